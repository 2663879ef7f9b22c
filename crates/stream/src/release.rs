//! Local retention (docs/streams.md "Local retention"): once every cut of
//! a stream's log is published on the remote, the segments of producers
//! that are gone and whose every committed byte a cut took hold nothing
//! that is not remote. They are deleted, and the cut log is rewritten to
//! start with a base record (format version 2) holding what its history
//! gave, so that neither grows for the whole job.
//!
//! Order, so that a crash at any point loses nothing and invents nothing:
//! 1. the segments are deleted (and their directory fsynced): the log
//!    still names them, but only in published rounds, which a drain never
//!    reads again;
//! 2. the new log (the base alone) is written to a temporary, fsynced,
//!    renamed over `cuts`, and the directory fsynced: a crash leaves the
//!    old log or the new one, never none. The base keeps the position of
//!    every producer whose segment is still there, so none is taken twice.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::error::{IoContext, Result};
use crate::format::{Base, PartMark};
use crate::layout;
use crate::local::LocalSeg;

/// What a release did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Released {
    /// The segments deleted, with their lengths.
    pub segments: Vec<(PathBuf, u64)>,
    /// The round of the base the log was rewritten to start at.
    pub base: Option<u64>,
}

/// The drain's state of a stream after a round whose log is all published.
pub(crate) struct LogState<'a> {
    pub cuts_path: &'a Path,
    pub cuts_len: &'a mut u64,
    /// The last round of the log, and the round of its base (0: none).
    pub rounds: u64,
    pub base_round: &'a mut u64,
    pub taken: &'a mut HashMap<u64, u64>,
    pub state: &'a [PartMark],
}

/// A segment that may go: its producer is gone (its lock is held here
/// until the file is deleted) and a cut took all of it.
pub(crate) struct Gone {
    pub path: PathBuf,
    pub id: u64,
    pub len: u64,
    _lock: File,
}

/// Release what the published rounds made redundant, once it amounts to
/// `min_bytes` (the dead segments' bytes plus the log's): deleting costs a
/// rewrite of the log (three fsyncs), so it is batched.
/// `min_bytes` u64::MAX: never.
pub(crate) fn release(
    dir: &Path,
    segs: &BTreeMap<u64, LocalSeg>,
    log: LogState<'_>,
    min_bytes: u64,
) -> Result<Released> {
    // A server job's root never gets here: its one-node drain is refused
    // (crate::job_root::refuse_marked); the job releases with the same
    // steps, agreed between them (crate::nodes::NodeShare::releasable).
    if min_bytes == u64::MAX || log.rounds == 0 {
        return Ok(Released::default());
    }
    let gone = gone(segs, log.taken)?;
    let bytes = gone.iter().map(|g| g.len).sum::<u64>() + *log.cuts_len;
    if (gone.is_empty() && log.rounds == *log.base_round) || bytes < min_bytes {
        return Ok(Released::default());
    }
    let mut out = Released {
        segments: delete(dir, &gone)?,
        base: None,
    };
    for g in &gone {
        log.taken.remove(&g.id);
    }
    // Producers whose segment is not here (deleted earlier, or another
    // node's in a root a server job drained once) need no position.
    log.taken.retain(|id, _| segs.contains_key(id));
    let mut producers: Vec<(u64, u64)> = log.taken.iter().map(|(a, b)| (*a, *b)).collect();
    producers.sort_unstable();
    let base = Base {
        round: log.rounds,
        parts: log.state.to_vec(),
        producers,
    };
    *log.cuts_len = write_base(log.cuts_path, &base)?;
    *log.base_round = log.rounds;
    out.base = Some(log.rounds);
    Ok(out)
}

/// At most this many segments go in one release: each is held open
/// (locked) until deleted, and a node may hold thousands of small ended
/// segments below the threshold; the rest go at the next rounds (each
/// round looks again), the base keeping their positions meanwhile.
pub const MAX_GONE: usize = 128;

/// The segments of `segs` that may go (at most [`MAX_GONE`]): a cut took
/// every byte (`taken`; a segment no cut took from holds only its header:
/// a producer that ended without a batch, or right after a roll) and
/// their producer has ended. Each one's lock is held until it is deleted.
pub(crate) fn gone(segs: &BTreeMap<u64, LocalSeg>, taken: &HashMap<u64, u64>) -> Result<Vec<Gone>> {
    let mut out = Vec::new();
    for (id, seg) in segs {
        if out.len() == MAX_GONE {
            break;
        }
        if taken.get(id).copied().unwrap_or(seg.header_len) != seg.len {
            continue;
        }
        if let Some(g) = dead_and_taken(seg, *id)? {
            out.push(g);
        }
    }
    Ok(out)
}

/// Step 1: delete the segments that may go, then fsync their directory
/// `dir` (the log still names them, in published rounds only).
pub(crate) fn delete(dir: &Path, gone: &[Gone]) -> Result<Vec<(PathBuf, u64)>> {
    let mut out = Vec::new();
    for g in gone {
        std::fs::remove_file(&g.path).ctx("delete drained segment", &g.path)?;
        out.push((g.path.clone(), g.len));
    }
    if !gone.is_empty() {
        layout::sync_dir(dir)?;
    }
    crate::failpoint::hit("stream.release_deleted");
    Ok(out)
}

/// Step 2: replace the cut log `cuts_path` with `base` alone, atomically
/// and durably (a temporary, fsync, rename, directory fsync). Returns the
/// log's new length.
pub(crate) fn write_base(cuts_path: &Path, base: &Base) -> Result<u64> {
    replace_log(cuts_path, &base.encode())
}

/// `Some` if the segment's producer is gone (its lock can be taken) and
/// its length is still what the cut took.
fn dead_and_taken(seg: &LocalSeg, id: u64) -> Result<Option<Gone>> {
    let f = File::open(&seg.path).ctx("open", &seg.path)?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            return Ok(None); // a live producer
        }
        return Err(e).ctx("flock", &seg.path);
    }
    // It may have written more before it ended.
    let len = f.metadata().ctx("stat", &seg.path)?.len();
    Ok((len == seg.len).then(|| Gone {
        path: seg.path.clone(),
        id,
        len,
        _lock: f,
    }))
}

/// Replace the cut log with `bytes` (a base record) atomically and
/// durably. Returns the new length.
fn replace_log(path: &Path, bytes: &[u8]) -> Result<u64> {
    layout::remove_dead_temporaries(path);
    layout::write_atomic_then(path, bytes, 0o600, &|| {
        crate::failpoint::hit("stream.base_written")
    })?;
    Ok(bytes.len() as u64)
}
