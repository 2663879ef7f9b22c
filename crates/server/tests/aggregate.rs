//! The aggregation strategy (crates/server/src/aggregate.rs) on logs built
//! with the log's own writer: when a set is complete (members closed and
//! committed; a newer set or the job's end), what is published (every
//! member as its logical file), progress and deletion after the record, a
//! member rewritten in a later open starting version 2, a damaged epoch
//! refused before anything reaches the remote.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{dirs, posix, JOB};
use paralog_aggregate::reader::{MemberReader, SetReader};
use paralog_aggregate::rule::Rules;
use paralog_log::{FileIdent, FileInventory, RankLog, WriterConfig};
use paralog_server::aggregate::{drain_sets, Sets};
use paralog_server::drain::DrainError;

fn sets(k: u32) -> Sets {
    Sets::new(Rules::parse(&["ckpt/{set}/rank-*.dat"]).unwrap(), k, 4096)
}

fn data(seed: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

/// One open (generation `gen`) of `rel` by a rank of one: `bytes` written
/// at 0, committed, closed if `close`.
fn write(root: &Path, rel: &str, gen: u64, bytes: &[u8], close: bool) {
    let ident = FileIdent {
        job: JOB.into(),
        path: format!("/app/{rel}").into_bytes(),
        rel: rel.as_bytes().to_vec(),
        gen,
    };
    let mut log = RankLog::create(root, ident, 0, 1, WriterConfig::default()).unwrap();
    log.write_at(0, bytes).unwrap();
    log.commit_local().unwrap();
    log.complete_epoch().unwrap();
    if close {
        log.mark_closed().unwrap();
    }
}

fn drain(s: &Sets, root: &Path, remote: &Path, flush: bool) -> Result<Vec<String>, DrainError> {
    let mut n = 0;
    let mut out = drain_sets(
        s,
        &posix(remote),
        &root.join(JOB),
        flush,
        false,
        &mut |_, _| n += 1,
    )?;
    // A set's failure is its own (the others went on).
    if let Some(e) = out.iter_mut().find_map(|o| o.error.take()) {
        return Err(e);
    }
    Ok(out
        .iter()
        .filter(|o| o.version.is_some())
        .map(|o| o.set.clone())
        .collect())
}

fn member(remote: &Path, set: &str, name: &str) -> Vec<u8> {
    let r = Arc::new(SetReader::open(&remote.join(set)).unwrap().unwrap());
    let mut m = MemberReader::new(r, name.as_bytes()).unwrap();
    let mut b = vec![0u8; m.size() as usize];
    m.read_at(0, &mut b).unwrap();
    b
}

/// A temporary directory with a node-local root and a remote in it.
#[test]
fn a_set_waits_for_a_newer_set_or_the_end_and_for_its_members() {
    let (_t, root, remote) = dirs();
    let s = sets(2);
    write(&root, "ckpt/s1/rank-0.dat", 1, &data(1, 10_000), true);
    write(&root, "ckpt/s1/rank-1.dat", 1, &data(2, 12_000), true);
    // Complete members, but the writers may not have moved on.
    assert!(drain(&s, &root, &remote, false).unwrap().is_empty());
    assert!(!remote.join("ckpt/s1").exists());
    // A newer set appears; its one member is still open.
    std::thread::sleep(std::time::Duration::from_millis(20));
    write(&root, "ckpt/s2/rank-0.dat", 1, &data(3, 5_000), false);
    assert_eq!(drain(&s, &root, &remote, false).unwrap(), vec!["ckpt/s1"]);
    assert_eq!(member(&remote, "ckpt/s1", "rank-1.dat"), data(2, 12_000));
    // Progress recorded and local records gone for s1's members.
    let f = FileInventory::scan_path(&root, JOB, b"ckpt/s1/rank-0.dat")
        .unwrap()
        .unwrap();
    assert!(f.progress.is_some() && f.pending_epochs().unwrap().is_empty());
    assert!(f
        .gens
        .values()
        .all(|g| g.ranks.values().all(|r| r.epochs.is_empty())));
    // s2: a member still open is not published, even at the end.
    assert!(drain(&s, &root, &remote, true).unwrap().is_empty());
    let names: Vec<String> = std::fs::read_dir(remote.join("ckpt/s1"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 3, "2 containers + 1 record: {names:?}");
}

#[test]
fn a_rewritten_member_starts_a_new_version_keeping_the_others() {
    let (_t, root, remote) = dirs();
    let s = sets(1);
    write(&root, "ckpt/s/rank-0.dat", 1, &data(1, 9_000), true);
    write(&root, "ckpt/s/rank-1.dat", 1, &data(2, 7_000), true);
    assert_eq!(drain(&s, &root, &remote, true).unwrap(), vec!["ckpt/s"]);
    // rank 1 rewrites its member (a later open, shorter bytes over the old).
    write(&root, "ckpt/s/rank-1.dat", 2, &data(9, 3_000), true);
    assert_eq!(drain(&s, &root, &remote, true).unwrap(), vec!["ckpt/s"]);
    let r = SetReader::open(&remote.join("ckpt/s")).unwrap().unwrap();
    assert_eq!(r.record().version, 2);
    assert_eq!(member(&remote, "ckpt/s", "rank-0.dat"), data(1, 9_000));
    // Not truncated by the program: the old tail stays, as on a plain file.
    let mut want = data(2, 7_000);
    want[..3_000].copy_from_slice(&data(9, 3_000));
    assert_eq!(member(&remote, "ckpt/s", "rank-1.dat"), want);
    let n = std::fs::read_dir(remote.join("ckpt/s")).unwrap().count();
    assert_eq!(n, 2, "the old version's container was collected");
}

#[test]
fn a_damaged_epoch_is_refused_before_the_remote() {
    let (_t, root, remote) = dirs();
    let s = sets(1);
    write(&root, "ckpt/s/rank-0.dat", 1, &data(1, 9_000), true);
    let f = FileInventory::scan_path(&root, JOB, b"ckpt/s/rank-0.dat")
        .unwrap()
        .unwrap();
    let rank = &f.gens[&1].ranks[&0];
    let log = rank.dir.join("e0000000001.data");
    let mut b = std::fs::read(&log).unwrap();
    b[4096 + 100] ^= 1;
    std::fs::write(&log, &b).unwrap();
    // Another set, healthy, is published all the same.
    write(&root, "ckpt/t/rank-0.dat", 1, &data(2, 5_000), true);
    let e = drain(&s, &root, &remote, true).unwrap_err();
    assert!(matches!(e, DrainError::Corrupt(_)), "{e}");
    assert!(!remote.join("ckpt/s").join("set.plr").exists());
    assert!(remote.join("ckpt/t").join("set.plr").exists());
}
