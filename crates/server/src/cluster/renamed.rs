//! A file whose planned epochs hold a rename (docs/format.md, "Namespace
//! operations"): drained by the one drain step both engines share
//! (`crate::drain::drain_file`, which takes `rename.rs`'s order between the
//! two files, the source's content and the whole publication), run by the
//! server of the node that holds the file's records while the others take
//! part in the agreement.
//!
//! A rename is recorded only for a one-process POSIX writer's file, whose
//! records, and the other file's, are on that writer's node: no byte of it
//! lies on another node. A file that holds a rename and has records on
//! several nodes (which capture never makes) is parked with that reason.
//!
//! Renamed away before its target's rename is remote: the step answers
//! "waiting", and the file is looked at again in the next round, with no
//! failure counted, for at most `WAIT_ROUNDS` rounds in a row (the target
//! parked or stuck): then the wait counts as a failure like any other.

use paralog_log::format::Op;

use super::plan::GlobalFile;
use super::{ClusterError, Coordinator};
use crate::drain::{DrainCtx, DrainError};
use crate::pool::BufferPool;
use crate::retry::Failure;

/// Rounds a file may wait for the other file of its rename before the wait
/// counts as a failure (about a minute at the default poll of 200 ms, as
/// the one-node service's minute).
pub(super) const WAIT_ROUNDS: u64 = 300;

/// What the one step did, the same on every server.
pub(super) enum Renamed {
    /// Epochs and bytes drained (the holder's counts, shared).
    Drained { epochs: u64, bytes: u64 },
    /// The other file's rename is not remote yet.
    Waiting(String),
}

/// Whether a planned group of `f` holds a rename's record (either side).
pub(super) fn holds_rename(f: &GlobalFile) -> bool {
    f.groups
        .iter()
        .flat_map(|g| &g.epochs)
        .flat_map(|(_, ms)| ms)
        .any(|(m, _)| {
            m.ops
                .iter()
                .any(|op| matches!(op, Op::RenameFrom(_) | Op::RenamedTo(_)))
        })
}

impl Coordinator {
    /// Drain every committed epoch of `f` with the one-node step on the
    /// node that holds it. `flush`: the job is ending (epochs of an open
    /// that has not ended go too). `Err` only for a failure of MPI itself.
    pub(super) fn drain_renamed(
        &mut self,
        f: &GlobalFile,
        flush: bool,
    ) -> Result<Result<Renamed, Failure>, ClusterError> {
        let [(holder, _)] = f.holders[..] else {
            return Ok(Err(Failure::damaged(format!(
                "a rename of a file whose records are on {} nodes (capture records renames of one process's files only)",
                f.holders.len()
            ))));
        };
        let (mut epochs, mut bytes) = (0u64, 0u64);
        let mut waiting = None;
        let mut local = None;
        if self.comm.rank() == holder {
            match self.drain_here(f, flush, &mut epochs, &mut bytes) {
                Ok(()) => {}
                Err(DrainError::Waiting(why)) => waiting = Some(why),
                Err(e) => local = Some(e.failure()),
            }
        }
        let epochs = self.sum(epochs)?;
        let bytes = self.sum(bytes)?;
        let waits = self.sum(u64::from(waiting.is_some()))?;
        if let Some(failure) = self.agree(local)? {
            return Ok(Err(failure));
        }
        if waits > 0 {
            return Ok(Ok(Renamed::Waiting(self.messages(waiting.as_deref())?)));
        }
        Ok(Ok(Renamed::Drained { epochs, bytes }))
    }

    /// The one-node drain of `f` here, under its drain lock (as `recover`
    /// and the one-node service take it), from a fresh look at its records.
    fn drain_here(
        &self,
        f: &GlobalFile,
        flush: bool,
        epochs: &mut u64,
        bytes: &mut u64,
    ) -> Result<(), DrainError> {
        let dir = self.my_dir(f).expect("the holder has the directory");
        let _lock = crate::drain::lock_file_dir(&dir)?;
        let inv = crate::drain::settle(&dir).map_err(crate::drain::local)?;
        let backend = self.backend(f).map_err(DrainError::Remote)?;
        let pool = BufferPool::new(2 * self.cfg.buf_bytes, self.cfg.buf_bytes);
        let ctx = DrainCtx {
            backend: backend.as_ref(),
            pool: &pool,
            limit: None,
            flush,
            deleter: None,
            // As the server job's other drains (group.rs): kept while the
            // program may still read the file through them (S3).
            keep_drained: !backend.readable_by_capture(),
        };
        crate::drain::drain_file(&ctx, &inv, &mut |d| {
            *epochs += 1;
            *bytes += d.bytes;
        })?;
        Ok(())
    }
}

impl Coordinator {
    /// One round of a file holding a rename: the one step, then the same
    /// bookkeeping as a drained or failed group (`Coordinator::drain_file`).
    pub(super) fn drain_file_renamed(
        &mut self,
        f: &GlobalFile,
        key: &super::plan::FileKey,
        round: &mut super::Round,
    ) -> Result<(), ClusterError> {
        self.show(f, key, 0, true);
        let started = std::time::Instant::now();
        let result = self.drain_renamed(f, round.finishing)?;
        let busy = started.elapsed();
        self.active += busy;
        self.drained.entry(key.clone()).or_default().busy += busy;
        let ids: Vec<paralog_log::EpochId> = f
            .groups
            .iter()
            .flat_map(|g| g.ids.iter().copied())
            .collect();
        let failure = match result {
            Ok(Renamed::Drained { epochs, bytes }) => {
                round.worked = true;
                self.waits.remove(key);
                self.retries.remove(key);
                let tally = self.drained.entry(key.clone()).or_default();
                tally.epochs += epochs;
                tally.bytes += bytes;
                self.totals.epochs_drained += epochs;
                self.totals.bytes_drained += bytes;
                round.pending = round.pending.saturating_sub(epochs);
                self.show(f, key, f.groups.len(), false);
                return Ok(());
            }
            Ok(Renamed::Waiting(why)) => {
                // Not worked: the round may sleep before the next look.
                let n = self.waits.entry(key.clone()).or_default();
                *n += 1;
                if *n <= WAIT_ROUNDS {
                    self.show(f, key, 0, false);
                    return Ok(());
                }
                self.waits.remove(key);
                Failure::Retry(why)
            }
            Err(failure) => {
                round.worked = true;
                failure
            }
        };
        self.group_failed(f, key, &ids, failure, round, 0);
        Ok(())
    }
}
