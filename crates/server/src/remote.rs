//! Which remote a file drains to: a URL (`file:///path`, `/path`), or by
//! default the prefix itself: each file goes back to the path the program
//! wrote, derived from its path record (application path minus relative path).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use paralog_backend::Backend;
use paralog_log::FileInventory;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remote {
    Prefix,
    Url(String),
}

impl Remote {
    /// From an optional URL (empty: the prefix); checks that it can be opened.
    pub fn parse(url: Option<&str>) -> Result<Remote, String> {
        match url.filter(|u| !u.is_empty()) {
            None => Ok(Remote::Prefix),
            Some(u) => {
                paralog_backend::open(u).map_err(|e| e.to_string())?;
                Ok(Remote::Url(u.to_owned()))
            }
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Remote::Prefix => "the prefix itself".into(),
            Remote::Url(u) => u.clone(),
        }
    }

    pub fn backend_for(&self, file: &FileInventory) -> Result<Box<dyn Backend>, String> {
        let url = match self {
            Remote::Url(u) => u.clone(),
            Remote::Prefix => {
                let r = file
                    .record
                    .as_ref()
                    .ok_or_else(|| format!("{}: no path record", file.dir.display()))?;
                let path = Path::new(OsStr::from_bytes(&r.path));
                let rel = Path::new(OsStr::from_bytes(&r.rel));
                let mut root = path.to_path_buf();
                for _ in rel.components() {
                    root.pop();
                }
                if root.join(rel) != path {
                    return Err(format!(
                        "{}: path {} does not end in {}",
                        file.dir.display(),
                        path.display(),
                        rel.display()
                    ));
                }
                root.to_string_lossy().into_owned()
            }
        };
        paralog_backend::open(&url).map_err(|e| e.to_string())
    }
}
