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
/// by one.
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
        if let Some(sets) = sets {
            for mut row in crate::aggregate::recover_sets(sets, remote, j) {
                row.job = j.name.clone();
                report.failed += usize::from(row.error.is_some());
                report.files.push(row);
            }
        }
        // A file renamed away waits for its target (`rename.rs`): passes
        // over the waiting ones while a pass gets one further.
        let mut todo: Vec<&FileInventory> = j
            .files
            .iter()
            .filter(|f| sets.is_none_or(|s| s.claims(&f.dir, remote).is_none()))
            .collect();
        loop {
            let mut waiting = Vec::new();
            for file in todo.iter().copied() {
                let (mut row, wait) = recover_file(remote, &pool, file, gc);
                if wait {
                    waiting.push((file, row));
                    continue;
                }
                row.job = j.name.clone();
                report.failed += usize::from(row.error.is_some());
                report.files.push(row);
            }
            if waiting.is_empty() || waiting.len() == todo.len() {
                for (_, mut row) in waiting {
                    row.job = j.name.clone();
                    report.failed += 1;
                    report.files.push(row);
                }
                break;
            }
            todo = waiting.into_iter().map(|(f, _)| f).collect();
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

fn recover_file(
    remote: &Remote,
    pool: &BufferPool,
    file: &FileInventory,
    gc: bool,
) -> (FileRecovery, bool) {
    let mut row = FileRecovery {
        path: file.display_name(),
        drained: fmt_ids(&[]),
        ..FileRecovery::default()
    };
    let mut waiting = false;
    if let Err(e) = recover_into(&mut row, remote, pool, file, gc, &mut waiting) {
        row.error = Some(e);
    }
    (row, waiting)
}

fn recover_into(
    row: &mut FileRecovery,
    remote: &Remote,
    pool: &BufferPool,
    file: &FileInventory,
    gc: bool,
    waiting: &mut bool,
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
    *waiting = matches!(result, Err(crate::drain::DrainError::Waiting(_)));
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
