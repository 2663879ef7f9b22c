//! Producers, the drain and readers on real files in one process: rounds,
//! rolled segments, groups resuming, a crash between a recorded cut and
//! its watermark, a re-drain into a fresh remote, torn tails, damage named
//! by file and offset, and bad input.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use paralog_stream::{
    drain_stream, Delivered, DrainOptions, From, Order, Partitioner, Producer, Reader,
    RemoteStream, StreamError,
};

mod common;

use common::{copy_tree, dirs, reader_from_start, round_robin, tree, S};

fn opts() -> DrainOptions {
    // Small segments, so that rolling is exercised.
    DrainOptions {
        roll_bytes: 1500,
        max_round_bytes: 1 << 20,
        release_bytes: 64 << 20,
    }
}

fn read_all(remote: &Path, group: Option<&str>, from: From, order: Order) -> Vec<Delivered> {
    let mut r = Reader::open(RemoteStream::open(remote, S).unwrap(), group, from, order).unwrap();
    let mut out = Vec::new();
    while let Some(d) = r.next_event().unwrap() {
        out.push(d);
    }
    if group.is_some() {
        r.commit().unwrap();
    }
    out
}

/// The checks every test makes on what a reader got: offsets contiguous
/// from 0 per partition; per producer and partition, sequence numbers
/// strictly increase; per producer, exactly the events below `flushed`.
fn check_complete(got: &[Delivered], flushed: &HashMap<u64, u64>) {
    let mut next_off: HashMap<u32, u64> = HashMap::new();
    let mut last_seq: HashMap<(u64, u32), u64> = HashMap::new();
    let mut seqs: HashMap<u64, Vec<u64>> = HashMap::new();
    for d in got {
        let o = next_off.entry(d.partition).or_default();
        assert_eq!(
            d.offset, *o,
            "partition {} offsets not contiguous",
            d.partition
        );
        *o += 1;
        if let Some(prev) = last_seq.insert((d.event.producer, d.partition), d.event.seq) {
            assert!(
                d.event.seq > prev,
                "producer {:x} partition {}: seq {} after {prev}",
                d.event.producer,
                d.partition,
                d.event.seq
            );
        }
        assert_eq!(
            d.event.payload,
            format!("{:x}:{}", d.event.producer, d.event.seq).into_bytes(),
            "payload is not the one appended"
        );
        seqs.entry(d.event.producer).or_default().push(d.event.seq);
    }
    for (id, n) in flushed {
        let mut s = seqs.remove(id).unwrap_or_default();
        s.sort_unstable();
        assert_eq!(
            s,
            (0..*n).collect::<Vec<_>>(),
            "producer {id:x}: not every flushed event exactly once"
        );
    }
    assert!(seqs.is_empty(), "events of unknown producers");
}

/// The producer's next sequence number, from what it has handed out.
fn next_seq(p: &Producer) -> u64 {
    NEXT.with(|m| *m.borrow().get(&p.id()).unwrap_or(&0))
}

thread_local! {
    static NEXT: std::cell::RefCell<HashMap<u64, u64>> = std::cell::RefCell::new(HashMap::new());
}

fn app(p: &mut Producer, n: u64, key: Option<&str>) {
    for _ in 0..n {
        let next = next_seq(p);
        let (_, seq) = p
            .append(
                key.map(str::as_bytes),
                format!("{:x}:{next}", p.id()).as_bytes(),
                None,
            )
            .unwrap();
        assert_eq!(seq, next);
        NEXT.with(|m| *m.borrow_mut().entry(p.id()).or_default() += 1);
    }
}

#[test]
fn rounds_roll_groups_and_redrain() {
    let (t, local, remote) = dirs();
    let mut ps = [
        round_robin(&local, 3),
        Producer::open(&local, S, 3, Partitioner::Key).unwrap(),
        Producer::open(&local, S, 3, Partitioner::Fixed(2)).unwrap(),
    ];
    let mut flushed = HashMap::new();
    for round in 0..6 {
        for (i, p) in ps.iter_mut().enumerate() {
            let key = (i == 1).then(|| ["a", "b", "c", "d"][round % 4]);
            app(p, 40 + 7 * i as u64, key);
            flushed.insert(p.id(), p.flush().unwrap());
        }
        // Appended but not flushed: not written, so never drained.
        app(&mut ps[0], 3, None);
        let r = drain_stream(&local, &remote, S, &opts()).unwrap();
        assert_eq!(r.round, Some(round as u64 + 1));
        // The last flush is undone by nothing: flush again for the next round.
        flushed.insert(ps[0].id(), ps[0].flush().unwrap());
    }
    let r = drain_stream(&local, &remote, S, &opts()).unwrap();
    assert_eq!(r.round, Some(7));
    assert_eq!(
        drain_stream(&local, &remote, S, &opts()).unwrap().round,
        None,
        "nothing new, no round"
    );
    let got = read_all(&remote, None, From::Earliest, Order::Cut);
    check_complete(&got, &flushed);
    // Fixed: every event of producer 2 in partition 2; keyed: one key, one partition.
    assert!(got
        .iter()
        .filter(|d| d.event.producer == ps[2].id())
        .all(|d| d.partition == 2));
    let mut key_part = HashMap::new();
    for d in got.iter().filter(|d| d.event.key.is_some()) {
        assert_eq!(
            *key_part.entry(d.event.key.clone()).or_insert(d.partition),
            d.partition,
            "a key in two partitions"
        );
    }
    // Rolled: a partition has several segments.
    let rs = RemoteStream::open(&remote, S).unwrap();
    assert!(
        paralog_stream::layout::part_segments(&rs.dir, 0)
            .unwrap()
            .len()
            > 2
    );
    // Cut order is (round, partition, offset); time order holds the same events.
    assert!(got
        .windows(2)
        .all(|w| (w[0].round, w[0].partition, w[0].offset)
            < (w[1].round, w[1].partition, w[1].offset)));
    let mut by_time = read_all(&remote, None, From::Earliest, Order::Time);
    // Time order is a merge of the partitions (each in offset order) that
    // hands out, each time, the least (event time, partition, offset) of
    // the partitions' next events: the reader must give exactly what a
    // plain scan for that least head gives.
    let mut heads: Vec<std::collections::VecDeque<&Delivered>> = vec![Default::default(); 3];
    let mut in_offsets = got.clone();
    in_offsets.sort_by_key(|d| (d.partition, d.offset));
    for d in &in_offsets {
        heads[d.partition as usize].push_back(d);
    }
    let mut merged = Vec::new();
    while let Some(q) = (0..heads.len())
        .filter(|&q| !heads[q].is_empty())
        .min_by_key(|&q| {
            let d = heads[q][0];
            (d.event.time_ns, d.partition, d.offset)
        })
    {
        merged.push(heads[q].pop_front().unwrap().clone());
    }
    assert_eq!(
        by_time, merged,
        "time order is not the merge of the partitions"
    );
    by_time.sort_by_key(|d| (d.partition, d.offset));
    let mut sorted = got.clone();
    sorted.sort_by_key(|d| (d.partition, d.offset));
    assert_eq!(by_time, sorted);

    // A group reads part, commits, and resumes exactly there; another
    // group sees identical partitions.
    let mut r = Reader::open(
        RemoteStream::open(&remote, S).unwrap(),
        Some("g1"),
        From::Committed,
        Order::Cut,
    )
    .unwrap();
    let first: Vec<_> = (0..100).map(|_| r.next_event().unwrap().unwrap()).collect();
    r.commit().unwrap();
    drop(r);
    let rest = read_all(&remote, Some("g1"), From::Committed, Order::Cut);
    assert_eq!([first, rest].concat(), got);
    assert!(
        read_all(&remote, Some("g1"), From::Committed, Order::Cut).is_empty(),
        "a committed group got events again"
    );
    assert_eq!(
        read_all(&remote, Some("g2"), From::Earliest, Order::Cut),
        got
    );

    // A copy of the local root (its segments and cut log) replays into a
    // fresh remote byte for byte.
    let copy = t.path().join("copy");
    let fresh = t.path().join("fresh");
    std::fs::create_dir(&fresh).unwrap();
    copy_tree(&local, &copy);
    let r = drain_stream(&copy, &fresh, S, &opts()).unwrap();
    assert_eq!((r.replayed, r.round), (7, None));
    let mut a = tree(&remote.join(".paralog-streams"));
    a.retain(|p, _| !p.starts_with("tele/groups"));
    assert!(
        tree(&fresh.join(".paralog-streams")) == a,
        "the re-drain wrote other bytes"
    );

    // Private local files.
    let dir = local.join(".paralog-streams").join(S);
    assert_eq!(
        std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    assert_eq!(
        std::fs::metadata(ps[0].path())
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
}

/// A crash after a cut was recorded, during its apply: the remote holds
/// the old watermark and garbage past it. The next drain applies the cut
/// again: the same bytes as an uninterrupted drain.
#[test]
fn recorded_cut_applied_again() {
    let (_t, local, remote) = dirs();
    let mut p = round_robin(&local, 2);
    app(&mut p, 50, None);
    p.flush().unwrap();
    drain_stream(&local, &remote, S, &opts()).unwrap();
    let rdir = remote.join(".paralog-streams").join(S);
    let wm1 = std::fs::read(rdir.join("watermark")).unwrap();
    let tree1 = tree(&rdir);
    app(&mut p, 30, None);
    let n = p.flush().unwrap();
    drain_stream(&local, &remote, S, &opts()).unwrap();
    let whole = tree(&rdir);
    // Back to round 1's watermark, with garbage where round 2 wrote:
    // after round 1's bytes, and at the end of segments it created (the
    // segments it did not write to stay as they are).
    std::fs::write(rdir.join("watermark"), &wm1).unwrap();
    for (path, bytes) in &whole {
        if path.extension().is_some_and(|e| e == "seg") && tree1.get(path) != Some(bytes) {
            let b = match tree1.get(path) {
                Some(old) => [old.clone(), vec![0xee; 40]].concat(),
                None => [&bytes[..bytes.len() - 40], &[0xee; 40][..]].concat(),
            };
            std::fs::write(rdir.join(path), &b).unwrap();
        }
    }
    // Readers see round 1 only, and no garbage.
    assert_eq!(
        read_all(&remote, None, From::Earliest, Order::Cut).len(),
        50
    );
    let r = drain_stream(&local, &remote, S, &opts()).unwrap();
    assert_eq!((r.replayed, r.round), (1, None));
    assert!(tree(&rdir) == whole, "the replayed round wrote other bytes");
    check_complete(
        &read_all(&remote, None, From::Earliest, Order::Cut),
        &HashMap::from([(p.id(), n)]),
    );
}

/// A torn tail (half a batch) is not read; damage inside is refused with
/// the file and offset; a damaged remote batch is never delivered.
#[test]
fn torn_and_corrupt() {
    let (_t, local, remote) = dirs();
    let mut p = round_robin(&local, 1);
    for _ in 0..3 {
        app(&mut p, 10, None);
        p.flush().unwrap();
    }
    let seg = p.path().to_path_buf();
    let bytes = std::fs::read(&seg).unwrap();
    // A torn tail: the first 100 bytes of a batch (a copy of the first),
    // as a write cut short by a crash leaves it.
    let h = 52 + S.len();
    let mut torn = bytes.clone();
    torn.extend_from_slice(&bytes[h..h + 100]);
    std::fs::write(&seg, &torn).unwrap();
    let r = drain_stream(&local, &remote, S, &opts()).unwrap();
    assert_eq!(r.events, 30);
    assert_eq!(r.torn.len(), 1, "{:?}", r.torn);
    assert_eq!(r.torn[0].1, bytes.len() as u64);
    // Its producer is alive (a flush may be in progress): not cut.
    assert!(r.cut.is_empty());
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), torn.len() as u64);
    // Gone, it will never finish that flush: the tail is cut off.
    drop(p);
    let r = drain_stream(&local, &remote, S, &opts()).unwrap();
    assert_eq!(r.cut, vec![(seg.clone(), bytes.len() as u64)]);
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), bytes.len() as u64);
    assert!(drain_stream(&local, &remote, S, &opts())
        .unwrap()
        .torn
        .is_empty());

    // Damage in a batch with bytes after it (the torn tail cut, a batch
    // of a second segment): refused, naming the segment and the offset.
    let mut q = round_robin(&local, 1);
    app(&mut q, 5, None);
    q.flush().unwrap();
    app(&mut q, 5, None);
    q.flush().unwrap();
    let mut b = std::fs::read(q.path()).unwrap();
    b[h + 70] ^= 0x10; // inside the first batch's first frame
    std::fs::write(q.path(), &b).unwrap();
    let e = drain_stream(&local, &remote, S, &opts()).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(e, StreamError::Corrupt { offset, .. } if offset == h as u64),
        "{msg}"
    );
    assert!(msg.contains(&q.path().display().to_string()), "{msg}");

    // Damage on the remote: the reader refuses the batch, naming it.
    let rseg = remote
        .join(".paralog-streams")
        .join(S)
        .join("p00000")
        .join(format!("{:020}.seg", 0));
    let mut b = std::fs::read(&rseg).unwrap();
    b[h + 100] ^= 1;
    std::fs::write(&rseg, &b).unwrap();
    let mut r = reader_from_start(&remote);
    let e = r.next_event().unwrap_err().to_string();
    assert!(
        e.contains(&rseg.display().to_string()) && e.contains("offset"),
        "{e}"
    );
}

#[test]
fn bad_input() {
    let t = tempfile::tempdir().unwrap();
    let local = t.path().join("local");
    let _p = round_robin(&local, 3);
    assert!(matches!(
        Producer::open(&local, S, 4, Partitioner::RoundRobin),
        Err(StreamError::PartitionMismatch {
            existing: 3,
            asked: 4,
            ..
        })
    ));
    assert!(matches!(
        Producer::open(&local, "../x", 1, Partitioner::RoundRobin),
        Err(StreamError::InvalidName { .. })
    ));
    assert!(Producer::open(&local, "s", 2, Partitioner::Fixed(2)).is_err());
    let mut p = Producer::open(&local, "big", 1, Partitioner::RoundRobin).unwrap();
    let huge = vec![0u8; (paralog_stream::format::MAX_EVENT + 1) as usize];
    assert!(matches!(
        p.append(None, &huge, None),
        Err(StreamError::TooLarge { .. })
    ));
    assert!(matches!(
        RemoteStream::open(t.path(), "nope"),
        Err(StreamError::UnknownStream { .. })
    ));
    // A remote drained from another node-local root is not written over.
    let remote = t.path().join("remote");
    std::fs::create_dir(&remote).unwrap();
    let mut a = Producer::open(&t.path().join("l1"), "x", 1, Partitioner::RoundRobin).unwrap();
    a.append(None, b"1", None).unwrap();
    a.flush().unwrap();
    drain_stream(&t.path().join("l1"), &remote, "x", &opts()).unwrap();
    let mut b = Producer::open(&t.path().join("l2"), "x", 2, Partitioner::RoundRobin).unwrap();
    b.append(None, b"1", None).unwrap();
    b.flush().unwrap();
    assert!(matches!(
        drain_stream(&t.path().join("l2"), &remote, "x", &opts()),
        Err(StreamError::PartitionMismatch { .. })
    ));
}
