//! Recovery on one node: after a crash of the program, the server or the
//! node, drain every globally committed epoch not yet recorded as drained,
//! in order, with the server's own drain step; report what was done per
//! file. Running it twice changes nothing the second time. Epochs that were
//! never committed are reported, and removed only with `gc`. (Across nodes,
//! recovery is the server job with `finish_now`: `cluster`.)

use std::path::Path;

use paralog_log::gc::collect_garbage;
use paralog_log::reader::fmt_ids;
use paralog_log::{FileInventory, Inventory, LogError};
use serde::Serialize;

use crate::drain::{drain_file, lock_file_dir, DrainCtx};
use crate::pool::BufferPool;
use crate::remote::Remote;

/// What recovery did to one file. Serialized as `paralog recover --json`
/// prints it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FileRecovery {
    /// The job the file belongs to.
    #[serde(skip)]
    pub job: String,
    pub path: String,
    /// Where it drains to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
    /// The epochs drained, as `paralog inspect` writes them.
    pub drained: String,
    pub drained_epochs: usize,
    /// Unfinished uploads of a crashed drain removed from the remote.
    pub aborted_uploads: usize,
    pub bytes: u64,
    /// Epochs left that were never committed (and never will be).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uncommitted: Option<String>,
    /// Records of those removed (`gc`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removed: Option<usize>,
    /// Why the file could not be (fully) recovered; its local data is kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The error is a wait for the other file of a rename (which a later
    /// round of the same recovery may drain).
    #[serde(skip)]
    pub waiting: bool,
}

/// What recovery did on this node.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub files: Vec<FileRecovery>,
    /// Files (and the remote's garbage collection) that failed.
    pub failed: usize,
    /// Unreferenced items removed from the remote (`gc`).
    pub collected: usize,
    /// Why the remote's garbage collection failed.
    #[serde(skip)]
    pub collect_error: Option<String>,
}

/// Recover every file of `job` (or of every job) under the node-local
/// `root` into `remote`. `Err` only when the root cannot be scanned; each
/// file's failure is in its row.
pub fn recover_node(
    root: &Path,
    job: Option<&str>,
    remote: &Remote,
    gc: bool,
) -> Result<Report, LogError> {
    recover_node_sets(root, job, remote, gc, None)
}

/// [`recover_node`] with `--aggregate`: the members of checkpoint sets are
/// recovered set by set (`aggregate::recover_sets`), the other files one
/// by one, in rounds while renames make them wait for each other
/// (`recover_job`).
pub fn recover_node_sets(
    root: &Path,
    job: Option<&str>,
    remote: &Remote,
    gc: bool,
    sets: Option<&crate::aggregate::Sets>,
) -> Result<Report, LogError> {
    let inv = Inventory::scan(root)?;
    let pool = BufferPool::new(64 << 20, 8 << 20);
    let mut report = Report::default();
    for j in inv.jobs.iter().filter(|j| job.is_none_or(|n| n == j.name)) {
        for mut row in recover_job(remote, &pool, j, gc, sets) {
            row.job = j.name.clone();
            report.failed += usize::from(row.error.is_some());
            report.files.push(row);
        }
    }
    // What crashed drains left on the remote that nothing refers to.
    if let (true, Remote::Url(url, backend)) = (gc, remote) {
        match backend.collect_garbage() {
            Ok(n) => report.collected = n,
            Err(e) => {
                report.collect_error = Some(format!("collecting garbage on {url}: {e}"));
                report.failed += 1;
            }
        }
    }
    Ok(report)
}

/// One job's sets and plain files, in rounds: the sets (with
/// `--aggregate`), then the plain files, then again those that waited for
/// a rename's other file, for as long as a round drains something.
///
/// Why rounds and not one fixed order: a rename makes either kind wait
/// for the other. A member renamed out of a published set (`mv
/// ckpt/s1/rank-0.dat keep/`) keeps its set waiting until the plain file
/// `keep/rank-0.dat` is drained, and a plain file renamed into a set
/// waits until that set is published; chains (a set's member renamed to
/// a plain file renamed into another set) alternate. Ordering by the
/// renames would mean reading every rename record of the job first to
/// build that graph; a round that drains nothing ends the loop, and every
/// other round drains at least one epoch, so the rounds are bounded by
/// the epochs and cost nothing when no rename is waiting (one round).
fn recover_job(
    remote: &Remote,
    pool: &BufferPool,
    job: &paralog_log::reader::JobInventory,
    gc: bool,
    sets: Option<&crate::aggregate::Sets>,
) -> Vec<FileRecovery> {
    let mut rows = Vec::new();
    // A member file's latest row (a set that waited in one round may be
    // published in the next).
    let mut set_rows: std::collections::BTreeMap<String, FileRecovery> = Default::default();
    let mut sets_left = sets.is_some();
    // Each plain file with its row of the round before (none yet).
    let mut files: Vec<(&FileInventory, Option<FileRecovery>)> = job
        .files
        .iter()
        .filter(|f| sets.is_none_or(|s| s.claims(&f.dir, remote).is_none()))
        .map(|f| (f, None))
        .collect();
    loop {
        let mut drained = 0;
        let mut sets_waiting = false;
        if let (Some(sets), true) = (sets, sets_left) {
            for row in crate::aggregate::recover_sets(sets, remote, job) {
                drained += row.drained_epochs;
                sets_waiting |= row.waiting;
                let row = match set_rows.remove(&row.path) {
                    Some(before) => after_round(before, row),
                    None => row,
                };
                set_rows.insert(row.path.clone(), row);
            }
        }
        let mut waiting = Vec::new();
        for (file, before) in files {
            let row = recover_file(remote, pool, file, gc);
            drained += row.drained_epochs;
            let row = match before {
                Some(before) => after_round(before, row),
                None => row,
            };
            if row.waiting {
                waiting.push((file, Some(row)));
            } else {
                rows.push(row);
            }
        }
        if drained == 0 || !sets_waiting && waiting.is_empty() {
            rows.extend(waiting.into_iter().filter_map(|(_, row)| row));
            break;
        }
        sets_left = sets_waiting;
        files = waiting;
    }
    set_rows.into_values().chain(rows).collect()
}

/// A file's row of a later round, with what the rounds before drained.
fn after_round(before: FileRecovery, mut row: FileRecovery) -> FileRecovery {
    if before.drained_epochs > 0 {
        row.drained = if row.drained_epochs == 0 {
            before.drained
        } else {
            format!("{}, {}", before.drained, row.drained)
        };
        row.drained_epochs += before.drained_epochs;
        row.bytes += before.bytes;
    }
    row.aborted_uploads += before.aborted_uploads;
    row
}

fn recover_file(
    remote: &Remote,
    pool: &BufferPool,
    file: &FileInventory,
    gc: bool,
) -> FileRecovery {
    let mut row = FileRecovery {
        path: file.display_name(),
        drained: fmt_ids(&[]),
        ..FileRecovery::default()
    };
    if let Err(e) = recover_into(&mut row, remote, pool, file, gc) {
        row.error = Some(e);
    }
    row
}

fn recover_into(
    row: &mut FileRecovery,
    remote: &Remote,
    pool: &BufferPool,
    file: &FileInventory,
    gc: bool,
) -> Result<(), String> {
    // The drain lock first, then a fresh look: a server may have drained
    // some of it since the inventory was taken.
    let _lock = lock_file_dir(&file.dir).map_err(|e| e.to_string())?;
    let file = &crate::drain::settle(&file.dir).map_err(|e| e.to_string())?;
    let backend = remote.backend_for(file).map_err(|e| e.to_string())?;
    let rel = file
        .record
        .as_ref()
        .map(|r| r.rel.clone())
        .unwrap_or_default();
    // What a crashed drain left half-done remotely (S3 multipart uploads).
    row.aborted_uploads = backend.abort_stale(&rel).map_err(|e| e.to_string())?;
    row.remote = Some(backend.describe(&rel));
    let ctx = DrainCtx {
        backend: backend.as_ref(),
        pool,
        limit: None,
        // After a crash nothing is held back: the open will not go on.
        flush: true,
        deleter: None,
        // The job is over: nothing will read the drained records again.
        keep_drained: false,
    };
    let mut drained = Vec::new();
    let result = drain_file(&ctx, file, &mut |d| {
        drained.push(d.id);
        row.bytes += d.bytes;
    });
    row.drained = fmt_ids(&drained);
    row.drained_epochs = drained.len();
    row.waiting = matches!(result, Err(crate::drain::DrainError::Waiting(_)));
    result.map_err(|e| e.to_string())?;
    // What is left: epochs that are not committed (and never will be).
    let job_dir = file.dir.parent();
    let after = FileInventory::scan_path(
        job_dir.and_then(Path::parent).unwrap_or(&file.dir),
        job_dir
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str())
            .unwrap_or(""),
        &rel,
    )
    .map_err(|e| e.to_string())?;
    let Some(after) = after else {
        return Ok(());
    };
    let left = after.epoch_ids();
    row.uncommitted = Some(fmt_ids(&left));
    if gc && !left.is_empty() {
        let r = collect_garbage(&after, false).map_err(|e| e.to_string())?;
        row.removed = Some(r.removed.len());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(ids: &[u64], bytes: u64, waiting: bool) -> FileRecovery {
        let ids: Vec<paralog_log::EpochId> = ids
            .iter()
            .map(|&i| paralog_log::EpochId::new(1, i))
            .collect();
        FileRecovery {
            path: "a".into(),
            drained: fmt_ids(&ids),
            drained_epochs: ids.len(),
            bytes,
            waiting,
            error: waiting.then(|| "waiting".into()),
            ..FileRecovery::default()
        }
    }

    #[test]
    fn a_later_round_keeps_what_the_rounds_before_drained() {
        let both = after_round(row(&[1, 2], 10, true), row(&[3], 5, false));
        assert_eq!((both.drained_epochs, both.bytes, both.error), (3, 15, None));
        assert_eq!(
            both.drained,
            format!(
                "{}, {}",
                row(&[1, 2], 0, false).drained,
                row(&[3], 0, false).drained
            )
        );
        // Nothing more drained: the earlier epochs, and the later row's wait.
        let still = after_round(row(&[1], 4, true), row(&[], 0, true));
        assert_eq!(
            (still.drained_epochs, still.bytes, still.waiting),
            (1, 4, true)
        );
        assert_eq!(still.drained, row(&[1], 0, false).drained);
        // Nothing before: the later row as it is.
        let only = after_round(row(&[], 0, true), row(&[2], 3, false));
        assert_eq!(
            (only.drained_epochs, only.drained),
            (1, row(&[2], 0, false).drained)
        );
    }
}
