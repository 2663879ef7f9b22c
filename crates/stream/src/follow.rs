//! A producer's view of the drain's progress: the cut log read
//! incrementally (only what was appended since the last look), with no
//! lock, for the quota (`quota.rs`) and the segment roll (`producer.rs`).
//! The drain replaces the log by a base record now and then (local
//! retention, `release.rs`); a new inode, or a shorter file, is read again
//! from its start.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::PathBuf;

use crate::error::{IoContext, Result};
use crate::format::{self, Base, Cut};
use crate::layout;

pub(crate) struct CutFollower {
    path: PathBuf,
    /// The log's bytes folded into `taken` so far, and its inode.
    pos: u64,
    ino: u64,
    /// Per producer, where the last cut's range of its segment ended.
    taken: HashMap<u64, u64>,
}

impl CutFollower {
    /// The follower of the cut log of the stream directory `dir`.
    pub fn new(dir: PathBuf) -> CutFollower {
        CutFollower {
            path: dir.join(layout::CUTS),
            pos: 0,
            ino: 0,
            taken: HashMap::new(),
        }
    }

    /// Where the cuts folded so far took producer `id`'s segment to.
    pub fn taken(&self, id: u64) -> Option<u64> {
        self.taken.get(&id).copied()
    }

    /// Fold the records appended since the last look. A record not whole
    /// yet, or that does not check, stops the fold: it is looked at again
    /// next time (the drain reports damage, not the producer).
    pub fn fold(&mut self) -> Result<()> {
        let path = &self.path;
        let f = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e).ctx("open", path),
        };
        let meta = f.metadata().ctx("stat", path)?;
        let len = meta.len();
        if meta.ino() != self.ino || len < self.pos {
            self.ino = meta.ino();
            self.pos = 0;
            self.taken.clear();
        }
        if len <= self.pos {
            return Ok(());
        }
        let mut b = vec![0u8; (len - self.pos) as usize];
        f.read_exact_at(&mut b, self.pos).ctx("read", path)?;
        let mut pos = 0usize;
        if self.pos == 0 && b.starts_with(format::MAGIC_BASE) {
            let n = format::record_len(&b).unwrap_or(0).min(b.len());
            let Ok(base) = Base::decode(&b[..n], path, 0) else {
                return Ok(());
            };
            self.taken.extend(base.producers);
            pos = n;
        }
        while let Some(n) = format::record_len(&b[pos..]) {
            if n < 36 || pos + n > b.len() {
                break;
            }
            let Ok(cut) = Cut::decode(&b[pos..pos + n], path, self.pos + pos as u64) else {
                break;
            };
            for r in &cut.ranges {
                self.taken.insert(r.producer, r.to);
            }
            pos += n;
        }
        self.pos += pos as u64;
        Ok(())
    }
}
