//! Reading a node-local root: what it holds (inventory), which epochs are
//! globally committed, and the logical file at an epoch, checksums verified.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use crate::durable;
use crate::error::{IoContext, LogError, Result};
use crate::extent_map::{ExtentMap, Piece};
use crate::format::{DataHeader, Extent, Manifest, Op, PathRecord, ProgressRecord};
use crate::layout::{self, EpochFileKind};

/// An epoch of one open: (generation, epoch). Orders like the program did.
pub type EpochId = (u64, u64);

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EpochFiles {
    /// Length of the data log, if present.
    pub data: Option<u64>,
    pub manifest: bool,
    pub manifest_tmp: bool,
    pub mark: bool,
}

#[derive(Debug, Clone, Default)]
pub struct RankInventory {
    pub dir: PathBuf,
    pub epochs: BTreeMap<u64, EpochFiles>,
    /// The rank's open of the file ended (its close marker is here).
    pub closed: bool,
}

#[derive(Debug, Clone, Default)]
pub struct GenInventory {
    pub dir: PathBuf,
    pub ranks: BTreeMap<u32, RankInventory>,
}

#[derive(Debug, Clone)]
pub struct FileInventory {
    pub dir: PathBuf,
    /// From the directory's path record; `None` if it is missing or damaged
    /// (`path_error` then says why).
    pub record: Option<PathRecord>,
    pub path_error: Option<String>,
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
    /// No mark, but every rank's manifest is here.
    AllManifests,
    /// Not (yet) known to be committed: these ranks' manifests are missing
    /// here. On a single node this means it is not committed.
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
        for (name, path, is_dir) in list_dir(root)? {
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
            for (fname, fpath, fdir) in list_dir(&path)? {
                if fdir && layout::is_file_dir_name(&fname) {
                    job.files.push(scan_file(&fpath, &mut inv.stray)?);
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

fn scan_file(dir: &Path, stray: &mut Vec<PathBuf>) -> Result<FileInventory> {
    let mut gens = BTreeMap::new();
    for (name, path, is_dir) in list_dir(dir)? {
        if name == layout::PATH_FILE
            || name.starts_with("path.tmp.")
            || name == layout::PROGRESS_FILE
            || name.starts_with("progress.tmp")
            || name == crate::single::LOCK_FILE
            || crate::single::is_staging_name(&name)
        {
            continue;
        }
        let Some(gen) = is_dir.then(|| layout::parse_gen_dir_name(&name)).flatten() else {
            stray.push(path);
            continue;
        };
        let mut g = GenInventory {
            dir: path.clone(),
            ranks: BTreeMap::new(),
        };
        for (rname, rpath, rdir) in list_dir(&path)? {
            let Some(rank) = rdir.then(|| layout::parse_rank_dir_name(&rname)).flatten() else {
                stray.push(rpath);
                continue;
            };
            let mut r = RankInventory {
                dir: rpath.clone(),
                epochs: BTreeMap::new(),
                closed: false,
            };
            for (ename, epath, edir) in list_dir(&rpath)? {
                if ename == layout::CLOSED_FILE && !edir {
                    r.closed = true;
                    continue;
                }
                let Some((epoch, kind)) = (!edir)
                    .then(|| layout::parse_epoch_file_name(&ename))
                    .flatten()
                else {
                    stray.push(epath);
                    continue;
                };
                // A data log deleted between the listing and its stat (the
                // server removes drained epochs while others scan): as if
                // it had not been listed, like a directory that vanished.
                let data_len = match kind {
                    EpochFileKind::Data => match std::fs::metadata(&epath) {
                        Ok(m) => Some(m.len()),
                        Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                        Err(e) => return Err(e).ctx("stat", &epath),
                    },
                    _ => None,
                };
                let e = r.epochs.entry(epoch).or_default();
                match kind {
                    EpochFileKind::Data => e.data = data_len,
                    EpochFileKind::Manifest => e.manifest = true,
                    EpochFileKind::ManifestTmp => e.manifest_tmp = true,
                    EpochFileKind::Mark => e.mark = true,
                }
            }
            g.ranks.insert(rank, r);
        }
        gens.insert(gen, g);
    }
    // The records are read after the listing, not before: a writer records
    // the path before any epoch exists, and the drain records progress
    // before it deletes an epoch, so whatever the listing saw is covered by
    // the records read now. Read first, a new file's path could be missing
    // yet its first committed epoch listed (the server then parked a
    // healthy file as damaged).
    let path_file = dir.join(layout::PATH_FILE);
    let (record, path_error) = match std::fs::read(&path_file) {
        Ok(bytes) => match PathRecord::decode(&bytes, &path_file) {
            Ok(r) => (Some(r), None),
            Err(e) => (None, Some(e.to_string())),
        },
        Err(e) => (None, Some(format!("{}: {e}", path_file.display()))),
    };
    let progress_file = dir.join(layout::PROGRESS_FILE);
    let (progress, progress_error) = match std::fs::read(&progress_file) {
        Ok(bytes) => match ProgressRecord::decode(&bytes, &progress_file) {
            Ok(p) => (Some(p), None),
            Err(e) => (None, Some(e.to_string())),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => (None, None),
        Err(e) => (None, Some(format!("{}: {e}", progress_file.display()))),
    };
    Ok(FileInventory {
        dir: dir.to_path_buf(),
        record,
        path_error,
        progress,
        progress_error,
        gens,
    })
}

/// Which of a file's epochs count, given which are committed (`ids` in
/// order, `committed` alongside): an uncommitted epoch blocks the later
/// epochs of its open, unless a later open has committed epochs (then the
/// earlier open ended in a crash and its uncommitted tail never happened).
/// Shared by one node's view and the servers' merged view of all nodes.
pub fn committed_prefix(ids: &[EpochId], committed: &[bool]) -> Vec<EpochId> {
    let mut out = Vec::new();
    let mut blocked_gen = None;
    for (i, &id) in ids.iter().enumerate() {
        if blocked_gen == Some(id.0) {
            continue;
        }
        if committed[i] {
            out.push(id);
            continue;
        }
        let later_open_committed = ids
            .iter()
            .zip(committed)
            .skip(i)
            .any(|(other, &c)| c && other.0 > id.0);
        if !later_open_committed {
            break;
        }
        blocked_gen = Some(id.0);
    }
    out
}

/// (name, path, is_dir) of each entry, sorted by name; a missing directory
/// is empty (it may have been cleaned up while we looked).
fn list_dir(dir: &Path) -> Result<Vec<(String, PathBuf, bool)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).ctx("list", dir),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.ctx("list", dir)?;
        let ft = entry.file_type().ctx("stat", &entry.path())?;
        let name = entry.file_name().to_string_lossy().into_owned();
        out.push((name, entry.path(), ft.is_dir()));
    }
    out.sort();
    Ok(out)
}

impl FileInventory {
    /// Scan only the directory of one file (`rel`) of one job; `None` if the
    /// node holds nothing for it.
    pub fn scan_path(root: &Path, job: &str, rel: &[u8]) -> Result<Option<FileInventory>> {
        layout::validate_component("job name", job)?;
        let dir = root.join(job).join(layout::file_dir_name(rel));
        if !dir.is_dir() {
            return Ok(None);
        }
        let mut stray = Vec::new();
        let file = scan_file(&dir, &mut stray)?;
        if let Some(r) = &file.record {
            if r.rel != rel {
                return Err(LogError::Inconsistent {
                    path: dir,
                    what: format!(
                        "directory stands for {:?}, not {:?} (hash collision)",
                        String::from_utf8_lossy(&r.rel),
                        String::from_utf8_lossy(rel)
                    ),
                });
            }
        }
        Ok(Some(file))
    }

    /// Scan one file directory (`<root>/<job>/f-<hash>`), as found by a
    /// watcher; stray entries are ignored here (`inspect` lists them).
    pub fn scan_dir(dir: &Path) -> Result<FileInventory> {
        let mut stray = Vec::new();
        scan_file(dir, &mut stray)
    }

    /// Which log this file's epochs come from, for a remote to tell its
    /// own earlier apply of an epoch from another run's epoch of the same
    /// number: a hash of the job's name and the moment its node-local
    /// directory was made (a re-run under the same job name makes it anew).
    /// Zero when it cannot be told.
    pub fn origin(&self) -> [u8; 16] {
        origin_of(&self.dir)
    }

    /// Bytes of an epoch's data logs held here (all ranks).
    pub fn local_bytes(&self, (gen, epoch): EpochId) -> u64 {
        self.gens.get(&gen).map_or(0, |g| {
            g.ranks
                .values()
                .filter_map(|r| r.epochs.get(&epoch).and_then(|e| e.data))
                .sum()
        })
    }

    /// Every epoch that any rank has any record of, in program order.
    pub fn epoch_ids(&self) -> Vec<EpochId> {
        let mut ids: Vec<EpochId> = self
            .gens
            .iter()
            .flat_map(|(&g, gi)| {
                gi.ranks
                    .values()
                    .flat_map(move |r| r.epochs.keys().map(move |&e| (g, e)))
            })
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Decode and cross-check the manifests of one epoch present here.
    pub fn manifests(&self, (gen, epoch): EpochId) -> Result<Vec<(Manifest, PathBuf)>> {
        let Some(g) = self.gens.get(&gen) else {
            return Ok(Vec::new());
        };
        let mut out: Vec<(Manifest, PathBuf)> = Vec::new();
        for (&rank, r) in &g.ranks {
            let path = r
                .dir
                .join(layout::epoch_file_name(epoch, EpochFileKind::Manifest));
            let listed = r.epochs.get(&epoch).is_some_and(|e| e.manifest);
            // A rank whose directory was listed before its manifest was
            // renamed into place may have committed since: the scan lists the
            // ranks one after another, so it can see another rank's commit
            // mark (written after every rank's manifest) and miss this
            // manifest. Look for it by name. A listed manifest that is gone
            // is an error, as before (a drain deleted it under us).
            let bytes = match std::fs::read(&path) {
                Ok(b) => b,
                Err(e) if !listed && e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e).ctx("read manifest", &path),
            };
            let m = Manifest::decode(&bytes, &path)?;
            let mismatch = |what: String| LogError::Inconsistent {
                path: path.clone(),
                what,
            };
            if m.rank != rank || m.epoch != epoch || m.ident.gen != gen {
                return Err(mismatch(format!(
                    "manifest says rank {} generation {} epoch {}, its place says rank {rank} generation {gen} epoch {epoch}",
                    m.rank, m.ident.gen, m.epoch
                )));
            }
            if let Some(rec) = &self.record {
                if rec.rel != m.ident.rel {
                    return Err(mismatch(format!(
                        "manifest is for {:?}, the directory for {:?}",
                        String::from_utf8_lossy(&m.ident.rel),
                        String::from_utf8_lossy(&rec.rel)
                    )));
                }
            }
            if let Some((first, _)) = out.first() {
                if first.comm_size != m.comm_size || first.ident != m.ident {
                    return Err(mismatch(format!(
                        "ranks disagree on the file or communicator size ({} vs {})",
                        first.comm_size, m.comm_size
                    )));
                }
            }
            out.push((m, path));
        }
        Ok(out)
    }

    /// Whether an epoch is globally committed, from this node's view.
    pub fn commit_status(&self, id: EpochId) -> Result<CommitStatus> {
        let (gen, epoch) = id;
        let marked = self.gens.get(&gen).is_some_and(|g| {
            g.ranks
                .values()
                .any(|r| r.epochs.get(&epoch).is_some_and(|e| e.mark))
        });
        if marked {
            return Ok(CommitStatus::Marked);
        }
        let manifests = self.manifests(id)?;
        let Some((first, _)) = manifests.first() else {
            return Ok(CommitStatus::Incomplete {
                comm_size: 0,
                missing: Vec::new(),
            });
        };
        let comm_size = first.comm_size;
        let have: Vec<u32> = manifests.iter().map(|(m, _)| m.rank).collect();
        let missing: Vec<u32> = (0..comm_size).filter(|r| !have.contains(r)).collect();
        Ok(if missing.is_empty() {
            CommitStatus::AllManifests
        } else {
            CommitStatus::Incomplete { comm_size, missing }
        })
    }

    /// The globally committed epochs held here that count, in order. An
    /// epoch that is not committed blocks the later epochs of its open (they
    /// cannot be applied past it), unless a later open of the file has
    /// committed epochs: then the earlier open ended (a crash) and its
    /// uncommitted tail never happened.
    pub fn committed_epochs(&self) -> Result<Vec<EpochId>> {
        let ids = self.epoch_ids();
        // Epochs up to the progress record were committed and drained; what
        // is left of them (a crash before their deletion finished, a slow
        // rank's late mark) is neither evidence nor an obstacle.
        let drained = self.progress.map(|p| (p.gen, p.epoch));
        let mut committed = Vec::with_capacity(ids.len());
        for &id in &ids {
            committed.push(Some(id) <= drained || self.commit_status(id)?.is_committed());
        }
        Ok(committed_prefix(&ids, &committed))
    }

    /// Whether an open of the file has ended: a rank's close marker, or a
    /// later open of the file with records (it began after this one ended).
    pub fn open_ended(&self, gen: u64) -> bool {
        self.gens
            .get(&gen)
            .is_some_and(|g| g.ranks.values().any(|r| r.closed))
            || self.gens.range(gen + 1..).next().is_some()
    }

    /// The committed epochs not yet recorded as drained, in order.
    pub fn pending_epochs(&self) -> Result<Vec<EpochId>> {
        let done = self.progress.map(|p| (p.gen, p.epoch));
        Ok(self
            .committed_epochs()?
            .into_iter()
            .filter(|id| Some(*id) > done)
            .collect())
    }

    /// Whether this node holds every rank's manifest of every committed epoch
    /// (one node ran all ranks): only then is [`Self::logical_file`] the
    /// whole file rather than this node's part of it.
    ///
    /// Epochs up to the progress record do not count: they are in the
    /// remote file, and the drain deletes their records one rank after
    /// another, so a scan in the middle of that deletion sees some ranks'
    /// manifests and not others. The progress record is read after the
    /// listing and written before any deletion, so every epoch the listing
    /// saw partly deleted is at or before it.
    pub fn complete_locally(&self) -> Result<bool> {
        self.complete_locally_after(self.progress.map(|p| (p.gen, p.epoch)))
    }

    /// [`Self::complete_locally`] for [`Self::logical_file_whole`]: drained
    /// epochs count too (their records are kept for a remote capture cannot
    /// read).
    pub fn complete_locally_whole(&self) -> Result<bool> {
        self.complete_locally_after(None)
    }

    fn complete_locally_after(&self, drained: Option<EpochId>) -> Result<bool> {
        for id in self
            .committed_epochs()?
            .into_iter()
            .filter(|id| Some(*id) > drained)
        {
            let manifests = self.manifests(id)?;
            let comm_size = manifests.first().map_or(0, |(m, _)| m.comm_size as usize);
            if manifests.len() != comm_size {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The logical file after the committed epochs up to and including
    /// `upto` (default: the last committed one). Epochs that are not
    /// committed are skipped: the program was told they failed, or never
    /// reached their consistency point.
    pub fn logical_file(&self, upto: Option<EpochId>) -> Result<LogicalFile> {
        if let Some(e) = &self.progress_error {
            return Err(LogError::Inconsistent {
                path: self.dir.join(layout::PROGRESS_FILE),
                what: format!("the drain progress cannot be read ({e}); which epochs are already remote is unknown"),
            });
        }
        let committed = self.committed_epochs()?;
        let drained = self.progress.map(|p| (p.gen, p.epoch));
        let upto = match upto {
            Some(id) => {
                if drained.is_some_and(|d| id <= d) {
                    return Err(LogError::NotFound {
                        what: format!(
                            "epoch {}:{} of {} was drained to the remote (drained up to {}); its local data is gone",
                            id.0,
                            id.1,
                            self.display_name(),
                            fmt_ids(&drained.into_iter().collect::<Vec<_>>())
                        ),
                    });
                }
                if !committed.contains(&id) {
                    return Err(LogError::NotFound {
                        what: format!(
                            "epoch {}:{} of {} is not globally committed here (committed: {})",
                            id.0,
                            id.1,
                            self.display_name(),
                            fmt_ids(&committed)
                        ),
                    });
                }
                Some(id)
            }
            None => committed.last().copied(),
        };
        let mut lf = LogicalFile {
            after: drained,
            ..LogicalFile::default()
        };
        for id in committed
            .into_iter()
            .filter(|id| Some(*id) <= upto && Some(*id) > drained)
        {
            let manifests = self.manifests(id)?;
            lf.apply_epoch(id, &manifests)?;
        }
        Ok(lf)
    }

    /// The logical file from the job's first epoch, drained ones included:
    /// for a remote the capture library cannot read (S3), whose drained
    /// epochs the server keeps here until the job ends. Refused if a
    /// drained epoch's records are gone (the view would miss its bytes).
    pub fn logical_file_whole(&self) -> Result<LogicalFile> {
        let drained = self.progress.map(|p| (p.gen, p.epoch));
        let committed = self.committed_epochs()?;
        let mut lf = LogicalFile::default();
        for &id in &committed {
            let manifests = self.manifests(id)?;
            if manifests.is_empty() {
                return Err(LogError::NotFound {
                    what: format!(
                        "epoch {}:{} of {} was drained and its local records are gone (drained up to {})",
                        id.0,
                        id.1,
                        self.display_name(),
                        fmt_ids(&drained.into_iter().collect::<Vec<_>>())
                    ),
                });
            }
            lf.apply_epoch(id, &manifests)?;
        }
        if let Some(d) = drained {
            if !committed.contains(&d) {
                return Err(LogError::NotFound {
                    what: format!(
                        "{} was drained up to epoch {}:{}, whose local records are gone",
                        self.display_name(),
                        d.0,
                        d.1
                    ),
                });
            }
        }
        Ok(lf)
    }

    pub fn display_name(&self) -> String {
        match &self.record {
            Some(r) => String::from_utf8_lossy(&r.path).into_owned(),
            None => self.dir.display().to_string(),
        }
    }
}

/// `FileInventory::origin` of the file directory `file_dir`.
pub fn origin_of(file_dir: &Path) -> [u8; 16] {
    let Some(job_dir) = file_dir.parent() else {
        return [0; 16];
    };
    let Ok(made) = std::fs::metadata(job_dir).and_then(|m| m.created()) else {
        return [0; 16];
    };
    let nanos = made
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name = job_dir
        .file_name()
        .map(|n| n.as_encoded_bytes())
        .unwrap_or_default();
    let fnv = |seed: u64| {
        let mut h = seed;
        for &b in name.iter().chain(&nanos.to_le_bytes()) {
            h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
        h
    };
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&fnv(0xcbf2_9ce4_8422_2325).to_le_bytes());
    out[8..].copy_from_slice(&fnv(0x8422_2325_cbf2_9ce4).to_le_bytes());
    out
}

pub fn fmt_ids(ids: &[EpochId]) -> String {
    if ids.is_empty() {
        return "none".into();
    }
    ids.iter()
        .map(|(g, e)| format!("{g}:{e}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Where a manifest extent's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceExtent {
    pub epoch: EpochId,
    pub rank: u32,
    pub data_path: PathBuf,
    pub extent: Extent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourcePiece {
    /// Index into [`LogicalFile::sources`].
    pub source: usize,
    /// Offset of this piece within the source extent.
    pub skip: u64,
}

impl Piece for SourcePiece {
    fn slice(&self, skip: u64, _len: u64, _full: u64) -> Self {
        SourcePiece {
            source: self.source,
            skip: self.skip + skip,
        }
    }

    fn join(&self, len: u64, next: &Self, _next_len: u64) -> Option<Self> {
        (self.source == next.source && self.skip + len == next.skip).then_some(*self)
    }
}

/// How big the file is, given how big it was before the first epoch (the
/// remote's "base" file, 0 for a new file).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SizeState {
    /// The size implied by the operations (writes, set-size, preallocate).
    pub min_size: u64,
    /// A set-size happened: the base's own length no longer matters.
    pub size_set: bool,
    /// Base bytes at or beyond this offset were cut off by a set-size
    /// (and read as zeros if the file grew again).
    pub base_cut: Option<u64>,
}

impl SizeState {
    pub fn final_size(&self, base_len: u64) -> u64 {
        if self.size_set {
            self.min_size
        } else {
            self.min_size.max(base_len)
        }
    }

    /// How many leading bytes of the base remain visible where not overwritten.
    pub fn base_visible(&self, base_len: u64) -> u64 {
        let cut = self.base_cut.map_or(base_len, |c| c.min(base_len));
        cut.min(self.final_size(base_len))
    }
}

/// The file as the program left it at some committed epoch: extents pointing
/// into data logs, plus the size rules. Holes are holes.
#[derive(Debug, Clone, Default)]
pub struct LogicalFile {
    /// Epochs up to this one were already drained: the logical file is
    /// these epochs applied on top of the remote's state at that point.
    pub after: Option<EpochId>,
    pub epochs: Vec<EpochId>,
    /// The last operation applied removed the file (it does not exist).
    pub deleted: bool,
    pub sources: Vec<SourceExtent>,
    pub map: ExtentMap<SourcePiece>,
    pub size: SizeState,
}

impl LogicalFile {
    /// Merge the ranks of one epoch: for each phase p in order, every rank's
    /// phase-p extents (a later phase wins; within a phase ascending rank
    /// breaks ties: the program gave those writes no order), then the size
    /// operation ending phase p, which all ranks that recorded it must agree
    /// on.
    pub fn apply_epoch(&mut self, id: EpochId, manifests: &[(Manifest, PathBuf)]) -> Result<()> {
        type RankExtent<'a> = (&'a Manifest, &'a PathBuf, &'a Extent);
        let mut phases: BTreeMap<u64, Vec<RankExtent>> = BTreeMap::new();
        let mut size_ops: BTreeMap<u64, (Op, u32, &PathBuf)> = BTreeMap::new();
        let mut ordered: Vec<&(Manifest, PathBuf)> = manifests.iter().collect();
        ordered.sort_by_key(|(m, _)| m.rank);
        for (m, path) in ordered {
            let mut phase = 0u64;
            for op in &m.ops {
                match op {
                    Op::Extent(e) => phases.entry(phase).or_default().push((m, path, e)),
                    Op::Phase(p) => phase = *p,
                    Op::SetSize(_) | Op::Preallocate(_) | Op::Delete => {
                        match size_ops.get(&phase) {
                            None => {
                                size_ops.insert(phase, (*op, m.rank, path));
                            }
                            Some((other, other_rank, _)) if other != op => {
                                return Err(LogError::Inconsistent {
                                    path: path.clone(),
                                    what: format!(
                                        "epoch {}:{} size operation ending phase {phase}: rank {} recorded {op:?}, rank {other_rank} {other:?}",
                                        id.0, id.1, m.rank
                                    ),
                                });
                            }
                            Some(_) => {}
                        }
                        phase += 1;
                    }
                }
            }
        }
        self.deleted = false;
        let mut order: Vec<u64> = phases.keys().chain(size_ops.keys()).copied().collect();
        order.sort_unstable();
        order.dedup();
        for p in order {
            for (m, path, e) in phases.get(&p).into_iter().flatten() {
                let data_path =
                    path.with_file_name(layout::epoch_file_name(id.1, EpochFileKind::Data));
                self.sources.push(SourceExtent {
                    epoch: id,
                    rank: m.rank,
                    data_path,
                    extent: **e,
                });
                let source = self.sources.len() - 1;
                self.map
                    .insert(e.file_off, e.len, SourcePiece { source, skip: 0 });
                self.size.min_size = self.size.min_size.max(e.file_end());
                self.deleted = false;
            }
            match size_ops.get(&p).copied() {
                Some((Op::SetSize(n), _, _)) => {
                    self.deleted = false;
                    self.map.truncate(n);
                    self.size.min_size = n;
                    self.size.size_set = true;
                    self.size.base_cut = Some(self.size.base_cut.map_or(n, |c| c.min(n)));
                }
                Some((Op::Preallocate(n), _, _)) => {
                    self.deleted = false;
                    self.size.min_size = self.size.min_size.max(n);
                }
                Some((Op::Delete, _, _)) => {
                    self.map.truncate(0);
                    self.size = SizeState {
                        min_size: 0,
                        size_set: true,
                        base_cut: Some(0),
                    };
                    self.deleted = true;
                }
                _ => {}
            }
        }
        self.epochs.push(id);
        Ok(())
    }

    /// Ranges of data in offset order: (file offset, length, piece).
    pub fn pieces(&self) -> impl Iterator<Item = (u64, u64, &SourcePiece)> {
        self.map.iter()
    }

    /// Bytes of data the logical file holds (not counting holes).
    pub fn data_bytes(&self) -> u64 {
        self.map.iter().map(|(_, len, _)| len).sum()
    }

    /// Fill `buf` with the logical file's bytes at `off`, on top of a base
    /// file of `base_len` bytes read by `base` (offset, buffer); holes and
    /// bytes past the base read as zeros. The caller bounds the read by
    /// [`SizeState::final_size`]. Every source extent is checksum-verified.
    pub fn read_at(
        &self,
        reader: &mut SourceReader,
        off: u64,
        buf: &mut [u8],
        base_len: u64,
        base: &mut dyn FnMut(u64, &mut [u8]) -> Result<()>,
    ) -> Result<()> {
        buf.fill(0);
        let end = off + buf.len() as u64;
        let visible = self.size.base_visible(base_len);
        if off < visible {
            let n = (visible.min(end) - off) as usize;
            base(off, &mut buf[..n])?;
        }
        for c in self.map.lookup(off, buf.len() as u64) {
            // Ranges the map does not cover keep the base bytes (or zeros).
            if let Some(piece) = c.value {
                let lo = (c.off - off) as usize;
                reader.read(
                    &self.sources[piece.source],
                    piece.skip,
                    &mut buf[lo..lo + c.len as usize],
                )?;
            }
        }
        Ok(())
    }

    /// Write the logical file to `out` (created or truncated), on top of
    /// `base` (the file before the first epoch; `None`: a new file). Every
    /// source extent is verified against its checksum before any of its
    /// bytes are used; holes are left as holes.
    pub fn materialize(&self, out: &Path, base: Option<&Path>) -> Result<u64> {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(out)
            .ctx("create", out)?;
        let mut base_len = 0;
        if let Some(base) = base {
            let b = File::open(base).ctx("open base file", base)?;
            base_len = b.metadata().ctx("stat", base)?.len();
            copy_range(&b, base, &f, out, 0, self.size.base_visible(base_len))?;
        }
        let mut reader = SourceReader::default();
        let mut buf = Vec::new();
        for (off, len, piece) in self.pieces() {
            buf.resize(len as usize, 0);
            reader.read(&self.sources[piece.source], piece.skip, &mut buf)?;
            durable::pwrite_all(&f, &buf, off, out)?;
        }
        let size = self.size.final_size(base_len);
        f.set_len(size).ctx("set length", out)?;
        f.sync_all().ctx("fsync", out)?;
        Ok(size)
    }
}

fn copy_range(
    src: &File,
    src_path: &Path,
    dst: &File,
    dst_path: &Path,
    off: u64,
    len: u64,
) -> Result<()> {
    let mut buf = vec![0u8; (len as usize).min(1 << 20)];
    let mut done = 0;
    while done < len {
        let n = ((len - done) as usize).min(buf.len());
        durable::pread_exact(src, &mut buf[..n], off + done, src_path)?;
        durable::pwrite_all(dst, &buf[..n], off + done, dst_path)?;
        done += n as u64;
    }
    Ok(())
}

/// Reads pieces of source extents, verifying each whole extent's checksum
/// once before handing out any of its bytes.
#[derive(Default)]
pub struct SourceReader {
    open: Option<(PathBuf, File)>,
    verified: std::collections::HashSet<(PathBuf, u64)>,
}

impl SourceReader {
    /// The data log of `src`, opened (and its header checked) once.
    fn file(&mut self, src: &SourceExtent) -> Result<&File> {
        if self.open.as_ref().is_none_or(|(p, _)| *p != src.data_path) {
            let f = File::open(&src.data_path).ctx("open data log", &src.data_path)?;
            check_data_header(&f, src)?;
            self.open = Some((src.data_path.clone(), f));
        }
        Ok(&self.open.as_ref().expect("just opened").1)
    }

    /// The data log of a source extent that already passed [`Self::verify`],
    /// for an in-kernel copy of its bytes (`copy_file_range`).
    pub fn verified_file(&mut self, src: &SourceExtent) -> Result<&File> {
        self.verify(src)?;
        self.file(src)
    }

    /// Check a whole source extent against its checksum (once per extent).
    pub fn verify(&mut self, src: &SourceExtent) -> Result<()> {
        let key = (src.data_path.clone(), src.extent.log_pos);
        if self.verified.contains(&key) {
            return Ok(());
        }
        let e = src.extent;
        let f = self.file(src)?;
        let mut crc = 0;
        let mut chunk = vec![0u8; (e.len as usize).min(1 << 20)];
        let mut done = 0;
        while done < e.len {
            let n = ((e.len - done) as usize).min(chunk.len());
            durable::pread_exact(f, &mut chunk[..n], e.log_pos + done, &src.data_path)?;
            crc = crc32c::crc32c_append(crc, &chunk[..n]);
            done += n as u64;
        }
        check_extent_crc(&src.data_path, &e, crc)?;
        self.verified.insert(key);
        Ok(())
    }

    /// Bytes `[skip, skip + buf.len())` of a source extent, never before the
    /// whole extent passed its checksum. Reading a whole extent checks it in
    /// the same pass.
    pub fn read(&mut self, src: &SourceExtent, skip: u64, buf: &mut [u8]) -> Result<()> {
        let e = src.extent;
        if skip == 0 && buf.len() as u64 == e.len {
            let f = self.file(src)?;
            durable::pread_exact(f, buf, e.log_pos, &src.data_path)?;
            check_extent_crc(&src.data_path, &e, crc32c::crc32c(buf))?;
            self.verified.insert((src.data_path.clone(), e.log_pos));
            return Ok(());
        }
        self.verify(src)?;
        let f = self.file(src)?;
        durable::pread_exact(f, buf, e.log_pos + skip, &src.data_path)
    }
}

/// A data log must belong to the rank, generation and epoch whose manifest
/// points at it (catches logs moved or restored to the wrong place).
fn check_data_header(f: &File, src: &SourceExtent) -> Result<()> {
    let mut head = [0u8; crate::format::DATA_HEADER_USED];
    durable::pread_exact(f, &mut head, 0, &src.data_path)?;
    let h = DataHeader::decode(&head, &src.data_path)?;
    if (h.rank, h.gen, h.epoch) != (src.rank, src.epoch.0, src.epoch.1) {
        return Err(LogError::Inconsistent {
            path: src.data_path.clone(),
            what: format!(
                "data log belongs to rank {} generation {} epoch {}, its manifest to rank {} generation {} epoch {}",
                h.rank, h.gen, h.epoch, src.rank, src.epoch.0, src.epoch.1
            ),
        });
    }
    Ok(())
}

fn check_extent_crc(path: &Path, e: &Extent, found: u32) -> Result<()> {
    if found != e.crc {
        return Err(LogError::Checksum {
            path: path.to_path_buf(),
            offset: e.log_pos,
            len: e.len,
            expected: e.crc,
            found,
        });
    }
    Ok(())
}
