//! `paralog stream ...`: shared event streams (docs/streams.md). Reading
//! a drained stream (`ls`, `describe`, `cat`) is in `read.rs`; the drain
//! and the load generator (`drain`, `produce`) in `write.rs`. The logic is
//! in `paralog-stream`; this parses, calls and prints.

use std::process::ExitCode;

use anyhow::anyhow;
use paralog_backend::RemoteUrl;
use paralog_stream::StreamPlace;

pub mod lag;
mod read;
mod release_arg;
mod time;
mod trim;
mod write;

pub use release_arg::{threshold as release_threshold, ReleaseArg};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Subcommand)]
enum Cmd {
    /// The streams drained to a remote (the URL given to --remote).
    Ls(read::LsArgs),
    /// A stream's partitions, high watermarks, segments and reader groups.
    Describe(read::DescribeArgs),
    /// Print a stream's events (one per line), alone or as a reader group.
    Cat(read::CatArgs),
    /// `cat` that follows the stream: prints each drain round as it is
    /// published, until killed.
    Tail(read::TailArgs),
    /// Delete a stream's oldest segments on the remote (whole segments, per
    /// partition; never the one the drain appends to).
    Trim(trim::TrimArgs),
    /// Drain the streams of a node-local root to a remote (one round, or --follow).
    Drain(write::DrainArgs),
    /// The streams under a node-local root: producers, bytes, bytes not drained yet.
    Lag(write::LagArgs),
    /// Append generated events to a stream (a load generator for tests and
    /// benchmarks): prints its producer id, then each flush.
    Produce(write::ProduceArgs),
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.cmd {
        Cmd::Ls(a) => read::ls(a),
        Cmd::Describe(a) => read::describe(a),
        Cmd::Cat(a) => read::cat(a),
        Cmd::Tail(a) => read::tail(a),
        Cmd::Trim(a) => trim::trim(a),
        Cmd::Drain(a) => write::drain(a),
        Cmd::Lag(a) => write::lag(a),
        Cmd::Produce(a) => write::produce(a),
    }
}

/// Print a command's rows: one JSON array with `--json`, else a line
/// per row.
fn print_rows<T>(
    json: bool,
    rows: &[T],
    to_json: impl Fn(&T) -> serde_json::Value,
    line: impl Fn(&T) -> String,
) -> anyhow::Result<ExitCode> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if json {
        let v = rows.iter().map(to_json).collect();
        writeln!(out, "{}", serde_json::Value::Array(v))?;
    } else {
        for r in rows {
            writeln!(out, "{}", line(r))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Where a remote URL's streams are: a directory, S3 or the object
/// layout (parsed by the one URL parser, opened by the server's
/// `stream_store`).
fn place(url: &str) -> anyhow::Result<StreamPlace> {
    let u = url.parse::<RemoteUrl>().map_err(|e| anyhow!("{e}"))?;
    paralog_server::stream_store::stream_place(&u).map_err(|e| anyhow!("{e}"))
}

/// The server's stream drain (one node): to `--stream-remote`, else to
/// `--remote`; none with the prefix as the remote (said in the log;
/// `paralog run` gives `--stream-remote` then).
pub fn server_drain(
    stream_remote: Option<&str>,
    remote: &paralog_server::remote::Remote,
    root: &std::path::Path,
    release_bytes: u64,
    released: paralog_server::streams::ReleaseCounts,
) -> anyhow::Result<Option<paralog_server::streams::StreamDrain>> {
    let Some(dir) = stream_place_of(stream_remote, remote)? else {
        return Ok(None);
    };
    let every = std::time::Duration::from_millis(100);
    Ok(Some(paralog_server::streams::start(
        root.to_path_buf(),
        dir,
        every,
        release_bytes,
        released,
    )?))
}

/// Where a server's streams drain: `--stream-remote URL`, else the
/// server's `--remote`; `None` (said in the log) with neither.
pub fn stream_place_of(
    stream_remote: Option<&str>,
    remote: &paralog_server::remote::Remote,
) -> anyhow::Result<Option<StreamPlace>> {
    use paralog_server::remote::Remote;
    Ok(Some(match (stream_remote, remote) {
        (Some(u), _) => place(u).map_err(|e| anyhow!("--stream-remote: {e}"))?,
        (None, Remote::Url(u, _)) => paralog_server::stream_store::stream_place(u)
            .map_err(|e| anyhow!("streams on {u}: {e}"))?,
        (None, Remote::Prefix) => {
            tracing::info!("streams are not drained: give --stream-remote URL (docs/streams.md)");
            return Ok(None);
        }
    }))
}

/// `URL/STREAM`: the remote and the stream's name (its last component).
fn split_target(target: &str) -> anyhow::Result<(StreamPlace, String)> {
    let t = target.trim_end_matches('/');
    let (url, name) = t
        .rsplit_once('/')
        .ok_or_else(|| anyhow!("{target}: give URL/STREAM (the remote, then the stream's name)"))?;
    paralog_stream::format::valid_name("stream name", name)
        .map_err(|e| anyhow!("{target}: {e}"))?;
    let url = if url.is_empty() || url.ends_with(':') || url.ends_with("//") {
        format!("{url}/")
    } else {
        url.to_owned()
    };
    Ok((place(&url)?, name.to_owned()))
}
