//! Checkpoint sets on the object layout (`objstore://ROOT`,
//! docs/aggregate.md): the set record and each container are objects of
//! the layout, named as on a POSIX remote (`<set dir>/set.plr`,
//! `<set dir>/c<k>-v<version>-<attempt>.plc`). A container is one chunk
//! (one layout block per set block, so the layout's CRC and the set's
//! cover the same bytes); the record is published through the layout's
//! own publish (a hard link of the next version number: complete or
//! absent, and two publishers both succeed as two versions).
//!
//! This module reads (the capture library links it); writing is in
//! `publish` (feature `writer`).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use paralog_backend::objstore::{ObjError, ObjStore, Version};

use crate::error::{AggError, Result};
use crate::format::{SetRecord, RECORD_NAME};
use crate::stored::{decode_for_set, StoredAs};

/// The object holding `file` of the set `set`.
pub fn object_name(set: &[u8], file: &[u8]) -> Vec<u8> {
    let mut n = set.to_vec();
    n.push(b'/');
    n.extend_from_slice(file);
    n
}

/// How errors name an object of the layout: `objstore://ROOT/NAME`.
pub fn display_path(store: &ObjStore, name: &[u8]) -> PathBuf {
    let mut s = std::ffi::OsString::from("objstore://");
    s.push(store.root().as_os_str());
    s.push("/");
    s.push(OsStr::from_bytes(name));
    PathBuf::from(s)
}

/// The layout's errors as the set's: damage keeps its file and offset,
/// a missing object is NotFound (a newer version replaced it).
pub fn obj_err(path: &Path) -> impl FnOnce(ObjError) -> AggError + '_ {
    move |e| match e {
        ObjError::Io { path, op, error } => AggError::Io { path, op, error },
        ObjError::Damaged { path, offset, what } => AggError::Corrupt { path, offset, what },
        ObjError::NotFound { what } => AggError::Io {
            path: path.to_path_buf(),
            op: "read object",
            error: std::io::Error::new(std::io::ErrorKind::NotFound, what),
        },
        ObjError::Invalid(what) => AggError::Invalid {
            path: path.to_path_buf(),
            what,
        },
    }
}

/// The latest version of an object, `None` when it has none or the latest
/// deleted it.
pub fn latest(store: &ObjStore, name: &[u8]) -> Result<Option<Version>> {
    let v = store
        .version(name, None)
        .map_err(obj_err(&display_path(store, name)))?;
    Ok(v.filter(|v| !v.deleted))
}

/// The whole content of a version, every block verified.
fn read_all(store: &ObjStore, v: &Version, path: &Path) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(v.size as usize);
    store.read_version(v, &mut out).map_err(obj_err(path))?;
    Ok(out)
}

/// The published record of the set `set` and its version number in the
/// layout; `None` when there is none.
pub fn read_record(store: &ObjStore, set: &[u8]) -> Result<Option<(SetRecord, u64)>> {
    let name = object_name(set, RECORD_NAME.as_bytes());
    let path = display_path(store, &name);
    let Some(v) = latest(store, &name)? else {
        return Ok(None);
    };
    let bytes = read_all(store, &v, &path)?;
    let r = decode_for_set(&bytes, &path, StoredAs::Set(set))?;
    Ok(Some((r, v.number)))
}

/// Every record version of the set that is kept (oldest first), decoded:
/// what `collect_orphans` must not take containers from.
pub fn kept_records(store: &ObjStore, set: &[u8]) -> Result<Vec<SetRecord>> {
    let name = object_name(set, RECORD_NAME.as_bytes());
    let path = display_path(store, &name);
    let mut out = Vec::new();
    for n in store.versions(&name).map_err(obj_err(&path))? {
        let v = match store.version(&name, Some(n)) {
            Ok(Some(v)) => v,
            Ok(None) => continue,
            // Removed by retention since the listing.
            Err(ObjError::NotFound { .. }) => continue,
            Err(e) => return Err(obj_err(&path)(e)),
        };
        if !v.deleted {
            let bytes = read_all(store, &v, &path)?;
            out.push(decode_for_set(&bytes, &path, StoredAs::Set(set))?);
        }
    }
    Ok(out)
}

/// Whether `meta/<dir>` holds a set record object.
fn has_record(store: &ObjStore, dir: &[u8]) -> bool {
    let name = object_name(dir, RECORD_NAME.as_bytes());
    store.versions(&name).is_ok_and(|v| !v.is_empty())
}

/// The set a path of the layout belongs to: the nearest ancestor of `rel`
/// holding a set record object. The set directory's and the member's
/// relative paths.
pub fn find_set(store: &ObjStore, rel: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut cut = rel.len();
    while let Some(i) = rel[..cut].iter().rposition(|&b| b == b'/') {
        if has_record(store, &rel[..i]) {
            return Some((rel[..i].to_vec(), rel[i + 1..].to_vec()));
        }
        cut = i;
    }
    None
}

/// Every set of the layout, by set directory, with its record or why it
/// cannot be read (sets do not nest).
pub fn list_sets(store: &ObjStore) -> Result<Vec<(PathBuf, Result<SetRecord>)>> {
    let meta = store.root().join("meta");
    if !store.root().is_dir() {
        return Err(AggError::Io {
            path: store.root().to_path_buf(),
            op: "list the object store",
            error: std::io::Error::new(std::io::ErrorKind::NotFound, "no such directory"),
        });
    }
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let b = rel.as_os_str().as_bytes();
        if !b.is_empty() && has_record(store, b) {
            match read_record(store, b) {
                // Removed: its program deleted every member (crate::remove).
                Ok(None) => {}
                r => out.push((rel.clone(), r.map(|r| r.expect("a record").0))),
            }
            continue;
        }
        let Ok(entries) = std::fs::read_dir(meta.join(&rel)) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(rel.join(e.file_name()));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}
