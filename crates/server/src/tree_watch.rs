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
//! file made in between is seen twice rather than never: `Policy::watched`
//! runs once a directory and everything below it are watched, which is
//! where a caller takes in what was there before its watch existed.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};

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
    /// the caller to take in. Runs at start, for a new directory and in a
    /// rescan; not for a directory gone before its watch was made.
    fn watched(&mut self, _dir: &Path, _depth: usize) {}

    /// A wanted directory appeared (created or moved in) at `depth`, after
    /// it and its subtree were added (or found gone meanwhile).
    fn appeared(&mut self, _dir: &Path, _depth: usize) {}

    /// A file `name` in `dir`, a directory at `LEAF_DEPTH`, was closed
    /// after writing or moved in.
    fn file(&mut self, dir: &Path, name: &OsStr);

    /// The event queue overflowed.
    fn overflow(&mut self) -> Overflow;

    /// No watch could be made for `dir` (`fs.inotify.max_user_watches`):
    /// it and what is below it are not watched; say what that costs.
    fn out_of_watches(&mut self, dir: &Path);

    /// The events of one read are handled (to act once for many).
    fn batch_done(&mut self) {}
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
        w.add(&root, 0)?;
        Ok(w)
    }

    /// Handle events until the inotify descriptor fails (never, normally)
    /// or a directory cannot be watched or listed for a reason other than
    /// being gone.
    pub fn run(mut self) -> io::Result<()> {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            // Copied out of the buffer: handling them adds watches, which
            // borrows the descriptor the events borrow.
            let events: Vec<(WatchDescriptor, EventMask, Option<std::ffi::OsString>)> = self
                .ino
                .read_events_blocking(&mut buf)?
                .map(|e| (e.wd, e.mask, e.name.map(OsStr::to_owned)))
                .collect();
            for (wd, mask, name) in events {
                self.handle(wd, mask, name.as_deref())?;
            }
            self.policy.batch_done();
        }
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
                self.add(&root, 0)?;
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
                self.add(&child, depth + 1)?;
                self.policy.appeared(&child, depth + 1);
            }
        } else if depth == P::LEAF_DEPTH {
            self.policy.file(&dir, name);
        }
        Ok(())
    }

    /// Watch `dir` (at `depth`), then list it and add the wanted
    /// directories below (the watch first: nothing made in between is
    /// missed).
    fn add(&mut self, dir: &Path, depth: usize) -> io::Result<()> {
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
        if depth < P::LEAF_DEPTH {
            let entries = match std::fs::read_dir(dir) {
                Ok(e) => e,
                Err(e) if gone(&e) => return Ok(()),
                Err(e) => return Err(e),
            };
            for entry in entries {
                let entry = entry?;
                let path = entry.path();
                if entry.file_type()?.is_dir() && self.policy.wants(&path, depth + 1) {
                    self.add(&path, depth + 1)?;
                }
            }
        }
        self.policy.watched(dir, depth);
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
