//! Which remote a file drains to: a URL (`file:///path` or `/path`,
//! `objstore:///path`, `s3://bucket/prefix`, parsed by
//! `paralog_backend::url`), opened once and shared by all files; or by
//! default the prefix itself: each file goes back to the path the program
//! wrote, derived from its path record (application path minus relative
//! path).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use paralog_backend::objstore::ObjStore;
use paralog_backend::posix::PosixBackend;
use paralog_backend::{Backend, BackendError, ErrorKind, RemoteUrl};
use paralog_log::FileInventory;

#[derive(Debug, Clone)]
pub enum Remote {
    Prefix,
    Url(RemoteUrl, Arc<dyn Backend>),
}

/// Open the backend a parsed URL names: the one place where each kind of
/// remote is constructed (the server, `recover`, `get`, `doctor`).
pub fn open(url: &RemoteUrl) -> Result<Arc<dyn Backend>, BackendError> {
    if matches!(url, RemoteUrl::ObjStore(o) if !o.sync) {
        // A drain deletes the node-local log once the remote holds the
        // bytes: a remote that may lose them in a crash would lose data.
        return Err(BackendError {
            kind: ErrorKind::Permanent,
            target: url.to_string(),
            op: "open the remote",
            message: "sync=0 is for the object API's direct puts only: a drain deletes the node-local log once the remote holds the bytes, so its remote must be durable (remove sync=0)".into(),
        });
    }
    Ok(match url {
        RemoteUrl::Posix(root) => Arc::new(PosixBackend::new(root)?),
        RemoteUrl::ObjStore(o) => Arc::new(ObjStore::new(o)),
        RemoteUrl::S3(s) => Arc::new(paralog_s3::S3Backend::open(s)?),
    })
}

impl Remote {
    /// From an optional URL (`None`: the prefix); opens it.
    pub fn new(url: Option<RemoteUrl>) -> Result<Remote, BackendError> {
        match url {
            None => Ok(Remote::Prefix),
            Some(u) => {
                let b = open(&u)?;
                Ok(Remote::Url(u, b))
            }
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Remote::Prefix => "the prefix itself".into(),
            Remote::Url(u, _) => u.to_string(),
        }
    }

    pub fn backend_for(&self, file: &FileInventory) -> Result<Arc<dyn Backend>, BackendError> {
        match (self, &file.record) {
            (Remote::Url(_, b), _) => Ok(b.clone()),
            (Remote::Prefix, Some(r)) => self.backend_for_record(&r.path, &r.rel),
            (Remote::Prefix, None) => Err(BackendError {
                kind: ErrorKind::Permanent,
                target: file.dir.display().to_string(),
                op: "find the remote",
                message: "no path record".into(),
            }),
        }
    }

    /// The backend of a file known by its path record (the program's path
    /// and the path relative to the prefix).
    pub fn backend_for_record(
        &self,
        path: &[u8],
        rel: &[u8],
    ) -> Result<Arc<dyn Backend>, BackendError> {
        match self {
            Remote::Url(_, b) => Ok(b.clone()),
            Remote::Prefix => {
                let path = Path::new(OsStr::from_bytes(path));
                let rel = Path::new(OsStr::from_bytes(rel));
                let mut root = path.to_path_buf();
                for _ in rel.components() {
                    root.pop();
                }
                if root.join(rel) != path {
                    return Err(BackendError {
                        kind: ErrorKind::Permanent,
                        target: path.display().to_string(),
                        op: "find the remote",
                        message: format!("the path does not end in {}", rel.display()),
                    });
                }
                Ok(Arc::new(PosixBackend::new(&root)?))
            }
        }
    }
}
