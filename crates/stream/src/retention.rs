//! Retention on the remote (`paralog stream trim`, docs/streams.md): whole
//! segments of each partition deleted, oldest first, by age or by the
//! bytes to keep. The segment the watermark names (the one rounds append
//! to) and anything after it are never touched, so a trim and a drain may
//! run at the same time, and what is left of a partition is always a run
//! of segments ending at its watermark. Readers refuse an offset below a
//! partition's first segment (`StreamError::Trimmed`).

use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::error::{IoContext, Result};
use crate::layout;
use crate::reader::RemoteStream;

/// What to keep of each partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Segments last written within this age (by the file's mtime: the
    /// round that last appended to it).
    Newer(Duration),
    /// The newest segments holding at least this many bytes.
    Bytes(u64),
}

/// What a trim did to one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trimmed {
    pub partition: u32,
    /// The first offsets of the segments deleted.
    pub segments: Vec<u64>,
    pub bytes: u64,
    /// The partition's first offset now.
    pub first: u64,
}

/// Trim every partition of a stream on a POSIX remote.
pub fn trim(remote: &Path, stream: &str, keep: Keep) -> Result<Vec<Trimmed>> {
    let s = RemoteStream::open(remote, stream)?;
    let wm = s.watermark()?;
    let now = SystemTime::now();
    let mut out = Vec::new();
    for (p, mark) in wm.parts.iter().enumerate() {
        let p = p as u32;
        let firsts = layout::part_segments(&s.dir, p)?;
        // (first offset, bytes, last written) of the published segments.
        let mut segs = Vec::new();
        for &f in firsts
            .iter()
            .filter(|&&f| mark.seg_end > 0 && f <= mark.seg_first)
        {
            let path = layout::part_segment(&s.dir, p, f);
            let m = std::fs::metadata(&path).ctx("stat", &path)?;
            let len = if f == mark.seg_first {
                mark.seg_end
            } else {
                m.len()
            };
            let at = m.modified().ctx("stat", &path)?;
            segs.push((f, len, at));
        }
        let mut left: u64 = segs.iter().map(|s| s.1).sum();
        let mut t = Trimmed {
            partition: p,
            first: segs.first().map_or(0, |s| s.0),
            ..Default::default()
        };
        // Never the last segment: rounds append to it.
        for &(f, len, at) in segs.iter().take(segs.len().saturating_sub(1)) {
            let go = match keep {
                Keep::Newer(age) => now.duration_since(at).is_ok_and(|d| d > age),
                Keep::Bytes(n) => left - len >= n,
            };
            if !go {
                break;
            }
            let path = layout::part_segment(&s.dir, p, f);
            std::fs::remove_file(&path).ctx("delete", &path)?;
            t.segments.push(f);
            t.bytes += len;
            left -= len;
        }
        if let Some(&next) = segs.get(t.segments.len()) {
            t.first = next.0;
        }
        if !t.segments.is_empty() {
            // The deletions survive a crash together with what was kept.
            layout::sync_dir(&layout::part_dir(&s.dir, p))?;
        }
        out.push(t);
    }
    Ok(out)
}
