//! The generic watch driven by a policy that reports every hook on a
//! channel: what it watches, what it finds by listing, and overflow.

use super::*;
use std::ffi::OsString;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// What the policy was told.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Watched(PathBuf, usize),
    Appeared(PathBuf, usize),
    File(PathBuf, OsString),
    Overflow,
}

/// Leaf at depth 2; directories named `skip*` are not wanted. The first
/// file named `hold` blocks the event loop until the test passes `hold`
/// (to let the kernel's queue fill).
struct Recorder {
    seen: Sender<Seen>,
    hold: Option<Arc<Barrier>>,
}

impl Policy for Recorder {
    const LEAF_DEPTH: usize = 2;

    fn wants(&self, dir: &Path, _depth: usize) -> bool {
        !dir.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("skip")
    }

    fn watched(&mut self, dir: &Path, depth: usize) {
        let _ = self.seen.send(Seen::Watched(dir.to_path_buf(), depth));
    }

    fn appeared(&mut self, dir: &Path, depth: usize) {
        let _ = self.seen.send(Seen::Appeared(dir.to_path_buf(), depth));
    }

    fn file(&mut self, dir: &Path, name: &OsStr) {
        let _ = self
            .seen
            .send(Seen::File(dir.to_path_buf(), name.to_owned()));
        if name == "hold" {
            if let Some(b) = self.hold.take() {
                b.wait(); // the loop is held
                b.wait(); // the queue is full
            }
        }
    }

    fn overflow(&mut self) -> Overflow {
        let _ = self.seen.send(Seen::Overflow);
        Overflow::Rescan
    }

    fn out_of_watches(&mut self, dir: &Path) {
        panic!("out of inotify watches at {}", dir.display());
    }
}

/// A watch of `root` running on a thread, and what its policy sees.
fn start(root: &Path, hold: Option<Arc<Barrier>>) -> Receiver<Seen> {
    let (seen, rx) = channel();
    let w = TreeWatch::new(root.to_path_buf(), Recorder { seen, hold }).unwrap();
    std::thread::spawn(move || w.run());
    rx
}

/// The hooks' reports up to and including `want` (a failure, not a hang,
/// if it never comes).
fn until(rx: &Receiver<Seen>, want: &Seen) -> Vec<Seen> {
    let mut got = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(s) => {
                let done = &s == want;
                got.push(s);
                if done {
                    return got;
                }
            }
            Err(_) => panic!(
                "never saw {want:?}; saw {} reports, the last {:?}",
                got.len(),
                &got[got.len().saturating_sub(4)..]
            ),
        }
    }
}

fn file(dir: &Path, name: &str) -> Seen {
    Seen::File(dir.to_path_buf(), name.into())
}

#[test]
fn a_tree_made_after_the_start_is_watched_down_to_the_leaf_depth_only() {
    let root = tempfile::tempdir().unwrap();
    let rx = start(root.path(), None);
    assert_eq!(rx.recv().unwrap(), Seen::Watched(root.path().into(), 0));
    let (a, b) = (root.path().join("a"), root.path().join("a/b"));
    // One level at a time: b made before a's watch would be found by a's
    // listing, and made between a's watch and its listing, twice.
    std::fs::create_dir(&a).unwrap();
    until(&rx, &Seen::Appeared(a.clone(), 1));
    std::fs::create_dir(&b).unwrap();
    // A directory that appears is not `watched` (that is the scans'), and
    // b, an empty leaf, holds no file to report.
    assert_eq!(
        until(&rx, &Seen::Appeared(b.clone(), 2)),
        [Seen::Appeared(b.clone(), 2)]
    );
    let deeper = b.join("c");
    std::fs::create_dir(&deeper).unwrap();
    std::fs::write(deeper.join("f"), b"x").unwrap();
    // Moved in: an event at the leaf (created: none), still not watched.
    let moved = b.join("moved");
    std::fs::create_dir_all(root.path().join("skip-tmp/moved")).unwrap();
    std::fs::rename(root.path().join("skip-tmp/moved"), &moved).unwrap();
    std::fs::write(moved.join("f"), b"x").unwrap();
    let skipped = root.path().join("skip/b");
    std::fs::create_dir_all(&skipped).unwrap();
    std::fs::write(skipped.join("f"), b"x").unwrap();
    // Files closed at depths above the leaf are not events.
    std::fs::write(a.join("f"), b"x").unwrap();
    std::fs::write(b.join("f"), b"x").unwrap();
    // Events arrive in order: anything about c, moved, skip or a's file
    // would come before b's.
    let seen = until(&rx, &file(&b, "f"));
    assert_eq!(seen, [file(&b, "f")], "only the leaf's file is an event");
}

#[test]
fn a_subtree_moved_in_is_listed_and_the_files_its_leaves_held_are_reported() {
    let root = tempfile::tempdir().unwrap();
    let rx = start(root.path(), None);
    assert_eq!(rx.recv().unwrap(), Seen::Watched(root.path().into(), 0));
    // Made under an unwanted name, so that x/y exists before any watch of
    // it can: only the listing after x's watch can find y.
    let tmp = root.path().join("skip-tmp");
    std::fs::create_dir_all(tmp.join("x/y")).unwrap();
    std::fs::write(tmp.join("x/y/old"), b"x").unwrap();
    let x = root.path().join("x");
    let y = x.join("y");
    std::fs::rename(tmp.join("x"), &x).unwrap();
    let seen = until(&rx, &Seen::Appeared(x.clone(), 1));
    assert_eq!(
        seen,
        [file(&y, "old"), Seen::Appeared(x.clone(), 1)],
        "the files of the leaves below first, then that its top appeared"
    );
    // y's own watch works: a file closed in it now is an event.
    std::fs::write(y.join("new"), b"x").unwrap();
    assert_eq!(until(&rx, &file(&y, "new")), [file(&y, "new")]);
}

#[test]
fn an_overflow_calls_the_hook_and_a_rescan_watches_the_tree_again() {
    let root = tempfile::tempdir().unwrap();
    let leaf = root.path().join("a/b");
    std::fs::create_dir_all(&leaf).unwrap();
    let hold = Arc::new(Barrier::new(2));
    let rx = start(root.path(), Some(hold.clone()));
    until(&rx, &Seen::Watched(root.path().into(), 0));
    std::fs::write(leaf.join("hold"), b"x").unwrap();
    hold.wait();
    // The loop is held in the hook: more events than the kernel queues.
    // Two names in turn, as the kernel merges an event equal to the last
    // one queued.
    let queued: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    for i in 0..queued + 10 {
        let name = if i % 2 == 0 { "p" } else { "q" };
        std::fs::File::create(leaf.join(name)).unwrap();
    }
    hold.wait();
    until(&rx, &Seen::Overflow);
    let rescan = until(&rx, &Seen::Watched(root.path().into(), 0));
    for d in [leaf.clone(), root.path().join("a")] {
        let depth = d.strip_prefix(root.path()).unwrap().components().count();
        assert!(
            rescan.contains(&Seen::Watched(d.clone(), depth)),
            "the rescan did not watch {}: {rescan:?}",
            d.display()
        );
    }
}
