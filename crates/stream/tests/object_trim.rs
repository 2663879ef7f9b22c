//! Retention on an object remote (docs/streams.md "Retention"): a trim
//! request PUT beside the index is applied by the drain after its next
//! round, with or without new data; whole objects go from each
//! partition's start, never its last; readers start at what is left and
//! refuse an offset below it; the drain goes on. A store of files stands
//! for S3 here (tests/stream/objects.py runs MinIO and objstore://).

use std::path::Path;
use std::time::{Duration, SystemTime};

use paralog_stream::object_remote::stream_key;
use paralog_stream::object_trim::{self, TrimRule};
use paralog_stream::objects::object_key;
use paralog_stream::{
    Compaction, DrainOptions, Drainer, From, ObjectRemote, Order, Reader, RemoteStream,
    StreamError, StreamPlace,
};

mod common;
use common::{dirs, read_from, round_robin, DirStore, S};

const N: u32 = 3;
const OPTS: DrainOptions = DrainOptions {
    roll_bytes: 0,
    max_round_bytes: 64 << 20,
    release_bytes: 64 << 20,
};

/// `rounds` rounds of 30 events each, drained to `store` one object per
/// partition and round (compaction as given).
fn rounds(local: &Path, remote: &ObjectRemote<DirStore>, d: &mut Drainer, rounds: usize) {
    let mut p = round_robin(local, N);
    for r in 0..rounds {
        for e in 0..30 {
            p.append(
                None,
                format!("r{r} e{e} {}", "x".repeat(100)).as_bytes(),
                None,
            )
            .unwrap();
        }
        p.flush().unwrap();
        assert!(d.drain_to(local, remote, S, &OPTS).unwrap().round.is_some());
    }
}

fn place(store: &Path) -> StreamPlace {
    StreamPlace::Store(std::sync::Arc::new(DirStore(store.to_path_buf())))
}

fn remote(store: &Path, compaction: Compaction) -> ObjectRemote<DirStore> {
    ObjectRemote {
        store: DirStore(store.to_path_buf()),
        compaction,
    }
}

#[test]
fn the_drain_applies_a_trim_request_keeping_bytes_and_readers_start_after_it() {
    let (_t, local, store) = dirs();
    let objs = remote(&store, Compaction::OFF);
    let mut d = Drainer::default();
    rounds(&local, &objs, &mut d, 6);
    let all = read_from(&place(&store), None, From::Earliest).unwrap();
    assert_eq!(all.len(), 180);
    // A group that read the first 5 events and committed them.
    let mut g = Reader::open(
        RemoteStream::open_at(&place(&store), S).unwrap(),
        Some("old"),
        From::Earliest,
        Order::Cut,
    )
    .unwrap();
    for _ in 0..5 {
        g.next_event().unwrap().unwrap();
    }
    g.commit().unwrap();
    drop(g);

    let before = objs.index(S, N).unwrap();
    let keep = 2 * before.parts[0].objects[0].bytes + 1;
    object_trim::request(&objs.store, S, TrimRule::KeepBytes(keep)).unwrap();
    // Nothing happens until the drain's next round: a trim never PUTs
    // the index itself.
    assert!(object_trim::pending(&objs.store, S).unwrap());
    assert_eq!(objs.index(S, N).unwrap(), before);
    let r = d.drain_to(&local, &objs, S, &OPTS).unwrap();
    assert_eq!(r.round, None, "no new data: the trim still applies");
    assert!(!object_trim::pending(&objs.store, S).unwrap());
    let after = objs.index(S, N).unwrap();
    assert_eq!(after.round, before.round);
    assert_eq!(
        after.marks(),
        before.marks(),
        "a trim never changes the last objects"
    );
    assert!(after.retired.is_empty());
    for (p, (b, a)) in before.parts.iter().zip(&after.parts).enumerate() {
        let kept: u64 = a.objects.iter().map(|o| o.bytes).sum();
        assert!(
            kept >= keep && kept - a.objects[0].bytes < keep,
            "partition {p} keeps {kept}"
        );
        assert!(
            (2..=3).contains(&a.objects.len()),
            "partition {p}: {:?}",
            a.objects
        );
        let gone = &b.objects[..b.objects.len() - a.objects.len()];
        let t = &r.trimmed[p];
        assert_eq!(t.segments, gone.iter().map(|o| o.first).collect::<Vec<_>>());
        assert_eq!(t.first, a.objects[0].first);
        for o in gone {
            let key = stream_key(S, &object_key(p as u32, o.first, o.end));
            assert!(!store.join(&key).exists(), "{key} still there");
        }
    }
    assert_eq!(object_trim::compare(&before, &after), r.trimmed);

    // Readers: from earliest, exactly the events at or past the first offsets.
    let firsts: Vec<u64> = r.trimmed.iter().map(|t| t.first).collect();
    let want: Vec<_> = all
        .iter()
        .filter(|e| e.offset >= firsts[e.partition as usize])
        .map(|e| (e.partition, e.offset, e.event.payload.clone()))
        .collect();
    let got: Vec<_> = read_from(&place(&store), None, From::Earliest)
        .unwrap()
        .into_iter()
        .map(|e| (e.partition, e.offset, e.event.payload))
        .collect();
    assert_eq!(got, want);
    // The group committed below them is refused, naming the offsets.
    let err = read_from(&place(&store), Some("old"), From::Committed).unwrap_err();
    assert!(
        matches!(err, StreamError::Trimmed { partition, offset, first, .. }
            if first == firsts[partition as usize] && offset < first),
        "{err}"
    );
    assert!(err.to_string().contains("was trimmed"), "{err}");
    // The drain goes on.
    rounds(&local, &objs, &mut d, 1);
    assert_eq!(
        read_from(&place(&store), None, From::Earliest)
            .unwrap()
            .len(),
        want.len() + 30
    );
}

#[test]
fn a_trim_by_age_goes_by_the_store_time_and_takes_compacted_away_objects_too() {
    let (_t, local, store) = dirs();
    // Runs of 3 small objects compacted, kept retired for 1000 rounds.
    let c = Compaction {
        small: 1 << 20,
        min_run: 3,
        max: 64 << 20,
        grace: 1000,
    };
    let objs = remote(&store, c);
    let mut d = Drainer::default();
    rounds(&local, &objs, &mut d, 7);
    let before = objs.index(S, N).unwrap();
    assert!(!before.retired.is_empty(), "nothing compacted");
    // Each partition's first object (compacted) last written 2 h ago.
    let old = SystemTime::now() - Duration::from_secs(7200);
    for (p, part) in before.parts.iter().enumerate() {
        let o = part.objects[0];
        let f = std::fs::File::options()
            .write(true)
            .open(store.join(stream_key(S, &object_key(p as u32, o.first, o.end))))
            .unwrap();
        f.set_modified(old).unwrap();
    }
    object_trim::request(
        &objs.store,
        S,
        object_trim::older_than(Duration::from_secs(3600)),
    )
    .unwrap();
    let r = d.drain_to(&local, &objs, S, &OPTS).unwrap();
    let after = objs.index(S, N).unwrap();
    for (p, part) in after.parts.iter().enumerate() {
        let b = &before.parts[p];
        assert_eq!(
            part.objects[..],
            b.objects[1..],
            "partition {p}: only the old object goes"
        );
        assert_eq!(r.trimmed[p].segments, vec![b.objects[0].first]);
    }
    // The small objects that the trimmed ones had replaced are deleted
    // too (wholly below the new start), not left for the grace period.
    for x in &before.retired {
        let first = after.parts[x.partition as usize].objects[0].first;
        let key = stream_key(S, &object_key(x.partition, x.object.first, x.object.end));
        assert_eq!(store.join(&key).exists(), x.object.end > first, "{key}");
        assert_eq!(after.retired.contains(x), x.object.end > first, "{key}");
    }
    // A rule of 0 s keeps only each partition's last object.
    object_trim::request(&objs.store, S, object_trim::older_than(Duration::ZERO)).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    d.drain_to(&local, &objs, S, &OPTS).unwrap();
    let last = objs.index(S, N).unwrap();
    assert!(last.parts.iter().all(|p| p.objects.len() == 1), "{last:?}");
    assert_eq!(last.marks(), before.marks());
}

#[test]
fn a_damaged_trim_request_is_refused_naming_it() {
    let (_t, local, store) = dirs();
    let objs = remote(&store, Compaction::OFF);
    let mut d = Drainer::default();
    rounds(&local, &objs, &mut d, 2);
    let key = store.join(stream_key(S, object_trim::TRIM_REQUEST));
    let mut b = object_trim::TrimRequest {
        rule: TrimRule::KeepBytes(0),
        asked_ns: 1,
    }
    .encode();
    b[30] ^= 4;
    std::fs::write(&key, &b).unwrap();
    let before = objs.index(S, N).unwrap();
    let err = d.drain_to(&local, &objs, S, &OPTS).unwrap_err().to_string();
    assert!(err.contains(&key.display().to_string()), "{err}");
    assert_eq!(
        objs.index(S, N).unwrap(),
        before,
        "nothing trimmed by a damaged request"
    );
}
