//! The committed state of a captured path as this node's log holds it: the
//! real file under the prefix (what the drain has written so far, the
//! "base") plus the committed epochs not yet drained. Capture answers from
//! it whether the file exists, how long it is, and the bytes a rank reads
//! that it did not write in the current epoch: MPI makes another rank's
//! writes visible only after a sync, i.e. exactly the committed state.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use paralog_backend::objstore::{ObjStore, Version};
use paralog_log::format::Times;
use paralog_log::reader::SourceReader;
use paralog_log::{FileInventory, LogicalFile};

use crate::report;
use crate::settings::Config;
use crate::state::CResult;

/// Where the drained bytes of a file are, for capture to read them: a
/// POSIX remote's file (the prefix itself by default), the latest version
/// in an object layout, or nowhere capture can read (S3: no network in the
/// application's process).
#[derive(Debug, Clone)]
pub enum Base {
    File(PathBuf),
    /// A POSIX remote's file (root, relative path), or, when no such file
    /// exists, the member of a checkpoint set in one of its parent
    /// directories (docs/aggregate.md): looked for only then, so that a
    /// plain file costs nothing more.
    FileOrMember(PathBuf, Vec<u8>),
    Object(ObjStore, Vec<u8>),
    Unreadable,
    /// The open truncates the file (`O_TRUNC`): nothing drained can show
    /// through, so the remote is not asked (a round trip on sshfs or NFS
    /// for every checkpoint file written with `"w"`).
    Cut,
}

impl Base {
    /// The same kind of drained state for another path of the remote
    /// (the source of a rename).
    fn for_rel(&self, rel: &[u8]) -> Base {
        match self {
            Base::FileOrMember(root, _) => Base::FileOrMember(root.clone(), rel.to_vec()),
            Base::Object(store, _) => Base::Object(store.clone(), rel.to_vec()),
            // A base named by its path alone (no root to join `rel` to):
            // the source's drained bytes cannot be found from it.
            Base::File(_) => Base::Unreadable,
            Base::Unreadable => Base::Unreadable,
            Base::Cut => Base::Cut,
        }
    }

    pub fn of(cfg: &Config, rel: &[u8]) -> CResult<Base> {
        if let Some(url) = &cfg.remote_objstore {
            return Ok(Base::Object(ObjStore::new(url), rel.to_vec()));
        }
        Ok(match &cfg.remote_root {
            Some(r) => Base::FileOrMember(r.clone(), rel.to_vec()),
            None => Base::Unreadable,
        })
    }
}

/// The drained state as opened for one view.
enum Opened {
    /// The drained file, opened at the first read, and whether it existed
    /// when the view was built: a view is a snapshot (rebuilt at each
    /// commit), so a file absent then answers no times and no mode without
    /// asking the remote again (ROMIO `lstat`s every file it opens: a
    /// round trip on sshfs or NFS each).
    File(PathBuf, std::sync::OnceLock<std::fs::File>, bool),
    Object(ObjStore, Version),
    /// A checkpoint set's member, every block verified as it is read.
    Member(std::sync::Mutex<paralog_aggregate::MemberReader>),
    Unreadable,
    /// Drained bytes this node cannot rebuild: why.
    Lost(String),
    /// The source of a rename not yet drained: its own committed view.
    Renamed(std::sync::Mutex<Box<View>>, PathBuf),
}

pub struct View {
    pub lf: LogicalFile,
    base: Opened,
    pub base_len: u64,
    /// Every committed epoch has all its ranks' records on this node; else
    /// the view lacks other nodes' bytes and must not answer reads.
    pub complete: bool,
    reader: SourceReader,
}

pub struct Committed {
    pub view: View,
    pub exists: bool,
    pub size: u64,
    /// This job's log has a record of the file (committed epochs, drained
    /// or not): capture answers for it, even once everything is drained.
    pub known: bool,
    /// Its drained bytes are a member of a checkpoint set: capture answers
    /// for it (no plain file holds them).
    pub in_set: bool,
}

/// The drained file's length, if it exists.
fn open_base(base: Base, abs: &Path) -> CResult<(Opened, Option<u64>)> {
    Ok(match base {
        Base::File(p) => {
            let m = std::fs::metadata(&p).ok();
            let present = m.is_some();
            let len = m.filter(|m| m.is_file()).map(|m| m.len());
            (Opened::File(p, std::sync::OnceLock::new(), present), len)
        }
        Base::Object(store, name) => match store.version(&name, None) {
            Ok(Some(v)) if !v.deleted => {
                let len = v.size;
                (Opened::Object(store, v), Some(len))
            }
            Ok(Some(_)) => (Opened::Unreadable, None),
            // No object of this name: a member of a checkpoint set?
            Ok(None) => match crate::sets::open_obj_member(&store, &name, abs)? {
                Some(m) => {
                    let len = m.size();
                    (Opened::Member(std::sync::Mutex::new(m)), Some(len))
                }
                None => (Opened::Unreadable, None),
            },
            Err(e) => {
                report::line(&format!(
                    "reading the drained versions of {}: {e}",
                    abs.display()
                ));
                return Err(libc::EIO);
            }
        },
        Base::FileOrMember(root, rel) => {
            let p = root.join(OsStr::from_bytes(&rel));
            match std::fs::metadata(&p) {
                Ok(m) => (
                    Opened::File(p, std::sync::OnceLock::new(), true),
                    m.is_file().then_some(m.len()),
                ),
                Err(_) => match crate::sets::member_of(&root, &rel) {
                    Some((set_dir, member)) => {
                        match crate::sets::open_member(&set_dir, &member, abs)? {
                            Some(m) => {
                                let len = m.size();
                                (Opened::Member(std::sync::Mutex::new(m)), Some(len))
                            }
                            None => (Opened::File(p, std::sync::OnceLock::new(), false), None),
                        }
                    }
                    None => (Opened::File(p, std::sync::OnceLock::new(), false), None),
                },
            }
        }
        Base::Unreadable | Base::Cut => (Opened::Unreadable, None),
    })
}

/// Build the committed state of `abs` (remote-relative `rel`) for `job`.
pub fn committed(
    local: &Path,
    job: &str,
    abs: &Path,
    rel: &[u8],
    base: Base,
) -> CResult<Committed> {
    committed_at(local, job, abs, rel, base, 0)
}

fn committed_at(
    local: &Path,
    job: &str,
    abs: &Path,
    rel: &[u8],
    base: Base,
    depth: usize,
) -> CResult<Committed> {
    let fail = |e: paralog_log::LogError| {
        report::line(&format!(
            "reading the committed state of {}: {e}",
            abs.display()
        ));
        e.raw_os_error().unwrap_or(libc::EIO)
    };
    // The log first, then the drained state: the server drains an epoch
    // to the remote before it deletes it here, so a base read after the
    // scan holds at least every epoch the scan no longer sees (and applying
    // an epoch the base already holds again changes nothing). A record
    // deleted by the drain while we scan: look again.
    let mut attempt = 0;
    let unreadable = matches!(base, Base::Unreadable);
    let mut known;
    let (lf, complete, lost) = loop {
        let inv = FileInventory::scan_path(local, job, rel);
        known = matches!(inv, Ok(Some(_)));
        let scanned = inv.and_then(|inv| match inv {
            None => Ok((LogicalFile::default(), true, None)),
            Some(inv) if unreadable => match inv.logical_file_whole() {
                Ok(lf) => Ok((lf, inv.complete_locally_whole()?, None)),
                // Drained to S3 and not all of it is here (another node of
                // the job holds the rest, or its records went): the open
                // goes on with what this node knows; a read of the rest
                // fails with this message, never with made-up bytes.
                Err(e) => Ok((
                    inv.logical_file(None)?,
                    false,
                    Some(format!(
                        "{} was drained to S3 and cannot be read back here ({e}; docs/s3.md)",
                        abs.display()
                    )),
                )),
            },
            Some(inv) => Ok((inv.logical_file(None)?, inv.complete_locally()?, None)),
        });
        match scanned {
            Ok(v) => break v,
            Err(paralog_log::LogError::Io { ref error, .. })
                if error.kind() == std::io::ErrorKind::NotFound && attempt < 50 =>
            {
                attempt += 1;
            }
            Err(e) => return Err(fail(e)),
        }
    };
    let lost_here = lost.is_some();
    let (opened, real) = match (lost, lf.from) {
        (Some(why), _) => (Opened::Lost(why), Some(0)),
        (None, Some((epoch, r))) if !matches!(base, Base::Cut) => {
            match renamed_base(local, job, rel, abs, &base, epoch, r)? {
                Some(v) => v,
                // The rename was drained meanwhile: the drained file holds
                // it; look again (a bounded number of times).
                None if depth < 50 => return committed_at(local, job, abs, rel, base, depth + 1),
                None => {
                    report::line(&format!(
                        "{}: its rename kept being drained while it was read",
                        abs.display()
                    ));
                    return Err(libc::EIO);
                }
            }
        }
        (None, _) => open_base(base, abs)?,
    };
    let in_set = matches!(opened, Opened::Member(_));
    let base_len = real.unwrap_or(0);
    let (exists, size) = if lf.epochs.is_empty() {
        (real.is_some(), base_len)
    } else {
        (!lf.deleted, lf.size.final_size(base_len))
    };
    // The size is what this node knows; for reads the unknown base reaches
    // as far as any read may go, so that every byte of it fails loudly
    // unless a later cut (set_size) removed it.
    let base_len = if lost_here { u64::MAX } else { base_len };
    Ok(Committed {
        view: View {
            lf,
            base: opened,
            base_len,
            complete,
            reader: SourceReader::default(),
        },
        exists,
        size,
        known,
        in_set,
    })
}

/// The base of a file whose epochs hold a rename onto it (`epoch`, from
/// `r`): the source's committed view at the epoch `r` names, on top of the
/// source's own drained state. `None`: the rename is drained by now (read
/// after the source, so that a source removed by the drain since our scan
/// is never read as empty): build the view again.
fn renamed_base(
    local: &Path,
    job: &str,
    rel: &[u8],
    abs: &Path,
    base: &Base,
    epoch: paralog_log::EpochId,
    r: paralog_log::format::RenameRef,
) -> CResult<Option<(Opened, Option<u64>)>> {
    let fail = |e: paralog_log::LogError| {
        report::line(&format!(
            "reading the source of the rename onto {}: {e}",
            abs.display()
        ));
        e.raw_os_error().unwrap_or(libc::EIO)
    };
    let dir = local.join(job).join(r.file_dir_name());
    let inv = FileInventory::scan_dir(&dir).map_err(fail)?;
    let src_rel = match &inv.record {
        Some(rec) if r.names(&rec.rel) => rec.rel.clone(),
        _ => {
            report::line(&format!(
                "the source of the rename onto {} is not in {} (damaged log?)",
                abs.display(),
                dir.display()
            ));
            return Err(libc::EIO);
        }
    };
    let unreadable = matches!(base, Base::Unreadable);
    let lf = inv.content_at(r.at, unreadable).map_err(fail)?;
    let src_abs = PathBuf::from(OsStr::from_bytes(
        &inv.record.as_ref().expect("checked").path,
    ));
    let (opened, real) = match lf.from {
        Some((e2, r2)) => match renamed_base(local, job, &src_rel, &src_abs, base, e2, r2)? {
            Some(v) => v,
            None => return Ok(None),
        },
        None => open_base(base.for_rel(&src_rel), &src_abs)?,
    };
    // Still pending here after the source was read: the source's drain
    // (which waits for this rename to be remote) has not touched it. (A
    // remote capture cannot read keeps every drained record until the job
    // ends, the source's too: the view is whole either way.)
    let progress = FileInventory::scan_path(local, job, rel)
        .map_err(fail)?
        .and_then(|i| i.progress);
    if !unreadable && progress.is_some_and(|p| p.id() >= epoch) {
        return Ok(None);
    }
    let base_len = real.unwrap_or(0);
    let size = if lf.epochs.is_empty() {
        real
    } else {
        (!lf.deleted).then(|| lf.size.final_size(base_len))
    };
    let view = View {
        lf,
        base: opened,
        base_len,
        complete: true,
        reader: SourceReader::default(),
    };
    Ok(Some((
        Opened::Renamed(std::sync::Mutex::new(Box::new(view)), src_abs),
        size,
    )))
}

impl View {
    /// The file's permission bits in this view: the creation mode its
    /// epochs recorded, else the drained file's (a `chmod` reaches that
    /// once the epochs are drained) or set member's, else a rename
    /// source's; `None` when nothing says (an object remote keeps no
    /// modes).
    pub fn mode(&self) -> Option<u32> {
        use std::os::unix::fs::PermissionsExt;
        if self.lf.mode.is_some() || self.lf.deleted {
            return self.lf.mode;
        }
        match &self.base {
            Opened::File(p, _, true) => std::fs::metadata(p)
                .ok()
                .filter(|m| m.is_file())
                .map(|m| m.permissions().mode() & 0o7777),
            Opened::Renamed(v, _) => v.lock().ok().and_then(|v| v.mode()),
            // A checkpoint set's member: the mode its set recorded.
            Opened::Member(m) => m.lock().ok().map(|m| m.member().mode & 0o7777),
            _ => None,
        }
    }

    /// The file's times in this view: those the program set on top of its
    /// base's (the drained file's, or a rename source's), or, once its
    /// epochs changed it, the time its newest bytes reached the log.
    pub fn times(&self) -> Option<Times> {
        self.lf.times_on(|| match &self.base {
            Opened::File(p, _, true) => file_times(p.as_path()),
            Opened::Renamed(v, _) => v.lock().ok().and_then(|v| v.times()),
            _ => None,
        })
    }

    /// Bytes of the committed file at `off` (zeros past its end). ENOENT,
    /// quietly, when a data log went away under us (the server drained and
    /// deleted it): the caller rebuilds the view and asks again.
    pub fn read(&mut self, abs: &Path, off: u64, buf: &mut [u8]) -> CResult<()> {
        let opened = &self.base;
        let mut base = |at: u64, dst: &mut [u8]| -> paralog_log::Result<()> {
            use std::os::unix::fs::FileExt;
            match opened {
                Opened::File(p, file, _) => {
                    let io = |op, error| paralog_log::LogError::Io {
                        path: p.to_path_buf(),
                        op,
                        error,
                    };
                    let f = match file.get() {
                        Some(f) => f,
                        None => {
                            let f = std::fs::File::open(p).map_err(|e| io("open", e))?;
                            file.get_or_init(|| f)
                        }
                    };
                    f.read_exact_at(dst, at).map_err(|e| io("read", e))
                }
                Opened::Object(store, v) => store.read_range(v, at, dst).map_err(|e| match e {
                    // A chunk removed under us (a newer version replaced
                    // this one and retention dropped it): rebuild and retry.
                    paralog_backend::objstore::ObjError::Io { path, op, error } => {
                        paralog_log::LogError::Io { path, op, error }
                    }
                    other => paralog_log::LogError::Inconsistent {
                        path: store.root().to_path_buf(),
                        what: format!("version {} of {}: {other}", v.number, abs.display()),
                    },
                }),
                Opened::Member(m) => crate::sets::read_member(m, abs, at, dst),
                Opened::Lost(why) => Err(paralog_log::LogError::NotFound { what: why.clone() }),
                Opened::Renamed(v, src) => {
                    let mut v = v.lock().unwrap_or_else(|p| p.into_inner());
                    v.read(src, at, dst).map_err(|e| paralog_log::LogError::Io {
                        path: src.clone(),
                        op: "read the source of a rename",
                        error: std::io::Error::from_raw_os_error(e),
                    })
                }
                Opened::Unreadable => Err(paralog_log::LogError::NotFound {
                    what: format!(
                        "drained bytes of {} are in object storage that capture cannot read (S3)",
                        abs.display()
                    ),
                }),
            }
        };
        self.lf.read_at(&mut self.reader, off, buf, self.base_len, &mut base).map_err(|e| {
            if matches!(&e, paralog_log::LogError::Io { error, .. } if error.kind() == std::io::ErrorKind::NotFound) {
                return libc::ENOENT;
            }
            report::line(&format!("reading committed bytes of {} at offset {off}: {e}", abs.display()));
            e.raw_os_error().unwrap_or(libc::EIO)
        })
    }
}

/// A file's access and modification times, if it exists.
pub(crate) fn file_times(p: &Path) -> Option<Times> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).ok()?;
    Some(Times {
        atime: Some(m.atime() * 1_000_000_000 + m.atime_nsec()),
        mtime: Some(m.mtime() * 1_000_000_000 + m.mtime_nsec()),
    })
}
