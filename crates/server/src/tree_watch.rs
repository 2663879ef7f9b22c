//! One depth-limited inotify watch of a directory tree, for the two
//! watchers that wait for files closed at a fixed depth below a root: the
//! server's epochs (`watch.rs`: root, job, file, open, rank) and the CLI's
//! logged array puts (`obj_watch.rs`: root, object log, staging, put).
//! This module owns the mechanism (the inotify descriptor, the watch →
//! directory map, the event loop, queue overflow, removed watches, the
//! subtree added when a directory appears); a `Policy` says which
//! directories belong to the tree and what an event means.
//!
//! A directory is watched first and listed after, so a subdirectory or a
//! file made in between is seen twice rather than never. At start and in a
//! rescan, `Policy::watched` runs once a directory and everything below it
//! are watched, which is where a caller takes in what was there before its
//! watch existed; a leaf directory that appears later is listed instead and
//! its files are reported as events (`Policy::file`), so that a caller
//! acts on the files that matter and not on every directory made.
//!
//! Events are handled in batches: after the first one, the loop takes what
//! follows until the queue has been quiet for `QUIET` (at most `GATHER`
//! in all), then calls `Policy::batch_done`. One commit is a burst of
//! events microseconds apart (a rank directory renamed into its
//! generation, its data log closed, its commit mark, its close marker): a
//! caller that acts once per batch acts once for the burst.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};

/// What a watcher does with its tree when the kernel's event queue
/// overflowed (events were lost).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    /// Watch and list the whole tree again from the root: every directory
    /// is reported to `Policy::watched` again.
    Rescan,
    /// Keep the watches as they are (the caller has another way to find
    /// what it missed).
    Keep,
}

/// A caller's part of a tree watch. Depths count from the root (0).
pub trait Policy {
    /// The depth of the directories whose files matter. They are watched
    /// for files closed after writing or moved in, and not listed; nothing
    /// below them is watched.
    const LEAF_DEPTH: usize;

    /// Whether `dir`, a directory at `depth` (1 to `LEAF_DEPTH`) below a
    /// watched one, belongs to the tree.
    fn wants(&self, dir: &Path, depth: usize) -> bool;

    /// `dir` at `depth` is watched, and so is every wanted directory below
    /// it (reported before it): what it holds from before its watch is for
    /// the caller to take in. Runs at start and in a rescan, not for a
    /// directory that appears later (`appeared`, and `file` for what its
    /// leaves hold), nor for a directory gone before its watch was made.
    fn watched(&mut self, _dir: &Path, _depth: usize) {}

    /// A wanted directory appeared (created or moved in) at `depth`, after
    /// it and its subtree were added (or found gone meanwhile), and after
    /// the files its leaves held were reported.
    fn appeared(&mut self, _dir: &Path, _depth: usize) {}

    /// A file `name` in `dir`, a directory at `LEAF_DEPTH`, was closed
    /// after writing or moved in, or was there when `dir` (or a directory
    /// above it) appeared: perhaps still open, perhaps reported twice.
    fn file(&mut self, dir: &Path, name: &OsStr);

    /// The event queue overflowed.
    fn overflow(&mut self) -> Overflow;

    /// No watch could be made for `dir` (`fs.inotify.max_user_watches`):
    /// it and what is below it are not watched; say what that costs.
    fn out_of_watches(&mut self, dir: &Path);

    /// The events of one batch are handled (to act once for many); also
    /// after the start-up scan and after a rescan.
    fn batch_done(&mut self) {}
}

/// A batch ends once no event came for this long...
const QUIET: Duration = Duration::from_millis(1);
/// ...or this long after its first event, so that a steady stream of
/// events (a program making files back to back) still ends batches.
const GATHER: Duration = Duration::from_millis(10);

/// Why a directory is watched: it was found by a scan of the tree (start,
/// rescan: `Policy::watched`), or it appeared since (its leaves listed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    Scan,
    New,
}

/// A watch of the tree below a root, driven by a `Policy`.
pub struct TreeWatch<P: Policy> {
    ino: Inotify,
    root: PathBuf,
    dirs: HashMap<WatchDescriptor, (PathBuf, usize)>,
    policy: P,
}

impl<P: Policy> TreeWatch<P> {
    /// Watch `root` and every wanted directory below it (the start-up
    /// scan: `Policy::watched` for each).
    pub fn new(root: PathBuf, policy: P) -> io::Result<TreeWatch<P>> {
        let mut w = TreeWatch {
            ino: Inotify::init()?,
            root,
            dirs: HashMap::new(),
            policy,
        };
        let root = w.root.clone();
        w.add(&root, 0, Found::Scan)?;
        w.policy.batch_done();
        Ok(w)
    }

    /// Handle events until the inotify descriptor fails (never, normally)
    /// or a directory cannot be watched or listed for a reason other than
    /// being gone.
    pub fn run(mut self) -> io::Result<()> {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            self.wait(None)?;
            let first = Instant::now();
            self.read(&mut buf)?;
            while let Some(left) = GATHER.checked_sub(first.elapsed()) {
                if !self.wait(Some(QUIET.min(left)))? {
                    break;
                }
                self.read(&mut buf)?;
            }
            self.policy.batch_done();
        }
    }

    /// Wait until events can be read, or `timeout` passes (then false).
    fn wait(&self, timeout: Option<Duration>) -> io::Result<bool> {
        let mut fd = libc::pollfd {
            fd: self.ino.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.map_or(-1, |t| t.as_millis().clamp(1, i32::MAX as u128) as i32);
        loop {
            // SAFETY: one valid pollfd, for the duration of the call.
            match unsafe { libc::poll(&mut fd, 1, ms) } {
                -1 if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
                -1 => return Err(io::Error::last_os_error()),
                n => return Ok(n > 0),
            }
        }
    }

    /// Read and handle the events queued (none: nothing to do).
    fn read(&mut self, buf: &mut [u8]) -> io::Result<()> {
        // Copied out of the buffer: handling them adds watches, which
        // borrows the descriptor the events borrow.
        let events: Vec<(WatchDescriptor, EventMask, Option<std::ffi::OsString>)> =
            match self.ino.read_events(buf) {
                Ok(events) => events
                    .map(|e| (e.wd, e.mask, e.name.map(OsStr::to_owned)))
                    .collect(),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            };
        for (wd, mask, name) in events {
            self.handle(wd, mask, name.as_deref())?;
        }
        Ok(())
    }

    fn handle(
        &mut self,
        wd: WatchDescriptor,
        mask: EventMask,
        name: Option<&OsStr>,
    ) -> io::Result<()> {
        if mask.contains(EventMask::Q_OVERFLOW) {
            if self.policy.overflow() == Overflow::Rescan {
                let root = self.root.clone();
                self.add(&root, 0, Found::Scan)?;
            }
            return Ok(());
        }
        if mask.contains(EventMask::IGNORED) {
            // The directory is gone (or unmounted): its descriptor may be
            // reused for another one.
            self.dirs.remove(&wd);
            return Ok(());
        }
        let (Some((dir, depth)), Some(name)) = (self.dirs.get(&wd).cloned(), name) else {
            return Ok(());
        };
        if mask.contains(EventMask::ISDIR) {
            let child = dir.join(name);
            if depth < P::LEAF_DEPTH && self.policy.wants(&child, depth + 1) {
                self.add(&child, depth + 1, Found::New)?;
                self.policy.appeared(&child, depth + 1);
            }
        } else if depth == P::LEAF_DEPTH {
            self.policy.file(&dir, name);
        }
        Ok(())
    }

    /// Watch `dir` (at `depth`), then list it and add the wanted
    /// directories below, or (a leaf that appeared) report its files (the
    /// watch first: nothing made in between is missed).
    fn add(&mut self, dir: &Path, depth: usize, found: Found) -> io::Result<()> {
        let mask = if depth == P::LEAF_DEPTH {
            WatchMask::CLOSE_WRITE | WatchMask::MOVED_TO | WatchMask::ONLYDIR
        } else {
            WatchMask::CREATE | WatchMask::MOVED_TO | WatchMask::ONLYDIR
        };
        let wd = match self.ino.watches().add(dir, mask) {
            Ok(wd) => wd,
            // Removed meanwhile (a drained job's clean-up, a published
            // put): nothing to watch.
            Err(e) if gone(&e) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                self.policy.out_of_watches(dir);
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        // A directory renamed within the tree keeps its inode, hence its
        // descriptor: the new path replaces the old.
        self.dirs.insert(wd, (dir.to_path_buf(), depth));
        if depth < P::LEAF_DEPTH || found == Found::New {
            let entries = match std::fs::read_dir(dir) {
                Ok(e) => e,
                Err(e) if gone(&e) => return Ok(()),
                Err(e) => return Err(e),
            };
            for entry in entries {
                let entry = entry?;
                let is_dir = entry.file_type()?.is_dir();
                if depth == P::LEAF_DEPTH {
                    if !is_dir {
                        self.policy.file(dir, &entry.file_name());
                    }
                    continue;
                }
                let path = entry.path();
                if is_dir && self.policy.wants(&path, depth + 1) {
                    self.add(&path, depth + 1, found)?;
                }
            }
        }
        if found == Found::Scan {
            self.policy.watched(dir, depth);
        }
        Ok(())
    }
}

/// A directory removed, or replaced by a file, between its event (or its
/// listing) and its watch.
fn gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR)
}

#[cfg(test)]
mod tests;
