//! Finding committed epochs as they appear: inotify on the node-local tree
//! (root, jobs, files, opens, ranks). A data log closed after writing (a
//! format-2 local commit closes it after its commit record), a format-1
//! manifest renamed into place or a commit mark written under a file's
//! directory queues that file; a new
//! directory gets its own watch and is scanned at once (what was created
//! before the watch existed is not missed). A queue overflow, or any doubt,
//! falls back to a full scan. The server's own writes (progress records)
//! and deletions are not events.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use paralog_log::layout;

use crate::service::Server;

/// Depth below the root: 0 root, 1 job, 2 file, 3 open, 4 rank.
const FILE_DEPTH: usize = 2;
const RANK_DEPTH: usize = 4;

pub struct Watcher {
    ino: Inotify,
    server: Server,
    root: PathBuf,
    dirs: HashMap<WatchDescriptor, (PathBuf, usize)>,
}

impl Watcher {
    /// Watch the root and everything below it that the server serves, and
    /// queue every file already there (the start-up scan).
    pub fn new(server: Server) -> std::io::Result<Watcher> {
        let root = server.config().root.clone();
        let mut w = Watcher {
            ino: Inotify::init()?,
            server,
            root: root.clone(),
            dirs: HashMap::new(),
        };
        w.add_tree(&root, 0)?;
        Ok(w)
    }

    /// Handle events until the inotify descriptor fails (never, normally).
    pub fn run(mut self) -> std::io::Result<()> {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let events: Vec<(WatchDescriptor, EventMask, Option<std::ffi::OsString>)> = self
                .ino
                .read_events_blocking(&mut buf)?
                .map(|e| (e.wd, e.mask, e.name.map(OsStr::to_owned)))
                .collect();
            for (wd, mask, name) in events {
                if mask.contains(EventMask::Q_OVERFLOW) {
                    tracing::warn!("inotify queue overflowed: rescanning the node-local root");
                    let root = self.root.clone();
                    self.add_tree(&root, 0)?;
                    continue;
                }
                if mask.contains(EventMask::IGNORED) {
                    self.dirs.remove(&wd);
                    continue;
                }
                let Some((dir, depth)) = self.dirs.get(&wd).cloned() else {
                    continue;
                };
                let Some(name) = name else { continue };
                if mask.contains(EventMask::ISDIR) {
                    self.add_tree(&dir.join(&name), depth + 1)?;
                } else if depth == RANK_DEPTH && relevant(&name) {
                    if let Some(file_dir) = dir.ancestors().nth(RANK_DEPTH - FILE_DEPTH) {
                        self.server.notify(file_dir);
                    }
                }
            }
        }
    }

    /// Watch `dir` (at `depth`) and the directories below it; queue the
    /// files found.
    fn add_tree(&mut self, dir: &Path, depth: usize) -> std::io::Result<()> {
        if depth == 1 {
            let job = dir.file_name().and_then(OsStr::to_str).unwrap_or("");
            if !self.server.serves_job(job) || layout::validate_component("job", job).is_err() {
                return Ok(());
            }
        }
        if depth == FILE_DEPTH
            && !dir
                .file_name()
                .and_then(OsStr::to_str)
                .is_some_and(layout::is_file_dir_name)
        {
            return Ok(());
        }
        let mask = if depth == RANK_DEPTH {
            WatchMask::MOVED_TO | WatchMask::CLOSE_WRITE | WatchMask::ONLYDIR
        } else {
            WatchMask::CREATE | WatchMask::MOVED_TO | WatchMask::ONLYDIR
        };
        let wd = match self.ino.watches().add(dir, mask) {
            Ok(wd) => wd,
            // Removed meanwhile (a drained job's cleanup): nothing to watch.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                tracing::error!(dir = %dir.display(), "out of inotify watches (fs.inotify.max_user_watches): new epochs below this directory are found only by the next full scan");
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        self.dirs.insert(wd, (dir.to_path_buf(), depth));
        if depth < RANK_DEPTH {
            let entries = match std::fs::read_dir(dir) {
                Ok(e) => e,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(e),
            };
            for entry in entries {
                let entry = entry?;
                if entry.file_type()?.is_dir() {
                    self.add_tree(&entry.path(), depth + 1)?;
                }
            }
        }
        if depth >= FILE_DEPTH {
            if let Some(file_dir) = dir.ancestors().nth(depth - FILE_DEPTH) {
                self.server.notify(file_dir);
            }
        }
        Ok(())
    }
}

/// Names whose appearance can make an epoch drainable: a data log closed
/// (format 2: its commit record was written), a manifest renamed into place
/// (format 1), a commit mark, the close marker of an open.
fn relevant(name: &OsStr) -> bool {
    let n = name.to_string_lossy();
    if n == layout::CLOSED_FILE {
        // The open ended: epochs held for a whole-open upload may go.
        return true;
    }
    matches!(
        layout::parse_epoch_file_name(&n),
        Some((
            _,
            layout::EpochFileKind::Data
                | layout::EpochFileKind::Manifest
                | layout::EpochFileKind::Mark
        ))
    )
}
