//! The drain step both engines share, whoever writes the bytes: which
//! epochs go together, the shape of the new remote version, its first and
//! last operations, and, once the remote holds it durably, the progress
//! record and the deletion of the local records.
//!
//! The one-node service (`drain.rs`) runs every part of it on one server;
//! the server job (`cluster/`) has the leader shape and finish the version
//! while every server writes its own bytes in between.

use std::path::Path;

use paralog_backend::{Backend, BackendError, EpochShape, EpochSink, RemoteOp};
use paralog_log::format::ProgressRecord;
use paralog_log::{layout, EpochId, FileInventory, LogError, LogicalFile};

/// The runs of epochs to apply now, each as one new remote state: one
/// epoch each, or, for a backend that takes the epochs of an open
/// together (`whole_opens`), every epoch of one open once that open ended
/// (`ended(open)`) or the job is ending (`flush`). The second value is the
/// number of epochs held back waiting for their open to end.
pub fn open_groups(
    pending: &[EpochId],
    whole_opens: bool,
    flush: bool,
    ended: impl Fn(u64) -> bool,
) -> (Vec<&[EpochId]>, usize) {
    let mut groups = Vec::new();
    let mut i = 0;
    while i < pending.len() {
        if !whole_opens {
            groups.push(&pending[i..=i]);
            i += 1;
            continue;
        }
        let open = pending[i].gen;
        let j = i + pending[i..].iter().take_while(|id| id.gen == open).count();
        if !flush && !ended(open) {
            return (groups, j - i);
        }
        groups.push(&pending[i..j]);
        i = j;
    }
    (groups, 0)
}

/// What the merged epochs `lf` (ending with `last`) do to the file, for
/// the backend. `origin`: which log they came from
/// (`FileInventory::origin`); `fresh`: nothing of the file was drained yet
/// in this job.
pub fn shape(last: EpochId, origin: [u8; 16], lf: &LogicalFile, fresh: bool) -> EpochShape {
    EpochShape {
        epoch: last,
        origin,
        deleted: lf.deleted,
        size: lf.size,
        fresh,
        replace: false,
        mode: lf.mode,
        // Unless the program set them, the drained file takes the time its
        // bytes were committed, which stat answered before the drain. A
        // deleted file has none.
        times: lf.times_on(|| None).filter(|_| !lf.deleted),
    }
}

/// The shape of a version that replaces the file whole with `size` bytes
/// written from offset 0 (a rename onto it: `rename.rs`).
pub fn replace_shape(
    last: EpochId,
    origin: [u8; 16],
    size: u64,
    fresh: bool,
    mode: Option<u32>,
    times: Option<paralog_backend::Times>,
) -> EpochShape {
    EpochShape {
        epoch: last,
        origin,
        deleted: false,
        size: paralog_log::reader::SizeState {
            min_size: size,
            size_set: true,
            base_cut: Some(0),
        },
        fresh,
        replace: true,
        mode,
        times,
    }
}

/// The operation that gives the file the size its epochs leave: exactly
/// that size after a set-size, else at least it.
pub fn size_op(lf: &LogicalFile) -> RemoteOp<'static> {
    if lf.size.size_set {
        RemoteOp::SetSize(lf.size.min_size)
    } else {
        RemoteOp::Preallocate(lf.size.min_size)
    }
}

/// Start the new version: the deletion, or the cut (remote bytes at or
/// past it must never show again). The bytes follow, then [`finish`].
pub fn begin<'b>(
    backend: &'b dyn Backend,
    rel: &[u8],
    shape: &EpochShape,
    lf: &LogicalFile,
) -> Result<Box<dyn EpochSink + Send + 'b>, BackendError> {
    let mut sink = backend.begin(rel, shape)?;
    if lf.deleted {
        sink.apply(RemoteOp::Delete)?;
    } else if let Some(cut) = lf.size.base_cut {
        sink.apply(RemoteOp::SetSize(cut))?;
    }
    Ok(sink)
}

/// End the version: its size (which also creates the file for an epoch
/// without data: it was opened), then durable.
pub fn finish(
    mut sink: Box<dyn EpochSink + Send + '_>,
    lf: &LogicalFile,
) -> Result<(), BackendError> {
    if !lf.deleted {
        sink.apply(size_op(lf))?;
    }
    sink.commit()
}

/// Before a retry or a recovery: remove what an interrupted drain of `rel`
/// left on the remote (S3: its unfinished multipart uploads). Best effort,
/// said in the log under `name`: the drain does not depend on it. Whether
/// it was done: when not (the remote still down), the caller asks again
/// once a drain of the file has succeeded, or the upload would be left
/// (a retry whose own requests outlasted the outage succeeds after an
/// abort that failed).
pub fn abort_stale(backend: &dyn Backend, rel: &[u8], name: &str) -> bool {
    match backend.abort_stale(rel) {
        Ok(0) => true,
        Ok(n) => {
            tracing::info!(file = %name, uploads = n, "aborted unfinished uploads");
            true
        }
        Err(e) => {
            tracing::warn!(file = %name, error = %e, "aborting unfinished uploads failed");
            false
        }
    }
}

/// The remote holds everything up to `last` durably: say so in the file
/// directory's progress record (atomically, durably).
pub fn write_progress(dir: &Path, last: EpochId) -> Result<(), LogError> {
    let path = dir.join(layout::PROGRESS_FILE);
    let tmp = dir.join(format!("{}.tmp", layout::PROGRESS_FILE));
    let record = ProgressRecord {
        gen: last.gen,
        epoch: last.epoch,
    };
    paralog_log::durable::write_atomic(&path, &tmp, &record.encode())
}

/// Remove every rank's records of a drained epoch from this node. No
/// fsync of the directories: the progress record is durable before this
/// starts, so records that a crash brings back are known drained (the
/// next server, `recover` or gc deletes them). An fsync here was a third
/// journal commit per drained epoch on the node's disk, beside the
/// program's own.
pub fn delete_epoch(file: &FileInventory, EpochId { gen, epoch }: EpochId) -> Result<(), LogError> {
    use layout::EpochFileKind;
    let Some(g) = file.gens.get(&gen) else {
        return Ok(());
    };
    for r in g.ranks.values() {
        if !r.epochs.contains_key(&epoch) {
            continue;
        }
        for kind in [
            EpochFileKind::Data,
            EpochFileKind::Manifest,
            EpochFileKind::ManifestTmp,
            EpochFileKind::Mark,
        ] {
            remove_if_present(&r.dir.join(layout::epoch_file_name(epoch, kind)))?;
        }
        crate::failpoint::hit("drain.mid_delete");
        crate::failpoint::delete_delay();
    }
    Ok(())
}

fn remove_if_present(p: &Path) -> Result<(), LogError> {
    match std::fs::remove_file(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(LogError::Io {
            path: p.to_path_buf(),
            op: "remove",
            error,
        }),
    }
}

/// A crash between the progress record and the deletion leaves records of
/// drained epochs, and so does a slow rank whose commit mark arrives after
/// the epoch was drained (any one rank's mark lets the drain start): finish
/// deleting them.
pub fn delete_drained_leftovers(file: &FileInventory) -> Result<(), LogError> {
    let Some(done) = file.progress.map(|p| p.id()) else {
        return Ok(());
    };
    for id in file.epoch_ids().into_iter().filter(|id| *id <= done) {
        delete_epoch(file, id)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_of_whole_opens_wait_for_the_open_to_end() {
        let ids = [(1, 1), (1, 2), (2, 1), (2, 2), (3, 1)].map(|(g, e)| EpochId::new(g, e));
        let (g, wait) = open_groups(&ids, false, false, |_| false);
        assert_eq!((g.len(), wait), (5, 0));
        let (g, wait) = open_groups(&ids, true, false, |open| open < 3);
        assert_eq!(g, vec![&ids[0..2], &ids[2..4]]);
        assert_eq!(wait, 1);
        let (g, wait) = open_groups(&ids, true, false, |open| open != 2);
        assert_eq!((g, wait), (vec![&ids[0..2]], 2));
        let (g, wait) = open_groups(&ids, true, true, |_| false);
        assert_eq!((g.len(), wait), (3, 0));
    }
}
