//! Which remote a file drains to: a URL (`file:///path` or `/path`,
//! `objstore:///path`, `s3://bucket/prefix`), opened once and shared by all
//! files; or by default the prefix itself: each file goes back to the path
//! the program wrote, derived from its path record (application path minus
//! relative path).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use paralog_backend::Backend;
use paralog_log::FileInventory;

#[derive(Debug, Clone)]
pub enum Remote {
    Prefix,
    Url(String, Arc<dyn Backend>),
}

/// Open the backend a URL names.
pub fn open(url: &str) -> Result<Arc<dyn Backend>, String> {
    if url.starts_with("s3://") {
        return paralog_s3::S3Backend::open(url)
            .map(|b| Arc::new(b) as Arc<dyn Backend>)
            .map_err(|e| e.to_string());
    }
    paralog_backend::open(url)
        .map(Arc::from)
        .map_err(|e| e.to_string())
}

impl Remote {
    /// From an optional URL (empty: the prefix); opens it.
    pub fn parse(url: Option<&str>) -> Result<Remote, String> {
        match url.filter(|u| !u.is_empty()) {
            None => Ok(Remote::Prefix),
            Some(u) => Ok(Remote::Url(u.to_owned(), open(u)?)),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Remote::Prefix => "the prefix itself".into(),
            Remote::Url(u, _) => u.clone(),
        }
    }

    pub fn backend_for(&self, file: &FileInventory) -> Result<Arc<dyn Backend>, String> {
        match (self, &file.record) {
            (Remote::Url(_, b), _) => Ok(b.clone()),
            (Remote::Prefix, Some(r)) => self.backend_for_record(&r.path, &r.rel),
            (Remote::Prefix, None) => Err(format!("{}: no path record", file.dir.display())),
        }
    }

    /// The backend of a file known by its path record (the program's path
    /// and the path relative to the prefix).
    pub fn backend_for_record(&self, path: &[u8], rel: &[u8]) -> Result<Arc<dyn Backend>, String> {
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
                    return Err(format!(
                        "path {} does not end in {}",
                        path.display(),
                        rel.display()
                    ));
                }
                open(&root.to_string_lossy())
            }
        }
    }
}
