//! The few file-system steps that make a record durable, each with the reason
//! for its fsync. Files are created 0600 and directories 0700: node-local
//! data is private to the user who ran the job.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::Path;

use crate::error::{IoContext, Result};

pub const FILE_MODE: u32 = 0o600;
pub const DIR_MODE: u32 = 0o700;

/// fsync a directory, so that entries created, renamed or removed in it
/// survive a crash (fsync of a file does not persist its name).
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .ctx("open directory", dir)?
        .sync_all()
        .ctx("fsync directory", dir)
}

/// Create `dir` and its missing parents below `base` with mode 0700, and fsync
/// each parent that gained an entry, so the path exists after a crash.
/// `base` itself must exist; nothing at or above it is touched.
pub fn create_dirs_below(base: &Path, dir: &Path) -> Result<()> {
    for parent in create_dirs(base, dir)? {
        sync_dir(&parent)?;
    }
    Ok(())
}

/// Create `dir` and its missing parents below `base` with mode 0700,
/// without fsync; returns the parents that gained an entry (whose fsync
/// would make the new path durable). `base` itself must exist; nothing at
/// or above it is touched.
pub fn create_dirs(base: &Path, dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    let rel = dir
        .strip_prefix(base)
        .map_err(|_| crate::error::LogError::InvalidName {
            what: "directory",
            value: dir.display().to_string(),
            why: "is not below the node-local root",
        })?;
    let mut cur = base.to_path_buf();
    let mut changed = Vec::new();
    for comp in rel.components() {
        let parent = cur.clone();
        cur.push(comp);
        match DirBuilder::new().mode(DIR_MODE).create(&cur) {
            Ok(()) => changed.push(parent),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e).ctx("create directory", &cur),
        }
    }
    Ok(changed)
}

/// Write `bytes` to `path` atomically and durably: temporary name, fsync,
/// rename, fsync of the directory. A crash leaves the old file or the new one,
/// plus possibly the temporary (which readers ignore; gc removes a
/// manifest's).
pub fn write_atomic(path: &Path, tmp: &Path, bytes: &[u8]) -> Result<()> {
    // The content must be on disk before the name points at it.
    write_tmp(tmp, bytes, true)?;
    fs::rename(tmp, path).ctx("rename into place", path)?;
    // The rename is the commit; it is only durable once the directory is.
    sync_dir(path.parent().expect("a file path has a parent"))
}

/// Write `bytes` to `path` through a temporary name and a rename, without
/// fsync: a reader sees the old file or the whole new one, but after a
/// crash of the node it may be missing or empty (for records that can be
/// re-derived).
pub fn write_renamed(path: &Path, tmp: &Path, bytes: &[u8]) -> Result<()> {
    write_tmp(tmp, bytes, false)?;
    fs::rename(tmp, path).ctx("rename into place", path)
}

/// Create (or truncate) `tmp` with `bytes`, fsynced if `sync`.
fn write_tmp(tmp: &Path, bytes: &[u8], sync: bool) -> Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(FILE_MODE)
        .open(tmp)
        .ctx("create", tmp)?;
    f.write_all(bytes).ctx("write", tmp)?;
    if sync {
        f.sync_all().ctx("fsync", tmp)?;
    }
    Ok(())
}

/// `pwrite` all of `buf` at `off` (retrying short writes and EINTR).
pub fn pwrite_all(f: &File, buf: &[u8], off: u64, path: &Path) -> Result<()> {
    f.write_all_at(buf, off).ctx("write", path)
}

/// `pread` exactly `buf.len()` bytes at `off`; a short file is corruption
/// (the manifest promised these bytes), reported with the offset.
pub fn pread_exact(f: &File, buf: &mut [u8], off: u64, path: &Path) -> Result<()> {
    match f.read_exact_at(buf, off) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            Err(crate::error::LogError::Corrupt {
                path: path.to_path_buf(),
                offset: off,
                what: format!(
                    "data log ends before the {} bytes the manifest lists here",
                    buf.len()
                ),
            })
        }
        Err(e) => Err(e).ctx("read", path),
    }
}

/// Write a small file that needs no fsync (commit marks, close markers:
/// each can be re-derived or only delays an upload if lost), private to
/// the user like every node-local file.
pub fn write_private(path: &Path, bytes: &[u8], what: &'static str) -> Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(FILE_MODE)
        .open(path)
        .ctx(what, path)?;
    f.write_all(bytes).ctx(what, path)
}
