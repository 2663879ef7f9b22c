//! The drain to an object store (docs/streams.md "Object remotes"), with a
//! store of whole files under a directory (each PUT a new file renamed
//! into place: whole objects, as S3 gives): the objects are byte for byte
//! the segment files of a POSIX drain of a copy of the same local root
//! rolling every round, the index gives that drain's watermark back, a
//! re-drain after a crash before the index writes the same objects again,
//! and a cut log planned for a POSIX remote is refused.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use paralog_stream::format::Watermark;
use paralog_stream::layout;
use paralog_stream::object_remote::stream_key;
use paralog_stream::objects::{object_key, INDEX};
use paralog_stream::reader::list_streams_at;
use paralog_stream::{
    Compaction, Delivered, DrainOptions, Drainer, From, ObjectRemote, Order, Partitioner,
    PosixRemote, Producer, Reader, RemoteStream, StreamPlace,
};

mod common;
use common::{read_from, walk, DirStore, S};

const N: u32 = 3;

/// A local root with 3 producers' events over several flushes.
fn produce(local: &Path) {
    let mut ps: Vec<Producer> = (0..3)
        .map(|_| Producer::open(local, S, N, Partitioner::RoundRobin).unwrap())
        .collect();
    for f in 0..6 {
        for (i, p) in ps.iter_mut().enumerate() {
            for e in 0..(f * 7 + i * 3) {
                p.append(None, format!("f{f} p{i} e{e}").as_bytes(), None)
                    .unwrap();
            }
            p.flush().unwrap();
        }
    }
}

fn copy(from: &Path, to: &Path) {
    let st = std::process::Command::new("cp")
        .args(["-a", from.to_str().unwrap(), to.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(st.success());
}

/// Small rounds: several per drain, the same in both copies.
const OPTS: DrainOptions = DrainOptions {
    roll_bytes: 0,
    max_round_bytes: 2000,
    release_bytes: 64 << 20,
};

fn drain_all(local: &Path, remote: &dyn paralog_stream::StreamRemote) -> u64 {
    let mut d = Drainer::default();
    let mut rounds = 0;
    while d.drain_to(local, remote, S, &OPTS).unwrap().round.is_some() {
        rounds += 1;
    }
    rounds
}

/// A produced local root `a`, its copy `b`, `a` drained to the directory
/// `posix` (its rounds counted), and an empty directory `store`.
struct Setup {
    _t: tempfile::TempDir,
    b: PathBuf,
    posix: PathBuf,
    store: PathBuf,
    rounds: u64,
}

fn setup() -> Setup {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = (t.path().join("a"), t.path().join("b"));
    let (posix, store) = (t.path().join("posix"), t.path().join("store"));
    std::fs::create_dir(&posix).unwrap();
    std::fs::create_dir(&store).unwrap();
    produce(&a);
    copy(&a, &b);
    let rounds = drain_all(&a, &PosixRemote(&posix));
    Setup {
        _t: t,
        b,
        posix,
        store,
        rounds,
    }
}

#[test]
fn objects_are_the_posix_segments_and_a_redrain_writes_them_again() {
    let Setup {
        _t,
        b,
        posix,
        store,
        rounds,
    } = setup();
    assert!(rounds > 3, "{rounds} rounds");
    let objects = ObjectRemote {
        store: DirStore(store.clone()),
        compaction: Compaction::OFF,
    };
    let index = store.join(stream_key(S, INDEX));
    // Round by round, keeping the index from before the last round.
    let (mut d, mut prev, mut got) = (Drainer::default(), None, 0);
    loop {
        let before = std::fs::read(&index).ok();
        if d.drain_to(&b, &objects, S, &OPTS).unwrap().round.is_none() {
            break;
        }
        prev = before;
        got += 1;
    }
    assert_eq!(got, rounds);

    let rdir = layout::stream_dir(&posix, S);
    let wm_path = rdir.join(layout::WATERMARK);
    let wm = Watermark::decode(&std::fs::read(&wm_path).unwrap(), &wm_path).unwrap();
    let ix = objects.index(S, N).unwrap();
    assert_eq!((ix.round, ix.marks()), (wm.round, wm.parts.clone()));
    let mut compared = 0;
    for p in 0..N {
        let firsts = layout::part_segments(&rdir, p).unwrap();
        let objs = &ix.parts[p as usize].objects;
        assert_eq!(objs.iter().map(|o| o.first).collect::<Vec<_>>(), firsts);
        for o in objs {
            let seg = std::fs::read(layout::part_segment(&rdir, p, o.first)).unwrap();
            let key = stream_key(S, &object_key(p, o.first, o.end));
            let obj = std::fs::read(store.join(&key)).unwrap();
            assert!(seg == obj, "{key} differs from its POSIX segment");
            assert_eq!(o.bytes, obj.len() as u64);
            compared += 1;
        }
    }
    assert!(compared > 6, "{compared} objects");

    // A crash after the last round's objects, before its index: the
    // previous index back in place, the objects kept. A fresh drainer
    // replays the cut, PUTs the same bytes, and publishes the same index.
    let last = std::fs::read(&index).unwrap();
    let before: Vec<(PathBuf, Vec<u8>)> = walk(&store)
        .into_iter()
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    std::fs::write(&index, prev.unwrap()).unwrap();
    let r = Drainer::default().drain_to(&b, &objects, S, &OPTS).unwrap();
    assert_eq!((r.replayed, r.round), (1, None));
    assert_eq!(std::fs::read(&index).unwrap(), last);
    for (p, bytes) in before {
        assert!(
            std::fs::read(&p).unwrap() == bytes,
            "{} changed",
            p.display()
        );
    }
}

#[test]
fn a_cut_log_planned_for_a_posix_remote_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let (a, posix, store) = (
        t.path().join("a"),
        t.path().join("posix"),
        t.path().join("store"),
    );
    std::fs::create_dir(&posix).unwrap();
    std::fs::create_dir(&store).unwrap();
    produce(&a);
    // Segments rolled at 64 MiB: the later rounds append to the first.
    let opts = DrainOptions {
        max_round_bytes: 2000,
        ..Default::default()
    };
    let mut d = Drainer::default();
    while d.drain(&a, &posix, S, &opts).unwrap().round.is_some() {}
    let err = Drainer::default()
        .drain_to(&a, &ObjectRemote::new(DirStore(store)), S, &opts)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("round 2") && err.contains("planned for a POSIX remote"),
        "{err}"
    );
}

fn read_all(place: &StreamPlace, group: Option<&str>) -> paralog_stream::Result<Vec<Delivered>> {
    read_from(place, group, From::Committed)
}

#[test]
fn a_reader_on_the_store_reads_what_the_posix_reader_does_and_refuses_damage() {
    let Setup {
        _t,
        b,
        posix,
        store,
        ..
    } = setup();
    let place = StreamPlace::Store(Arc::new(DirStore(store.clone())));
    drain_all(&b, &*place.remote());

    let dir = StreamPlace::Dir(posix.clone());
    let want = read_all(&dir, None).unwrap();
    assert!(want.len() > 100, "{} events", want.len());
    assert_eq!(read_all(&place, None).unwrap(), want);
    assert_eq!(list_streams_at(&place).unwrap(), vec![S.to_string()]);
    let rs = RemoteStream::open_at(&place, S).unwrap();
    assert_eq!(
        rs.watermark().unwrap(),
        RemoteStream::open_at(&dir, S).unwrap().watermark().unwrap()
    );

    // A group: its offsets are an object; a second read from them is empty.
    assert_eq!(read_all(&place, Some("g")).unwrap(), want);
    assert!(read_all(&place, Some("g")).unwrap().is_empty());
    let groups = rs.groups().unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(
        groups[0].1.offsets,
        rs.watermark()
            .unwrap()
            .parts
            .iter()
            .map(|m| m.next)
            .collect::<Vec<_>>()
    );

    // One flipped byte in a batch of an object: refused, naming the
    // object and the batch's offset in it.
    let ix = ObjectRemote::new(DirStore(store.clone()))
        .index(S, N)
        .unwrap();
    let o = ix.parts[1].objects[1];
    let key = stream_key(S, &object_key(1, o.first, o.end));
    let path = store.join(&key);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() - 10;
    bytes[at] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    let err = read_all(&place, None).unwrap_err().to_string();
    assert!(
        err.contains(&key) && err.contains("corrupt at offset"),
        "{err}"
    );
    // An object the index names and the store lacks: named.
    std::fs::remove_file(&path).unwrap();
    let err = read_all(&place, None).unwrap_err().to_string();
    assert!(
        err.contains(&key) && err.contains("the store has none"),
        "{err}"
    );
}

#[test]
fn the_drain_compacts_small_objects_expires_them_and_a_redrain_does_the_same() {
    let t = tempfile::tempdir().unwrap();
    let (a, b, c) = (t.path().join("a"), t.path().join("b"), t.path().join("c"));
    let (posix, s1, s2) = (
        t.path().join("posix"),
        t.path().join("s1"),
        t.path().join("s2"),
    );
    for d in [&posix, &s1, &s2] {
        std::fs::create_dir(d).unwrap();
    }
    produce(&a);
    copy(&a, &b);
    copy(&a, &c);
    drain_all(&a, &PosixRemote(&posix));
    let compaction = Compaction {
        small: 1500,
        min_run: 2,
        max: 5000,
        grace: 2,
    };
    let remote = |dir: &Path| ObjectRemote {
        store: DirStore(dir.to_path_buf()),
        compaction,
    };
    let rounds = drain_all(&b, &remote(&s1));
    assert!(rounds > 3, "{rounds} rounds");
    let ix = remote(&s1).index(S, N).unwrap();
    let objects: usize = ix.parts.iter().map(|p| p.objects.len()).sum();
    let written: usize = walk(&layout::stream_dir(&posix, S))
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .count();
    assert!(
        objects < written,
        "{objects} objects for {written} rounds' segments: nothing compacted"
    );
    // On the store: exactly the objects the index names or still retires.
    let mut named: Vec<String> = ix
        .parts
        .iter()
        .enumerate()
        .flat_map(|(p, part)| part.objects.iter().map(move |o| (p as u32, *o)))
        .chain(ix.retired.iter().map(|r| (r.partition, r.object)))
        .map(|(p, o)| stream_key(S, &object_key(p, o.first, o.end)))
        .collect();
    named.sort();
    let mut stored: Vec<String> = walk(&s1)
        .iter()
        .map(|p| p.strip_prefix(&s1).unwrap().to_str().unwrap().to_owned())
        .filter(|k| k.contains("/p0"))
        .collect();
    stored.sort();
    assert_eq!(
        stored, named,
        "objects neither named nor retired were left, or named ones are gone"
    );
    assert!(ix.retired.iter().all(|r| r.round + 2 > ix.round));

    // The same events as the directory's, in the same cut order.
    let place = StreamPlace::Store(Arc::new(DirStore(s1.clone())));
    let want = read_all(&StreamPlace::Dir(posix.clone()), None).unwrap();
    assert_eq!(read_all(&place, None).unwrap(), want);

    // A re-drain of a copy into a fresh store: the same objects, the same bytes.
    drain_all(&c, &remote(&s2));
    let tree = |d: &Path| -> Vec<(PathBuf, Vec<u8>)> {
        walk(d)
            .into_iter()
            .map(|p| {
                (
                    p.strip_prefix(d).unwrap().to_path_buf(),
                    std::fs::read(&p).unwrap(),
                )
            })
            .collect()
    };
    assert!(tree(&s1) == tree(&s2), "a re-drain compacted differently");
}

#[test]
fn a_reader_whose_objects_were_compacted_and_deleted_reads_the_index_again() {
    let Setup {
        _t,
        b,
        posix,
        store,
        ..
    } = setup();
    let remote = ObjectRemote {
        store: DirStore(store.clone()),
        compaction: Compaction {
            small: 1500,
            min_run: 2,
            max: 5000,
            grace: 1,
        },
    };
    // Two rounds (nothing to compact yet: the last object never is),
    // then a reader holding that index, then the rest.
    let mut d = Drainer::default();
    for _ in 0..2 {
        assert!(d.drain_to(&b, &remote, S, &OPTS).unwrap().round.is_some());
    }
    let place = StreamPlace::Store(Arc::new(DirStore(store.clone())));
    let mut r = Reader::open(
        RemoteStream::open_at(&place, S).unwrap(),
        None,
        From::Earliest,
        Order::Cut,
    )
    .unwrap();
    let first = remote.index(S, N).unwrap().parts[0].objects[0];
    while d.drain_to(&b, &remote, S, &OPTS).unwrap().round.is_some() {}
    let gone = store.join(stream_key(S, &object_key(0, first.first, first.end)));
    assert!(
        !gone.exists(),
        "{} was not compacted and deleted",
        gone.display()
    );
    let mut got = Vec::new();
    while let Some(e) = r.next_event().unwrap() {
        got.push(e);
    }
    let want: Vec<Delivered> = read_all(&StreamPlace::Dir(posix), None)
        .unwrap()
        .into_iter()
        .filter(|e| e.round <= 2)
        .collect();
    assert!(!want.is_empty());
    assert_eq!(got, want);
}
