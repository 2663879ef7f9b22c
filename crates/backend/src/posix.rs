//! The POSIX backend: the remote is a directory on a (parallel or network)
//! file system. Writes are pwrite, size operations ftruncate, durability is
//! fsync of the file (and of its directory when it was created or removed).
//! The file is never truncated unless the program asked for it.

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

use crate::{Backend, BackendError, EpochShape, EpochSink, ErrorKind, RemoteOp};

#[derive(Debug)]
pub struct PosixBackend {
    root: PathBuf,
}

impl PosixBackend {
    /// A directory (from a parsed URL, or the prefix derived from a path
    /// record); checked again here because the latter is not a URL.
    pub fn new(root: &Path) -> Result<PosixBackend, BackendError> {
        let root = root.to_path_buf();
        if !root.is_absolute() || root.components().any(|c| c == Component::ParentDir) {
            return Err(BackendError {
                kind: ErrorKind::Permanent,
                target: root.display().to_string(),
                op: "open remote",
                message: "a POSIX remote must be an absolute path without '..'".into(),
            });
        }
        Ok(PosixBackend { root })
    }

    fn path(&self, rel: &[u8]) -> PathBuf {
        self.root.join(OsStr::from_bytes(rel))
    }
}

/// Which OS errors are worth retrying: the remote being away, full or
/// read-only may change; a path that cannot exist will not.
fn classify(e: &io::Error) -> ErrorKind {
    match e.raw_os_error() {
        Some(libc::ENOTDIR | libc::EISDIR | libc::ENAMETOOLONG | libc::EINVAL | libc::ELOOP) => {
            ErrorKind::Permanent
        }
        _ => ErrorKind::Retryable,
    }
}

fn err(path: &Path, op: &'static str, e: io::Error) -> BackendError {
    BackendError {
        kind: classify(&e),
        target: path.display().to_string(),
        op,
        message: e.to_string(),
    }
}

impl Backend for PosixBackend {
    fn begin(
        &self,
        rel: &[u8],
        shape: &EpochShape,
    ) -> Result<Box<dyn EpochSink + Send + '_>, BackendError> {
        let path = self.path(rel);
        // A version that replaces the file whole is written under a hidden
        // name beside it and renamed onto it at commit: the name shows the
        // old file or the new one, never a half-written one. The name is
        // fixed per file, so a drain retried after a crash writes (and
        // renames) the same temporary: none is left once it succeeds.
        let temp = shape.replace.then(|| replace_temp(&path));
        Ok(Box::new(PosixSink {
            path,
            root: &self.root,
            file: None,
            dir_changed: false,
            no_copy: false,
            temp,
            mode: shape.mode.unwrap_or(0o644) & 0o7777,
            // Never for a deleted file: opening it to set them would make it.
            times: shape.times.filter(|_| !shape.deleted),
        }))
    }

    fn describe(&self, rel: &[u8]) -> String {
        self.path(rel).display().to_string()
    }

    fn local_path(&self, rel: &[u8]) -> Option<PathBuf> {
        Some(self.path(rel))
    }

    fn root_dir(&self) -> Option<&Path> {
        Some(&self.root)
    }

    fn concurrent_writers(&self) -> bool {
        true
    }
}

struct PosixSink<'a> {
    path: PathBuf,
    root: &'a Path,
    file: Option<File>,
    /// The file was created or removed: its directory must be synced too.
    dir_changed: bool,
    /// copy_file_range does not work between these file systems.
    no_copy: bool,
    /// Replacing the file whole: written here, renamed onto `path`.
    temp: Option<PathBuf>,
    /// The mode a file this sink creates gets (less the umask).
    mode: u32,
    /// The times the program set, given to the file before its fsync.
    times: Option<crate::Times>,
}

/// `dir/.NAME.paralog-replace`: hidden, in the same directory (a rename
/// within one file system), and recognisable as paralog's.
pub fn replace_temp(path: &Path) -> PathBuf {
    let mut name = std::ffi::OsString::from(".");
    name.push(path.file_name().unwrap_or_default());
    name.push(REPLACE_SUFFIX);
    path.with_file_name(name)
}

const REPLACE_SUFFIX: &str = ".paralog-replace";

/// Whether a directory entry is a replacing version still being written
/// (`replace_temp`): never shown to the program (capture's listings).
pub fn is_replace_temp(name: &[u8]) -> bool {
    name.len() > 1 + REPLACE_SUFFIX.len()
        && name.starts_with(b".")
        && name.ends_with(REPLACE_SUFFIX.as_bytes())
}

impl PosixSink<'_> {
    fn file(&mut self) -> Result<&File, BackendError> {
        if self.file.is_none() {
            if let Some(t) = self.temp.clone() {
                return self.open_temp(t);
            }
            let existed = self.path.exists();
            if !existed {
                root_exists(self.root)?;
                // Directories below the root that the program created
                // under the prefix.
                if let Some(parent) = self.path.parent() {
                    if parent != self.root {
                        std::fs::create_dir_all(parent)
                            .map_err(|e| err(parent, "create directory", e))?;
                    }
                }
            }
            // The program's creation mode (0644 when unknown, as a
            // program's own open would get with the usual umask).
            let f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(self.mode)
                .open(&self.path)
                .map_err(|e| err(&self.path, "open", e))?;
            self.dir_changed |= !existed;
            self.file = Some(f);
        }
        Ok(self.file.as_ref().expect("just opened"))
    }
}

/// The remote root must exist: a missing root is a remote file system that
/// is not mounted, and creating it would write onto the mount point
/// instead. Retried later.
fn root_exists(root: &Path) -> Result<(), BackendError> {
    if root.is_dir() {
        return Ok(());
    }
    Err(err(
        root,
        "open remote root",
        io::Error::new(
            io::ErrorKind::NotFound,
            "the remote directory does not exist (not mounted?)",
        ),
    ))
}

impl PosixSink<'_> {
    /// The hidden temporary of a replacing version, empty (what a crashed
    /// attempt left in it goes).
    fn open_temp(&mut self, t: PathBuf) -> Result<&File, BackendError> {
        root_exists(self.root)?;
        if let Some(parent) = t.parent() {
            std::fs::create_dir_all(parent).map_err(|e| err(parent, "create directory", e))?;
        }
        // A temporary left by a crashed attempt may have another mode: the
        // new version gets this one (a renamed file keeps its source's).
        let _ = std::fs::remove_file(&t);
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(self.mode)
            .open(&t)
            .map_err(|e| err(&t, "open", e))?;
        self.dir_changed = true;
        self.file = Some(f);
        Ok(self.file.as_ref().expect("just opened"))
    }
}

impl EpochSink for PosixSink<'_> {
    fn apply(&mut self, op: RemoteOp<'_>) -> Result<(), BackendError> {
        match op {
            RemoteOp::Write { off, data } => {
                let path = self.path.clone();
                self.file()?
                    .write_all_at(data, off)
                    .map_err(|e| err(&path, "write", e))
            }
            RemoteOp::SetSize(n) => {
                let path = self.path.clone();
                self.file()?
                    .set_len(n)
                    .map_err(|e| err(&path, "truncate", e))
            }
            RemoteOp::Preallocate(n) => {
                let path = self.path.clone();
                let f = self.file()?;
                let len = f.metadata().map_err(|e| err(&path, "stat", e))?.len();
                if len < n {
                    f.set_len(n).map_err(|e| err(&path, "extend", e))?;
                }
                Ok(())
            }
            RemoteOp::Delete => {
                self.file = None;
                match std::fs::remove_file(&self.path) {
                    Ok(()) => {
                        self.dir_changed = true;
                        Ok(())
                    }
                    // Already gone: a replay after a crash, or never created.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                    Err(e) => Err(err(&self.path, "delete", e)),
                }
            }
        }
    }

    fn copy_from(
        &mut self,
        src: &File,
        src_off: u64,
        len: u64,
        off: u64,
    ) -> Result<bool, BackendError> {
        if self.no_copy {
            return Ok(false);
        }
        let path = self.path.clone();
        let dst = self.file()?.as_raw_fd();
        let (mut s_off, mut d_off) = (src_off as i64, off as i64);
        let mut left = len;
        while left > 0 {
            // SAFETY: both descriptors are open for the call's duration; the
            // offsets are ours.
            let n = unsafe {
                libc::copy_file_range(
                    src.as_raw_fd(),
                    &mut s_off,
                    dst,
                    &mut d_off,
                    left as usize,
                    0,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                let unsupported = matches!(
                    e.raw_os_error(),
                    Some(libc::EXDEV | libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)
                );
                if unsupported && left == len {
                    self.no_copy = true;
                    return Ok(false);
                }
                return Err(err(&path, "copy_file_range", e));
            }
            if n == 0 {
                return Err(err(
                    &path,
                    "copy_file_range",
                    io::Error::new(io::ErrorKind::UnexpectedEof, "source data log ended early"),
                ));
            }
            left -= n as u64;
        }
        Ok(true)
    }

    fn commit(mut self: Box<Self>) -> Result<(), BackendError> {
        if let (Some(t), None) = (&self.temp, &self.file) {
            // An empty new version: the temporary still has to exist.
            let t = t.clone();
            self.open_temp(t)?;
        }
        if let Some(times) = self.times {
            let path = self.temp.clone().unwrap_or_else(|| self.path.clone());
            set_times(self.file()?, times).map_err(|e| err(&path, "set times", e))?;
        }
        if let Some(f) = &self.file {
            f.sync_all().map_err(|e| err(&self.path, "fsync", e))?;
        }
        if let Some(t) = &self.temp {
            std::fs::rename(t, &self.path).map_err(|e| err(&self.path, "rename into place", e))?;
        }
        if self.dir_changed {
            let dir = self.path.parent().unwrap_or(self.root);
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| err(dir, "fsync directory", e))?;
        }
        Ok(())
    }
}

/// Give the file at `path` its times after others wrote it (the server
/// job's collective MPI-IO writes, which no sink of ours commits), made
/// durable.
pub fn set_path_times(path: &Path, t: crate::Times) -> Result<(), BackendError> {
    let f = File::options()
        .write(true)
        .open(path)
        .map_err(|e| err(path, "open to set times", e))?;
    set_times(&f, t).map_err(|e| err(path, "set times", e))?;
    f.sync_all().map_err(|e| err(path, "fsync", e))
}

/// `futimens` with the program's times; what it left alone stays.
fn set_times(f: &File, t: crate::Times) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let spec = |ns: Option<i64>| match ns {
        Some(ns) => libc::timespec {
            tv_sec: ns.div_euclid(1_000_000_000) as libc::time_t,
            tv_nsec: ns.rem_euclid(1_000_000_000) as _,
        },
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
    };
    let ts = [spec(t.atime), spec(t.mtime)];
    // SAFETY: an open descriptor and two initialised timespecs.
    if unsafe { libc::futimens(f.as_raw_fd(), ts.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: EpochShape = EpochShape {
        epoch: crate::EpochId::new(1, 1),
        origin: [0; 16],
        deleted: false,
        size: crate::SizeState {
            min_size: 0,
            size_set: false,
            base_cut: None,
        },
        fresh: false,
        replace: false,
        mode: None,
        times: None,
    };

    #[test]
    fn applies_ops_and_replays_idempotently() {
        let d = tempfile::tempdir().unwrap();
        let b = PosixBackend::new(d.path()).unwrap();
        let epoch = |b: &PosixBackend| {
            let mut s = b.begin(b"sub/f", &SHAPE).unwrap();
            s.apply(RemoteOp::Write {
                off: 0,
                data: &[1; 100],
            })
            .unwrap();
            s.apply(RemoteOp::SetSize(50)).unwrap();
            s.apply(RemoteOp::Write {
                off: 80,
                data: &[2; 10],
            })
            .unwrap();
            s.commit().unwrap();
        };
        epoch(&b);
        let mut want = vec![1u8; 50];
        want.resize(80, 0);
        want.extend([2u8; 10]);
        assert_eq!(std::fs::read(d.path().join("sub/f")).unwrap(), want);
        epoch(&b);
        assert_eq!(
            std::fs::read(d.path().join("sub/f")).unwrap(),
            want,
            "replay changes nothing"
        );
        let mut s = b.begin(b"sub/f", &SHAPE).unwrap();
        s.apply(RemoteOp::Delete).unwrap();
        s.apply(RemoteOp::Delete).unwrap();
        s.commit().unwrap();
        assert!(!d.path().join("sub/f").exists());
    }

    #[test]
    fn a_replacing_version_shows_whole_or_not_at_all() {
        let d = tempfile::tempdir().unwrap();
        let b = PosixBackend::new(d.path()).unwrap();
        let f = d.path().join("sub/ckpt");
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(&f, b"old checkpoint").unwrap();
        let replace = EpochShape {
            replace: true,
            ..SHAPE
        };
        // A drain that dies before its commit: the old file is untouched.
        let mut s = b.begin(b"sub/ckpt", &replace).unwrap();
        s.apply(RemoteOp::Write {
            off: 0,
            data: b"half",
        })
        .unwrap();
        drop(s);
        assert_eq!(std::fs::read(&f).unwrap(), b"old checkpoint");
        assert!(is_replace_temp(b".ckpt.paralog-replace"));
        assert!(
            replace_temp(&f).exists(),
            "the interrupted version's temporary"
        );
        // The retry writes the same temporary from empty and renames it.
        let mut s = b.begin(b"sub/ckpt", &replace).unwrap();
        s.apply(RemoteOp::Write {
            off: 0,
            data: b"new",
        })
        .unwrap();
        s.apply(RemoteOp::SetSize(3)).unwrap();
        s.commit().unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"new");
        let left: Vec<_> = std::fs::read_dir(f.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            left,
            vec![std::ffi::OsString::from("ckpt")],
            "no temporary left"
        );
        // An empty replacing version still replaces.
        let s = b.begin(b"sub/ckpt", &replace).unwrap();
        s.commit().unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"");
        assert!(!is_replace_temp(b".paralog-replace") && !is_replace_temp(b"ckpt"));
    }

    #[test]
    fn rejects_relative_and_escaping_roots() {
        assert!(PosixBackend::new(Path::new("rel/dir")).is_err());
        assert!(PosixBackend::new(Path::new("/a/../b")).is_err());
    }
}
