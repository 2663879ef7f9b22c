//! Which remote a file drains to: `--remote URL` / `PARALOG_REMOTE`, or by
//! default the prefix itself (each file goes back to the path the program
//! wrote, derived from its path record).

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use anyhow::{anyhow, bail};
use paralog_backend::Backend;
use paralog_log::FileInventory;

#[derive(clap::Args, Debug)]
pub struct RemoteArg {
    /// Where to drain: file:///path or /path [env: PARALOG_REMOTE; default:
    /// the prefix itself, i.e. each file goes to the path the program wrote]
    #[arg(long, value_name = "URL")]
    remote: Option<String>,
}

#[derive(Debug, Clone)]
pub enum Remote {
    /// Each file drains to the path the program opened.
    Prefix,
    Url(String),
}

impl RemoteArg {
    pub fn resolve(&self) -> anyhow::Result<Remote> {
        let url = self
            .remote
            .clone()
            .or_else(|| std::env::var("PARALOG_REMOTE").ok())
            .filter(|s| !s.is_empty());
        match url {
            None => Ok(Remote::Prefix),
            Some(u) => {
                paralog_backend::open(&u).map_err(|e| anyhow!("{e}"))?;
                Ok(Remote::Url(u))
            }
        }
    }
}

impl Remote {
    pub fn backend_for(&self, file: &FileInventory) -> anyhow::Result<Box<dyn Backend>> {
        let url = match self {
            Remote::Url(u) => u.clone(),
            Remote::Prefix => {
                let r = file
                    .record
                    .as_ref()
                    .ok_or_else(|| anyhow!("{}: no path record", file.dir.display()))?;
                let path = Path::new(std::ffi::OsStr::from_bytes(&r.path));
                let rel = Path::new(std::ffi::OsStr::from_bytes(&r.rel));
                let mut root = path.to_path_buf();
                for _ in rel.components() {
                    if !root.pop() {
                        bail!(
                            "{}: path {} does not end in {}",
                            file.dir.display(),
                            path.display(),
                            rel.display()
                        );
                    }
                }
                if root.join(rel) != path {
                    bail!(
                        "{}: path {} does not end in {}",
                        file.dir.display(),
                        path.display(),
                        rel.display()
                    );
                }
                root.to_string_lossy().into_owned()
            }
        };
        paralog_backend::open(&url).map_err(|e| anyhow!("{e}"))
    }
}
