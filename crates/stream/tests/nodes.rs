//! A server job's drain of a stream, its steps run here for two node-local
//! roots without MPI (the pieces handed over as bytes): the remote files
//! must be a one-node drain's of the same cuts, and what does not fit is
//! refused (docs/streams.md "Many nodes").

use std::path::Path;

use paralog_stream::nodes::{self, NodeShare};
use paralog_stream::{drain_stream, DrainOptions, DrainReport};

mod common;

use common::job::{files, job_round};
use common::{dirs, round_robin, S};

const N: u32 = 3;

/// `events` events of a producer of its own on `local`, flushed.
fn produce(local: &Path, events: usize, tag: &str) {
    let mut p = round_robin(local, N);
    for i in 0..events {
        p.append(None, format!("{tag}:{i}").as_bytes(), Some(i as i64))
            .unwrap();
    }
    p.flush().unwrap();
}

/// Two nodes drained together over two rounds write the partitions'
/// segments and the watermark byte for byte as a one-node drain of their
/// segments gathered with the job's cut log does; both cut logs are equal.
#[test]
fn two_nodes_write_what_one_node_drain_of_the_same_cuts_writes() {
    let (t, _, remote) = dirs();
    let roots = [t.path().join("n0"), t.path().join("n1")];
    produce(&roots[0], 50, "a");
    produce(&roots[1], 70, "b");
    let mut shares: Vec<NodeShare> = roots
        .iter()
        .map(|r| NodeShare::open(r, S, roots.len()).unwrap())
        .collect();
    let first = job_round(&mut shares, &remote);
    assert!(first > 0, "some frames crossed between nodes");
    produce(&roots[1], 30, "c");
    job_round(&mut shares, &remote);
    assert_eq!(shares[0].rounds(), 2);
    let logs: Vec<Vec<u8>> = roots
        .iter()
        .map(|r| std::fs::read(r.join(".paralog-streams").join(S).join("cuts")).unwrap())
        .collect();
    assert_eq!(logs[0], logs[1], "the nodes' cut logs");
    drop(shares);
    // One root holding every segment and the job's cut log.
    let merged = t.path().join("merged");
    let mdir = merged.join(".paralog-streams").join(S);
    std::fs::create_dir_all(&mdir).unwrap();
    for r in &roots {
        for e in std::fs::read_dir(r.join(".paralog-streams").join(S)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "seg") {
                std::fs::copy(&p, mdir.join(p.file_name().unwrap())).unwrap();
            }
        }
    }
    std::fs::write(mdir.join("cuts"), &logs[0]).unwrap();
    let fresh = t.path().join("fresh");
    std::fs::create_dir(&fresh).unwrap();
    let r = drain_stream(&merged, &fresh, S, &DrainOptions::default()).unwrap();
    assert_eq!(
        r.replayed, 2,
        "the one-node drain applied the job's two cuts"
    );
    let want: Vec<_> = files(&fresh)
        .into_iter()
        .filter(|(n, _)| !n.ends_with("/stream"))
        .collect();
    let got: Vec<_> = files(&remote)
        .into_iter()
        .filter(|(n, _)| !n.ends_with("/stream"))
        .collect();
    assert_eq!(got.len(), want.len());
    assert!(
        got == want,
        "the job's remote differs from a one-node drain's"
    );
}

/// What cannot come from one job's drain is refused: a producer on two
/// nodes, a range's frames sent twice or not at all, a partition sent to
/// a server that does not own it, a cut that does not follow the log.
#[test]
fn what_does_not_fit_is_refused() {
    let (t, _, _) = dirs();
    let root = t.path().join("n0");
    produce(&root, 20, "a");
    let mut share = NodeShare::open(&root, S, 2).unwrap();
    let ranges = share
        .take_new(&DrainOptions::default(), &mut DrainReport::default())
        .unwrap()
        .ranges;
    let state = vec![Default::default(); N as usize];
    let twice = [ranges.clone(), ranges.clone()].concat();
    let e = nodes::make_cut(1, &state, twice, 64 << 20, S).unwrap_err();
    assert!(e.to_string().contains("two nodes hold producer"), "{e}");

    let cut = nodes::make_cut(1, &state, ranges, 64 << 20, S).unwrap();
    share.record(&cut).unwrap();
    let (out, _) = share.pieces(&cut, 1, &|_| 0).unwrap();
    let rdir = t.path().join("r");
    let all = |_: u32| true;
    let ok = nodes::assemble(&cut, &[&out[0]], &all, &rdir).unwrap();
    assert_eq!(ok.len(), N as usize);
    let e = nodes::assemble(&cut, &[&out[0], &out[0]], &all, &rdir).unwrap_err();
    assert!(e.to_string().contains("came from two servers"), "{e}");
    let e = nodes::assemble(&cut, &[&[][..]], &all, &rdir).unwrap_err();
    assert!(e.to_string().contains("recorded 7 events"), "{e}");
    let e = nodes::assemble(&cut, &[&out[0]], &|p| p != 1, &rdir).unwrap_err();
    assert!(e.to_string().contains("not this server's"), "{e}");
    let mut cut_short = out[0].clone();
    cut_short.truncate(cut_short.len() - 3);
    assert!(nodes::assemble(&cut, &[&cut_short], &all, &rdir).is_err());

    // The same round again, or one that skips offsets, does not follow.
    let e = share.record(&cut).unwrap_err();
    assert!(e.to_string().contains("does not follow round 1"), "{e}");
    let mut skip = cut.clone();
    skip.round = 2;
    let e = share.record(&skip).unwrap_err();
    assert!(e.to_string().contains("does not follow"), "{e}");
    // The record of a round the log has, copied again, is refused too.
    let e = share.record_bytes(&cut.encode()).unwrap_err();
    assert!(e.to_string().contains("does not follow"), "{e}");
}

/// A one-node drain never releases a server job's root (the job does,
/// together: tests/nodes_release.rs): its cut log is the job's, the same
/// on every node; a one-node drain that would release everything it
/// could is refused, naming the job's mark, and changes nothing.
#[test]
fn a_one_node_drain_releases_nothing_of_a_server_jobs_root() {
    let (t, _, remote) = dirs();
    let roots = [t.path().join("n0"), t.path().join("n1")];
    produce(&roots[0], 20, "a");
    produce(&roots[1], 20, "b");
    let mut shares: Vec<NodeShare> = roots
        .iter()
        .map(|r| NodeShare::open(r, S, roots.len()).unwrap())
        .collect();
    job_round(&mut shares, &remote);
    drop(shares);
    let dir = roots[0].join(".paralog-streams").join(S);
    let before = files(&dir);
    let always = DrainOptions {
        release_bytes: 1,
        ..Default::default()
    };
    let e = drain_stream(&roots[0], &remote, S, &always)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("server-job") && e.contains("server job of several nodes"),
        "{e}"
    );
    assert_eq!(files(&dir), before, "the job's root is as it was");
}

/// A root whose history a one-node drain released (its log starts with a
/// base) is read by a server job's share from the base: the watermark of
/// the base's round checks, and the next round follows it.
#[test]
fn a_released_root_joins_a_server_job_at_its_base() {
    let (t, _, remote) = dirs();
    let root = t.path().join("n0");
    produce(&root, 30, "a");
    let always = DrainOptions {
        release_bytes: 1,
        ..Default::default()
    };
    let r = drain_stream(&root, &remote, S, &always).unwrap();
    assert_eq!(r.released.base, Some(1));
    let mut share = NodeShare::open(&root, S, 2).unwrap();
    assert_eq!((share.rounds(), share.partitions()), (1, Some(N)));
    let rdir = paralog_stream::layout::stream_dir(&remote, S);
    let wm_path = rdir.join("watermark");
    let wm = paralog_stream::format::Watermark::decode(&std::fs::read(&wm_path).unwrap(), &wm_path)
        .unwrap();
    share.check_watermark(&wm, &rdir).unwrap();
    // A watermark older than the base is refused.
    let old = paralog_stream::format::Watermark {
        round: 0,
        parts: vec![Default::default(); N as usize],
    };
    assert!(share.check_watermark(&old, &rdir).is_err());
    produce(&root, 12, "b");
    job_round(std::slice::from_mut(&mut share), &remote);
    assert_eq!(share.rounds(), 2);
    let wm = paralog_stream::format::Watermark::decode(&std::fs::read(&wm_path).unwrap(), &wm_path)
        .unwrap();
    assert_eq!(wm.parts.iter().map(|p| p.next).sum::<u64>(), 42);
}
