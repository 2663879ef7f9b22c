//! `paralog recover`: parses, calls the server crate's recovery (one node:
//! `paralog_server::recover`, then the streams' drain, `recover_streams`;
//! across nodes: the server job with everything to finish now, streams
//! and logged array puts included), prints its report.

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
    /// Where the shared event streams under the node-local root drain, as
    /// the server's `--stream-remote` (docs/streams.md) [default: --remote]
    #[arg(long, value_name = "URL")]
    stream_remote: Option<String>,
    #[command(flatten)]
    release: crate::stream::ReleaseArg,
}

/// `--json`: the files' report and the streams'.
#[derive(serde::Serialize)]
struct JsonReport<'a> {
    #[serde(flatten)]
    files: &'a paralog_server::recover::Report,
    streams: &'a [crate::recover_streams::StreamRecovery],
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    crate::server::init_tracing_if_asked();
    paralog_server::open_files::raise_soft_limit();
    let (node, mpi) = args.job_of_servers.resolve()?;
    let aggregate = args.aggregate.resolve()?;
    let root = args.at.local.resolve_for(node.as_deref())?;
    let remote = args.remote.resolve_checked()?;
    let stream_remote = args.stream_remote.as_deref();
    let release = args.release.resolve()?;
    if let Some(u) = stream_remote {
        // Before anything is drained (the place itself is made later).
        u.parse::<paralog_backend::RemoteUrl>()
            .map_err(|e| anyhow::anyhow!("--stream-remote: {e}"))?;
    }
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
        // The job's streams as the server job drains them (the recorded
        // cuts copied, applied again, then new rounds until none is left).
        // Every node alike, streams of its own or not: the rounds are
        // collective.
        let streams = crate::stream::stream_place_of(stream_remote, &remote)?;
        let mut cfg = args.job_of_servers.config(
            &root,
            args.at.job.clone(),
            remote,
            node.as_deref(),
            8 << 20,
            true,
        )?;
        cfg.sets = sets.map(std::sync::Arc::new);
        let undrained = undrained_streams(&root, streams.is_none())?;
        cfg.streams = streams;
        cfg.stream_release_bytes = release;
        // The node's logged array puts, as the server job publishes them;
        // the job ends after two rounds of every node's publisher (the
        // shares copied, then the versions published; docs/objects.md
        // "Logged puts in a server job").
        let objects = crate::obj_publish::start_for_job(root.clone())?;
        cfg.puts = Some(objects.puts());
        let (totals, rank) = crate::cluster::run(mpi, cfg, None)?;
        objects.finish();
        let code = crate::cluster::report(&totals, rank, &root, "recover");
        if let Some(names) = undrained {
            println!("paralog recover: streams {names} of {} NOT DRAINED: no stream remote: give --stream-remote URL (the server's) or --remote URL", root.display());
            return Ok(ExitCode::from(1));
        }
        return Ok(code);
    }
    // Logged array puts committed on this node: published once each.
    let objects = crate::obj_publish::round(&root, &paralog_objects::ViewServer::new());
    match &objects {
        Ok(r) if !args.json => {
            for p in &r.published {
                println!(
                    "published logged array {} version {} to {}",
                    p.name, p.committed.number, p.remote
                );
            }
            crate::obj_publish::print_left(&r.pending);
        }
        Ok(_) => {}
        Err(e) => eprintln!("paralog: logged array puts: {e}"),
    }
    // Waiting for another node's share is not this node's failure.
    let objects_failed = !objects
        .as_ref()
        .is_ok_and(|r| !crate::obj_publish::failed(r));
    let objects_none = objects
        .as_ref()
        .is_ok_and(|r| r.published.is_empty() && r.pending.is_empty());
    let report = recover_node_sets(
        &root,
        args.at.job.as_deref(),
        &remote,
        args.gc,
        sets.as_ref(),
    )
    .with_context(|| format!("scanning {}", root.display()))?;
    // After the files (as the server's last round): every stream. Its
    // place (an S3 client) only made when there is a stream.
    let streams = crate::recover_streams::recover(&root, release, || {
        crate::stream::stream_place_of(stream_remote, &remote)
    })
    .with_context(|| format!("the streams of {}", root.display()))?;
    let streams_failed = streams.iter().any(|s| s.error.is_some());
    if args.json {
        let out = JsonReport {
            files: &report,
            streams: &streams,
        };
        println!("{}", serde_json::to_string_pretty(&out)?);
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
        crate::recover_streams::print(&streams);
        if report.files.is_empty() && streams.is_empty() && objects_none {
            println!("nothing to recover in {}", root.display());
        }
    }
    Ok(
        if report.failed == 0 && !objects_failed && !streams_failed {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        },
    )
}

/// With no stream remote, the streams under `root` that the job of
/// recovers leaves undrained (named), else `None`.
fn undrained_streams(root: &std::path::Path, no_place: bool) -> anyhow::Result<Option<String>> {
    if !no_place {
        return Ok(None);
    }
    let names = paralog_stream::drain::local_streams(root)?;
    Ok((!names.is_empty()).then(|| names.join(", ")))
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
