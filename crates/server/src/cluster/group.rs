//! One group of epochs drained by every server: the merged file and a
//! check of every byte this server will send, agreed; then the strategy
//! the remote calls for (posix.rs, chunks.rs, parts.rs, gather.rs); then,
//! durable everywhere, the progress record and the local deletion.

use std::sync::Arc;

use paralog_backend::{Backend, EpochShape};
use paralog_log::reader::SourceReader;
use paralog_log::{FileInventory, LogicalFile};

use super::plan::{GlobalFile, Group};
use super::{ClusterError, Coordinator};
use crate::retry::Failure;
use crate::step;

impl Coordinator {
    /// Drain one group on every server. `Err` only for a failure of MPI
    /// itself; the inner result is agreed by all servers.
    pub(super) fn drain_group(&mut self, f: &GlobalFile, g: &Group, fresh: bool) -> Agreed<u64> {
        let me = self.comm.rank();
        let span = crate::timeline::DrainSpan::start(&g.ids);
        // The same drain lock as the one-node server and `recover` take: a
        // one-node `recover` run by hand on this node must not interleave.
        let mut lock = None;
        // 1. The merged file, and a check of every byte this node will send.
        let mut reader = SourceReader::default();
        let local = (|| -> Result<(LogicalFile, Arc<dyn Backend>), Failure> {
            if let Some(dir) = self.my_dir(f) {
                lock = Some(crate::drain::lock_file_dir(&dir).map_err(|e| match e {
                    crate::drain::DrainError::Busy(_) => Failure::Retry(e.to_string()),
                    other => Failure::damaged(other),
                })?);
            }
            let lf = g.logical_file().map_err(Failure::damaged)?;
            if lf.from.is_some() || lf.moved_to.is_some() {
                // Files holding renames go through renamed.rs, never here.
                return Err(Failure::damaged("a rename reached the group drain"));
            }
            for (_, _, piece) in lf.pieces() {
                let src = &lf.sources[piece.source];
                if g.node_of(src) == Some(me) {
                    reader.verify(src).map_err(Failure::damaged)?;
                }
            }
            let b = self.backend(f).map_err(Failure::from)?;
            Ok((lf, b))
        })();
        let (lf, backend, local_err) = match local {
            Ok((lf, b)) => (Some(lf), Some(b), None),
            Err(e) => (None, None, Some(e)),
        };
        if let Some(e) = self.agree(local_err)? {
            return Ok(Err(e));
        }
        let lf = lf.expect("agreed: every server built it");
        let backend = backend.expect("agreed: every server opened it");
        // This node's log (zero if it holds none of the file): only ever
        // makes a re-drain publish a duplicate, never skip one.
        let origin = self
            .my_dir(f)
            .map_or([0; 16], |d| paralog_log::reader::origin_of(&d));
        let last = *g.ids.last().expect("groups are not empty");
        let shape = step::shape(last, origin, &lf, fresh);
        let t = Target {
            me,
            f,
            g,
            lf: &lf,
            shape: &shape,
            backend: backend.as_ref(),
        };
        let parted = backend.parted().filter(|_| !lf.deleted);
        let result = if backend.concurrent_writers() {
            self.drain_shared(t, &mut reader)?
        } else if let Some(c) = backend.chunked() {
            self.drain_chunked(t, c, &mut reader)?
        } else if let Some(r) = match parted {
            Some(p) => self.drain_parted(t, p, &mut reader)?,
            None => None,
        } {
            r
        } else {
            self.drain_gathered(t, &mut reader)?
        };
        let bytes = match result {
            Ok(b) => b,
            Err(e) => return Ok(Err(e)),
        };
        // 2. Durable everywhere: record it, then free the local records.
        drop(reader);
        if let Some(dir) = self.my_dir(f) {
            let keep = !backend.readable_by_capture();
            let r = step::write_progress(&dir, last).and_then(|()| {
                if keep {
                    return Ok(());
                }
                let inv = FileInventory::scan_dir(&dir)?;
                for &id in &g.ids {
                    step::delete_epoch(&inv, id)?;
                }
                Ok(())
            });
            if let Err(e) = r {
                // The remote has it; another node's record proves it, and
                // the next round retries this one.
                tracing::warn!(file = %f.name(), error = %e, "recording progress failed here");
            }
            // This node's timeline counts the bytes of its own logs, as its
            // capture lines count its own ranks'.
            let own: u64 = lf
                .pieces()
                .filter(|(_, _, p)| !lf.deleted && g.node_of(&lf.sources[p.source]) == Some(me))
                .map(|(_, len, _)| len)
                .sum();
            span.end(&dir, &f.rel, own);
        }
        crate::failpoint::hit("cluster.after_progress");
        Ok(Ok(bytes))
    }
}

/// What every server agreed on (`Err`: MPI itself failed).
pub(super) type Agreed<T> = Result<Result<T, Failure>, ClusterError>;

/// The new remote version of one group that every server helps make:
/// the file, its epochs, their merged content, the version's shape and
/// the remote. Every strategy takes it.
#[derive(Clone, Copy)]
pub(super) struct Target<'a> {
    /// This server's rank in the server job.
    pub me: usize,
    pub f: &'a GlobalFile,
    pub g: &'a Group,
    pub lf: &'a LogicalFile,
    pub shape: &'a EpochShape,
    pub backend: &'a dyn Backend,
}

impl Target<'_> {
    /// The runs whose bytes this server holds, window after window (at
    /// most `window` bytes each), in order.
    pub fn my_runs(&self, window: u64) -> impl Iterator<Item = Run> {
        windows(self.g, self.lf, window, Some(self.me))
            .into_iter()
            .flatten()
    }
}

/// A run of the merged file's winning bytes and where they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// Where in the file.
    pub off: u64,
    pub len: u64,
    /// Index into the merged file's sources.
    pub source: usize,
    /// Offset in that source.
    pub skip: u64,
    /// The node that holds the source.
    pub node: usize,
}

/// Append the bytes of `node`'s runs in `win` to `pack`, in order, to send
/// them in one gather. After a failure (kept in `failed`) the bytes are
/// zeros: the gather still happens, and the failure is agreed on later.
pub(super) fn pack_runs(
    win: &[Run],
    node: usize,
    lf: &LogicalFile,
    reader: &mut SourceReader,
    pack: &mut Vec<u8>,
    failed: &mut Option<Failure>,
) {
    for r in win.iter().filter(|r| r.node == node) {
        let at = pack.len();
        pack.resize(at + r.len as usize, 0);
        if failed.is_none() {
            if let Err(e) = reader.read(&lf.sources[r.source], r.skip, &mut pack[at..]) {
                *failed = Some(Failure::damaged(e));
            }
        }
    }
}

/// Where each node's bytes start in a gather that received `counts`
/// bytes from each.
pub(super) fn starts(counts: &[i64]) -> Vec<usize> {
    let mut at = 0usize;
    counts
        .iter()
        .map(|&c| {
            let start = at;
            at += c as usize;
            start
        })
        .collect()
}

/// The merged file's pieces (of node `only`'s logs, or all), in offset
/// order, cut into windows of at most `w` bytes.
pub(super) fn windows(g: &Group, lf: &LogicalFile, w: u64, only: Option<usize>) -> Vec<Vec<Run>> {
    let mut windows = Vec::new();
    let mut cur = Vec::new();
    let mut cur_bytes = 0u64;
    for (off, len, piece) in lf.pieces() {
        let src = &lf.sources[piece.source];
        let owner = g.node_of(src).expect("every source has a holder");
        if only.is_some_and(|n| n != owner) {
            continue;
        }
        let mut done = 0;
        while done < len {
            let n = (len - done).min(w - cur_bytes);
            cur.push(Run {
                off: off + done,
                len: n,
                source: piece.source,
                skip: piece.skip + done,
                node: owner,
            });
            cur_bytes += n;
            done += n;
            if cur_bytes == w {
                windows.push(std::mem::take(&mut cur));
                cur_bytes = 0;
            }
        }
    }
    if !cur.is_empty() {
        windows.push(cur);
    }
    windows
}

/// The leader's steps that give a new version its shape: the deletion,
/// or the cut, the bytes other servers stored (`placed`, the object
/// layout), and the size; then made durable.
pub(super) fn shape_version(
    backend: &dyn Backend,
    rel: &[u8],
    shape: &EpochShape,
    lf: &LogicalFile,
    placed: Option<&[u8]>,
) -> Result<(), Failure> {
    let mut s = step::begin(backend, rel, shape, lf)?;
    if let Some(p) = placed.filter(|_| !lf.deleted) {
        s.place(p)?;
    }
    Ok(step::finish(s, lf)?)
}
