//! Renames in the drain (docs/format.md, "Namespace operations"), for both
//! engines and `recover`: a rename is one record in each file's log, and
//! the two files drain on their own, so the order between them lives here.
//!
//! - The target's epoch with `RenameFrom` is published whole: the source's
//!   content at the named epoch (its drained file, read back from the
//!   remote, plus its committed epochs still on this node), with the
//!   target's later epochs on top, as one new version that replaces the
//!   old one atomically (`EpochShape::replace`).
//! - The source's epochs up to its `RenamedTo` are drained as one group
//!   whose result is "deleted", and only once the target's progress record
//!   covers its rename: so the source's bytes never reach the remote under
//!   the source's name after the rename was recorded, and its records stay
//!   on this node until the target, which reads them, is remote.

use std::path::{Path, PathBuf};

use paralog_backend::{Backend, ReadBack};
use paralog_log::format::RenameRef;
use paralog_log::reader::SourceReader;
use paralog_log::{EpochId, FileInventory, LogError, LogicalFile};

use crate::drain::DrainError;

/// Renames onto renames (a -> b -> c before any drain) are followed this
/// deep; a longer chain is refused rather than followed without end.
pub(crate) const MAX_CHAIN: usize = 64;

/// How many of `pending` (in order) the next group must take so that
/// epochs before a rename away never reach the remote under this name,
/// and whether that group may go now. `Ok(None)`: no rename away among
/// them. `Err(Waiting)`: the target's rename is not remote yet.
pub fn collapse(file: &FileInventory, pending: &[EpochId]) -> Result<Option<usize>, DrainError> {
    let mut last = None;
    for (i, &id) in pending.iter().enumerate() {
        let ms = file.manifests(id).map_err(crate::drain::local)?;
        let moved = ms.iter().find_map(|(m, _)| {
            m.ops.iter().find_map(|op| match op {
                paralog_log::format::Op::RenamedTo(r) => Some(*r),
                _ => None,
            })
        });
        if let Some(r) = moved {
            last = Some((i, r));
        }
    }
    let Some((i, r)) = last else {
        return Ok(None);
    };
    let target = other_file(&file.dir, r)?;
    let done = target.progress.map(|p| p.id());
    if done.is_none_or(|d| d < r.at) {
        return Err(DrainError::Waiting(format!(
            "{} was renamed to {}: waiting for that rename (epoch {}) to reach the remote",
            file.display_name(),
            target.display_name(),
            r.at
        )));
    }
    Ok(Some(i + 1))
}

/// The other file of a rename, in the same job directory as `dir`; refused
/// unless its path record is the one the reference names.
pub(crate) fn other_file(dir: &Path, r: RenameRef) -> Result<FileInventory, DrainError> {
    let other = dir.parent().unwrap_or(dir).join(r.file_dir_name());
    if !other.is_dir() {
        // The other record of a rename is written a moment after this one
        // (capture writes the target's first): not there yet is not damage.
        return Err(DrainError::Waiting(format!(
            "the other file of a rename ({}) has no records here yet",
            other.display()
        )));
    }
    let inv = FileInventory::scan_dir(&other).map_err(crate::drain::local)?;
    match &inv.record {
        Some(rec) if r.names(&rec.rel) => Ok(inv),
        _ => Err(DrainError::Corrupt(LogError::Inconsistent {
            path: other,
            what: "a rename names this file directory, whose path record is not the one it names"
                .into(),
        })),
    }
}

/// The content of a rename's source at the epoch the rename names: its
/// committed epochs still here, on top of its drained file (or of the
/// source of its own rename).
pub struct Source<'b> {
    lf: LogicalFile,
    base: Base<'b>,
    base_len: u64,
    /// The source's length.
    pub size: u64,
    /// The mode the source was created with, where its records say.
    pub mode: Option<u32>,
    /// The times the source has at the rename (what its records set on
    /// top of its base's).
    pub times: Option<paralog_backend::Times>,
    reader: SourceReader,
    /// The source's file directory, and how far it was drained when its
    /// records were read.
    dir: PathBuf,
    seen: Option<EpochId>,
}

/// The source `r` names (for the file in `dir`) and its content at the
/// rename from its local records, every extent verified: what the content
/// lies on is the caller's to find (a plain drain's remote file, a set's
/// member).
pub(crate) struct SourceContent {
    pub(crate) inv: FileInventory,
    pub(crate) lf: LogicalFile,
    pub(crate) reader: SourceReader,
    /// How far the source was drained when its records were read.
    pub(crate) seen: Option<EpochId>,
}

pub(crate) fn source_content(
    dir: &Path,
    r: RenameRef,
    whole: bool,
) -> Result<SourceContent, DrainError> {
    let inv = other_file(dir, r)?;
    let seen = inv.progress.as_ref().map(|p| p.id());
    let lf = inv
        .content_at(r.at, whole)
        .map_err(|e| source_error(&inv.dir, seen, e))?;
    let mut reader = SourceReader::default();
    for (_, _, p) in lf.pieces() {
        reader
            .verify(&lf.sources[p.source])
            .map_err(|e| source_error(&inv.dir, seen, e))?;
    }
    Ok(SourceContent {
        inv,
        lf,
        reader,
        seen,
    })
}

/// An error reading a source's records. The source drains on its own: its
/// worker may have moved the epochs this drain was reading to the remote
/// and deleted them meanwhile. Then the data log is gone and the source's
/// progress record has moved on, and the target's drain goes again soon
/// (it reads those bytes from the remote then). Anything else is what the
/// error says (a data log missing with no drain behind it is damage).
pub(crate) fn source_error(dir: &Path, seen: Option<EpochId>, e: LogError) -> DrainError {
    let vanished =
        matches!(&e, LogError::Io { error, .. } if error.kind() == std::io::ErrorKind::NotFound);
    if vanished {
        let now = FileInventory::scan_dir(dir)
            .ok()
            .and_then(|inv| inv.progress.map(|p| p.id()));
        if now > seen {
            return DrainError::Waiting(format!(
                "the source of a rename ({}) drained while it was read",
                dir.display()
            ));
        }
    }
    crate::drain::local(e)
}

enum Base<'b> {
    None,
    /// The drained file, as the remote lets this process read it.
    Remote(Box<dyn ReadBack + 'b>),
    Renamed(Box<Source<'b>>),
    /// A checkpoint set's member (`mv ckpt/step-1/rank-0.dat keep/`): its
    /// drained bytes are in the set's containers, not a file of its name.
    Member(paralog_aggregate::MemberReader),
}

impl<'b> Source<'b> {
    /// Open the source `r` names, for the file in `dir`. `whole`: the
    /// remote cannot be read back (S3), and the server kept every record
    /// of the job: the content from the job's first epoch.
    pub fn open(
        dir: &Path,
        r: RenameRef,
        backend: &'b dyn Backend,
        whole: bool,
    ) -> Result<Source<'b>, DrainError> {
        Self::open_chain(dir, r, backend, whole, 0)
    }

    fn open_chain(
        dir: &Path,
        r: RenameRef,
        backend: &'b dyn Backend,
        whole: bool,
        depth: usize,
    ) -> Result<Source<'b>, DrainError> {
        let SourceContent {
            inv,
            lf,
            reader,
            seen,
        } = source_content(dir, r, whole)?;
        let rel = inv.record.as_ref().expect("checked").rel.clone();
        let (base, base_len) = match lf.from {
            Some((_, from)) if depth < MAX_CHAIN => {
                let s = Self::open_chain(&inv.dir, from, backend, whole, depth + 1)?;
                let n = s.size;
                (Base::Renamed(Box::new(s)), n)
            }
            Some(_) => {
                return Err(DrainError::Corrupt(LogError::Inconsistent {
                    path: inv.dir.clone(),
                    what: format!("more than {MAX_CHAIN} renames in a chain"),
                }))
            }
            // Read back from the remote only when some of its bytes show,
            // or its mode is not in the records.
            None if whole || (lf.size.base_cut == Some(0) && lf.mode.is_some()) => (Base::None, 0),
            None => drained_file(backend, &rel)?,
        };
        let size = if lf.epochs.is_empty() {
            base_len
        } else {
            lf.size.final_size(base_len)
        };
        let mode = lf.mode.or(match &base {
            Base::Renamed(s) => s.mode,
            Base::Remote(r) => r.mode(),
            Base::Member(m) => Some(m.member().mode & 0o7777),
            Base::None => None,
        });
        let base_times = match &base {
            Base::Renamed(s) => s.times,
            Base::Remote(r) => r.times(),
            Base::Member(_) | Base::None => None,
        };
        let times = lf.times_on(|| base_times);
        Ok(Source {
            mode,
            times,
            lf,
            base,
            base_len,
            size,
            reader,
            dir: inv.dir.clone(),
            seen,
        })
    }

    /// The source's bytes at `off` (zeros past its end).
    pub fn read(&mut self, off: u64, buf: &mut [u8]) -> paralog_log::Result<()> {
        let Source {
            lf,
            base,
            base_len,
            reader,
            ..
        } = self;
        let mut base_read = |at: u64, dst: &mut [u8]| -> paralog_log::Result<()> {
            match base {
                Base::None => {
                    dst.fill(0);
                    Ok(())
                }
                Base::Remote(r) => {
                    // Past the drained file's end: zeros (its size rules
                    // already said how long the source is).
                    let n = (r.size().saturating_sub(at) as usize).min(dst.len());
                    dst[n..].fill(0);
                    r.read_at(at, &mut dst[..n]).map_err(|e| LogError::Io {
                        path: PathBuf::from(e.target.clone()),
                        op: "read back the drained source of a rename",
                        error: std::io::Error::other(e.to_string()),
                    })
                }
                Base::Renamed(s) => s.read(at, dst),
                Base::Member(m) => {
                    let n = (m.size().saturating_sub(at) as usize).min(dst.len());
                    dst[n..].fill(0);
                    m.read_at(at, &mut dst[..n]).map_err(|e| LogError::Corrupt {
                        path: m.set().dir().to_path_buf(),
                        offset: at,
                        what: format!(
                            "the published member {}, the source of a rename: {e}",
                            String::from_utf8_lossy(&m.member().path)
                        ),
                    })
                }
            }
        };
        lf.read_at(reader, off, buf, *base_len, &mut base_read)
    }
}

/// The source's drained file, read back from the remote: a file of its
/// name, else its member in a checkpoint set. Absent: nothing of it was
/// drained.
fn drained_file<'b>(backend: &'b dyn Backend, rel: &[u8]) -> Result<(Base<'b>, u64), DrainError> {
    if let Some(r) = backend.read_back(rel).map_err(DrainError::Remote)? {
        let n = r.size();
        return Ok((Base::Remote(r), n));
    }
    Ok(match set_member(backend, rel)? {
        Some(m) => {
            let n = m.size();
            (Base::Member(m), n)
        }
        None => (Base::None, 0),
    })
}

/// `rel` as the member of a published checkpoint set (a directory remote
/// or the object layout; S3 keeps the job's records instead).
fn set_member(
    backend: &dyn Backend,
    rel: &[u8],
) -> Result<Option<paralog_aggregate::MemberReader>, DrainError> {
    use paralog_aggregate::reader::SetReader;
    use std::os::unix::ffi::OsStrExt;
    let found = if let Some(store) = backend.objstore() {
        paralog_aggregate::objset::find_set(store, rel)
            .map(|(set, m)| (SetReader::open_obj(store, &set), m))
    } else if let (Some(root), Some(_)) = (backend.root_dir(), backend.local_path(rel)) {
        paralog_aggregate::reader::find_set(root, rel).map(|(set, m)| {
            (
                SetReader::open(&root.join(std::ffi::OsStr::from_bytes(&set))),
                m,
            )
        })
    } else {
        None
    };
    let Some((reader, member)) = found else {
        return Ok(None);
    };
    let reader = reader.map_err(|e| {
        DrainError::Remote(paralog_backend::BackendError {
            kind: paralog_backend::ErrorKind::Retryable,
            target: backend.describe(rel),
            op: "read the checkpoint set holding the source of a rename",
            message: e.to_string(),
        })
    })?;
    Ok(reader.and_then(|r| paralog_aggregate::MemberReader::new(std::sync::Arc::new(r), &member)))
}

/// Publish the version of a file whose epochs `lf` hold a rename onto it:
/// the source's content with the later epochs on top, written from offset
/// 0 into a version that replaces the file whole (`EpochShape::replace`)
/// and made durable. Returns the bytes written.
#[allow(clippy::too_many_arguments)]
pub fn publish(
    ctx: &crate::drain::DrainCtx<'_>,
    rel: &[u8],
    last: EpochId,
    origin: [u8; 16],
    fresh: bool,
    lf: &LogicalFile,
    mut src: Source<'_>,
    mut reader: SourceReader,
) -> Result<u64, DrainError> {
    let size = lf.size.final_size(src.size);
    // A rename keeps the source's mode; a file created anew since, its own.
    // And its times, unless the file changed since.
    let times = lf.times_on(|| src.times);
    let shape = crate::step::replace_shape(last, origin, size, fresh, lf.mode.or(src.mode), times);
    let mut sink = ctx.backend.begin(rel, &shape).map_err(DrainError::Remote)?;
    let mut buf = ctx.pool.get();
    let chunk = buf.len() as u64;
    let src_len = src.size;
    let mut off = 0;
    while off < size {
        let n = (size - off).min(chunk) as usize;
        if let Some(l) = ctx.limit {
            l.take(n);
        }
        lf.read_at(&mut reader, off, &mut buf[..n], src_len, &mut |at, dst| {
            src.read(at, dst)
        })
        .map_err(|e| source_error(&src.dir, src.seen, e))?;
        sink.apply(paralog_backend::RemoteOp::Write {
            off,
            data: &buf[..n],
        })
        .map_err(DrainError::Remote)?;
        crate::failpoint::hit("drain.mid_write");
        off += n as u64;
    }
    crate::failpoint::hit("drain.before_fsync");
    sink.apply(paralog_backend::RemoteOp::SetSize(size))
        .map_err(DrainError::Remote)?;
    sink.commit().map_err(DrainError::Remote)?;
    Ok(size)
}
