//! What a server job's round costs a node in looking at a stream's
//! segments when it holds many (docs/streams.md "Many nodes", step 1):
//! the round's one listing (`NodeShare::take_new`: the new batches and
//! what a release would delete, from the same listing) against the two
//! it took before (`take_new` for the batches, then `releasable`, which
//! listed the segments again), with ended producers' segments all taken
//! whole by the cut log and not released yet (a threshold not reached).
//! Since the idle rounds (`listing.rs`), a round lists the segments only
//! until the directory settles (2 s after its last change), then `stat`s
//! them: the numbers are a mix of both once a run lasts that long.
//!
//! `cargo run --release -p paralog-stream --example round_listing --
//! [SEGMENTS ...] [--dir DIR]` (default 1000 and 5000 segments, in a
//! temporary directory under /dev/shm when there is one, so that making
//! them costs no disk flushes; the listing reads from the page cache
//! either way). Prints the best of 5 of each, in milliseconds.

use std::path::Path;
use std::time::Instant;

use paralog_stream::nodes::{self, NodeShare};
use paralog_stream::{DrainOptions, DrainReport, Partitioner, Producer};

const S: &str = "tele";
const PARTS: u32 = 4;

fn main() {
    let mut counts = Vec::new();
    let mut dir = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--dir" => dir = args.next(),
            n => counts.push(n.parse::<usize>().expect("a count of segments")),
        }
    }
    if counts.is_empty() {
        counts = vec![1000, 5000];
    }
    let base = dir.unwrap_or_else(|| {
        if Path::new("/dev/shm").is_dir() {
            "/dev/shm".into()
        } else {
            std::env::temp_dir().display().to_string()
        }
    });
    for n in counts {
        let t = tempfile::tempdir_in(&base).expect("a temporary directory");
        let local = t.path().join("local");
        for i in 0..n {
            let mut p = Producer::open(&local, S, PARTS, Partitioner::RoundRobin).unwrap();
            p.append(None, format!("event {i}").as_bytes(), None)
                .unwrap();
            p.flush().unwrap();
        }
        // One cut takes every segment whole; the producers have ended.
        let mut share = NodeShare::open(&local, S, 1).unwrap();
        // A threshold of 1 byte: the release look is made every round
        // (below the threshold a round skips it: `NodeShare::take_new`).
        let on = DrainOptions {
            release_bytes: 1,
            ..DrainOptions::default()
        };
        let new = share.take_new(&on, &mut DrainReport::default()).unwrap();
        let state = vec![Default::default(); PARTS as usize];
        let cut = nodes::make_cut(1, &state, new.ranges, 64 << 20, S).unwrap();
        share.record(&cut).unwrap();
        let off = DrainOptions {
            release_bytes: u64::MAX,
            ..on
        };
        let mut releasable = 0;
        let one = best(&mut || releasable = look(&mut share, &on));
        let bare = best(&mut || {
            look(&mut share, &off);
        });
        let mut again = 0;
        let two = best(&mut || {
            look(&mut share, &off);
            again = share.releasable().unwrap().bytes();
        });
        assert_eq!(releasable, again, "the two ways disagree");
        println!(
            "{n} ended segments taken whole ({releasable} bytes releasable): one listing {one:.1} ms (without the release look {bare:.1} ms), two listings {two:.1} ms"
        );
    }
}

/// One round's look at the segments; what a release would delete.
fn look(share: &mut NodeShare, opts: &DrainOptions) -> u64 {
    share
        .take_new(opts, &mut DrainReport::default())
        .unwrap()
        .releasable
}

/// The best of 5 runs of `f`, in milliseconds.
fn best(f: &mut dyn FnMut()) -> f64 {
    (0..5)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1000.0
        })
        .fold(f64::MAX, f64::min)
}
