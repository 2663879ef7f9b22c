//! The workers of the one-node server: each takes the next due file from
//! the queue, drains it (a plain file with `drain::drain_file`, a
//! checkpoint set member with its set: aggregate/), and files the outcome
//! (counted, retried with backoff, or parked).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use paralog_log::EpochId;

use super::{lock, Inner};
use crate::drain::{drain_file, lock_file_dir, DrainCtx, DrainError, Drained};
use crate::retry::backoff_time;

/// How long a file waits for the other file of a rename before the wait
/// counts as a failure.
const WAIT_FOR_RENAME: Duration = Duration::from_secs(60);

pub(super) fn worker(inner: &Inner) {
    loop {
        let Some(dir) = next_file(inner) else {
            return;
        };
        let started = Instant::now();
        // A bug must not take a worker (and the drain of every file) with
        // it: it parks this one file, with the panic as its message.
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drain_one(inner, &dir)))
                .unwrap_or_else(|p| {
                    let what = p
                        .downcast_ref::<String>()
                        .map(String::as_str)
                        .or_else(|| p.downcast_ref::<&str>().copied())
                        .unwrap_or("panic");
                    Err(DrainError::Internal(what.to_owned()))
                });
        let mut s = lock(inner);
        s.busy_workers -= 1;
        if s.busy_workers == 0 {
            if let Some(since) = s.active_since.take() {
                s.active_total += since.elapsed();
            }
        }
        let e = s.files.get_mut(&dir).expect("entries are never removed");
        e.busy = false;
        e.busy_since = None;
        e.busy_time += started.elapsed();
        let waited = match &result {
            Err(DrainError::Waiting(_)) => *e.waiting_since.get_or_insert_with(Instant::now),
            _ => {
                e.waiting_since = None;
                Instant::now()
            }
        };
        // Past a minute (the other file parked, or stuck), a wait is a
        // failure like any other: warned about, with back-off.
        if matches!(&result, Err(DrainError::Waiting(_))) && waited.elapsed() < WAIT_FOR_RENAME {
            // Renamed away, its target not remote yet (`rename.rs`): soon
            // again, with no failure counted.
            e.retry.not_before = Some(Instant::now() + Duration::from_millis(20));
            if !e.queued {
                e.queued = true;
                s.queue.push_back(dir);
                inner.work.notify_one();
            }
            inner.changed.notify_all();
            continue;
        }
        let mut requeue = std::mem::take(&mut e.dirty);
        match result.map_err(DrainError::failure) {
            Ok(()) => e.retry.succeeded(),
            Err(failure) => {
                let msg = failure.message().to_owned();
                // Jitter so that many files do not retry in lockstep.
                let jitter = (started.elapsed().subsec_nanos() % 1000) as f64 / 1000.0;
                let mut wait = Duration::ZERO;
                if e.retry.failed(failure, |n| {
                    wait = backoff_time(n, jitter);
                    Instant::now() + wait
                }) {
                    tracing::warn!(file = %e.path, attempt = e.retry.attempts, retry_in_s = wait.as_secs_f64(), error = %msg, "drain failed; local data kept, will retry");
                    requeue = true;
                } else {
                    tracing::error!(file = %e.path, error = %msg, "drain stopped for this file; its local data is kept");
                    requeue = false;
                }
            }
        }
        if requeue && !e.queued {
            e.queued = true;
            s.queue.push_back(dir);
            inner.work.notify_one();
        }
        inner.changed.notify_all();
    }
}

/// Take the first queued file that is due, waiting for one; `None` on stop.
fn next_file(inner: &Inner) -> Option<PathBuf> {
    let mut s = lock(inner);
    loop {
        if s.stop {
            return None;
        }
        let now = Instant::now();
        let mut soonest: Option<Instant> = None;
        let mut pick = None;
        for (i, dir) in s.queue.iter().enumerate() {
            let e = &s.files[dir];
            if e.busy {
                continue;
            }
            match e.retry.not_before {
                Some(t) if t > now => soonest = Some(soonest.map_or(t, |x| x.min(t))),
                _ => {
                    pick = Some(i);
                    break;
                }
            }
        }
        if let Some(i) = pick {
            let dir = s.queue.remove(i).expect("index from the queue");
            let e = s.files.get_mut(&dir).expect("queued files have entries");
            e.queued = false;
            e.busy = true;
            e.busy_since = Some(now);
            e.dirty = false;
            e.scans += 1;
            s.busy_workers += 1;
            if s.active_since.is_none() {
                s.active_since = Some(now);
            }
            return Some(dir);
        }
        let wait = soonest.map_or(Duration::from_secs(3600), |t| t - now);
        s = inner
            .work
            .wait_timeout(s, wait)
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
}

fn drain_one(inner: &Inner, dir: &Path) -> Result<(), DrainError> {
    let file_lock = lock_file_dir(dir)?;
    let inv = crate::drain::settle(dir).map_err(DrainError::Local)?;
    // A checkpoint set member (known by its path record, read under the
    // lock: a file being created has none yet) drains with its set, which
    // takes every member's lock itself.
    if let (Some(sets), Some(r)) = (inner.cfg.sets.as_ref(), &inv.record) {
        if sets
            .member_match(&r.path, &r.rel, &inner.cfg.remote)
            .is_some()
        {
            drop(file_lock);
            return drain_set_member(inner, sets, dir);
        }
    }
    let any_manifest = inv.gens.values().any(|g| {
        g.ranks
            .values()
            .any(|r| r.epochs.values().any(|e| e.manifest.is_some()))
    });
    if inv.record.is_none() && inv.path_error.is_some() && !any_manifest {
        // Being created (the path record comes first, and this scan may
        // have raced with it): nothing is committed yet; its events follow.
        return Ok(());
    }
    let pending = inv.pending_epochs().map_err(DrainError::Corrupt)?;
    let epoch_bytes: BTreeMap<EpochId, u64> = pending
        .iter()
        .map(|&id| (id, inv.local_bytes(id)))
        .collect();
    let bytes = epoch_bytes.values().sum();
    let retrying = {
        let mut s = lock(inner);
        let e = s.files.get_mut(dir).expect("entry");
        if let Some(r) = &inv.record {
            e.path = String::from_utf8_lossy(&r.path).into_owned();
        }
        e.epochs_pending = pending.len() as u64;
        e.bytes_pending = bytes;
        e.retry.attempts > 0
    };
    let backend = inner
        .cfg
        .remote
        .backend_for(&inv)
        .map_err(DrainError::Remote)?;
    if backend.readable_by_capture() {
        crate::step::delete_drained_leftovers(&inv).map_err(DrainError::Local)?;
    }
    if pending.is_empty() {
        return Ok(());
    }
    // A retry: what the failed attempt may have left on the remote (an
    // S3 upload whose abort failed too) goes first, as in the server job.
    // Best effort: the drain does not depend on it; not done (the remote
    // still down), it is asked again once this drain succeeded.
    let stale = match (retrying, &inv.record) {
        (true, Some(r)) => {
            let done = crate::step::abort_stale(backend.as_ref(), &r.rel, &inv.display_name());
            (!done).then_some(&r.rel)
        }
        _ => None,
    };
    let ctx = DrainCtx {
        backend: backend.as_ref(),
        pool: &inner.pool,
        limit: inner.limit.as_ref(),
        flush: inner.flush.load(std::sync::atomic::Ordering::SeqCst) > 0,
        deleter: Some(&inner.deleter),
        keep_drained: !backend.readable_by_capture(),
    };
    let mut on_epoch = |d: Drained| {
        let mut s = lock(inner);
        let local = epoch_bytes.get(&d.id).copied().unwrap_or(0);
        let e = s.count_drained(dir, d.bytes, local).expect("entry");
        tracing::debug!(file = %e.path, generation = d.id.gen, epoch = d.id.epoch, bytes = d.bytes, "epoch drained");
    };
    drain_file(&ctx, &inv, &mut on_epoch)?;
    if let Some(rel) = stale {
        crate::step::abort_stale(backend.as_ref(), rel, &inv.display_name());
    }
    Ok(())
}

/// A checkpoint set member: the sets of its job that are complete are
/// drained together (aggregate/); every member file drained is counted.
fn drain_set_member(
    inner: &Inner,
    sets: &crate::aggregate::Sets,
    dir: &Path,
) -> Result<(), DrainError> {
    use std::sync::atomic::Ordering::SeqCst;
    let job_dir = dir.parent().unwrap_or(dir);
    let flush = inner.flush.load(SeqCst) > 0;
    let mut on_epoch = |file: &Path, d: Drained| {
        lock(inner).count_drained(file, d.bytes, d.bytes);
    };
    let mut outcomes = crate::aggregate::drain_sets(
        sets,
        &inner.cfg.remote,
        job_dir,
        flush,
        false,
        &mut on_epoch,
    )?;
    // This file's own set failed: its failure (other sets' are theirs).
    let set = sets.claims(dir, &inner.cfg.remote).map(|m| m.set);
    let own = outcomes
        .iter_mut()
        .find(|o| set.as_deref() == Some(o.set.as_bytes()));
    if let Some(e) = own.and_then(|o| o.error.take()) {
        return Err(e);
    }
    // What this file still holds back (its set is not complete yet).
    let inv = paralog_log::FileInventory::scan_dir(dir).map_err(DrainError::Local)?;
    let pending = inv.pending_epochs().map_err(DrainError::Corrupt)?;
    if flush && !pending.is_empty() {
        // The job is ending and its set still cannot be published: a
        // member's writer died in it. Kept for `recover`, said once.
        let why = outcomes
            .iter()
            .find(|o| set.as_deref() == Some(o.set.as_bytes()))
            .and_then(|o| o.waiting.clone())
            .unwrap_or_else(|| "not complete".into());
        return Err(DrainError::SetNotPublished(format!(
            "checkpoint set {} not published at the end of the job ({why}); local data kept for `paralog recover --aggregate`",
            set.map(|s| String::from_utf8_lossy(&s).into_owned())
                .unwrap_or_default()
        )));
    }
    let mut s = lock(inner);
    if let Some(e) = s.files.get_mut(dir) {
        if let Some(r) = &inv.record {
            e.path = String::from_utf8_lossy(&r.path).into_owned();
        }
        e.epochs_pending = pending.len() as u64;
        e.bytes_pending = pending.iter().map(|&id| inv.local_bytes(id)).sum();
    }
    drop(s);
    for o in outcomes.iter().filter(|o| o.version.is_some()) {
        tracing::debug!(set = %o.set, version = o.version, members = o.members.len(), "set drained");
    }
    Ok(())
}
