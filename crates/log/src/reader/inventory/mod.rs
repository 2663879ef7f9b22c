//! What a node-local root holds (the inventory of its jobs, files, opens,
//! ranks and epochs), and which of a file's epochs are globally committed
//! (the commit rule of docs/format.md).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use super::cache::ScanCache;
use super::record::ManifestAt;
use crate::error::{IoContext, LogError, Result};
use crate::format::{PathRecord, ProgressRecord};
pub use crate::id::EpochId;
use crate::layout;

mod commit;
mod file;
mod scan;

pub use commit::{committed_prefix, fmt_ids, origin_of};
use scan::scan_file;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EpochFiles {
    /// Length of the data log, if present.
    pub data: Option<u64>,
    /// Where the rank's manifest is, if the scan found one (the rank
    /// committed the epoch locally): format 1, the file `e<N>.manifest`;
    /// format 2, the data log's commit record.
    pub manifest: Option<ManifestAt>,
    /// Format 1: a manifest being written when its writer stopped.
    pub manifest_tmp: bool,
    pub mark: bool,
    /// The data log has no valid commit record and there is no manifest
    /// file (its commit did not finish, or the record is damaged): why,
    /// naming the offset.
    pub torn: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct RankInventory {
    pub dir: PathBuf,
    pub epochs: BTreeMap<u64, EpochFiles>,
    /// The rank's open of the file ended (its close marker is here).
    pub closed: bool,
    /// A one-process writer's committed epoch still in its staging
    /// directory (`dir`): it crashed after its commit record was durable
    /// and before the rename into the generation (`single.rs`). Read in
    /// place; the server and `recover` finish the rename.
    pub staged: bool,
}

#[derive(Debug, Clone, Default)]
pub struct GenInventory {
    pub dir: PathBuf,
    pub ranks: BTreeMap<u32, RankInventory>,
}

#[derive(Debug, Clone)]
pub struct FileInventory {
    pub dir: PathBuf,
    /// From the directory's path record; if that is missing or damaged
    /// (`path_error` says why), from a committed format-2 manifest, which
    /// carries the same paths (`record_rebuilt`); `None` if neither.
    pub record: Option<PathRecord>,
    pub path_error: Option<String>,
    /// `record` comes from a manifest, not from the path record (a format-2
    /// writer does not make the path record durable: after a crash it may
    /// be missing or empty). The server rewrites the record.
    pub record_rebuilt: bool,
    /// The server's progress record: epochs up to it are in the remote.
    pub progress: Option<ProgressRecord>,
    /// Why the progress record could not be read (the file is then not
    /// drained, and its logical file is not built, until someone looks).
    pub progress_error: Option<String>,
    pub gens: BTreeMap<u64, GenInventory>,
}

#[derive(Debug, Clone)]
pub struct JobInventory {
    pub name: String,
    pub dir: PathBuf,
    pub files: Vec<FileInventory>,
}

#[derive(Debug, Clone)]
pub struct Inventory {
    pub root: PathBuf,
    pub jobs: Vec<JobInventory>,
    /// Entries that are not part of the layout (shown, never touched).
    pub stray: Vec<PathBuf>,
}

/// Whether an epoch is globally committed, judged from this node's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitStatus {
    /// A commit mark exists: the agreement succeeded.
    Marked,
    /// No mark, but every rank's manifest is here (format 2: every rank's
    /// commit record is valid).
    AllManifests,
    /// Not (yet) known to be committed: these ranks' manifests are missing
    /// here (format 2: or their commit records are torn). On a single node
    /// this means it is not committed.
    Incomplete { comm_size: u32, missing: Vec<u32> },
}

impl CommitStatus {
    pub fn is_committed(&self) -> bool {
        !matches!(self, CommitStatus::Incomplete { .. })
    }
}

impl Inventory {
    /// List everything under `root`. Unknown entries are reported in `stray`.
    pub fn scan(root: &Path) -> Result<Inventory> {
        Self::scan_cached(root, &mut ScanCache::off())
    }

    /// [`Self::scan`] through a cache of what earlier scans read: only what
    /// is new or changed since is read (reader/cache.rs). The caller
    /// begins and sweeps the cache around everything it reads with it.
    pub fn scan_cached(root: &Path, cache: &mut ScanCache) -> Result<Inventory> {
        if !std::fs::metadata(root)
            .ctx("open node-local root", root)?
            .is_dir()
        {
            return Err(LogError::Io {
                path: root.to_path_buf(),
                op: "open node-local root",
                error: io::Error::from_raw_os_error(libc::ENOTDIR),
            });
        }
        let mut inv = Inventory {
            root: root.to_path_buf(),
            jobs: Vec::new(),
            stray: Vec::new(),
        };
        for (name, path, is_dir) in cache.list(root)?.iter().cloned() {
            if name.starts_with(layout::RUNTIME_PREFIX) {
                continue;
            }
            if !is_dir || layout::validate_component("job name", &name).is_err() {
                inv.stray.push(path);
                continue;
            }
            let mut job = JobInventory {
                name,
                dir: path.clone(),
                files: Vec::new(),
            };
            for (fname, fpath, fdir) in cache.list(&path)?.iter().cloned() {
                if fdir && layout::is_file_dir_name(&fname) {
                    job.files.push(scan_file(&fpath, &mut inv.stray, cache)?);
                } else {
                    inv.stray.push(fpath);
                }
            }
            inv.jobs.push(job);
        }
        Ok(inv)
    }

    pub fn job(&self, name: &str) -> Option<&JobInventory> {
        self.jobs.iter().find(|j| j.name == name)
    }

    /// Find a file by the path the program wrote (absolute) or by its
    /// remote-relative path, in one job or in all jobs.
    pub fn find_file(
        &self,
        job: Option<&str>,
        path: &[u8],
    ) -> Vec<(&JobInventory, &FileInventory)> {
        let mut out = Vec::new();
        for j in &self.jobs {
            if job.is_some_and(|name| name != j.name) {
                continue;
            }
            for f in &j.files {
                if let Some(r) = &f.record {
                    if r.path == path || r.rel == path {
                        out.push((j, f));
                    }
                }
            }
        }
        out
    }
}
