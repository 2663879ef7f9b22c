//! Backpressure (docs/streams.md): a producer's quota of the bytes of its
//! stream that this node holds and the drain has not taken yet. Local data
//! is never deleted before it is remote, so when the drain falls behind (a
//! slow or unreachable remote) the producers must slow down instead of
//! filling the node's disk.
//!
//! The count is every producer segment's bytes past what the cuts took
//! (the cut log, read incrementally: only what was appended since the last
//! look). It is taken again after each write of a batch (a flush, or a
//! spill of 8 MiB), so a check costs a directory listing and a `stat` per
//! segment, next to a flush's `fdatasync`. Events pending in memory are not
//! counted: a producer holds at most 8 MiB of them, and waiting could not
//! drain them.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::error::{IoContext, Result, StreamError};
use crate::format::{self, Base, Cut};
use crate::layout;

/// A quota: the undrained bytes past which `append` waits, and how long
/// (zero: it fails at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    pub bytes: u64,
    pub wait: Duration,
}

/// How often a waiting append looks again (the server drains every 100 ms).
const POLL: Duration = Duration::from_millis(10);

pub(crate) struct Tracker {
    pub quota: Quota,
    stream: String,
    dir: PathBuf,
    /// The cut log's bytes folded into `taken` so far, and its inode: the
    /// drain replaces the log by a base record now and then (local
    /// retention), after which it is read again from its start.
    cuts_pos: u64,
    cuts_ino: u64,
    /// Per producer, where the last cut's range of its segment ended.
    taken: HashMap<u64, u64>,
    /// The undrained bytes at the last look.
    undrained: u64,
    /// A batch was written since: look again before the next append.
    pub stale: bool,
}

impl Tracker {
    pub fn new(quota: Quota, stream: &str, dir: PathBuf) -> Tracker {
        Tracker {
            quota,
            stream: stream.into(),
            dir,
            cuts_pos: 0,
            cuts_ino: 0,
            taken: HashMap::new(),
            undrained: 0,
            stale: true,
        }
    }

    /// Count again.
    pub fn look(&mut self) -> Result<u64> {
        self.stale = false;
        self.fold_cuts()?;
        let header = 52 + self.stream.len() as u64;
        let mut total = 0;
        for (name, path) in layout::entries(&self.dir)? {
            let Some(id) = layout::parse_segment_name(&name) else {
                continue;
            };
            let len = match std::fs::metadata(&path) {
                Ok(m) => m.len(),
                // A segment removed since the listing holds nothing undrained.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e).ctx("stat", &path),
            };
            let from = self.taken.get(&id).copied().unwrap_or(header);
            total += len.saturating_sub(from);
        }
        self.undrained = total;
        Ok(total)
    }

    /// Before an append: wait while the stream is over its quota, up to
    /// the quota's wait, then fail naming the stream and the numbers.
    pub fn admit(&mut self) -> Result<()> {
        if self.stale {
            self.look()?;
        }
        if self.undrained <= self.quota.bytes {
            return Ok(());
        }
        let start = Instant::now();
        loop {
            if self.look()? <= self.quota.bytes {
                return Ok(());
            }
            let waited = start.elapsed();
            if waited >= self.quota.wait {
                return Err(StreamError::QuotaFull {
                    stream: self.stream.clone(),
                    undrained: self.undrained,
                    quota: self.quota.bytes,
                    waited: if self.quota.wait.is_zero() {
                        "failing at once, as asked".into()
                    } else {
                        format!(
                            "waited {} ms for the drain: is it running, and can it reach the remote?",
                            waited.as_millis()
                        )
                    },
                });
            }
            std::thread::sleep(POLL.min(self.quota.wait - waited));
        }
    }

    /// Fold the cut records appended since the last look. A record not
    /// whole yet, or that does not check, stops the fold: it is looked at
    /// again next time (the drain reports damage, not the producer).
    fn fold_cuts(&mut self) -> Result<()> {
        let path = self.dir.join(layout::CUTS);
        let f = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e).ctx("open", &path),
        };
        let meta = f.metadata().ctx("stat", &path)?;
        let len = meta.len();
        if meta.ino() != self.cuts_ino {
            self.cuts_ino = meta.ino();
            self.cuts_pos = 0;
            self.taken.clear();
        }
        if len <= self.cuts_pos {
            return Ok(());
        }
        let mut b = vec![0u8; (len - self.cuts_pos) as usize];
        f.read_exact_at(&mut b, self.cuts_pos).ctx("read", &path)?;
        let mut pos = 0usize;
        if self.cuts_pos == 0 && b.starts_with(format::MAGIC_BASE) {
            let n = format::record_len(&b).unwrap_or(0).min(b.len());
            let Ok(base) = Base::decode(&b[..n], &path, 0) else {
                return Ok(());
            };
            self.taken.extend(base.producers);
            pos = n;
        }
        while let Some(n) = format::record_len(&b[pos..]) {
            if n < 36 || pos + n > b.len() {
                break;
            }
            let Ok(cut) = Cut::decode(&b[pos..pos + n], &path, self.cuts_pos + pos as u64) else {
                break;
            };
            for r in &cut.ranges {
                self.taken.insert(r.producer, r.to);
            }
            pos += n;
        }
        self.cuts_pos += pos as u64;
        Ok(())
    }
}
