//! The node-local side of the drain: a stream's producer segments, its
//! cut log, and the lock that lets one drain of a stream run at a time.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{corrupt, IoContext, Result, StreamError};
use crate::format::{self, Base, Cut, Header, KIND_SEGMENT, MAGIC_BASE};
use crate::layout;

/// A producer's segment as a round found it. No descriptor is kept: a
/// round may list thousands of segments, and holding one open each would
/// run into the process's open-file limit (1,024 by default); the few it
/// reads are opened when read ([`LocalSeg::open`]). A listed segment's
/// path names the same file until the drain itself deletes it (segments
/// are created under new names and never replaced).
pub struct LocalSeg {
    pub path: PathBuf,
    pub header_len: u64,
    /// The length when listed: a round reads no further.
    pub len: u64,
    /// The segment this one continues (its producer rolled), if any.
    pub pred: Option<u64>,
}

impl LocalSeg {
    /// The segment opened for reading (and for the fdatasync a round
    /// makes before it records a cut of it).
    pub fn open(&self) -> Result<File> {
        File::open(&self.path).ctx("open", &self.path)
    }
}

/// The cut log's length (0: none yet).
pub fn log_len(path: &Path) -> Result<u64> {
    match std::fs::metadata(path) {
        Ok(m) => Ok(m.len()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e).ctx("stat", path),
    }
}

/// The segments of a stream on this node, by producer, and their
/// partition count (they must agree).
pub fn segments(dir: &Path, stream: &str) -> Result<(BTreeMap<u64, LocalSeg>, Option<u32>)> {
    list_segments(dir, stream).map(|(segs, parts, _)| (segs, parts))
}

/// [`segments`], and whether a segment was skipped because its producer
/// is writing its header now (it is listed once it has one).
pub(crate) fn list_segments(
    dir: &Path,
    stream: &str,
) -> Result<(BTreeMap<u64, LocalSeg>, Option<u32>, bool)> {
    let mut out = BTreeMap::new();
    let mut parts: Option<u32> = None;
    let mut skipped = false;
    for ent in std::fs::read_dir(dir).ctx("list", dir)? {
        let ent = ent.ctx("list", dir)?;
        let Some(id) = layout::parse_segment_name(&ent.file_name().to_string_lossy()) else {
            continue;
        };
        let path = ent.path();
        let len = std::fs::metadata(&path).ctx("stat", &path)?.len();
        let head = crate::producer::read_head(&path)?;
        if head.len() < 52 || (len as usize) < 52 + stream.len() {
            skipped = true;
            continue; // its producer is writing the header now
        }
        let h = Header::decode(&head, KIND_SEGMENT, &path)?;
        if h.name != stream || h.id != id {
            return Err(corrupt(
                &path,
                16,
                format!("header names stream {} producer {:016x}", h.name, h.id),
            ));
        }
        match parts {
            Some(p) if p != h.partitions => {
                return Err(StreamError::PartitionMismatch {
                    stream: stream.into(),
                    existing: p,
                    asked: h.partitions,
                })
            }
            _ => parts = Some(h.partitions),
        }
        out.insert(
            id,
            LocalSeg {
                path,
                header_len: h.len(),
                len,
                pred: (h.kind == format::KIND_ROLLED_SEGMENT).then_some(h.first),
            },
        );
    }
    Ok((out, parts, skipped))
}

/// The cut log as read: its base (when earlier rounds were released), the
/// cut records after it, and where its valid part ends.
#[derive(Debug, Clone, Default)]
pub struct CutLog {
    pub base: Option<Base>,
    pub cuts: Vec<Cut>,
    pub len: u64,
}

impl CutLog {
    /// The last round the log records (0: none).
    pub fn rounds(&self) -> u64 {
        self.base.as_ref().map_or(0, |b| b.round) + self.cuts.len() as u64
    }

    /// The partition count it fixes (`None`: no record yet).
    pub fn partitions(&self) -> Option<u32> {
        match (self.cuts.last(), &self.base) {
            (Some(c), _) => Some(c.parts.len() as u32),
            (None, Some(b)) => Some(b.parts.len() as u32),
            (None, None) => None,
        }
    }

    /// The producers' positions the base holds.
    pub fn taken_base(&self) -> HashMap<u64, u64> {
        self.base
            .iter()
            .flat_map(|b| b.producers.iter().copied())
            .collect()
    }

    /// Per producer, where the last cut's range of its segment ended.
    pub fn taken(&self) -> HashMap<u64, u64> {
        let mut taken = self.taken_base();
        for r in self.cuts.iter().flat_map(|c| &c.ranges) {
            taken.insert(r.producer, r.to);
        }
        taken
    }
}

/// Read the cut log: a base record may start it (format version 2), then
/// cut records whose rounds follow one by one. A torn last record (a crash
/// while appending it, before its fdatasync returned: never applied) is
/// ignored and overwritten by the next cut.
pub fn read_log(path: &Path) -> Result<CutLog> {
    let b = layout::read_small(path)?.unwrap_or_default();
    let mut log = CutLog::default();
    let mut pos = 0usize;
    if b.len() >= 16 && &b[..8] == MAGIC_BASE {
        // Written whole by a rename: a base that does not check is damage.
        let len = format::record_len(&b).unwrap_or(0).min(b.len());
        log.base = Some(Base::decode(&b[..len], path, 0)?);
        pos = len;
    }
    while pos < b.len() {
        let Some(len) = format::record_len(&b[pos..]) else {
            break;
        };
        if len < 36 || pos + len > b.len() {
            break;
        }
        match Cut::decode(&b[pos..pos + len], path, pos as u64) {
            Ok(c) => {
                if c.round != log.rounds() + 1 {
                    return Err(corrupt(
                        path,
                        pos as u64,
                        format!(
                            "cut of round {} where round {} was expected",
                            c.round,
                            log.rounds() + 1
                        ),
                    ));
                }
                log.cuts.push(c);
            }
            Err(_) if pos + len == b.len() => break,
            Err(e) => return Err(e),
        }
        pos += len;
    }
    log.len = pos as u64;
    Ok(log)
}

/// Append a cut record after the valid part of the log: one write, one
/// fdatasync (and a directory fsync when the log is created). Returns its
/// length.
pub fn append_cut(path: &Path, at: u64, cut: &Cut) -> Result<u64> {
    let existed = path.exists();
    let f = layout::open_private(path)?;
    let rec = cut.encode();
    if crate::failpoint::armed("stream.torn_cut") {
        // A crash in the middle of the record's write: half of it on disk.
        f.write_all_at(&rec[..rec.len() / 2], at)
            .ctx("write", path)?;
        f.sync_data().ctx("fdatasync", path)?;
        crate::failpoint::hit("stream.torn_cut");
    }
    f.write_all_at(&rec, at).ctx("write", path)?;
    f.set_len(at + rec.len() as u64).ctx("truncate", path)?;
    f.sync_data().ctx("fdatasync", path)?;
    if !existed {
        layout::sync_dir(path.parent().expect("the cut log has a directory"))?;
    }
    Ok(rec.len() as u64)
}

/// The stream's drain lock (flock, released when the file closes): one
/// drain of a stream at a time, whoever runs it.
pub fn lock(path: &Path) -> Result<File> {
    let f = layout::open_private(path)?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error()).ctx("flock", path);
    }
    Ok(f)
}

/// Cut a torn tail off a segment at `at` (where its last committed batch
/// ends) if its producer is gone (its lock can be taken): a flush that
/// will never finish, whose bytes are never read. Returns whether it cut;
/// a live producer's tail (a flush in progress) is left alone, and so is
/// a segment that grew since the round listed it (`seg.len`): its
/// producer finished that flush, and maybe more, before it ended, and
/// the next round reads them (cutting at `at` would lose committed
/// batches).
pub fn cut_torn_tail(seg: &LocalSeg, at: u64) -> Result<bool> {
    let f = OpenOptions::new()
        .write(true)
        .open(&seg.path)
        .ctx("open", &seg.path)?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            return Ok(false);
        }
        return Err(e).ctx("flock", &seg.path);
    }
    if f.metadata().ctx("stat", &seg.path)?.len() != seg.len {
        return Ok(false);
    }
    f.set_len(at).ctx("truncate", &seg.path)?;
    f.sync_data().ctx("fdatasync", &seg.path)?;
    Ok(true)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::{Partitioner, Producer};

    /// A producer of stream `s` (2 partitions) under `local` with one event
    /// flushed, and the stream's directory (the set-up of the listing tests
    /// too).
    pub(crate) fn one_flushed(local: &Path) -> (Producer, PathBuf) {
        let mut p = Producer::open(local, "s", 2, Partitioner::RoundRobin).unwrap();
        p.append(None, b"one", None).unwrap();
        p.flush().unwrap();
        (p, layout::stream_dir(local, "s"))
    }

    /// A round lists a segment while its producer's flush is being
    /// written (a torn tail at that length); the flush then completes and
    /// the producer ends before the round takes the lock: the tail is not
    /// cut, and the committed batch stays.
    #[test]
    fn a_tail_completed_after_the_listing_is_not_cut() {
        let t = tempfile::tempdir().unwrap();
        let local = t.path().join("l");
        let (mut p, dir) = one_flushed(&local);
        let first = segments(&dir, "s")
            .unwrap()
            .0
            .into_values()
            .next()
            .unwrap()
            .len;
        p.append(None, b"two", None).unwrap();
        p.flush().unwrap();
        let (segs, _) = segments(&dir, "s").unwrap();
        let mut seg = segs.into_values().next().unwrap();
        let whole = seg.len;
        // As listed in the middle of the second flush's write.
        seg.len = whole - 10;
        drop(p);
        assert!(!cut_torn_tail(&seg, first).unwrap());
        assert_eq!(std::fs::metadata(&seg.path).unwrap().len(), whole);
        // Listed after it ended: a real torn tail is cut.
        seg.len = whole;
        assert!(cut_torn_tail(&seg, first).unwrap());
        assert_eq!(std::fs::metadata(&seg.path).unwrap().len(), first);
    }
}
