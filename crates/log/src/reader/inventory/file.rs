//! What one file's inventory answers: its epochs, manifests and which are committed.

use std::io;
use std::path::{Path, PathBuf};

use crate::error::{LogError, Result};
use crate::format::{Manifest, PathRecord};
use crate::reader::cache::ScanCache;
use crate::reader::record::{read_rank_manifest, ManifestLoc, RankRecord};

use crate::layout;

use super::*;

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
