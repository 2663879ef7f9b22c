//! The POSIX remote's durability steps shared by publishing and removing
//! sets: a file written and fsynced before a name points at it, a
//! directory fsynced after its entries change, set directories created
//! with their parents made durable.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::{AggError, Result};

pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(path)
        .map_err(AggError::io(path, "create"))?;
    f.write_all(bytes).map_err(AggError::io(path, "write"))?;
    // The content must be on disk before the name points at it.
    f.sync_all().map_err(AggError::io(path, "fsync"))
}

pub fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(AggError::io(dir, "fsync directory"))
}

/// Create `dir` and its missing parents below `base` (which must exist),
/// fsyncing each parent that gained an entry: the set directory must
/// survive a crash before the record in it can.
pub fn create_dirs(base: &Path, dir: &Path) -> Result<()> {
    if !base.is_dir() {
        return Err(AggError::Invalid {
            path: base.to_path_buf(),
            what: "the remote directory does not exist".into(),
        });
    }
    let rel = dir.strip_prefix(base).unwrap_or(dir);
    let mut cur = base.to_path_buf();
    for c in rel.components() {
        let parent = cur.clone();
        cur.push(c);
        match std::fs::create_dir(&cur) {
            Ok(()) => sync_dir(&parent)?,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && cur.is_dir() => {}
            Err(e) => return Err(AggError::io(&cur, "create set directory")(e)),
        }
    }
    Ok(())
}
