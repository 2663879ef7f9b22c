//! Draining one file: its committed epochs, in order, into the remote.
//!
//! Per epoch (docs/server.md, "Drain protocol"):
//! 1. merge the ranks' manifests (the reader's own merge) and verify every
//!    source extent's checksum: a corrupt epoch is refused before any of its
//!    bytes reaches the remote;
//! 2. apply it: cut, final bytes, exact size (or delete), then make the
//!    remote durable (fsync, completed upload);
//! 3. write the progress record (durable);
//! 4. delete the epoch's local records.
//!
//! A crash anywhere re-applies at most the one epoch after the progress
//! record, and re-applying an epoch is idempotent.

use std::collections::BTreeSet;
use std::os::fd::AsRawFd;
use std::path::Path;

use paralog_backend::{Backend, BackendError, RemoteOp};
use paralog_log::layout;
use paralog_log::reader::SourceReader;
use paralog_log::{EpochId, FileInventory, LogError, LogicalFile};

use crate::failpoint;
use crate::limit::RateLimit;
use crate::pool::BufferPool;
use crate::retry::Failure;
use crate::step;

pub struct DrainCtx<'a> {
    pub backend: &'a dyn Backend,
    pub pool: &'a BufferPool,
    pub limit: Option<&'a RateLimit>,
    /// Drain everything committed now, even epochs of an open that has not
    /// ended and that the backend would rather receive whole (the job is
    /// ending, or this is a recovery).
    pub flush: bool,
    /// Where drained records go to be deleted; `None`: deleted inline.
    pub deleter: Option<&'a crate::delete::Deleter>,
    /// Keep the records of drained epochs (a running job whose remote the
    /// capture library cannot read: `Backend::readable_by_capture`).
    pub keep_drained: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    /// A local record failed its checks: the epoch is kept for inspection
    /// and nothing of it, or of later epochs of the file, is drained.
    #[error("refusing to drain a damaged epoch (kept for inspection; see `paralog inspect`): {0}")]
    Corrupt(LogError),
    #[error("remote: {0}")]
    Remote(BackendError),
    #[error("node-local log: {0}")]
    Local(LogError),
    /// A bug in paralog (a panic while draining this file).
    #[error("internal error while draining (please report it): {0}")]
    Internal(String),
    /// A checkpoint set that cannot be published now that the job ends:
    /// a member is still being written (its writer died in it); the local
    /// data is kept for `paralog recover --aggregate` (docs/aggregate.md).
    #[error("{0}")]
    SetNotPublished(String),
    /// The file was renamed away and its target's rename is not remote
    /// yet (`rename.rs`): look again soon; not a failure.
    #[error("{0}")]
    Waiting(String),
    /// Another drain (a server, `paralog recover`) holds the file.
    #[error("{0} is being drained by another process (a server or `paralog recover`)")]
    Busy(String),
}

impl DrainError {
    /// Whether trying again later can succeed.
    pub fn retryable(&self) -> bool {
        match self {
            DrainError::Corrupt(_) | DrainError::Internal(_) | DrainError::SetNotPublished(_) => {
                false
            }
            DrainError::Remote(e) => e.retryable(),
            DrainError::Local(_) | DrainError::Busy(_) | DrainError::Waiting(_) => true,
        }
    }

    /// What the scheduler does about it.
    pub fn failure(self) -> Failure {
        match self {
            DrainError::Remote(e) => e.into(),
            e if e.retryable() => Failure::Retry(e.to_string()),
            e => Failure::damaged(e),
        }
    }
}

pub(crate) fn local(e: LogError) -> DrainError {
    match e {
        LogError::Io { ref error, .. } if error.kind() != std::io::ErrorKind::NotFound => {
            DrainError::Local(e)
        }
        // Missing data the manifest promised, a checksum, a bad record:
        // damage, not a passing condition.
        _ => DrainError::Corrupt(e),
    }
}

/// The exclusive right to drain one file, held while its epochs are applied:
/// the server's workers and `paralog recover` may run at the same time, and
/// two drains of one file would race on the progress record. An advisory
/// `flock` on the file's directory: released by the kernel when the holder
/// dies, so a crash never leaves a file locked.
pub struct DrainLock {
    _dir: std::fs::File,
}

/// Take the drain lock of a file directory without waiting.
pub fn lock_file_dir(dir: &Path) -> Result<DrainLock, DrainError> {
    let f = std::fs::File::open(dir).map_err(|error| {
        local(LogError::Io {
            path: dir.to_path_buf(),
            op: "open for locking",
            error,
        })
    })?;
    // SAFETY: flock on a descriptor we own.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let error = std::io::Error::last_os_error();
        if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
            return Err(DrainError::Busy(dir.display().to_string()));
        }
        return Err(DrainError::Local(LogError::Io {
            path: dir.to_path_buf(),
            op: "lock",
            error,
        }));
    }
    Ok(DrainLock { _dir: f })
}

/// A fresh look at a file directory under its drain lock, with what a
/// crashed format-2 writer left unfinished put right first: a one-process
/// writer's committed epoch still in its staging directory is renamed into
/// its generation (under the writers' commit lock), and a path record that
/// a crash left missing or empty is written again from the manifests.
pub fn settle(dir: &Path) -> Result<FileInventory, LogError> {
    let mut inv = FileInventory::scan_dir(dir)?;
    if paralog_log::single::finish_publishes(&inv)? > 0 {
        tracing::info!(file = %inv.display_name(), "finished the publication of an epoch its writer committed before it stopped");
        inv = FileInventory::scan_dir(dir)?;
    }
    if inv.record_rebuilt {
        match inv.repair_path_record() {
            Ok(_) => {
                tracing::info!(file = %inv.display_name(), "path record rewritten from the manifests")
            }
            Err(e) => {
                tracing::warn!(file = %inv.display_name(), error = %e, "rewriting the path record failed")
            }
        }
    }
    Ok(inv)
}

/// One epoch reached the remote.
#[derive(Debug, Clone, Copy)]
pub struct Drained {
    pub id: EpochId,
    pub bytes: u64,
}

/// Drain every pending epoch of `file`, in order; `on_epoch` is told of each
/// one as soon as its progress is durable. Returns the number drained.
pub fn drain_file(
    ctx: &DrainCtx<'_>,
    file: &FileInventory,
    on_epoch: &mut dyn FnMut(Drained),
) -> Result<usize, DrainError> {
    if let Some(e) = &file.progress_error {
        return Err(DrainError::Corrupt(LogError::Inconsistent {
            path: file.dir.join(layout::PROGRESS_FILE),
            what: e.clone(),
        }));
    }
    let rel = match &file.record {
        Some(r) => r.rel.clone(),
        None => {
            return Err(DrainError::Corrupt(LogError::Inconsistent {
                path: file.dir.join(layout::PATH_FILE),
                what: format!(
                    "no readable path record: {}",
                    file.path_error.as_deref().unwrap_or("missing")
                ),
            }))
        }
    };
    let pending = file.pending_epochs().map_err(local)?;
    // Epochs up to a rename away go together, as a deletion, once the
    // rename's target is remote; until then the records stay, drained ones
    // too (the target may read them: S3's content from the job's start).
    let moved = crate::rename::collapse(file, &pending)?.unwrap_or(0);
    if !ctx.keep_drained {
        step::delete_drained_leftovers(file).map_err(DrainError::Local)?;
    }
    let mut n = 0;
    // Nothing of the file drained yet in this job: true for the first
    // group only, not for every group of this call (the later ones start
    // from the version the first one made).
    let mut fresh = file.progress.is_none();
    let (rest, _waiting) = step::open_groups(
        &pending[moved..],
        ctx.backend.whole_opens(),
        ctx.flush,
        |open| file.open_ended(open),
    );
    let groups = (moved > 0)
        .then_some(&pending[..moved])
        .into_iter()
        .chain(rest);
    for group in groups {
        let bytes = drain_epochs(ctx, file, &rel, group, fresh)?;
        fresh = false;
        // The bytes count once, with the group's last epoch.
        for (k, &id) in group.iter().enumerate() {
            let last = k + 1 == group.len();
            on_epoch(Drained {
                id,
                bytes: if last { bytes } else { 0 },
            });
        }
        n += group.len();
    }
    Ok(n)
}

/// Apply consecutive committed epochs of one open (one epoch, or a whole
/// open for a backend that wants them together) as one new remote state:
/// verify, apply, make durable, record progress at the last, then delete.
fn drain_epochs(
    ctx: &DrainCtx<'_>,
    file: &FileInventory,
    rel: &[u8],
    ids: &[EpochId],
    fresh: bool,
) -> Result<u64, DrainError> {
    let span = crate::timeline::DrainSpan::start(ids);
    let mut lf = LogicalFile::default();
    for &id in ids {
        let manifests = file.manifests(id).map_err(local)?;
        lf.apply_epoch(id, &manifests).map_err(local)?;
    }
    let id = *ids.last().expect("at least one epoch");

    // 1. Verify every extent this epoch still uses before touching the remote.
    let mut reader = SourceReader::default();
    let used: BTreeSet<usize> = lf.pieces().map(|(_, _, p)| p.source).collect();
    for &s in &used {
        reader.verify(&lf.sources[s]).map_err(local)?;
    }

    // A rename onto the file: the new version is the source's content
    // with the later epochs on top, published whole.
    if let (Some((_, from)), false) = (lf.from, lf.deleted) {
        let whole = !ctx.backend.readable_by_capture();
        let src = crate::rename::Source::open(&file.dir, from, ctx.backend, whole)?;
        let bytes = crate::rename::publish(ctx, rel, id, file.origin(), fresh, &lf, src, reader)?;
        failpoint::hit("drain.after_fsync");
        step::write_progress(&file.dir, id).map_err(DrainError::Local)?;
        span.end(&file.dir, rel, bytes);
        failpoint::hit("drain.after_progress");
        if !ctx.keep_drained {
            for &done in ids {
                step::delete_epoch(file, done).map_err(DrainError::Local)?;
            }
        }
        return Ok(bytes);
    }

    // 2. Apply.
    let shape = step::shape(id, file.origin(), &lf, fresh);
    let mut sink = step::begin(ctx.backend, rel, &shape, &lf).map_err(DrainError::Remote)?;
    let mut bytes = 0u64;
    // A pool buffer only once copy_file_range is not possible.
    let mut buf = None;
    let chunk = ctx.pool.buf_size() as u64;
    // In-kernel copies while the backend takes them (a POSIX remote on a
    // file system that supports copy_file_range from the local one).
    let mut copy = true;
    for (off, len, piece) in lf.pieces().filter(|_| !lf.deleted) {
        let src = &lf.sources[piece.source];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk) as usize;
            if let Some(l) = ctx.limit {
                l.take(n);
            }
            let src_off = src.extent.log_pos + piece.skip + done;
            if copy {
                let f = reader.verified_file(src).map_err(local)?;
                copy = sink
                    .copy_from(f, src_off, n as u64, off + done)
                    .map_err(DrainError::Remote)?;
            }
            if !copy {
                let buf = buf.get_or_insert_with(|| ctx.pool.get());
                reader
                    .read(src, piece.skip + done, &mut buf[..n])
                    .map_err(local)?;
                sink.apply(RemoteOp::Write {
                    off: off + done,
                    data: &buf[..n],
                })
                .map_err(DrainError::Remote)?;
            }
            failpoint::hit("drain.mid_write");
            done += n as u64;
            bytes += n as u64;
        }
    }
    failpoint::hit("drain.before_fsync");
    step::finish(sink, &lf).map_err(DrainError::Remote)?;
    failpoint::hit("drain.after_fsync");

    // 3. Record it; only then 4. delete the local records.
    step::write_progress(&file.dir, id).map_err(DrainError::Local)?;
    span.end(&file.dir, rel, bytes);
    failpoint::hit("drain.after_progress");
    if ctx.keep_drained {
        // Kept for the program's reads until the job ends.
        return Ok(bytes);
    }
    match ctx.deleter {
        Some(d) => d.submit(file, ids, reader),
        None => {
            drop(reader);
            for &done in ids {
                step::delete_epoch(file, done).map_err(DrainError::Local)?;
            }
        }
    }
    Ok(bytes)
}
