//! Wakes the publisher of logged array puts (`obj_publish`) the moment a
//! put commits on this node, instead of at its next round (up to 200 ms
//! later: on the bandwidth-limited remote of docs/benchmarks.md section 11
//! that wait was a large part of each version's publish). A thread of the
//! server watches, with inotify, the node-local object log
//! `ROOT/.paralog-objects/staging/` and each put's directory in it; a
//! commit record (`logged`) or a share record (`s<writer>`) closed after
//! writing kicks the publisher (`Puts::kick`). The rounds still come every
//! interval without it: a watch that cannot be made only costs latency.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use paralog_objects::logged::LOCAL_DIR;
use paralog_server::puts::Puts;

/// Depth below the node-local root: 0 the root, 1 the object log, 2 its
/// `staging/`, 3 a put's directory.
const PUT_DEPTH: usize = 3;

struct Watch {
    ino: Inotify,
    puts: Puts,
    dirs: HashMap<WatchDescriptor, (PathBuf, usize)>,
}

/// Start watching `root` for logged commits, kicking `puts`. The thread
/// lives as long as the server (it blocks in inotify).
pub fn start(root: PathBuf, puts: Puts) -> std::io::Result<()> {
    let mut w = Watch {
        ino: Inotify::init()?,
        puts,
        dirs: HashMap::new(),
    };
    w.add(&root, 0)?;
    std::thread::Builder::new()
        .name("objects-watch".into())
        .spawn(move || {
            if let Err(e) = w.run() {
                tracing::warn!(error = %e, "watching logged array puts (inotify) failed: they are found by the publisher's rounds only");
            }
        })?;
    Ok(())
}

/// The one child that matters at depths 0 and 1 (any directory below).
fn wanted(depth: usize, name: &OsStr) -> bool {
    match depth {
        0 => name == LOCAL_DIR,
        1 => name == "staging",
        _ => true,
    }
}

/// A file whose closing commits something the publisher acts on.
fn commits(name: &OsStr) -> bool {
    let n = name.to_string_lossy();
    n == "logged" || (n.len() == 33 && n.starts_with('s'))
}

impl Watch {
    fn run(mut self) -> std::io::Result<()> {
        let mut buf = vec![0u8; 16 << 10];
        loop {
            let events: Vec<(WatchDescriptor, EventMask, Option<std::ffi::OsString>)> = self
                .ino
                .read_events_blocking(&mut buf)?
                .map(|e| (e.wd, e.mask, e.name.map(OsStr::to_owned)))
                .collect();
            let mut kick = false;
            for (wd, mask, name) in events {
                if mask.contains(EventMask::Q_OVERFLOW) {
                    kick = true;
                    continue;
                }
                if mask.contains(EventMask::IGNORED) {
                    self.dirs.remove(&wd);
                    continue;
                }
                let (Some((dir, depth)), Some(name)) = (self.dirs.get(&wd).cloned(), name) else {
                    continue;
                };
                if mask.contains(EventMask::ISDIR) {
                    if depth < PUT_DEPTH && wanted(depth, &name) {
                        self.add(&dir.join(&name), depth + 1)?;
                        kick = true;
                    }
                } else if depth == PUT_DEPTH && commits(&name) {
                    kick = true;
                }
            }
            if kick {
                self.puts.kick();
            }
        }
    }

    /// Watch `dir` (at `depth`), then what is below it already (a watch
    /// first, then the listing: nothing made in between is missed).
    fn add(&mut self, dir: &Path, depth: usize) -> std::io::Result<()> {
        let mask = if depth == PUT_DEPTH {
            WatchMask::CLOSE_WRITE | WatchMask::MOVED_TO | WatchMask::ONLYDIR
        } else {
            WatchMask::CREATE | WatchMask::MOVED_TO | WatchMask::ONLYDIR
        };
        let wd = match self.ino.watches().add(dir, mask) {
            Ok(wd) => wd,
            // Gone meanwhile (a published put's directory), or not a
            // directory: nothing to watch.
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(libc::ENOTDIR) =>
            {
                return Ok(())
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                tracing::warn!(dir = %dir.display(), "out of inotify watches: logged puts below are found by the publisher's rounds only");
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        self.dirs.insert(wd, (dir.to_path_buf(), depth));
        if depth < PUT_DEPTH {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return Ok(());
            };
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) && wanted(depth, &e.file_name()) {
                    self.add(&e.path(), depth + 1)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Naps of `short` until one runs its full length: the kicks queued
    /// so far are used up.
    fn drain(puts: &Puts, short: Duration) {
        loop {
            let t = Instant::now();
            puts.nap(short);
            if t.elapsed() >= short {
                return;
            }
        }
    }

    /// Whether a nap of a minute ends within 20 s: something kicked.
    fn kicked(puts: &Puts) -> bool {
        let t = Instant::now();
        puts.nap(Duration::from_secs(60));
        t.elapsed() < Duration::from_secs(20)
    }

    #[test]
    fn a_commit_record_or_a_share_record_wakes_the_publisher() {
        let root = tempfile::tempdir().unwrap();
        let puts = Puts::default();
        // Watched before the object log exists (a server started before
        // the program's first logged put).
        start(root.path().to_path_buf(), puts.clone()).unwrap();
        let short = Duration::from_millis(300);
        drain(&puts, short);
        let staging = root.path().join(LOCAL_DIR).join("staging");
        let put = staging.join("0123456789abcdef0123456789abcdef");
        std::fs::create_dir_all(&put).unwrap();
        std::fs::write(put.join("begin"), b"x").unwrap();
        drain(&puts, short);
        // Not a commit: no kick.
        std::fs::write(put.join("c00000000000000000000"), b"x").unwrap();
        let t = Instant::now();
        puts.nap(short);
        assert!(t.elapsed() >= short, "a claim woke the publisher");
        // The commit record: a kick at once.
        std::fs::write(put.join("logged"), b"x").unwrap();
        assert!(
            kicked(&puts),
            "the commit record did not wake the publisher"
        );
        // A put made under a temporary name and renamed into place, and
        // a share record in it.
        drain(&puts, short);
        let tmp = staging.join(".share.x");
        std::fs::create_dir(&tmp).unwrap();
        let share = staging.join("fedcba9876543210fedcba9876543210");
        std::fs::rename(&tmp, &share).unwrap();
        drain(&puts, short);
        std::fs::write(share.join(format!("s{}", "ab".repeat(16))), b"x").unwrap();
        assert!(kicked(&puts), "the share record did not wake the publisher");
    }
}
