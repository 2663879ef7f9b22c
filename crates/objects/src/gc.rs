//! Collecting what abandoned chunked puts left: a put begun and never
//! committed nor aborted (its writers crashed, or the program did) keeps
//! its staging directory and its chunk files; none is in any version.

use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::error::{io_err, Result};
use crate::store::Store;
use crate::VersionId;

/// A chunked put not published nor aborted (`paralog obj puts`): what a
/// killed program left, or one still being written.
#[derive(Debug, Clone)]
pub struct PutInProgress {
    pub id: VersionId,
    pub name: String,
    /// Chunks claimed so far (whole, or by at least one part), of `chunks`.
    pub claimed: u64,
    pub chunks: u64,
    /// Writers that finished.
    pub finished: u64,
    /// A commit got as far as its publish (its array record, or an older
    /// binary's `publishing` mark): committing it
    /// again publishes it, or finds it published.
    pub publishing: bool,
    /// The version it was published as, by a commit killed before its
    /// cleanup (looked for only when `publishing`).
    pub published: Option<u64>,
    /// A logged put committed on this node (`logged`), or a share of one
    /// committed on another node (a writer's `s<writer>` record): the
    /// publisher's.
    pub logged: bool,
    /// Its `begin` or `name` is gone: what a commit killed while removing
    /// a published put's directory left (`obj gc` removes it).
    pub half_removed: bool,
    /// Since the put last changed.
    pub idle: Duration,
}

/// The newest modification time of a directory and the files in it: a put
/// in progress touches its directory at every chunk claimed.
fn newest(dir: &Path) -> SystemTime {
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let mut t = mtime(dir).unwrap_or(SystemTime::UNIX_EPOCH);
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            t = t.max(mtime(&e.path()).unwrap_or(SystemTime::UNIX_EPOCH));
        }
    }
    t
}

impl Store {
    /// The chunked puts in progress, by id. A put whose records do not read
    /// (begun a moment ago, or damaged) is an error naming its file.
    pub fn puts(&self) -> Result<Vec<PutInProgress>> {
        let staging = self.root().join("staging");
        let mut ids: Vec<VersionId> = match std::fs::read_dir(&staging) {
            Ok(entries) => entries
                .flatten()
                .filter_map(|e| crate::parse_id(&e.file_name().to_string_lossy()))
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io_err(&staging, "list puts")(e)),
        };
        ids.sort();
        let now = SystemTime::now();
        let mut out = Vec::new();
        for id in ids {
            let dir = self.staging_dir(&id);
            let name = std::fs::read(dir.join("name")).ok();
            let name = String::from_utf8_lossy(name.as_deref().unwrap_or_default()).into_owned();
            let half_removed = name.is_empty() || !dir.join("begin").exists();
            let chunks = match half_removed {
                true => 0,
                false => self.staged(&name, &id, false)?.0.n_chunks(),
            };
            let (mut claimed, mut finished) = (0, 0);
            // Chunks written in parts count once, however many parts.
            let mut in_parts = std::collections::BTreeSet::new();
            for e in std::fs::read_dir(&dir).map_err(io_err(&dir, "list the put"))? {
                let f = e.map_err(io_err(&dir, "list the put"))?.file_name();
                let f = f.to_string_lossy();
                if f.starts_with('c') {
                    claimed += 1;
                } else if let Some(i) = crate::parts::claim_chunk(&f) {
                    in_parts.insert(i);
                } else if f.strip_prefix('w').and_then(crate::parse_id).is_some() {
                    finished += 1;
                }
            }
            let publishing = self.commit_may_have_published(&id);
            let published = if publishing && !half_removed {
                self.published(&name, &id)?
            } else {
                None
            };
            out.push(PutInProgress {
                id,
                name,
                claimed: claimed + in_parts.len() as u64,
                chunks,
                finished,
                publishing,
                published,
                half_removed,
                logged: crate::logged_record::committed(&dir) || crate::share::holds_shares(&dir),
                idle: now.duration_since(newest(&dir)).unwrap_or_default(),
            });
        }
        Ok(out)
    }

    /// Remove the chunked puts (and half-made ones) untouched for longer
    /// than `grace`, with the chunk files they claimed; a put that was
    /// published keeps its chunks (its version uses them). Returns how
    /// many were removed. A put still being written within `grace` is left
    /// alone, so `grace` must exceed the longest pause between two chunks.
    pub fn collect_abandoned(&self, grace: Duration) -> Result<usize> {
        let staging = self.root().join("staging");
        let entries = match std::fs::read_dir(&staging) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(io_err(&staging, "list puts")(e)),
        };
        let now = SystemTime::now();
        let mut removed = 0;
        for e in entries {
            let dir = e.map_err(io_err(&staging, "list puts"))?.path();
            if !dir.is_dir() || now.duration_since(newest(&dir)).unwrap_or_default() <= grace {
                continue;
            }
            // A logged put committed on this node waits for its publisher
            // (a torn commit record is no commit: collected as abandoned),
            // and so does a share committed here for another node's put.
            if crate::logged_record::committed(&dir) || crate::share::holds_shares(&dir) {
                continue;
            }
            let id = dir
                .file_name()
                .and_then(|f| f.to_str())
                .and_then(crate::parse_id);
            let name = std::fs::read(dir.join("name")).ok();
            let name = name.as_deref().and_then(|n| std::str::from_utf8(n).ok());
            let published = match (id, name) {
                (Some(id), Some(name)) => self.published(name, &id)?.is_some(),
                _ => false,
            };
            if !published {
                crate::staging::remove_staged_chunks(self, &dir);
            }
            std::fs::remove_dir_all(&dir).map_err(io_err(&dir, "remove abandoned put"))?;
            removed += 1;
        }
        self.collect_view_temps(grace)?;
        Ok(removed)
    }

    /// Remove views half made by a process that died (`.v<n>.tmp.*` under
    /// `zarr/` and `hdf5/`) and untouched for longer than `grace`.
    fn collect_view_temps(&self, grace: Duration) -> Result<()> {
        let now = SystemTime::now();
        let mut stack = vec![self.root().join("zarr"), self.root().join("hdf5")];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let p = e.path();
                if !p.is_dir() {
                    continue;
                }
                let f = e.file_name().to_string_lossy().into_owned();
                if !(f.starts_with(".v") && f.contains(".tmp.")) {
                    // Versions' views hold chunk directories only: no need
                    // to look inside them.
                    let view = f.len() == 11
                        && f.starts_with('v')
                        && f[1..].bytes().all(|b| b.is_ascii_digit());
                    if !view {
                        stack.push(p);
                    }
                } else if now.duration_since(newest(&p)).unwrap_or_default() > grace {
                    std::fs::remove_dir_all(&p).map_err(io_err(&p, "remove half-made view"))?;
                }
            }
        }
        Ok(())
    }
}
