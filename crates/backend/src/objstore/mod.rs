//! The versioned object layout (`objstore:///root?dirs=N&keep=K`) on any
//! POSIX file system: every committed epoch of a file becomes a complete,
//! immutable version, published atomically. Format: docs/objstore.md.
//!
//! - Chunks: immutable objects named by a random UUID, placed by a hash of
//!   the UUID in one of N storage directories (`data/<k>/<uuid>`). A chunk is
//!   a sequence of blocks; each block has a CRC-32C recorded in the version
//!   records that use it.
//! - Versions: `meta/<name>/v<0000000001>`, one record per version listing
//!   the pieces of the file (file range → block of a chunk), its size and
//!   the epoch it came from; written to a temporary name, fsynced, renamed,
//!   directory fsynced. A reader takes the highest version present and sees
//!   it whole, or the previous one: never a partial version.
//! - Chunked PUT: any number of writers add chunks ([`ObjStore::writer`]);
//!   one [`ObjStore::publish`] makes them a version.
//! - Retention: the last K versions are kept; chunks no kept version uses
//!   are deleted after a publish.

mod data;
mod names;
mod publish;
mod record;
mod sink;
#[cfg(test)]
mod tests;

pub use data::{ChunkWriter, PieceMap};
pub use record::{Piece, Version};

use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::url::ObjStoreUrl;
use crate::{BackendError, ErrorKind};

/// How old an unreferenced chunk must be before `recover --gc` removes it:
/// a younger one may belong to a put that has not published yet.
pub const ORPHAN_GRACE: std::time::Duration = std::time::Duration::from_secs(3600);

/// The file in a name's metadata directory that locks its version numbers
/// (docs/objstore.md, "Publishing a version"): whoever removes an object
/// whole removes it too.
pub const NUMBERS_LOCK: &str = ".lock";

#[derive(Debug, thiserror::Error)]
pub enum ObjError {
    #[error("{path}: {op}: {error}")]
    Io {
        path: PathBuf,
        op: &'static str,
        error: io::Error,
    },
    #[error("{path}: damaged at byte {offset}: {what}")]
    Damaged {
        path: PathBuf,
        offset: u64,
        what: String,
    },
    #[error("{what}")]
    NotFound { what: String },
    #[error("{0}")]
    Invalid(String),
}

fn io_err<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(io::Error) -> ObjError + 'a {
    move |error| ObjError::Io {
        path: path.to_path_buf(),
        op,
        error,
    }
}

impl From<ObjError> for BackendError {
    fn from(e: ObjError) -> BackendError {
        let kind = match &e {
            ObjError::Io { .. } => ErrorKind::Retryable,
            _ => ErrorKind::Permanent,
        };
        BackendError {
            kind,
            target: "objstore".into(),
            op: "object layout",
            message: e.to_string(),
        }
    }
}

/// `objstore:///root?dirs=N&keep=K`.
#[derive(Debug, Clone)]
pub struct ObjStore {
    root: PathBuf,
    dirs: u32,
    keep: u64,
    /// `sync=0`: no fsync anywhere (see [`ObjStoreUrl::sync`]).
    sync: bool,
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

fn hex(id: &[u8; 16]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

fn sync_dir(dir: &Path) -> Result<(), ObjError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir, "fsync directory"))
}

fn version_name(n: u64) -> String {
    format!("v{n:010}")
}

impl ObjStore {
    /// The store a parsed `objstore://` URL names (nothing is touched:
    /// `check` says whether its root exists).
    pub fn new(url: &ObjStoreUrl) -> ObjStore {
        ObjStore {
            root: url.root.clone(),
            dirs: url.dirs,
            keep: url.keep,
            sync: url.sync,
        }
    }

    /// Whether what this store publishes is made durable (`sync=1`, the
    /// default) or left to the page cache (`sync=0`).
    pub fn durable(&self) -> bool {
        self.sync
    }

    /// Make a directory's names durable, unless the store is `sync=0`.
    pub fn sync_dir(&self, dir: &Path) -> Result<(), ObjError> {
        if self.sync {
            sync_dir(dir)
        } else {
            Ok(())
        }
    }

    /// Split `objstore:///root/NAME` (parsed as if NAME were part of the
    /// root) into the store whose `meta/NAME` exists and the object's name.
    pub fn locate(url: &ObjStoreUrl) -> Result<(ObjStore, Vec<u8>), ObjError> {
        let full = url.root.as_path();
        for root in full.ancestors().skip(1) {
            if root.join("meta").is_dir() {
                let name = full.strip_prefix(root).expect("an ancestor");
                if name.as_os_str().is_empty() || !root.join("meta").join(name).is_dir() {
                    break;
                }
                let store = ObjStore::new(&url.at(root));
                return Ok((store, name.as_os_str().as_bytes().to_vec()));
            }
        }
        Err(ObjError::NotFound {
            what: format!("objstore://{}: no object store holds an object of this name (no meta/NAME under any parent directory)", full.display()),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn check_root(&self) -> Result<(), ObjError> {
        if self.root.is_dir() {
            Ok(())
        } else {
            Err(ObjError::Io {
                path: self.root.clone(),
                op: "open object store",
                error: io::Error::new(
                    io::ErrorKind::NotFound,
                    "the object store directory does not exist (not mounted?)",
                ),
            })
        }
    }
}
