//! The library under operation (docs/streams.md): a reader that follows
//! the watermark across rounds and rolled segments, reading from a time,
//! retention with readers refusing trimmed offsets, and the quota.

use std::path::Path;
use std::time::{Duration, Instant};

use paralog_stream::retention::{trim, Keep};
use paralog_stream::{
    drain_stream, DrainOptions, From, Order, Partitioner, Producer, Quota, Reader, RemoteStream,
    StreamError,
};

const S: &str = "ops";

/// A fresh node-local root and remote, and a round-robin producer of `S`
/// with `partitions` partitions.
fn fresh(partitions: u32) -> (tempfile::TempDir, tempfile::TempDir, Producer) {
    let (local, remote) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let p = Producer::open(local.path(), S, partitions, Partitioner::RoundRobin).unwrap();
    (local, remote, p)
}

fn opts() -> DrainOptions {
    DrainOptions {
        roll_bytes: 4 << 10,
        ..Default::default()
    }
}

/// `n` events of `p` (payload 100 bytes, times `t0 + i`), then a flush.
fn append(p: &mut Producer, n: u64, t0: i64) {
    for i in 0..n {
        p.append(None, &[b'x'; 100], Some(t0 + i as i64)).unwrap();
    }
    p.flush().unwrap();
}

fn reader(remote: &Path, group: Option<&str>, from: From) -> paralog_stream::Result<Reader> {
    Reader::open(RemoteStream::open(remote, S)?, group, from, Order::Cut)
}

fn drain_all(r: &mut Reader) -> Vec<(u32, u64)> {
    std::iter::from_fn(|| r.next_event().unwrap())
        .map(|d| (d.partition, d.offset))
        .collect()
}

#[test]
fn follow_across_rounds_and_rolls() {
    let (local, remote, mut p) = fresh(2);
    append(&mut p, 100, 0);
    drain_stream(local.path(), remote.path(), S, &opts()).unwrap();
    let mut r = reader(remote.path(), None, From::Earliest).unwrap();
    assert_eq!(drain_all(&mut r).len(), 100);
    // Three more rounds, each rolling each partition's segment (4 KiB).
    for k in 1..4 {
        append(&mut p, 100, k * 100);
        drain_stream(local.path(), remote.path(), S, &opts()).unwrap();
    }
    assert!(
        r.next_event().unwrap().is_none(),
        "read past the watermark it opened with"
    );
    r.refresh().unwrap();
    let got = drain_all(&mut r);
    assert_eq!(got.len(), 300);
    for part in 0..2 {
        let offs: Vec<u64> = got.iter().filter(|g| g.0 == part).map(|g| g.1).collect();
        assert_eq!(offs, (50..200).collect::<Vec<_>>(), "partition {part}");
    }
}

#[test]
fn from_time_starts_each_partition_at_its_first_later_event() {
    let (local, remote, mut p) = fresh(3);
    append(&mut p, 300, 1_000);
    drain_stream(local.path(), remote.path(), S, &opts()).unwrap();
    let mut r = reader(remote.path(), None, From::Time(1_150)).unwrap();
    let mut n = 0;
    while let Some(d) = r.next_event().unwrap() {
        assert!(d.event.time_ns >= 1_150);
        n += 1;
    }
    assert_eq!(n, 150);
}

#[test]
fn trim_keeps_a_suffix_and_readers_refuse_below_it() {
    let (local, remote, mut p) = fresh(1);
    for k in 0..5 {
        append(&mut p, 50, k * 50);
        drain_stream(local.path(), remote.path(), S, &opts()).unwrap();
    }
    let mut g = reader(remote.path(), Some("g"), From::Committed).unwrap();
    for _ in 0..10 {
        g.next_event().unwrap().unwrap();
    }
    g.commit().unwrap();
    let t = trim(remote.path(), S, Keep::Bytes(10 << 10)).unwrap();
    // Five segments of one round each (7 KiB, rolled at 4 KiB): the last
    // two hold the 10 KiB to keep.
    assert_eq!(t[0].segments, vec![0, 50, 100]);
    assert_eq!(t[0].first, 150);
    let s = RemoteStream::open(remote.path(), S).unwrap();
    assert_eq!(s.first_offsets().unwrap(), vec![150]);
    let mut r = reader(remote.path(), None, From::Earliest).unwrap();
    let got = drain_all(&mut r);
    assert_eq!(got.first(), Some(&(0, 150)));
    assert_eq!(got.len(), 100);
    match reader(remote.path(), Some("g"), From::Committed) {
        Err(StreamError::Trimmed {
            offset: 10,
            first: 150,
            ..
        }) => {}
        other => panic!("a group below the first segment: {:?}", other.err()),
    }
    // Never the last segment, whatever the rule.
    let t = trim(remote.path(), S, Keep::Newer(Duration::ZERO)).unwrap();
    assert_eq!((t[0].segments.clone(), t[0].first), (vec![150], 200));
    append(&mut p, 50, 250);
    drain_stream(local.path(), remote.path(), S, &opts()).unwrap();
    let mut r = reader(remote.path(), None, From::Earliest).unwrap();
    assert_eq!(drain_all(&mut r).len(), 100);
}

#[test]
fn quota_fails_at_once_or_waits_for_the_drain() {
    let (local, remote, mut p) = fresh(1);
    p.set_quota(Some(Quota {
        bytes: 5_000,
        wait: Duration::ZERO,
    }));
    let mut n = 0;
    let err = loop {
        match p.append(None, &[b'x'; 100], None) {
            Ok(_) => n += 1,
            Err(e) => break e,
        }
        p.flush().unwrap();
    };
    // A batch of one event: 56 + 40 + 100 + 32 bytes. The count after the
    // 22nd passes the quota; the 23rd append is refused.
    let batch = 228;
    assert!(
        matches!(err, StreamError::QuotaFull { quota: 5_000, undrained, .. } if undrained == 22 * batch),
        "{err}"
    );
    assert_eq!(n, 22);
    drain_stream(local.path(), remote.path(), S, &opts()).unwrap();
    p.append(None, b"after the drain", None).unwrap();
    // Waiting: a drain in another thread frees it.
    p.set_quota(Some(Quota {
        bytes: 0,
        wait: Duration::from_secs(30),
    }));
    p.flush().unwrap();
    let (l, r) = (local.path().to_path_buf(), remote.path().to_path_buf());
    let t0 = Instant::now();
    let d = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        drain_stream(&l, &r, S, &opts()).unwrap();
    });
    p.append(None, b"waited", None).unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(300));
    d.join().unwrap();
}
