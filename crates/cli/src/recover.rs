//! `paralog recover`: after a crash of the program, the server or the node,
//! drain every globally committed epoch not yet recorded as drained, in
//! order, with the server's own drain; then report. Running it twice changes
//! nothing the second time. Uncommitted epochs are reported, and removed
//! only with --gc.

use std::process::ExitCode;

use anyhow::Context;
use paralog_log::gc::collect_garbage;
use paralog_log::reader::fmt_ids;
use paralog_log::{FileInventory, Inventory};
use paralog_server::drain::{drain_file, lock_file_dir, DrainCtx};
use paralog_server::pool::BufferPool;
use serde_json::json;

use crate::remote::Remote;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    local: crate::LocalArg,
    #[command(flatten)]
    remote: crate::remote::RemoteArg,
    /// Only this job.
    #[arg(long)]
    job: Option<String>,
    /// Also remove the records of epochs that can never be committed.
    #[arg(long)]
    gc: bool,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    job_of_servers: crate::server::ServerJobArgs,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (node, mpi) = args.job_of_servers.resolve()?;
    let root = args.local.resolve_for(node.as_deref())?;
    let remote = args.remote.resolve_checked()?;
    if let Some(mpi) = mpi {
        // One process per node: the servers' drain, everything, then stop.
        crate::server::init_tracing();
        let (totals, rank) = crate::cluster::run(crate::cluster::Job {
            mpi,
            root: root.clone(),
            job: args.job.clone(),
            remote,
            node: args.job_of_servers.node_name(node.as_deref())?,
            buf_bytes: 8 << 20,
            socket: None,
            finish_now: true,
            peer_timeout: std::time::Duration::from_secs_f64(args.job_of_servers.peer_timeout),
            posix_writes: args.job_of_servers.posix_writes.into(),
        })?;
        return Ok(crate::cluster::report(&totals, rank, &root, "recover"));
    }
    let inv = Inventory::scan(&root).with_context(|| format!("scanning {}", root.display()))?;
    let pool = BufferPool::new(64 << 20, 8 << 20);
    let mut rows = Vec::new();
    let mut failed = 0;
    for job in inv
        .jobs
        .iter()
        .filter(|j| args.job.as_ref().is_none_or(|n| *n == j.name))
    {
        for file in &job.files {
            let row = recover_file(&remote, &pool, file, args.gc);
            if row["error"].is_string() {
                failed += 1;
            }
            if !args.json {
                print_row(&job.name, &row);
            }
            rows.push(row);
        }
    }
    // What crashed drains left on the remote that nothing refers to.
    let mut collected = 0;
    if let (true, Remote::Url(url, backend)) = (args.gc, &remote) {
        match backend.collect_garbage() {
            Ok(n) => collected = n,
            Err(e) => {
                eprintln!("paralog: collecting garbage on {url}: {e}");
                failed += 1;
            }
        }
        if collected > 0 && !args.json {
            println!("removed {collected} unreferenced item(s) from {url}");
        }
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({ "files": rows, "failed": failed, "collected": collected })
            )?
        );
    } else if rows.is_empty() {
        println!("nothing to recover in {}", root.display());
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn recover_file(
    remote: &Remote,
    pool: &BufferPool,
    file: &FileInventory,
    gc: bool,
) -> serde_json::Value {
    let name = file.display_name();
    // The drain lock first, then a fresh look: a server may have drained
    // some of it since the inventory was taken.
    let _lock = match lock_file_dir(&file.dir) {
        Ok(l) => l,
        Err(e) => return json!({ "path": name, "error": e.to_string() }),
    };
    let fresh = match FileInventory::scan_dir(&file.dir) {
        Ok(f) => f,
        Err(e) => return json!({ "path": name, "error": e.to_string() }),
    };
    let file = &fresh;
    let backend = match remote.backend_for(file) {
        Ok(b) => b,
        Err(e) => return json!({ "path": name, "error": e.to_string() }),
    };
    let rel_for_abort = file
        .record
        .as_ref()
        .map(|r| r.rel.clone())
        .unwrap_or_default();
    // What a crashed drain left half-done remotely (S3 multipart uploads).
    let aborted = match backend.abort_stale(&rel_for_abort) {
        Ok(n) => n,
        Err(e) => return json!({ "path": name, "error": e.to_string() }),
    };
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
    let mut bytes = 0;
    let result = drain_file(&ctx, file, &mut |d| {
        drained.push(d.id);
        bytes += d.bytes;
    });
    let rel = file
        .record
        .as_ref()
        .map(|r| r.rel.clone())
        .unwrap_or_default();
    let mut row = json!({
        "path": name,
        "remote": backend.describe(&rel),
        "drained": fmt_ids(&drained),
        "drained_epochs": drained.len(),
        "aborted_uploads": aborted,
        "bytes": bytes,
    });
    if let Err(e) = result {
        row["error"] = json!(e.to_string());
        return row;
    }
    // What is left: epochs that are not committed (and never will be).
    let after = match FileInventory::scan_path(
        file.dir
            .parent()
            .and_then(|p| p.parent())
            .unwrap_or(&file.dir),
        file.dir
            .parent()
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str())
            .unwrap_or(""),
        &rel,
    ) {
        Ok(Some(f)) => f,
        Ok(None) => return row,
        Err(e) => {
            row["error"] = json!(e.to_string());
            return row;
        }
    };
    let left: Vec<_> = after.epoch_ids();
    row["uncommitted"] = json!(fmt_ids(&left));
    if gc && !left.is_empty() {
        match collect_garbage(&after, false) {
            Ok(r) => row["removed"] = json!(r.removed.len()),
            Err(e) => row["error"] = json!(e.to_string()),
        }
    }
    row
}

fn print_row(job: &str, row: &serde_json::Value) {
    let path = row["path"].as_str().unwrap_or("?");
    if let Some(e) = row["error"].as_str() {
        println!("job {job}: {path}: FAILED: {e}");
        println!("  local data is kept; fix the cause and run `paralog recover` again");
        return;
    }
    let n = row["drained_epochs"].as_u64().unwrap_or(0);
    if n == 0 {
        println!(
            "job {job}: {path}: nothing to drain (remote {} is up to date)",
            row["remote"].as_str().unwrap_or("?")
        );
    } else {
        println!(
            "job {job}: {path}: drained {n} epoch(s) ({}), {} bytes, to {}",
            row["drained"].as_str().unwrap_or(""),
            row["bytes"],
            row["remote"].as_str().unwrap_or("?")
        );
    }
    match (row["uncommitted"].as_str(), row["removed"].as_u64()) {
        (Some("none") | None, _) => {}
        (Some(ids), Some(k)) => println!("  epochs never committed: {ids}; removed {k} record(s)"),
        (Some(ids), None) => println!("  epochs never committed: {ids} (kept; --gc removes them)"),
    }
}
