//! The logical file: the committed epochs of a file merged (ranks phase by
//! phase, epochs in order, the size rules), its reads on top of a base file,
//! and `materialize`.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use super::{fmt_ids, EpochId, FileInventory, SourceExtent, SourceReader};
use crate::durable;
use crate::error::{IoContext, LogError, Result};
use crate::extent_map::{position_piece, ExtentMap};
use crate::format::{Extent, Manifest, Op, RenameRef, Times};
use crate::layout::{self, EpochFileKind};

impl FileInventory {
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
        let drained = self.progress.map(|p| p.id());
        let upto = match upto {
            Some(id) => {
                if drained.is_some_and(|d| id <= d) {
                    return Err(LogError::NotFound {
                        what: format!(
                            "epoch {id} of {} was drained to the remote (drained up to {}); its local data is gone",
                            self.display_name(),
                            fmt_ids(&drained.into_iter().collect::<Vec<_>>())
                        ),
                    });
                }
                if !committed.contains(&id) {
                    return Err(LogError::NotFound {
                        what: format!(
                            "epoch {id} of {} is not globally committed here (committed: {})",
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

    /// The source of a rename at its epoch `at` (docs/format.md,
    /// "Namespace operations"): the committed epochs after the drained ones
    /// up to `at` (none when `at` is 0:0 or already drained: the drained
    /// file is the whole content), to be read on top of the drained file;
    /// `whole`: from the job's first epoch (a remote the drained bytes
    /// cannot be read back from, whose drained records the server keeps).
    pub fn content_at(&self, at: EpochId, whole: bool) -> Result<LogicalFile> {
        let drained = if whole {
            None
        } else {
            self.progress.map(|p| p.id())
        };
        let mut lf = LogicalFile {
            after: drained,
            ..LogicalFile::default()
        };
        let committed = self.committed_epochs()?;
        if let (true, Some(d)) = (whole, self.progress.map(|p| p.id())) {
            // Drained records gone: the content would miss their bytes.
            if d <= at && !committed.contains(&d) {
                return Err(LogError::NotFound {
                    what: format!(
                        "{}, the source of a rename, was drained up to epoch {d}, whose local records are gone",
                        self.display_name()
                    ),
                });
            }
        }
        for id in committed
            .into_iter()
            .filter(|id| *id <= at && Some(*id) > drained)
        {
            let manifests = self.manifests(id)?;
            if manifests.is_empty() {
                return Err(LogError::NotFound {
                    what: format!(
                        "epoch {id} of {}, the source of a rename, has no local records left",
                        self.display_name()
                    ),
                });
            }
            lf.apply_epoch(id, &manifests)?;
        }
        Ok(lf)
    }

    /// The logical file from the job's first epoch, drained ones included:
    /// for a remote the capture library cannot read (S3), whose drained
    /// epochs the server keeps here until the job ends. Refused if a
    /// drained epoch's records are gone (the view would miss its bytes).
    pub fn logical_file_whole(&self) -> Result<LogicalFile> {
        let drained = self.progress.map(|p| p.id());
        let committed = self.committed_epochs()?;
        let mut lf = LogicalFile::default();
        for &id in &committed {
            let manifests = self.manifests(id)?;
            if manifests.is_empty() {
                return Err(LogError::NotFound {
                    what: format!(
                        "epoch {id} of {} was drained and its local records are gone (drained up to {})",
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
                        "{} was drained up to epoch {d}, whose local records are gone",
                        self.display_name(),
                    ),
                });
            }
        }
        Ok(lf)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourcePiece {
    /// Index into [`LogicalFile::sources`].
    pub source: usize,
    /// Offset of this piece within the source extent.
    pub skip: u64,
}

position_piece!(SourcePiece { source, skip });

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
    /// A rename onto this file among the epochs (the last one): the base
    /// under the later epochs is the source's content at that point, not
    /// this file's drained state (docs/format.md, "Namespace operations").
    pub from: Option<(EpochId, RenameRef)>,
    /// A rename of this file away among the epochs (the last one): its
    /// drain waits for the target's rename to be remote.
    pub moved_to: Option<RenameRef>,
    /// The mode the program created the file with, if among the epochs.
    pub mode: Option<u32>,
    /// The times the program set after the file's last change among the
    /// epochs (what they leave alone is the base's: the drained file's, or
    /// a rename source's).
    pub times: Option<crate::format::Times>,
    /// The epochs changed the file since its base: the base's times are
    /// gone (the remote file is as new as its drain, but for `times`).
    pub times_replaced: bool,
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
        let mut created: Option<u32> = None;
        // Times one of the ranks set after its last change (the highest
        // rank's, if several did: a deterministic choice), and how the
        // epoch changed the file (a rename alone keeps its source's times).
        let mut times: Option<crate::format::Times> = None;
        let mut changes = 0usize;
        let mut renamed = false;
        let mut ordered: Vec<&(Manifest, PathBuf)> = manifests.iter().collect();
        ordered.sort_by_key(|(m, _)| m.rank);
        for (m, path) in ordered {
            let mut phase = 0u64;
            for op in &m.ops {
                match op {
                    Op::Extent(e) => {
                        changes += 1;
                        phases.entry(phase).or_default().push((m, path, e))
                    }
                    Op::Phase(p) => phase = *p,
                    Op::Mode(m) => created = Some(*m),
                    Op::Times(t) => times = Some(*t),
                    Op::SetSize(_)
                    | Op::Preallocate(_)
                    | Op::Delete
                    | Op::RenameFrom(_)
                    | Op::RenamedTo(_) => {
                        changes += 1;
                        renamed |= matches!(op, Op::RenameFrom(_));
                        match size_ops.get(&phase) {
                            None => {
                                size_ops.insert(phase, (*op, m.rank, path));
                            }
                            Some((other, other_rank, _)) if other != op => {
                                return Err(LogError::Inconsistent {
                                    path: path.clone(),
                                    what: format!(
                                        "epoch {id} size operation ending phase {phase}: rank {} recorded {op:?}, rank {other_rank} {other:?}",
                                        m.rank
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
                    path.with_file_name(layout::epoch_file_name(id.epoch, EpochFileKind::Data));
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
                Some((op @ (Op::Delete | Op::RenamedTo(_)), _, _)) => {
                    self.map.truncate(0);
                    self.size = SizeState {
                        min_size: 0,
                        size_set: true,
                        base_cut: Some(0),
                    };
                    self.deleted = true;
                    self.from = None;
                    self.mode = None;
                    if let Op::RenamedTo(r) = op {
                        self.moved_to = Some(r);
                    }
                }
                Some((Op::RenameFrom(r), _, _)) => {
                    // Nothing the file held before shows through: its base
                    // is now the source's content, whole (no cut).
                    self.map.truncate(0);
                    self.size = SizeState::default();
                    self.deleted = false;
                    self.from = Some((id, r));
                    // A renamed file keeps its source's mode.
                    self.mode = None;
                }
                _ => {}
            }
        }
        if let (Some(m), false) = (created, self.deleted) {
            self.mode = Some(m);
        }
        if changes > 0 {
            self.times_replaced = !(renamed && changes == 1);
            self.times = None;
        }
        self.times = Times::layered(self.times, times);
        self.epochs.push(id);
        Ok(())
    }

    /// The times the file has after these epochs on a base whose times
    /// `base` gives (asked only when the base still shows): those the
    /// program set, on top of the base's, or, once the epochs changed the
    /// file, of when its newest bytes were committed (so that the drained
    /// file, and `stat` before and after the drain, agree with each other).
    pub fn times_on(&self, base: impl FnOnce() -> Option<Times>) -> Option<Times> {
        let under = if self.times_replaced {
            self.last_change()
        } else {
            base()
        };
        Times::layered(under, self.times)
    }

    /// When the newest bytes were committed: the modification time of the
    /// data logs of the last epoch that holds any (format 2 writes its
    /// commit record at their end); none if no epoch holds data.
    pub fn last_change(&self) -> Option<Times> {
        use std::os::unix::fs::MetadataExt;
        let last = self.sources.iter().map(|s| s.epoch).max()?;
        let mut paths: Vec<&Path> = self
            .sources
            .iter()
            .filter(|s| s.epoch == last)
            .map(|s| s.data_path.as_path())
            .collect();
        paths.sort_unstable();
        paths.dedup();
        let newest = paths
            .into_iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.mtime() * 1_000_000_000 + m.mtime_nsec())
            .max()?;
        Some(Times {
            atime: Some(newest),
            mtime: Some(newest),
        })
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
