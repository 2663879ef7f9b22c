//! Backpressure (docs/streams.md): a producer's quota of the bytes of its
//! stream that this node holds and the drain has not taken yet. Local data
//! is never deleted before it is remote, so when the drain falls behind (a
//! slow or unreachable remote) the producers must slow down instead of
//! filling the node's disk.
//!
//! The count is every producer segment's bytes past what the cuts took
//! (the cut log, read incrementally by `follow.rs`). It is taken again after each write of a batch (a flush, or a
//! spill of 8 MiB), so a check costs a directory listing and a `stat` per
//! segment, next to a flush's `fdatasync`. Events pending in memory are not
//! counted: a producer holds at most 8 MiB of them, and waiting could not
//! drain them.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::error::{IoContext, Result, StreamError};
use crate::follow::CutFollower;
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
    /// What the drain's cuts took.
    cuts: CutFollower,
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
            cuts: CutFollower::new(dir.clone()),
            dir,
            undrained: 0,
            stale: true,
        }
    }

    /// Count again.
    pub fn look(&mut self) -> Result<u64> {
        self.stale = false;
        self.cuts.fold()?;
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
            let from = self.cuts.taken(id).unwrap_or(header);
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
}
