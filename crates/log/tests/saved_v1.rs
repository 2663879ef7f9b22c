//! A real node-local log written by the format-1 writer (commit a68fde9,
//! the last before format 2), saved under `tests/vectors/v1_log/`, with the
//! files it materializes to under `tests/vectors/v1_log.expected/`. Every
//! later build must read it and drain it to exactly those bytes: format 1
//! stays readable after the writer moved on.
//!
//! What it holds (job `job-v1`):
//! - `out.dat`: one open of 2 ranks; epoch 1 both ranks write; epoch 2 a
//!   set size then writes, committed without commit marks (every rank's
//!   manifest is the commit); epoch 3 committed by rank 0 only (not
//!   committed: never applied, removed by gc);
//! - `single.txt`: two one-process writers (generations 1 and 2), the
//!   first one closed.
//!
//! Generated once by `cargo test -p paralog-log --test saved_v1 -- --ignored
//! generate` at that commit; the generator is kept for the record and now
//! refuses to run (it would write the current format).

mod common;

use std::path::{Path, PathBuf};

use paralog_log::gc::collect_garbage;
use paralog_log::{EpochId, FileInventory, Inventory, RankLog, WriterConfig};

fn saved() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/v1_log")
}

fn expected_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/v1_log.expected")
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_mul(31).wrapping_add((i % 251) as u8))
        .collect()
}

fn write_v1_log(root: &Path) {
    let ident = common::ident("job-v1", "/pfs/job/out.dat", "out.dat", 1);
    let cfg = WriterConfig::default();
    let mut r = common::ranks(root, &ident, 2, cfg);
    // Epoch 1.
    r[0].write_at(0, &pattern(1, 5000)).unwrap();
    r[1].write_at(5000, &pattern(2, 3000)).unwrap();
    r[1].write_at(9000, &pattern(3, 100)).unwrap();
    common::commit_all(&mut r);
    // Epoch 2: a set size, then writes; committed, marks lost.
    for l in r.iter_mut() {
        l.set_size(6000);
    }
    r[0].write_at(100, &pattern(4, 200)).unwrap();
    r[1].write_at(7000, &pattern(5, 50)).unwrap();
    common::commit_all(&mut r);
    for l in r.iter() {
        std::fs::remove_file(l.rank_dir().join("e0000000002.commit")).unwrap();
    }
    // Epoch 3: rank 0 only.
    r[0].write_at(0, &pattern(6, 10)).unwrap();
    r[0].commit_local().unwrap();

    let single = common::ident("job-v1", "/pfs/job/single.txt", "single.txt", 0);
    let mut a = RankLog::create_single(root, single.clone(), cfg).unwrap();
    let mut b = RankLog::create_single(root, single, cfg).unwrap();
    a.write_at(0, b"first writer, first commit\n").unwrap();
    b.write_at(6, b"SECOND").unwrap();
    common::commit(&mut a);
    a.mark_closed().unwrap();
    common::commit(&mut b);
}

/// The logical file of `rel` at `upto`, materialized.
fn materialize(root: &Path, rel: &[u8], upto: Option<(u64, u64)>, out: &Path) -> Vec<u8> {
    let inv = FileInventory::scan_path(root, "job-v1", rel)
        .unwrap()
        .unwrap();
    let lf = inv
        .logical_file(upto.map(|(g, e)| EpochId::new(g, e)))
        .unwrap();
    lf.materialize(out, None).unwrap();
    std::fs::read(out).unwrap()
}

/// A file, an epoch of it, and the name of what it materializes to.
type Case = (&'static [u8], Option<(u64, u64)>, &'static str);

const CASES: [Case; 4] = [
    (b"out.dat", Some((1, 1)), "out.dat.1-1"),
    (b"out.dat", Some((1, 2)), "out.dat.1-2"),
    (b"single.txt", Some((1, 1)), "single.txt.1-1"),
    (b"single.txt", Some((2, 1)), "single.txt.2-1"),
];

#[test]
#[ignore = "wrote tests/vectors/v1_log once, with the format-1 writer"]
fn generate() {
    assert_eq!(
        paralog_log::format::FORMAT_VERSION,
        1,
        "this build writes another format: the saved format-1 log stays as it is"
    );
    let root = saved();
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    write_v1_log(&root);
    // Git keeps no empty directories: the empty staging place of writer
    // b's next epoch goes (the generations are all filled).
    let file_dir = root
        .join("job-v1")
        .join(paralog_log::layout::file_dir_name(b"single.txt"));
    for s in paralog_log::single::staging_dirs(&file_dir).unwrap() {
        std::fs::remove_dir_all(s).unwrap();
    }
    let exp = expected_dir();
    let _ = std::fs::remove_dir_all(&exp);
    std::fs::create_dir_all(&exp).unwrap();
    for (rel, upto, name) in CASES {
        materialize(&root, rel, upto, &exp.join(name));
    }
}

/// A copy of the saved tree at `to` (gc and the drain change it).
fn copy_tree(from: &Path, to: &Path) {
    let ok = std::process::Command::new("cp")
        .arg("-r")
        .arg(from)
        .arg(to)
        .status()
        .unwrap()
        .success();
    assert!(ok, "cp -r {} {}", from.display(), to.display());
}

#[test]
fn the_saved_v1_log_reads_back_byte_for_byte() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("local");
    copy_tree(&saved(), &root);
    for (rel, upto, name) in CASES {
        let got = materialize(&root, rel, upto, &d.path().join(name));
        let want = std::fs::read(expected_dir().join(name)).unwrap();
        assert!(got == want, "{name}: differs from the saved result");
    }
    // The latest committed state is the last epoch of each (epoch 3 of
    // out.dat is not committed).
    let inv = Inventory::scan(&root).unwrap();
    let out = inv.find_file(Some("job-v1"), b"out.dat")[0].1.clone();
    assert_eq!(
        out.committed_epochs().unwrap(),
        vec![EpochId::new(1, 1), EpochId::new(1, 2)]
    );
    let single = inv.find_file(Some("job-v1"), b"single.txt")[0].1.clone();
    assert_eq!(
        single.committed_epochs().unwrap(),
        vec![EpochId::new(1, 1), EpochId::new(2, 1)]
    );
    assert!(inv.stray.is_empty(), "{:?}", inv.stray);
}

#[test]
fn the_saved_v1_log_survives_gc_and_keeps_its_committed_epochs() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("local");
    copy_tree(&saved(), &root);
    let inv = Inventory::scan(&root).unwrap();
    for (_, f) in inv.find_file(Some("job-v1"), b"out.dat") {
        let r = collect_garbage(f, false).unwrap();
        // Only rank 0's record of the uncommitted epoch 3 goes.
        let mut names: Vec<String> = r
            .removed
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, vec!["e0000000003.data", "e0000000003.manifest"]);
    }
    let got = materialize(&root, b"out.dat", None, &d.path().join("after-gc"));
    assert_eq!(
        got,
        std::fs::read(expected_dir().join("out.dat.1-2")).unwrap()
    );
}
