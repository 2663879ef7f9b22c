//! A node holding more segments of a stream than the drain may open
//! files at once (docs/streams.md "Local retention"): a round opens only
//! the segments it reads, one at a time, and a release holds at most
//! `release::MAX_GONE` open, so a drain whose soft open-file limit is 300
//! drains and releases 400 ended producers' segments, on one node and
//! as a server job's node. (Before, a round held one descriptor per
//! segment and a release one more per segment it deleted.) One test in
//! its own binary: the limit is the process's.

use std::path::Path;

use paralog_stream::nodes::{self, NodeShare};
use paralog_stream::{layout, release, DrainOptions, DrainReport, Drainer};

mod common;

use common::{reader_from_start, round_robin, S};

const SEGMENTS: usize = 400;
const LIMIT: u64 = 300;

fn ended_producers(local: &Path) {
    for i in 0..SEGMENTS {
        let mut p = round_robin(local, 3);
        p.append(None, format!("{}:0:{i}", p.id()).as_bytes(), None)
            .unwrap();
        p.flush().unwrap();
    }
}

fn seg_count(local: &Path) -> usize {
    std::fs::read_dir(layout::stream_dir(local, S))
        .unwrap()
        .filter(|e| {
            layout::parse_segment_name(&e.as_ref().unwrap().file_name().to_string_lossy()).is_some()
        })
        .count()
}

fn lower_open_files() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain calls on a struct we own.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
        r.rlim_cur = LIMIT.min(r.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &r), 0);
    }
}

#[test]
fn more_segments_than_open_files() {
    assert!(release::MAX_GONE < LIMIT as usize / 2);
    // On tmpfs when there is one: the test is about descriptors, and
    // making 800 segments costs 2,400 fsyncs on a disk.
    let t = tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap();
    let (local, remote, job) = (t.path().join("l"), t.path().join("r"), t.path().join("j"));
    std::fs::create_dir(&remote).unwrap();
    ended_producers(&local);
    ended_producers(&job);
    lower_open_files();

    // One node: every event drained, every segment released (at most
    // MAX_GONE a round), the log rebased.
    let opts = DrainOptions {
        release_bytes: 1,
        ..DrainOptions::default()
    };
    let mut d = Drainer::default();
    let mut rounds = 0;
    while seg_count(&local) > 0 {
        rounds += 1;
        assert!(rounds < 20, "{} segments left", seg_count(&local));
        d.drain(&local, &remote, S, &opts).unwrap();
    }
    assert!(rounds > SEGMENTS / release::MAX_GONE, "{rounds} rounds");
    let mut r = reader_from_start(&remote);
    let mut n = 0;
    while r.next_event().unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, SEGMENTS);

    // A server job's node: the view of the round, a cut of everything,
    // then the view of what a release deletes, and the release.
    let mut share = NodeShare::open(&job, S, 2).unwrap();
    let new = share.take_new(&opts, &mut DrainReport::default()).unwrap();
    assert_eq!(new.ranges.len(), SEGMENTS);
    let state = vec![Default::default(); 3];
    let cut = nodes::make_cut(1, &state, new.ranges, 64 << 20, S).unwrap();
    share.record(&cut).unwrap();
    let again = share.take_new(&opts, &mut DrainReport::default()).unwrap();
    assert!(again.ranges.is_empty() && again.releasable > 0);
    let going = share.releasable().unwrap();
    assert_eq!(going.gone().len(), release::MAX_GONE);
    assert_eq!(going.bytes(), again.releasable);
    share.delete_released(going).unwrap();
    assert_eq!(seg_count(&job), SEGMENTS - release::MAX_GONE);
}
