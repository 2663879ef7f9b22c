//! Finding committed epochs as they appear: the server's policy for the
//! tree watch (`tree_watch.rs`) of the node-local tree (root, jobs,
//! files, opens, ranks). A data log closed after writing (a format-2
//! local commit closes it after its commit record), a format-1 manifest
//! renamed into place or a commit mark written under a file's directory
//! queues that file, once per batch of events however many of them name
//! it; a new directory gets its own watch, and a new rank directory is
//! listed: what it holds from before its watch counts as those events (a
//! rank directory renamed in with its commit is not missed). A directory
//! made queues nothing by itself: a new file is scanned when its first
//! epoch can be committed, not once per directory of its creation. At
//! start and after a queue overflow, every file found is queued. The
//! server's own writes (progress records) and deletions are not events.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use paralog_log::layout;

use crate::service::Server;
use crate::tree_watch::{Overflow, Policy, TreeWatch};

/// Depth below the root: 0 root, 1 job, 2 file, 3 open, 4 rank.
const FILE_DEPTH: usize = 2;
const RANK_DEPTH: usize = 4;

/// The server's epoch watcher: a tree watch with the epochs' policy.
pub struct Watcher(TreeWatch<Epochs>);

impl Watcher {
    /// Watch the root and everything below it that the server serves, and
    /// queue every file already there (the start-up scan).
    pub fn new(server: Server) -> std::io::Result<Watcher> {
        let root = server.config().root.clone();
        let epochs = Epochs {
            server,
            batch: Vec::new(),
            in_batch: HashSet::new(),
        };
        TreeWatch::new(root, epochs).map(Watcher)
    }

    /// Handle events until the inotify descriptor fails (never, normally).
    pub fn run(self) -> std::io::Result<()> {
        self.0.run()
    }
}

/// The epochs of the served jobs, queued on the server.
struct Epochs {
    server: Server,
    /// The file directories named in this batch, in order, each once.
    batch: Vec<PathBuf>,
    in_batch: HashSet<PathBuf>,
}

impl Epochs {
    /// `file_dir` is queued at the end of the batch: if a worker were to
    /// take it now, the rest of the commit's burst would make it scan the
    /// file again (`Server::notify` marks a busy file dirty).
    fn queue(&mut self, file_dir: &Path) {
        if self.in_batch.insert(file_dir.to_path_buf()) {
            self.batch.push(file_dir.to_path_buf());
        }
    }
}

impl Policy for Epochs {
    const LEAF_DEPTH: usize = RANK_DEPTH;

    /// The served jobs (with a valid name) and the file directories in
    /// them; any open and rank below.
    fn wants(&self, dir: &Path, depth: usize) -> bool {
        let name = dir.file_name().and_then(OsStr::to_str).unwrap_or("");
        match depth {
            1 => self.server.serves_job(name) && layout::validate_component("job", name).is_ok(),
            FILE_DEPTH => layout::is_file_dir_name(name),
            _ => true,
        }
    }

    /// Start or rescan: its file may hold epochs committed before the
    /// watch, queue it.
    fn watched(&mut self, dir: &Path, depth: usize) {
        if depth >= FILE_DEPTH {
            if let Some(file_dir) = dir.ancestors().nth(depth - FILE_DEPTH) {
                self.queue(file_dir);
            }
        }
    }

    fn file(&mut self, rank_dir: &Path, name: &OsStr) {
        if relevant(name) {
            if let Some(file_dir) = rank_dir.ancestors().nth(RANK_DEPTH - FILE_DEPTH) {
                self.queue(file_dir);
            }
        }
    }

    fn batch_done(&mut self) {
        self.in_batch.clear();
        for file_dir in self.batch.drain(..) {
            self.server.notify(&file_dir);
        }
    }

    fn overflow(&mut self) -> Overflow {
        tracing::warn!("inotify queue overflowed: rescanning the node-local root");
        Overflow::Rescan
    }

    fn out_of_watches(&mut self, dir: &Path) {
        tracing::error!(dir = %dir.display(), "out of inotify watches (fs.inotify.max_user_watches): new epochs below this directory are found only by the next full scan");
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
