//! Several writers of one name at once, as threads and as processes: no
//! version lost or mixed, every commit its own version, the later commit
//! the latest; readers polling meanwhile see whole versions only.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

use common::{kept_numbers, objstore};
use paralog_objects::{ArrayMeta, Attrs, DType, Store};

const SHAPE: [u64; 2] = [8, 64];
const CHUNKS: [u64; 2] = [2, 16];

fn filled(v: i64) -> Vec<i64> {
    vec![v; (SHAPE[0] * SHAPE[1]) as usize]
}

#[test]
fn four_threads_hundred_commits_no_version_lost_or_mixed() {
    let (_t, store) = objstore(4, 1000);
    let stop = AtomicBool::new(false);
    let mut committed = BTreeMap::new();
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut reads = 0;
            let mut last = 0;
            while !stop.load(Ordering::Relaxed) {
                let Ok(av) = store.array("c", None) else {
                    continue;
                };
                let vals = av.read_as::<i64>(&store, &[0, 0], &SHAPE).unwrap();
                // One put fills its array with one value: two values in
                // one read would be a mixed version.
                assert!(
                    vals.iter().all(|&x| x == vals[0]),
                    "mixed version {}",
                    av.number
                );
                assert!(
                    av.number >= last,
                    "the latest went back from {last} to {}",
                    av.number
                );
                last = av.number;
                reads += 1;
            }
            reads
        });
        let writers: Vec<_> = (0..4i64)
            .map(|w| {
                let store = &store;
                s.spawn(move || {
                    (0..25i64)
                        .map(|r| {
                            let v = w * 1000 + r;
                            let c = store
                                .put_as("c", &SHAPE, &CHUNKS, Attrs::new(), &filled(v))
                                .unwrap();
                            (c.number, v)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for w in writers {
            for (n, v) in w.join().unwrap() {
                assert!(
                    committed.insert(n, v).is_none(),
                    "version {n} returned twice"
                );
            }
        }
        stop.store(true, Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0, "the reader read nothing");
    });
    assert_eq!(committed.len(), 100);
    let kept = kept_numbers(&store, "c");
    assert_eq!(kept, committed.keys().copied().collect::<Vec<_>>());
    for (&n, &v) in &committed {
        let av = store.array("c", Some(n)).unwrap();
        assert_eq!(
            av.read_as::<i64>(&store, &[0, 0], &SHAPE).unwrap(),
            filled(v)
        );
        // Every version's view survived the other writers' pruning.
        paralog_objects::zarr::check_view(&store, &av).unwrap();
    }
}

/// This test binary run again as a writer process (see below); a no-op
/// in a normal test run.
#[test]
fn child_process() {
    let Ok(url) = std::env::var("PARALOG_OBJECTS_TEST_CHILD") else {
        return;
    };
    let store = Store::open(&url.parse().unwrap()).unwrap();
    let w: i64 = std::env::var("PARALOG_OBJECTS_TEST_WRITER")
        .unwrap()
        .parse()
        .unwrap();
    match std::env::var("PARALOG_OBJECTS_TEST_PUT") {
        // A writer of one chunked put: its own row of chunks.
        Ok(id) => {
            let id = paralog_objects::parse_id(&id).unwrap();
            let meta = ArrayMeta::new(DType::I64, &SHAPE, &CHUNKS);
            let mut put = store.join_as("p", &id, &meta).unwrap();
            for j in 0..SHAPE[1] / CHUNKS[1] {
                let vals = vec![w * 100 + j as i64; (CHUNKS[0] * CHUNKS[1]) as usize];
                put.write_chunk_as(&[w as u64, j], &vals).unwrap();
            }
            put.finish().unwrap();
        }
        // Whole puts of one name, racing the other processes.
        Err(_) => {
            for r in 0..20 {
                let v = w * 1000 + r;
                let c = store
                    .put_as("c", &SHAPE, &CHUNKS, Attrs::new(), &filled(v))
                    .unwrap();
                println!("PUT {} {v}", c.number);
            }
        }
    }
}

fn spawn_child(url: &str, w: usize, put: Option<&str>) -> std::process::Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "child_process",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("PARALOG_OBJECTS_TEST_CHILD", url)
    .env("PARALOG_OBJECTS_TEST_WRITER", w.to_string())
    .stdout(std::process::Stdio::piped());
    if let Some(id) = put {
        cmd.env("PARALOG_OBJECTS_TEST_PUT", id);
    }
    cmd.spawn().unwrap()
}

#[test]
fn three_processes_of_one_name_lose_no_version() {
    let (t, store) = objstore(4, 1000);
    let url = format!("objstore://{}?dirs=4&keep=1000", t.path().display());
    let children: Vec<_> = (0..3).map(|w| spawn_child(&url, w, None)).collect();
    let mut committed = BTreeMap::new();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "a writer process failed");
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            // The harness may print "test child_process ... " before the
            // first line, on the same line.
            if let Some((_, rest)) = line.split_once("PUT ") {
                let (n, v) = rest.split_once(' ').unwrap();
                assert!(committed
                    .insert(n.parse::<u64>().unwrap(), v.parse::<i64>().unwrap())
                    .is_none());
            }
        }
    }
    assert_eq!(
        committed.len(),
        60,
        "every put of every process is a version"
    );
    assert_eq!(store.versions("c").unwrap().len(), 60);
    for (&n, &v) in &committed {
        let av = store.array("c", Some(n)).unwrap();
        assert_eq!(
            av.read_as::<i64>(&store, &[0, 0], &SHAPE).unwrap(),
            filled(v),
            "version {n}"
        );
        paralog_objects::zarr::check_view(&store, &av).unwrap();
    }
}

#[test]
fn four_processes_write_one_chunked_put() {
    let (t, store) = objstore(4, 3);
    let url = format!("objstore://{}?dirs=4", t.path().display());
    let meta = ArrayMeta::new(DType::I64, &SHAPE, &CHUNKS);
    let id = store.begin("p", &meta).unwrap().id();
    let hex = paralog_objects::id_hex(&id);
    let children: Vec<_> = (0..4).map(|w| spawn_child(&url, w, Some(&hex))).collect();
    for c in children {
        assert!(c.wait_with_output().unwrap().status.success());
    }
    let c = store.commit("p", &id).unwrap();
    let av = store.array("p", None).unwrap();
    assert_eq!((av.number, av.id), (c.number, id));
    let vals = av.read_as::<i64>(&store, &[0, 0], &SHAPE).unwrap();
    for (k, &x) in vals.iter().enumerate() {
        let (row, col) = (k as u64 / SHAPE[1], k as u64 % SHAPE[1]);
        assert_eq!(
            x,
            (row / CHUNKS[0] * 100 + col / CHUNKS[1]) as i64,
            "element {row},{col}"
        );
    }
}

/// With `keep=1` every commit drops the version before it, chunks and
/// view, while other writers are still making theirs: every commit must
/// still succeed (its version published, a view made or not needed), and
/// the one kept version must be whole and have its view.
#[test]
fn commits_succeed_while_retention_drops_their_versions() {
    let (_t, store) = objstore(4, 1);
    let mut numbers = Vec::new();
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..4i64)
            .map(|w| {
                let store = &store;
                s.spawn(move || {
                    (0..10i64)
                        .map(|r| {
                            // 64 chunks: linking the view takes long
                            // enough to meet another commit's retention.
                            let v = vec![w * 1000 + r; 32 * 32];
                            let c = store.put_as("k", &[32, 32], &[4, 4], Attrs::new(), &v);
                            c.unwrap().number
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in hs {
            numbers.extend(h.join().unwrap());
        }
    });
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=40).collect::<Vec<_>>());
    let kept = store.versions("k").unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].number, 40);
    let av = store.array("k", None).unwrap();
    let vals = av.read_as::<i64>(&store, &[0, 0], &[32, 32]).unwrap();
    assert!(vals.iter().all(|&x| x == vals[0]));
    paralog_objects::zarr::check_view(&store, &av).unwrap();
}
