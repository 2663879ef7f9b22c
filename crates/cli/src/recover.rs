//! `paralog recover`: parses, calls the server crate's recovery (one node:
//! `paralog_server::recover`; across nodes: the server job with everything
//! to finish now), prints its report.

use std::process::ExitCode;

use anyhow::Context;
use paralog_server::recover::{recover_node_sets, FileRecovery};

use crate::remote::Remote;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    at: crate::LocalJob,
    #[command(flatten)]
    remote: crate::remote::RemoteArg,
    /// Also remove the records of epochs that can never be committed.
    #[arg(long)]
    gc: bool,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
    /// With --aggregate: also publish checkpoint sets a member of which was
    /// still being written when the job stopped, flagged incomplete, with
    /// what the members committed (docs/aggregate.md)
    #[arg(long)]
    incomplete: bool,
    #[command(flatten)]
    job_of_servers: crate::server::ServerJobArgs,
    #[command(flatten)]
    aggregate: crate::aggregate_args::AggregateArgs,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (node, mpi) = args.job_of_servers.resolve()?;
    let aggregate = args.aggregate.resolve()?;
    let root = args.at.local.resolve_for(node.as_deref())?;
    let remote = args.remote.resolve_checked()?;
    if args.incomplete && aggregate.is_none() {
        anyhow::bail!("--incomplete publishes checkpoint sets: give --aggregate RULE too");
    }
    let sets =
        crate::aggregate_args::AggregateArgs::sets(aggregate, &remote, mpi.is_some())?.map(|s| {
            if args.incomplete {
                s.publishing_incomplete()
            } else {
                s
            }
        });
    if let Some(mpi) = mpi {
        // One process per node: the servers' drain, everything, then stop.
        crate::server::init_tracing();
        let mut cfg = args.job_of_servers.config(
            &root,
            args.at.job.clone(),
            remote,
            node.as_deref(),
            8 << 20,
            true,
        )?;
        cfg.sets = sets.map(std::sync::Arc::new);
        let (totals, rank) = crate::cluster::run(mpi, cfg, None)?;
        return Ok(crate::cluster::report(&totals, rank, &root, "recover"));
    }
    // Logged array puts committed on this node: published once each.
    let objects = crate::obj_publish::round(&root);
    match &objects {
        Ok(done) if !args.json => {
            for p in done {
                println!(
                    "published logged array {} version {} to {}",
                    p.name, p.committed.number, p.remote
                );
            }
        }
        Ok(_) => {}
        Err(e) => eprintln!("paralog: logged array puts: {e}"),
    }
    let report = recover_node_sets(
        &root,
        args.at.job.as_deref(),
        &remote,
        args.gc,
        sets.as_ref(),
    )
    .with_context(|| format!("scanning {}", root.display()))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for row in &report.files {
            print_row(row);
        }
        if let Some(e) = &report.collect_error {
            eprintln!("paralog: {e}");
        }
        if report.collected > 0 {
            if let Remote::Url(url, _) = &remote {
                println!(
                    "removed {} unreferenced item(s) from {url}",
                    report.collected
                );
            }
        }
        if report.files.is_empty() && objects.as_ref().is_ok_and(|d| d.is_empty()) {
            println!("nothing to recover in {}", root.display());
        }
    }
    Ok(if report.failed == 0 && objects.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn print_row(row: &FileRecovery) {
    let (job, path) = (&row.job, &row.path);
    if let Some(e) = &row.error {
        println!("job {job}: {path}: FAILED: {e}");
        println!("  local data is kept; fix the cause and run `paralog recover` again");
        return;
    }
    let remote = row.remote.as_deref().unwrap_or("?");
    if row.drained_epochs == 0 {
        println!("job {job}: {path}: nothing to drain (remote {remote} is up to date)");
    } else {
        println!(
            "job {job}: {path}: drained {} epoch(s) ({}), {} bytes, to {remote}",
            row.drained_epochs, row.drained, row.bytes
        );
    }
    match (row.uncommitted.as_deref(), row.removed) {
        (Some("none") | None, _) => {}
        (Some(ids), Some(k)) => println!("  epochs never committed: {ids}; removed {k} record(s)"),
        (Some(ids), None) => println!("  epochs never committed: {ids} (kept; --gc removes them)"),
    }
}
