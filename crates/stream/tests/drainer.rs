//! The drainer that remembers each stream between rounds (the server's,
//! `drain --follow`'s): it must write what a fresh drain would, also when
//! another drain ran in between, and `drain_pending` must leave nothing
//! behind however small a round is; an idle stream's rounds look at
//! little and miss no flush. And a watermark past the data is refused by
//! readers.

use std::path::Path;

use paralog_stream::format::Watermark;
use paralog_stream::{
    drain_stream, DrainOptions, Drainer, From, Order, Partitioner, Producer, Reader, RemoteStream,
};

mod common;

use common::{dirs, round_robin, walk, S};

fn read_count(remote: &Path) -> paralog_stream::Result<usize> {
    let mut r = Reader::open(
        RemoteStream::open(remote, S)?,
        None,
        From::Earliest,
        Order::Cut,
    )?;
    let mut n = 0;
    while r.next_event()?.is_some() {
        n += 1;
    }
    Ok(n)
}

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for e in walk(dir) {
        out.push((
            e.strip_prefix(dir).unwrap().display().to_string(),
            std::fs::read(&e).unwrap(),
        ));
    }
    out.sort();
    out
}

#[test]
fn remembered_state_writes_what_a_fresh_drain_writes() {
    let (t, local, remote) = dirs();
    // Rounds of at most ~1 KiB: many rounds per drain_pending.
    let opts = DrainOptions {
        roll_bytes: 3000,
        max_round_bytes: 1024,
        release_bytes: 64 << 20,
    };
    let mut a = round_robin(&local, 2);
    let mut b = round_robin(&local, 2);
    let mut d = Drainer::default();
    let mut total = 0;
    for i in 0..8 {
        for p in [&mut a, &mut b] {
            // Three batches of about 590 bytes: more than a round's share.
            for _ in 0..3 {
                for _ in 0..10 {
                    p.append(None, b"0123456789", None).unwrap();
                }
                p.flush().unwrap();
            }
            total += 30;
        }
        if i % 3 == 2 {
            // Another drain of the same stream between two of ours.
            Drainer::default()
                .drain_pending(&local, &remote, S, &opts)
                .unwrap();
        } else {
            let rounds = d.drain_pending(&local, &remote, S, &opts).unwrap();
            assert!(
                rounds.len() > 1,
                "a small round budget takes several rounds"
            );
        }
        assert_eq!(read_count(&remote).unwrap(), total, "after round {i}");
    }
    // A fresh copy replays into a fresh remote: the same files.
    let fresh = t.path().join("fresh");
    std::fs::create_dir(&fresh).unwrap();
    drain_stream(&local, &fresh, S, &opts).unwrap();
    assert!(
        files(&fresh) == files(&remote),
        "the remembering drainer wrote other bytes than a replay"
    );
}

/// Rounds of an idle stream (`listing.rs`): once its directory settled,
/// a round neither lists it nor reads the remote (a damaged segment file
/// slipped in with the directory's mtime put back goes unseen), yet a
/// flush to a known segment is drained at the next round (seen by its
/// length) and a new producer's segment too (seen by the directory's
/// mtime), byte for byte what a fresh drain writes.
#[test]
fn idle_rounds_take_every_flush_at_once() {
    let (t, local, remote) = dirs();
    let opts = DrainOptions::default();
    let dir = paralog_stream::layout::stream_dir(&local, S);
    let settle = || {
        let past = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        std::fs::File::open(&dir)
            .unwrap()
            .set_modified(past)
            .unwrap();
    };
    let mut p = round_robin(&local, 2);
    p.append(None, b"one", None).unwrap();
    p.flush().unwrap();
    let mut d = Drainer::default();
    assert_eq!(d.drain(&local, &remote, S, &opts).unwrap().round, Some(1));
    settle();
    assert_eq!(d.drain(&local, &remote, S, &opts).unwrap().round, None);

    // Not listed, the remote not read: a damaged segment and a damaged
    // watermark go unseen while nothing changes.
    let mtime = std::fs::metadata(&dir).unwrap().modified().unwrap();
    let bad = dir.join(paralog_stream::layout::segment_name(0xdead));
    std::fs::write(&bad, vec![0x55u8; 200]).unwrap();
    std::fs::File::open(&dir)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let wm = remote.join(".paralog-streams").join(S).join("watermark");
    let good = std::fs::read(&wm).unwrap();
    std::fs::write(&wm, b"damaged").unwrap();
    for _ in 0..3 {
        assert_eq!(d.drain(&local, &remote, S, &opts).unwrap().round, None);
    }
    std::fs::write(&wm, &good).unwrap();

    // A flush: drained at the next round (the directory still unlisted).
    p.append(None, b"two", None).unwrap();
    p.flush().unwrap();
    let r = d.drain(&local, &remote, S, &opts).unwrap();
    assert_eq!((r.round, r.events), (Some(2), 1));
    assert_eq!(read_count(&remote).unwrap(), 2);

    // A new producer: its segment changes the directory's mtime, so the
    // next round lists it (and would refuse the damaged file).
    std::fs::remove_file(&bad).unwrap();
    let mut q = round_robin(&local, 2);
    q.append(None, b"three", None).unwrap();
    q.flush().unwrap();
    let r = d.drain(&local, &remote, S, &opts).unwrap();
    assert_eq!((r.round, r.events), (Some(3), 1));
    assert_eq!(read_count(&remote).unwrap(), 3);

    let fresh = t.path().join("fresh");
    std::fs::create_dir(&fresh).unwrap();
    drain_stream(&local, &fresh, S, &opts).unwrap();
    assert!(files(&fresh) == files(&remote));
}

#[test]
fn watermark_past_the_data_is_refused() {
    let (_t, local, remote) = dirs();
    let mut p = round_robin(&local, 1);
    for _ in 0..10 {
        p.append(None, b"x", None).unwrap();
    }
    p.flush().unwrap();
    drain_stream(&local, &remote, S, &DrainOptions::default()).unwrap();
    let path = remote.join(".paralog-streams").join(S).join("watermark");
    let mut wm = Watermark::decode(&std::fs::read(&path).unwrap(), &path).unwrap();
    wm.parts[0].next += 5;
    std::fs::write(&path, wm.encode()).unwrap();
    let e = read_count(&remote).unwrap_err().to_string();
    assert!(
        e.contains("watermark says 15") && e.contains("p00000"),
        "{e}"
    );
    // And the drain refuses a remote whose watermark is not the one its
    // cut log made.
    let e = drain_stream(&local, &remote, S, &DrainOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("disagrees with the cut log"), "{e}");
}

/// The cut log: a damaged record with more after it is refused, naming
/// the log and the record's offset; a damaged last record is an append
/// that never finished (never applied), overwritten by the next round.
#[test]
fn damaged_cut_log() {
    let (_t, local, remote) = dirs();
    let mut p = round_robin(&local, 2);
    let mut lens = vec![0u64];
    let cuts = local.join(".paralog-streams").join(S).join("cuts");
    for _ in 0..3 {
        p.append(None, b"e", None).unwrap();
        p.flush().unwrap();
        drain_stream(&local, &remote, S, &DrainOptions::default()).unwrap();
        lens.push(std::fs::metadata(&cuts).unwrap().len());
    }
    let good = std::fs::read(&cuts).unwrap();
    // The last record damaged: taken for an unfinished append. The remote
    // is at round 3, past the log's 2 rounds: refused, not overwritten.
    let mut b = good.clone();
    let at = (lens[2] + 20) as usize;
    b[at] ^= 1;
    std::fs::write(&cuts, &b).unwrap();
    let e = drain_stream(&local, &remote, S, &DrainOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("drained from another node-local root"), "{e}");
    // The middle record damaged: refused, naming the log and its offset.
    let mut b = good.clone();
    b[(lens[1] + 20) as usize] ^= 1;
    std::fs::write(&cuts, &b).unwrap();
    let e = drain_stream(&local, &remote, S, &DrainOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&cuts.display().to_string()) && e.contains(&format!("offset {}", lens[1])),
        "{e}"
    );
    // Half a record after the good ones (a crash while appending): ignored,
    // and the next round writes over it.
    let mut b = good.clone();
    b.extend_from_slice(&good[lens[2] as usize..lens[2] as usize + 30]);
    std::fs::write(&cuts, &b).unwrap();
    p.append(None, b"f", None).unwrap();
    p.flush().unwrap();
    let r = drain_stream(&local, &remote, S, &DrainOptions::default()).unwrap();
    assert_eq!((r.round, r.replayed), (Some(4), 0));
    assert_eq!(read_count(&remote).unwrap(), 4);
    assert_eq!(std::fs::read(&cuts).unwrap()[..good.len()], good[..]);
}

/// With one producer per partition (each partition in time order), the
/// event-time merge delivers every event in nondecreasing time across
/// partitions, although the drain cut them in other groupings; cut order
/// does not (it goes round by round, partition by partition).
#[test]
fn time_order_merges_partitions() {
    let (_t, local, remote) = dirs();
    let mut ps: Vec<_> = (0..3)
        .map(|p| Producer::open(&local, S, 3, Partitioner::Fixed(p)).unwrap())
        .collect();
    let mut time = 1_000i64;
    for round in 0..5 {
        for i in 0..60 {
            // Uneven rates: partition 2 gets few events, partition 0 many.
            let p = [0, 0, 0, 1, 1, 2][(i * 7 + round) % 6];
            time += 1 + (i as i64 % 3);
            ps[p].append(None, b"x", Some(time)).unwrap();
        }
        for p in &mut ps {
            p.flush().unwrap();
        }
        drain_stream(&local, &remote, S, &DrainOptions::default()).unwrap();
    }
    let read = |order| {
        let mut r = Reader::open(
            RemoteStream::open(&remote, S).unwrap(),
            None,
            From::Earliest,
            order,
        )
        .unwrap();
        let mut out = Vec::new();
        while let Some(d) = r.next_event().unwrap() {
            out.push(d.event.time_ns);
        }
        out
    };
    let by_time = read(Order::Time);
    assert_eq!(by_time.len(), 300);
    assert!(
        by_time.windows(2).all(|w| w[0] <= w[1]),
        "event-time order is not sorted"
    );
    let by_cut = read(Order::Cut);
    assert!(
        by_cut.windows(2).any(|w| w[0] > w[1]),
        "cut order happened to be time order: the test proves nothing"
    );
}
