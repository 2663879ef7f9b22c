//! Where a stream's records live, locally and on a POSIX remote, and the
//! few durable file steps (each with the reason for its fsync).
//!
//! ```text
//! <local>/.paralog-streams/<stream>/     0700
//!     <producer:016x>.seg                one per (process, stream), 0600
//!     cuts                               the drain's cut log (a base, then cuts)
//!     drain.lock                         one drain of the stream at a time
//!     job                                a server job drained this root
//! <remote>/.paralog-streams/<stream>/
//!     stream                             the stream's description
//!     watermark                          the high watermark (atomic)
//!     p<partition:05>/<first:020>.seg    a partition's segments
//!     groups/<group>                     a reader group's offsets (atomic)
//! ```

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{IoContext, Result};

/// Below the local root and the remote root alike. The local root's
/// `.paralog-*` entries are not read as jobs by the log's inventory.
pub const STREAMS_DIR: &str = ".paralog-streams";
pub const CUTS: &str = "cuts";
pub const DRAIN_LOCK: &str = "drain.lock";
pub const STREAM_RECORD: &str = "stream";
pub const WATERMARK: &str = "watermark";
pub const GROUPS: &str = "groups";

pub fn streams_dir(root: &Path) -> PathBuf {
    root.join(STREAMS_DIR)
}

pub fn stream_dir(root: &Path, stream: &str) -> PathBuf {
    streams_dir(root).join(stream)
}

/// The local directory of an existing stream under the node-local `root`
/// (its name checked first); an unknown stream is an error naming both.
pub fn existing_local_stream(root: &Path, stream: &str) -> Result<PathBuf> {
    crate::format::valid_name("stream name", stream)?;
    let dir = stream_dir(root, stream);
    if !dir.is_dir() {
        return Err(crate::error::StreamError::UnknownStream {
            stream: stream.into(),
            root: root.to_path_buf(),
        });
    }
    Ok(dir)
}

pub fn segment_name(producer: u64) -> String {
    format!("{producer:016x}.seg")
}

/// The producer of a local segment's file name.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".seg")?;
    (hex.len() == 16
        && hex
            .bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()))
    .then(|| u64::from_str_radix(hex, 16).ok())
    .flatten()
}

pub fn part_dir(stream_dir: &Path, partition: u32) -> PathBuf {
    stream_dir.join(format!("p{partition:05}"))
}

pub fn part_segment(stream_dir: &Path, partition: u32, first: u64) -> PathBuf {
    part_dir(stream_dir, partition).join(format!("{first:020}.seg"))
}

/// The first offsets of a partition's segments, in order.
pub fn part_segments(stream_dir: &Path, partition: u32) -> Result<Vec<u64>> {
    let dir = part_dir(stream_dir, partition);
    let mut out = Vec::new();
    let rd = match std::fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e).ctx("list", &dir),
    };
    for ent in rd {
        let name = ent.ctx("list", &dir)?.file_name();
        let name = name.to_string_lossy();
        if let Some(n) = name.strip_suffix(".seg").filter(|n| n.len() == 20) {
            if let Ok(first) = n.parse::<u64>() {
                out.push(first);
            }
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// fsync a directory: entries created or renamed in it survive a crash.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .ctx("open directory", dir)?
        .sync_all()
        .ctx("fsync directory", dir)
}

/// Create `dir` and missing parents below `base` (which exists), mode
/// `mode`; each parent that gained an entry is fsynced so that the path
/// survives a crash. Returns whether anything was created.
pub fn create_dirs(base: &Path, dir: &Path, mode: u32) -> Result<bool> {
    let rel = dir.strip_prefix(base).expect("a directory below its base");
    let mut cur = base.to_path_buf();
    let mut made = false;
    for comp in rel.components() {
        let parent = cur.clone();
        cur.push(comp);
        match DirBuilder::new().mode(mode).create(&cur) {
            Ok(()) => {
                sync_dir(&parent)?;
                made = true;
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e).ctx("create directory", &cur),
        }
    }
    Ok(made)
}

/// Replace `path` with `bytes` atomically and durably: a temporary name,
/// fsync, rename, fsync of the directory. A reader sees the old record or
/// the new one, before and after a crash.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    write_atomic_then(path, bytes, mode, &|| {})
}

/// [`write_atomic`], calling `synced` once the temporary is durable and
/// before the rename (a crash point for tests).
pub fn write_atomic_then(path: &Path, bytes: &[u8], mode: u32, synced: &dyn Fn()) -> Result<()> {
    let name = path
        .file_name()
        .expect("a record path has a name")
        .to_string_lossy();
    let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .ctx("create", &tmp)?;
    f.write_all(bytes).ctx("write", &tmp)?;
    // The content must be on disk before the name points at it.
    f.sync_all().ctx("fsync", &tmp)?;
    synced();
    std::fs::rename(&tmp, path).ctx("rename into place", path)?;
    // The rename is the commit; it is durable once the directory is.
    sync_dir(path.parent().expect("a record path has a parent"))
}

/// Temporaries of `path` left by writers that died before their rename (a
/// drain killed while it published its watermark): named after their
/// process, removed once that process is gone, so that a later drain
/// leaves the remote as an uninterrupted one would. A live writer's is
/// left alone.
pub fn remove_dead_temporaries(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let prefix = format!(".{}.tmp-", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let file = e.file_name();
        let Some(pid) = file
            .to_str()
            .and_then(|f| f.strip_prefix(&prefix))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// A small record file read whole, `None` if absent.
pub fn read_small(path: &Path) -> Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).ctx("read", path),
    }
}

/// The names of the entries of `dir` (none if it does not exist), each with
/// its path, sorted by name.
pub fn entries(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).ctx("list", dir),
    };
    let mut out = Vec::new();
    for ent in rd {
        let ent = ent.ctx("list", dir)?;
        out.push((ent.file_name().to_string_lossy().into_owned(), ent.path()));
    }
    out.sort();
    Ok(out)
}

/// A node-local file opened for writing, created private (0600), never
/// truncated.
pub fn open_private(path: &Path) -> Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .ctx("open", path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_writers_temporary_goes_a_live_ones_stays() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join(WATERMARK);
        // No process has pid 4194304 (above Linux's pid_max); pid 1 lives.
        for pid in ["4194304", "1"] {
            std::fs::write(d.path().join(format!(".{WATERMARK}.tmp-{pid}")), b"torn").unwrap();
        }
        std::fs::write(d.path().join(".other.tmp-4194304"), b"not ours").unwrap();
        remove_dead_temporaries(&path);
        write_atomic(&path, b"new", 0o644).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                ".other.tmp-4194304",
                &format!(".{WATERMARK}.tmp-1"),
                WATERMARK
            ]
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
    }
}
