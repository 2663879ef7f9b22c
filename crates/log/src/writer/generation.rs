//! A new log's checks and its place: valid names and rank, the next free
//! generation of a file, the path record beside its ranks.

use std::io;
use std::path::Path;

use crate::durable;
use crate::error::{IoContext, LogError, Result};
use crate::format::{FileIdent, PathRecord};
use crate::layout;

/// What every new log checks first: names that stay inside the root, a
/// rank inside its communicator, a root that is a directory.
pub(super) fn validate(root: &Path, ident: &FileIdent, rank: u32, comm_size: u32) -> Result<()> {
    layout::validate_component("job name", &ident.job)?;
    layout::validate_rel(&ident.rel)?;
    if !ident.path.starts_with(b"/") || ident.path.len() > crate::format::MAX_PATH_LEN {
        return Err(LogError::InvalidName {
            what: "application path",
            value: String::from_utf8_lossy(&ident.path).into_owned(),
            why: "must be absolute and at most PATH_MAX bytes",
        });
    }
    if comm_size == 0 || rank >= comm_size {
        return Err(LogError::InvalidName {
            what: "rank",
            value: format!("{rank} of {comm_size}"),
            why: "must be below the communicator size",
        });
    }
    if ident.gen == 0 {
        return Err(LogError::InvalidName {
            what: "generation",
            value: "0".into(),
            why: "generations start at 1",
        });
    }
    let meta = std::fs::metadata(root).ctx("stat node-local root", root)?;
    if !meta.is_dir() {
        return Err(LogError::Io {
            path: root.to_path_buf(),
            op: "use as node-local root",
            error: io::Error::from_raw_os_error(libc::ENOTDIR),
        });
    }
    Ok(())
}

/// The next open generation of `rel` in `job` on this node: one past the
/// highest generation directory present. The server keeps generation
/// directories until the job is finished, so numbers are never reused.
/// Callers with several ranks agree on the maximum over all ranks.
pub fn next_generation(root: &Path, job: &str, rel: &[u8]) -> Result<u64> {
    layout::validate_component("job name", job)?;
    let file_dir = root.join(job).join(layout::file_dir_name(rel));
    next_generation_in(&file_dir)
}

/// One more than the highest generation in a file directory.
pub(crate) fn next_generation_in(file_dir: &Path) -> Result<u64> {
    let file_dir = file_dir.to_path_buf();
    let mut max = 0;
    match std::fs::read_dir(&file_dir) {
        Ok(entries) => {
            for entry in entries {
                let entry = entry.ctx("list", &file_dir)?;
                if let Some(g) = entry
                    .file_name()
                    .to_str()
                    .and_then(layout::parse_gen_dir_name)
                {
                    max = max.max(g);
                }
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).ctx("list", &file_dir),
    }
    Ok(max + 1)
}

/// Record which path a file directory stands for (once), and refuse a
/// directory that already stands for another path (a hash collision).
/// Without fsync: the record is a convenience (a directory whose epochs
/// were all drained still says what it is); in format 2 every commit
/// record's manifest carries the paths, and readers fall back to them when
/// a crash left the record missing or empty. An unreadable record is
/// written again.
pub(super) fn record_path(file_dir: &Path, ident: &FileIdent, rank: u32) -> Result<()> {
    let path_file = file_dir.join(layout::PATH_FILE);
    let existing = match std::fs::read(&path_file) {
        Ok(bytes) => PathRecord::decode(&bytes, &path_file).ok(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).ctx("read", &path_file),
    };
    match existing {
        Some(existing) => {
            if existing.rel != ident.rel {
                return Err(LogError::Inconsistent {
                    path: path_file,
                    what: format!(
                        "directory stands for {:?}, not {:?} (hash collision)",
                        String::from_utf8_lossy(&existing.rel),
                        String::from_utf8_lossy(&ident.rel)
                    ),
                });
            }
            Ok(())
        }
        None => record_path_new(file_dir, ident, rank),
    }
}

/// [`record_path`] for a file directory this process has just made: there
/// is no record to read.
pub(super) fn record_path_new(file_dir: &Path, ident: &FileIdent, rank: u32) -> Result<()> {
    let record = PathRecord {
        path: ident.path.clone(),
        rel: ident.rel.clone(),
    };
    // Ranks on one node may race here; each uses its own temporary name
    // and renames the same content into place.
    let tmp = file_dir.join(format!(
        "{}.tmp.{}.{}",
        layout::PATH_FILE,
        rank,
        std::process::id()
    ));
    durable::write_renamed(&file_dir.join(layout::PATH_FILE), &tmp, &record.encode())
}
