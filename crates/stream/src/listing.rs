//! A stream's node-local segments remembered from one drain round to the
//! next (docs/streams.md "Idle streams"), so that a round of a stream
//! whose segments did not change costs a `stat` per segment, not a
//! directory listing plus an open and a read of every segment's header.
//!
//! What can change between two rounds, and what tells:
//! - a flush appends a batch and its commit record to an existing segment:
//!   its length grows (a producer only appends past its last commit; a
//!   failed write is cut back to it). Each known segment is `stat`ed
//!   every round, so no flush is missed, whatever the clocks do;
//! - a new segment (a producer opens the stream, or rolls), or a segment
//!   deleted (local retention): the directory's mtime changes. It is
//!   trusted only once it is [`SETTLED`] older than the listing it vouches
//!   for: a file system stamps with a coarse clock (a kernel tick; a
//!   second on some), so an entry made in the same tick as the last change
//!   before the listing could leave the same mtime. Until then, and when a
//!   segment's header was still being written (skipped by the listing),
//!   every round lists the directory again;
//! - and at least every [`RELIST_EVERY`] a listing is made anyway, so that
//!   a clock stepped back (or a file server's clock, behind ours) can only
//!   delay a new segment, never hide it.
//!
//! Headers never change once written (segments are created under new
//! names and never replaced), so a known segment's header is never read
//! again.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use crate::error::{IoContext, Result};
use crate::local::{self, LocalSeg};

/// How much older than a listing the directory's mtime must be before it
/// stands for that listing (2 s: coarse kernel ticks, and file systems
/// with whole-second times).
pub const SETTLED: Duration = Duration::from_secs(2);

/// The longest a listing is kept without listing the directory again.
pub const RELIST_EVERY: Duration = Duration::from_secs(10);

/// A stream directory's segments, and what says a new listing would find
/// the same ones.
pub struct Listing {
    pub segs: BTreeMap<u64, LocalSeg>,
    /// Their partition count (`None`: no segment with a header yet).
    pub parts: Option<u32>,
    /// The directory's mtime before the listing, if it can vouch for it:
    /// settled, and no segment was skipped.
    settled: Option<SystemTime>,
    listed_at: Instant,
}

impl Listing {
    /// List the directory `dir` of `stream` now.
    pub fn read(dir: &Path, stream: &str) -> Result<Listing> {
        // Before the listing: an entry made during it changes the mtime
        // from this one, and the next refresh lists again.
        let before = mtime(dir)?;
        let now = SystemTime::now();
        let listed_at = Instant::now();
        let (segs, parts, skipped) = local::list_segments(dir, stream)?;
        let old_enough = now.duration_since(before).is_ok_and(|age| age >= SETTLED);
        Ok(Listing {
            segs,
            parts,
            settled: (old_enough && !skipped).then_some(before),
            listed_at,
        })
    }

    /// Make the listing what [`Listing::read`] would give now: each
    /// segment's length `stat`ed, and the directory listed again unless
    /// its settled mtime says no segment came or went.
    pub fn refresh(&mut self, dir: &Path, stream: &str) -> Result<()> {
        if let Some(m) = self.settled {
            if self.listed_at.elapsed() < RELIST_EVERY && mtime(dir)? == m {
                for seg in self.segs.values_mut() {
                    match std::fs::metadata(&seg.path) {
                        Ok(md) => seg.len = md.len(),
                        // Deleted since the mtime was read.
                        Err(e) if e.kind() == ErrorKind::NotFound => {
                            return self.relist(dir, stream)
                        }
                        Err(e) => return Err(e).ctx("stat", &seg.path),
                    }
                }
                return Ok(());
            }
        }
        self.relist(dir, stream)
    }

    fn relist(&mut self, dir: &Path, stream: &str) -> Result<()> {
        *self = Listing::read(dir, stream)?;
        Ok(())
    }

    /// Whether the directory's mtime vouches for the listing (the next
    /// refresh `stat`s the segments only).
    pub fn settled(&self) -> bool {
        self.settled.is_some()
    }
}

fn mtime(dir: &Path) -> Result<SystemTime> {
    std::fs::metadata(dir)
        .and_then(|m| m.modified())
        .ctx("stat", dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout;
    use crate::{Partitioner, Producer};

    /// Set a directory's mtime `ago` in the past (as if its last change
    /// were that old).
    fn age(dir: &Path, ago: Duration) {
        let t = SystemTime::now() - ago;
        let f = std::fs::File::open(dir).unwrap();
        f.set_modified(t).unwrap();
    }

    fn lens(l: &Listing) -> Vec<u64> {
        l.segs.values().map(|s| s.len).collect()
    }

    /// A flush to a known segment is seen by its length, a new segment
    /// by the directory's mtime; a settled listing does not list the
    /// directory again (a file that would make a listing fail goes
    /// unseen while the mtime is unchanged), and one not settled does.
    #[test]
    fn flushes_and_new_segments_are_seen_and_a_settled_listing_is_not_redone() {
        let t = tempfile::tempdir().unwrap();
        let local = t.path().join("l");
        let (mut p, dir) = crate::local::tests::one_flushed(&local);
        // Just made: not settled.
        let mut l = Listing::read(&dir, "s").unwrap();
        assert!(!l.settled());
        age(&dir, Duration::from_secs(60));
        l.refresh(&dir, "s").unwrap();
        assert!(l.settled());
        let first = lens(&l);

        // A flush: the length grows, with no directory change.
        p.append(None, b"two", None).unwrap();
        p.flush().unwrap();
        l.refresh(&dir, "s").unwrap();
        assert!(l.settled());
        assert_eq!(l.segs.len(), 1);
        assert!(lens(&l)[0] > first[0]);

        // Not listed again while settled: a damaged segment put there
        // with the directory's mtime restored is not read...
        let m = std::fs::metadata(&dir).unwrap().modified().unwrap();
        let bad = dir.join(layout::segment_name(0xdead));
        std::fs::write(&bad, vec![0x55u8; 200]).unwrap();
        std::fs::File::open(&dir).unwrap().set_modified(m).unwrap();
        l.refresh(&dir, "s").unwrap();
        assert_eq!(l.segs.len(), 1);
        // ...and a real new entry changes the mtime: listed, and refused.
        std::fs::write(dir.join("other"), b"").unwrap();
        assert!(l.refresh(&dir, "s").is_err());
        std::fs::remove_file(&bad).unwrap();
        // A new producer's segment.
        let q = Producer::open(&local, "s", 2, Partitioner::RoundRobin).unwrap();
        l.refresh(&dir, "s").unwrap();
        assert_eq!(l.segs.len(), 2);
        assert!(l.segs.contains_key(&q.id()));
        // Made just now: each refresh lists again until it settles.
        assert!(!l.settled());
    }

    /// A segment whose header is being written is skipped, and the
    /// listing is not settled until it has its header.
    #[test]
    fn a_segment_without_its_header_keeps_the_listing_unsettled() {
        let t = tempfile::tempdir().unwrap();
        let local = t.path().join("l");
        let _p = Producer::open(&local, "s", 2, Partitioner::RoundRobin).unwrap();
        let dir = layout::stream_dir(&local, "s");
        std::fs::write(dir.join(layout::segment_name(0xbeef)), b"PLST").unwrap();
        age(&dir, Duration::from_secs(60));
        let l = Listing::read(&dir, "s").unwrap();
        assert_eq!(l.segs.len(), 1);
        assert!(!l.settled());
    }
}
