//! What a node-local root holds (the inventory of its jobs, files, opens,
//! ranks and epochs), and which of a file's epochs are globally committed
//! (the commit rule of docs/format.md).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use super::cache::ScanCache;
use super::record::{read_rank_manifest, ManifestAt, ManifestLoc, Probe, RankRecord};
use crate::error::{IoContext, LogError, Result};
use crate::format::{Manifest, PathRecord, ProgressRecord};
pub use crate::id::EpochId;
use crate::layout::{self, EpochFileKind};

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

fn scan_file(dir: &Path, stray: &mut Vec<PathBuf>, cache: &mut ScanCache) -> Result<FileInventory> {
    let mut gens = BTreeMap::new();
    let mut staging = Vec::new();
    // A committed format-2 manifest, in case the path record is unreadable.
    let mut a_manifest: Option<(Vec<u8>, ManifestLoc)> = None;
    for (name, path, is_dir) in cache.list(dir)?.iter().cloned() {
        if crate::single::is_staging_name(&name) {
            if is_dir {
                staging.push(path);
            }
            continue;
        }
        if name == layout::PATH_FILE
            || name.starts_with("path.tmp.")
            || name == layout::PROGRESS_FILE
            || name.starts_with("progress.tmp")
            || name == crate::single::LOCK_FILE
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
        for (rname, rpath, rdir) in cache.list(&path)?.iter().cloned() {
            let Some(rank) = rdir.then(|| layout::parse_rank_dir_name(&rname)).flatten() else {
                stray.push(rpath);
                continue;
            };
            let r = scan_rank(&rpath, stray, &mut a_manifest, cache)?;
            g.ranks.insert(rank, r);
        }
        gens.insert(gen, g);
    }
    for stage in staging {
        rescue_staged(dir, &stage, &mut gens, &mut a_manifest, cache)?;
    }
    // The records are read after the listing, not before: a writer records
    // the path before any epoch exists, and the drain records progress
    // before it deletes an epoch, so whatever the listing saw is covered by
    // the records read now. Read first, a new file's path could be missing
    // yet its first committed epoch listed (the server then parked a
    // healthy file as damaged).
    let path_file = dir.join(layout::PATH_FILE);
    let (mut record, path_error) = match cache.read(&path_file) {
        Ok(bytes) => match PathRecord::decode(&bytes, &path_file) {
            Ok(r) => (Some(r), None),
            Err(e) => (None, Some(e.to_string())),
        },
        Err(e) => (None, Some(format!("{}: {e}", path_file.display()))),
    };
    // Format 2 does not make the path record durable (a crash may leave it
    // missing or empty): every commit record's manifest names the path.
    let mut record_rebuilt = false;
    if record.is_none() {
        if let Some(m) = a_manifest.and_then(|(bytes, loc)| loc.decode(&bytes).ok()) {
            record = Some(PathRecord {
                path: m.ident.path,
                rel: m.ident.rel,
            });
            record_rebuilt = true;
        }
    }
    let progress_file = dir.join(layout::PROGRESS_FILE);
    let (progress, progress_error) = match cache.read(&progress_file) {
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
        record_rebuilt,
        progress,
        progress_error,
        gens,
    })
}

/// List one rank directory: its epochs' records, where each manifest is
/// (a format-2 data log's header and commit record are read), its close
/// marker.
fn scan_rank(
    rdir: &Path,
    stray: &mut Vec<PathBuf>,
    a_manifest: &mut Option<(Vec<u8>, ManifestLoc)>,
    cache: &mut ScanCache,
) -> Result<RankInventory> {
    let mut r = RankInventory {
        dir: rdir.to_path_buf(),
        ..RankInventory::default()
    };
    // Names sort "e<N>.commit" < "e<N>.data" < "e<N>.manifest": the data
    // log of an epoch is probed before its manifest file is listed.
    let mut v2_logs = std::collections::BTreeSet::new();
    for (ename, epath, edir) in cache.list(rdir)?.iter().cloned() {
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
        match kind {
            EpochFileKind::Data => {
                // A data log deleted between the listing and the probe (the
                // server removes drained epochs while others scan): as if it
                // had not been listed, like a directory that vanished.
                let Some((len, probe)) = cache.probe(&epath)? else {
                    continue;
                };
                let e = r.epochs.entry(epoch).or_default();
                e.data = Some(len);
                match probe {
                    Probe::V1 => {}
                    Probe::NoHeader(err) => e.torn = Some(err.to_string()),
                    Probe::Committed {
                        offset, manifest, ..
                    } => {
                        e.manifest = Some(ManifestAt::Log {
                            offset,
                            len: manifest.len() as u32,
                        });
                        v2_logs.insert(epoch);
                        if a_manifest.is_none() {
                            let at = e.manifest.expect("just set");
                            *a_manifest = Some((manifest, ManifestLoc::new(rdir, epoch, at)));
                        }
                    }
                    Probe::Torn(err) => {
                        e.torn = Some(err.to_string());
                        v2_logs.insert(epoch);
                    }
                }
            }
            // Beside a format-2 data log a manifest file is not part of
            // the layout.
            EpochFileKind::Manifest if v2_logs.contains(&epoch) => stray.push(epath),
            EpochFileKind::Manifest => {
                let e = r.epochs.entry(epoch).or_default();
                e.manifest = Some(ManifestAt::File);
                e.torn = None;
            }
            EpochFileKind::ManifestTmp => r.epochs.entry(epoch).or_default().manifest_tmp = true,
            EpochFileKind::Mark => r.epochs.entry(epoch).or_default().mark = true,
        }
    }
    Ok(r)
}

/// A one-process writer's staging directory whose data log has a valid
/// commit record naming generation G, while G holds no rank 0: the writer
/// stopped after its commit was durable and before it renamed the rank
/// directory into G (`single.rs`). Its epoch is G's rank 0, read in place.
/// Not while a commit is in progress (its commit lock is held): that
/// writer is about to rename it, and what a scan sees stays ordered.
fn rescue_staged(
    file_dir: &Path,
    stage: &Path,
    gens: &mut BTreeMap<u64, GenInventory>,
    a_manifest: &mut Option<(Vec<u8>, ManifestLoc)>,
    cache: &mut ScanCache,
) -> Result<()> {
    let rank_dir = stage.join(layout::rank_dir_name(0));
    let data = rank_dir.join(layout::epoch_file_name(1, EpochFileKind::Data));
    let Some((_, Probe::Committed { header, .. })) = cache.probe(&data)? else {
        return Ok(());
    };
    let gen = header.gen;
    if gen == crate::single::STAGED_GEN
        || gen == 0
        || (header.rank, header.comm_size, header.epoch) != (0, 1, 1)
        || gens.get(&gen).is_some_and(|g| g.ranks.contains_key(&0))
        || crate::single::commit_in_progress(file_dir)
    {
        return Ok(());
    }
    let mut stray = Vec::new();
    let mut r = scan_rank(&rank_dir, &mut stray, a_manifest, cache)?;
    if r.epochs.get(&1).is_none_or(|e| e.manifest.is_none()) {
        return Ok(());
    }
    r.staged = true;
    gens.entry(gen)
        .or_insert_with(|| GenInventory {
            dir: file_dir.join(layout::gen_dir_name(gen)),
            ranks: BTreeMap::new(),
        })
        .ranks
        .insert(0, r);
    Ok(())
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
        if blocked_gen == Some(id.gen) {
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
            .any(|(other, &c)| c && other.gen > id.gen);
        if !later_open_committed {
            break;
        }
        blocked_gen = Some(id.gen);
    }
    out
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
        let file = scan_file(&dir, &mut stray, &mut ScanCache::off())?;
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
        scan_file(dir, &mut stray, &mut ScanCache::off())
    }

    /// The paths a file directory stands for: its path record, or, if that
    /// cannot be read (format 2 does not make it durable), a committed
    /// manifest's. `None` if neither says.
    pub fn path_of(dir: &Path) -> Option<PathRecord> {
        let path_file = dir.join(layout::PATH_FILE);
        if let Ok(r) = std::fs::read(&path_file)
            .map_err(|_| ())
            .and_then(|b| PathRecord::decode(&b, &path_file).map_err(|_| ()))
        {
            return Some(r);
        }
        Self::scan_dir(dir).ok().and_then(|f| f.record)
    }

    /// Write the path record again from what `record` says, when it was
    /// rebuilt from a manifest (durably: write, fsync, rename, fsync the
    /// directory). Returns whether it wrote.
    pub fn repair_path_record(&self) -> Result<bool> {
        let (true, Some(r)) = (self.record_rebuilt, &self.record) else {
            return Ok(false);
        };
        let path = self.dir.join(layout::PATH_FILE);
        let tmp = self.dir.join(format!(
            "{}.tmp.repair.{}",
            layout::PATH_FILE,
            std::process::id()
        ));
        crate::durable::write_atomic(&path, &tmp, &r.encode())?;
        Ok(true)
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
    pub fn local_bytes(&self, EpochId { gen, epoch }: EpochId) -> u64 {
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
                    .flat_map(move |r| r.epochs.keys().map(move |&e| EpochId::new(g, e)))
            })
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Decode and cross-check the manifests of one epoch present here (the
    /// path is where each was read: the manifest file, or the data log
    /// holding the commit record). A rank whose data log has no valid
    /// commit record is left out, as not committed, unless the epoch is
    /// proven committed ([`Self::commit_evidence`]): then that is damage,
    /// refused naming the file and offset.
    pub fn manifests(&self, id: EpochId) -> Result<Vec<(Manifest, PathBuf)>> {
        let EpochId { gen, epoch } = id;
        let Some(g) = self.gens.get(&gen) else {
            return Ok(Vec::new());
        };
        let proven = self.commit_evidence(id);
        let mut out: Vec<(Manifest, PathBuf)> = Vec::new();
        for (&rank, r) in &g.ranks {
            let listed = r.epochs.get(&epoch).and_then(|e| e.manifest);
            // A rank whose directory was listed before its manifest was
            // renamed into place (format 2: before its commit record was
            // written) may have committed since: the scan lists the ranks
            // one after another, so it can see another rank's commit mark
            // (written after every rank's local commit) and miss this one.
            // Look for it by name. A listed manifest that is gone is an
            // error, as before (a drain deleted it under us).
            let (bytes, loc) = match read_rank_manifest(&r.dir, epoch)? {
                RankRecord::Found { bytes, loc } => (bytes, loc),
                // Proven committed: the record was complete once. Not
                // proven: a commit that did not finish, or one being
                // redone (its agreement failed; the rank appends after it).
                RankRecord::Torn(e) if proven => return Err(e),
                RankRecord::Missing if listed.is_some() => {
                    let loc = ManifestLoc::new(&r.dir, epoch, listed.expect("listed"));
                    return Err(LogError::Io {
                        path: loc.path,
                        op: "read manifest",
                        error: io::Error::from(io::ErrorKind::NotFound),
                    });
                }
                RankRecord::Torn(_) | RankRecord::Missing => continue,
            };
            let m = loc.decode(&bytes)?;
            let path = loc.path;
            m.check_place(id, rank, &path)?;
            let mismatch = |what: String| LogError::Inconsistent {
                path: path.clone(),
                what,
            };
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

    /// Whether this node holds proof that an epoch was globally committed
    /// besides its manifests: a rank's commit mark, or a record of a later
    /// epoch of the same open (a rank starts epoch N+1 only after the
    /// agreement said every rank committed N). With such proof a torn
    /// commit record is damage, not an unfinished commit.
    pub fn commit_evidence(&self, id: EpochId) -> bool {
        let EpochId { gen, epoch } = id;
        self.gens.get(&gen).is_some_and(|g| {
            g.ranks.values().any(|r| {
                r.epochs.get(&epoch).is_some_and(|e| e.mark)
                    || r.epochs.range(epoch + 1..).next().is_some()
            })
        })
    }

    /// Whether an epoch is globally committed, from this node's view.
    pub fn commit_status(&self, id: EpochId) -> Result<CommitStatus> {
        let EpochId { gen, epoch } = id;
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
        let drained = self.progress.map(|p| p.id());
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
        let done = self.progress.map(|p| p.id());
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
        self.complete_locally_after(self.progress.map(|p| p.id()))
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
        .map(EpochId::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
