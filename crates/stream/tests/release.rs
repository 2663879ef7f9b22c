//! Local retention (docs/streams.md "Local retention"): the segments of
//! ended producers that published rounds took whole are deleted, and the
//! cut log rebased on a base record, only once the watermark covering
//! them is durable; a drain killed at any step (a real SIGKILL through
//! `PARALOG_FAILPOINT`, in a child process running this binary) loses
//! nothing: the next drain leaves the remote byte for byte as a drain
//! that never deleted anything.

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use paralog_stream::{
    drain_stream, DrainOptions, Drainer, From, Order, Partitioner, Producer, Reader, RemoteStream,
    StreamError,
};

mod common;

use common::{copy_tree, dirs, reader_from_start, round_robin, tree, S};

fn opts(release_bytes: u64) -> DrainOptions {
    DrainOptions {
        release_bytes,
        ..Default::default()
    }
}

/// Release at every round that has anything to release.
const ALWAYS: u64 = 1;
const NEVER: u64 = u64::MAX;

fn sdir(local: &Path) -> PathBuf {
    local.join(".paralog-streams").join(S)
}

/// The producers' segment files of the stream on a node-local root.
fn segs(local: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(sdir(local))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".seg"))
        .collect();
    out.sort();
    out
}

fn log_magic(local: &Path) -> Vec<u8> {
    std::fs::read(sdir(local).join("cuts")).unwrap()[..8].to_vec()
}

/// A producer that appends `n` events, flushes and ends; its id.
fn ended(local: &Path, n: u64) -> u64 {
    let mut p = round_robin(local, 3);
    for i in 0..n {
        p.append(None, format!("{}:{i}", p.id()).as_bytes(), None)
            .unwrap();
    }
    p.flush().unwrap();
    p.id()
}

/// Every event on the remote, checked: per producer, sequence numbers
/// 0..n exactly once each. Returns n per producer.
fn events(remote: &Path) -> HashMap<u64, u64> {
    let mut r = Reader::open(
        RemoteStream::open(remote, S).unwrap(),
        None,
        From::Earliest,
        Order::Cut,
    )
    .unwrap();
    let mut seen: HashMap<u64, Vec<u64>> = HashMap::new();
    while let Some(d) = r.next_event().unwrap() {
        seen.entry(d.event.producer).or_default().push(d.event.seq);
    }
    seen.into_iter()
        .map(|(id, mut v)| {
            v.sort_unstable();
            assert!(
                v.iter().copied().eq(0..v.len() as u64),
                "producer {id:016x}: {v:?}"
            );
            (id, v.len() as u64)
        })
        .collect()
}

/// Copy every segment of `from` into `to` (segments only grow, so the
/// longer copy is the newer one): the reference root gets the same
/// producers as the one that releases.
fn copy_segs(from: &Path, to: &Path) {
    for name in segs(from) {
        std::fs::copy(sdir(from).join(&name), sdir(to).join(&name)).unwrap();
    }
}

#[test]
fn ended_producers_released_live_ones_kept() {
    let (t, local, remote) = dirs();
    let a = ended(&local, 40);
    // A producer that ends without a batch: its segment is a header.
    drop(round_robin(&local, 3));
    let mut live = round_robin(&local, 3);
    live.append(None, b"live-0", None).unwrap();
    live.flush().unwrap();
    // The same producers on a root that keeps everything.
    let (ref_local, ref_remote) = (t.path().join("ref-local"), t.path().join("ref-remote"));
    copy_tree(&local, &ref_local);
    std::fs::create_dir(&ref_remote).unwrap();

    let r = drain_stream(&local, &remote, S, &opts(ALWAYS)).unwrap();
    assert_eq!(r.round, Some(1));
    assert_eq!(r.released.base, Some(1));
    assert_eq!(r.released.segments.len(), 2, "{:?}", r.released);
    assert_eq!(segs(&local), vec![format!("{:016x}.seg", live.id())]);
    assert_eq!(log_magic(&local), b"PLSTBASE");
    drain_stream(&ref_local, &ref_remote, S, &opts(NEVER)).unwrap();
    assert_eq!(segs(&ref_local).len(), 3);

    // The live producer goes on, then ends: an idle round releases it.
    live.append(None, b"live-1", None).unwrap();
    live.flush().unwrap();
    let b = ended(&local, 7);
    copy_segs(&local, &ref_local);
    let lid = live.id();
    drop(live);
    let mut d = Drainer::default();
    let r = d.drain(&local, &remote, S, &opts(ALWAYS)).unwrap();
    assert_eq!(r.round, Some(2));
    assert_eq!(r.released.segments.len(), 2, "{:?}", r.released);
    drain_stream(&ref_local, &ref_remote, S, &opts(NEVER)).unwrap();
    assert!(segs(&local).is_empty());
    let r = d.drain(&local, &remote, S, &opts(ALWAYS)).unwrap();
    assert_eq!((r.round, r.released.base), (None, None), "nothing left");

    let rd = |r: &Path| tree(&r.join(".paralog-streams").join(S));
    assert!(rd(&remote) == rd(&ref_remote), "the remotes differ");
    assert_eq!(events(&remote), HashMap::from([(a, 40), (lid, 2), (b, 7)]));

    // The node's numbers: nothing undrained, two rounds.
    let lag = paralog_stream::drain::local_lag(&local, S).unwrap();
    assert_eq!((lag.bytes, lag.drained, lag.rounds), (0, 0, 2));
    assert_eq!(lag.partitions, Some(3));
    // The partition count still holds with every segment gone.
    match Producer::open(&local, S, 5, Partitioner::RoundRobin) {
        Err(StreamError::PartitionMismatch { existing: 3, .. }) => {}
        other => panic!("{:?}", other.map(|p| p.id())),
    }
    // A later producer is drained after the base as before.
    let c = ended(&local, 5);
    drain_stream(&local, &remote, S, &opts(ALWAYS)).unwrap();
    assert_eq!(events(&remote)[&c], 5);
    assert!(segs(&local).is_empty());

    // A fresh remote cannot be rebuilt from a rebased log: refused.
    let fresh = t.path().join("fresh");
    std::fs::create_dir(&fresh).unwrap();
    let e = drain_stream(&local, &fresh, S, &opts(ALWAYS)).unwrap_err();
    assert!(e.to_string().contains("base of round 3"), "{e}");
}

#[test]
fn below_the_threshold_nothing_is_released() {
    let (_t, local, remote) = dirs();
    ended(&local, 10);
    ended(&local, 10);
    let r = drain_stream(&local, &remote, S, &DrainOptions::default()).unwrap();
    assert_eq!(r.released, Default::default());
    assert_eq!(segs(&local).len(), 2);
    assert_eq!(log_magic(&local), b"PLSTCUT\0");
    // Past it (the two segments and the log), both go.
    let total: u64 = std::fs::read_dir(sdir(&local))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    let r = drain_stream(&local, &remote, S, &opts(total / 2)).unwrap();
    assert_eq!(r.released.segments.len(), 2);
}

/// Run by the crash test in a child process (with `PARALOG_FAILPOINT`):
/// one drain that releases at every round. Does nothing in a normal run.
#[test]
fn child_drain() {
    let (Some(local), Some(remote)) = (
        std::env::var_os("RELEASE_TEST_LOCAL"),
        std::env::var_os("RELEASE_TEST_REMOTE"),
    ) else {
        return;
    };
    drain_stream(Path::new(&local), Path::new(&remote), S, &opts(ALWAYS)).unwrap();
}

fn killed_drain(local: &Path, remote: &Path, point: &str) {
    let st = Command::new(std::env::current_exe().unwrap())
        .args(["child_drain", "--exact", "--nocapture", "--test-threads=1"])
        .env("RELEASE_TEST_LOCAL", local)
        .env("RELEASE_TEST_REMOTE", remote)
        .env("PARALOG_FAILPOINT", point)
        .status()
        .unwrap();
    assert_eq!(
        st.signal(),
        Some(9),
        "{point}: not killed by SIGKILL: {st:?}"
    );
}

/// A drain killed at each step of a round and of a release; the next
/// drain, and a later round, leave the remote as a drain that keeps
/// everything does, with every event once.
#[test]
fn killed_at_every_step_loses_nothing() {
    for point in [
        "stream.after_cut",
        "stream.mid_apply",
        "stream.before_watermark",
        "stream.release_deleted",
        "stream.base_written",
    ] {
        let (t, local, remote) = dirs();
        let a = ended(&local, 30);
        let b = ended(&local, 20);
        let (ref_local, ref_remote) = (t.path().join("ref-local"), t.path().join("ref-remote"));
        copy_tree(&local, &ref_local);
        std::fs::create_dir(&ref_remote).unwrap();
        drain_stream(&ref_local, &ref_remote, S, &opts(NEVER)).unwrap();

        killed_drain(&local, &remote, point);
        let released = point.starts_with("stream.release") || point == "stream.base_written";
        // Nothing is deleted before the round's watermark is durable; the
        // log is the old one until the base is renamed over it.
        assert_eq!(segs(&local).len(), if released { 0 } else { 2 }, "{point}");
        assert_eq!(log_magic(&local), b"PLSTCUT\0", "{point}");
        let tmp = std::fs::read_dir(sdir(&local)).unwrap().any(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with(".cuts.tmp-")
        });
        assert_eq!(tmp, point == "stream.base_written", "{point}");

        let r = drain_stream(&local, &remote, S, &opts(ALWAYS)).unwrap();
        assert_eq!(r.released.base, Some(1), "{point}");
        assert!(segs(&local).is_empty(), "{point}");
        assert_eq!(log_magic(&local), b"PLSTBASE", "{point}");
        assert!(
            !std::fs::read_dir(sdir(&local)).unwrap().any(|e| e
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with(".cuts.tmp-")),
            "{point}: the dead drain's temporary is removed"
        );

        // A later round on top of the base.
        let c = ended(&local, 9);
        copy_segs(&local, &ref_local);
        drain_stream(&local, &remote, S, &opts(ALWAYS)).unwrap();
        drain_stream(&ref_local, &ref_remote, S, &opts(NEVER)).unwrap();
        let rd = |r: &Path| tree(&r.join(".paralog-streams").join(S));
        assert!(
            rd(&remote) == rd(&ref_remote),
            "{point}: the remotes differ"
        );
        assert_eq!(
            events(&remote),
            HashMap::from([(a, 30), (b, 20), (c, 9)]),
            "{point}"
        );
    }
}

/// A producer that runs on and on rolls to a new segment once its own
/// holds the roll size and the drain took it; the drain deletes the old
/// one. The node keeps about a roll's worth, whatever the producer wrote;
/// its sequence numbers go on across segments, in order in every
/// partition, each event once.
#[test]
fn a_live_producer_rolls_and_stays_bounded() {
    let (_t, local, remote) = dirs();
    let mut p = round_robin(&local, 3);
    p.set_roll_bytes(4000);
    let mut d = Drainer::default();
    let mut ids = std::collections::BTreeSet::new();
    let mut most = 0u64;
    for round in 0..60u64 {
        for i in 0..10 {
            p.append(None, format!("{round}:{i}:{:0100}", 0).as_bytes(), None)
                .unwrap();
        }
        p.flush().unwrap();
        ids.insert(p.id());
        d.drain(&local, &remote, S, &opts(ALWAYS)).unwrap();
        let held: u64 = std::fs::read_dir(sdir(&local))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        most = most.max(held);
    }
    assert!(ids.len() >= 10, "rolled {} times", ids.len() - 1);
    // About 1.5 KiB a flush: 90 KiB written, at most two segments (one
    // past the roll size by a flush, one new) and a small log kept.
    assert!(most < 12_000, "the node held {most} bytes");
    assert!(segs(&local).len() <= 2, "{:?}", segs(&local));
    let mut r = reader_from_start(&remote);
    let mut last: HashMap<u32, u64> = HashMap::new();
    let mut seqs = Vec::new();
    while let Some(e) = r.next_event().unwrap() {
        let prev = last.insert(e.partition, e.event.seq);
        assert!(
            prev.is_none_or(|s| s < e.event.seq),
            "order in partition {}",
            e.partition
        );
        seqs.push(e.event.seq);
    }
    seqs.sort_unstable();
    assert!(seqs.iter().copied().eq(0..600), "every event once");
}

/// Rolled segments drained only after the producer's earlier ones: with
/// no drain while it wrote (a chain of segments on the node), the drain
/// takes the chain in order, a segment per round, so each partition
/// holds the producer's events in the order it appended them.
#[test]
fn a_chain_of_rolled_segments_drains_in_order() {
    let (_t, local, remote) = dirs();
    let mut p = round_robin(&local, 3);
    p.set_roll_bytes(3000);
    let other = ended(&local, 50);
    for f in 0..20 {
        for i in 0..10 {
            p.append(None, format!("{f}:{i}:{:064}", 0).as_bytes(), None)
                .unwrap();
        }
        p.flush().unwrap();
    }
    drop(p);
    assert!(segs(&local).len() > 5, "{:?}", segs(&local));
    let reports = Drainer::default()
        .drain_pending(&local, &remote, S, &opts(ALWAYS))
        .unwrap();
    assert!(reports.len() > 5, "{} rounds", reports.len());
    assert!(segs(&local).is_empty());
    let mut r = reader_from_start(&remote);
    let mut last: HashMap<u32, u64> = HashMap::new();
    let mut n = 0;
    while let Some(e) = r.next_event().unwrap() {
        if e.event.producer == other {
            continue;
        }
        let prev = last.insert(e.partition, e.event.seq);
        assert!(
            prev.is_none_or(|s| s < e.event.seq),
            "partition {}: seq {} after {prev:?}",
            e.partition,
            e.event.seq
        );
        n += 1;
    }
    assert_eq!(n, 200);
}
