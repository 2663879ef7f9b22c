//! `paralog server`: the node server in the foreground. Drains every
//! committed epoch under the node-local root (one job, or all) to the
//! remote, and answers `paralog status` on a Unix socket. docs/server.md.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::bail;
use paralog_server::service::Config;
use paralog_server::status;

#[derive(clap::Args, Debug, Clone)]
pub struct Tuning {
    /// Files drained in parallel (worker threads).
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub workers: usize,
    /// Memory for drain buffers in all (K, M, G: binary multiples).
    #[arg(long, default_value = "256M", value_parser = parse_bytes, value_name = "BYTES")]
    pub memory: u64,
    /// Size of one drain buffer (one remote write).
    #[arg(long, default_value = "8M", value_parser = parse_bytes, value_name = "BYTES")]
    pub buffer: u64,
    /// Bandwidth cap for the drain, bytes per second (K, M, G) [default: none]
    #[arg(long, value_parser = parse_bytes, value_name = "BYTES")]
    pub max_rate: Option<u64>,
    /// CPU niceness of the drain workers (their I/O runs at the lowest
    /// best-effort priority too); 0 leaves both alone.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub nice: i32,
}

#[derive(clap::Args)]
#[command(mut_arg("job", |a| a.help("Serve only this job [default: every job under the node-local root]")))]
pub struct Args {
    #[command(flatten)]
    at: crate::LocalJob,
    #[command(flatten)]
    remote: crate::remote::RemoteArg,
    /// Status socket [default: <local>/.paralog-server[-JOB].sock]
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    #[command(flatten)]
    tuning: Tuning,
    #[command(flatten)]
    aggregate: crate::aggregate_args::AggregateArgs,
    #[command(flatten)]
    pub job_of_servers: ServerJobArgs,
    /// Where the shared event streams under the node-local root drain: a
    /// directory, s3://bucket/prefix or objstore:///path (docs/streams.md)
    /// [default: --remote; `paralog run` without one gives the prefix]
    #[arg(long, value_name = "URL")]
    stream_remote: Option<String>,
    #[command(flatten)]
    release: crate::stream::ReleaseArg,
}

/// How a server takes part in a server job (one server per node, started
/// by an MPI launcher).
#[derive(clap::Args, Debug, Clone)]
pub struct ServerJobArgs {
    /// This node's name [env: PARALOG_NODE; default: the host name]
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// The MPI of the server job [default: detected from the launcher's
    /// environment; without one, a server drains its node alone]
    #[arg(long, value_enum, value_name = "MPI")]
    pub mpi: Option<crate::env::Mpi>,
    /// Seconds a server waits for the others in one step before it gives
    /// up (a peer died or hangs) and ends the job, keeping every local log
    #[arg(long, default_value_t = 600.0, value_name = "SECS")]
    pub peer_timeout: f64,
    /// How the servers write a POSIX remote: each its own bytes
    /// (independent; measured faster, docs/benchmarks.md §8), or together
    /// with collective MPI-IO (MPI_File_write_all)
    #[arg(long, value_enum, default_value = "independent", value_name = "HOW")]
    pub posix_writes: PosixWritesArg,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy)]
pub enum PosixWritesArg {
    Independent,
    Collective,
}

impl From<PosixWritesArg> for paralog_server::cluster::PosixWrites {
    fn from(a: PosixWritesArg) -> Self {
        match a {
            PosixWritesArg::Independent => Self::Independent,
            PosixWritesArg::Collective => Self::Collective,
        }
    }
}

impl ServerJobArgs {
    /// The node name, and the MPI when this process is part of a server job.
    pub fn resolve(&self) -> anyhow::Result<(Option<String>, Option<crate::env::Mpi>)> {
        let node = self
            .node
            .clone()
            .or_else(|| std::env::var("PARALOG_NODE").ok())
            .filter(|n| !n.is_empty());
        Ok((node, self.mpi.or_else(crate::cluster::launched_by)))
    }

    pub fn node_name(&self, node: Option<&str>) -> anyhow::Result<String> {
        paralog_settings::node_name(node).map_err(|e| anyhow::anyhow!(e))
    }

    /// The configuration of this node's server in a server job.
    pub fn config(
        &self,
        root: &Path,
        job: Option<String>,
        remote: crate::remote::Remote,
        node: Option<&str>,
        buf_bytes: usize,
        finish_now: bool,
    ) -> anyhow::Result<paralog_server::cluster::ClusterConfig> {
        Ok(paralog_server::cluster::ClusterConfig {
            root: root.to_path_buf(),
            job,
            remote,
            node: self.node_name(node)?,
            buf_bytes,
            poll: std::time::Duration::from_millis(200),
            finish_now,
            peer_timeout: std::time::Duration::from_secs_f64(self.peer_timeout),
            posix_writes: self.posix_writes.into(),
            sets: None,
            streams: None,
            stream_release_bytes: paralog_stream::DrainOptions::default().release_bytes,
            puts: None,
        })
    }
}

/// `123`, `64K`, `256M`, `1G` (binary multiples; a trailing `B`/`iB` is allowed).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 1 << 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 1 << 30),
        Some('t' | 'T') => (&t[..t.len() - 1], 1 << 40),
        _ => (t, 1),
    };
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a size (examples: 4096, 64K, 256M, 1G)"))?;
    if !(n.is_finite() && n > 0.0) {
        return Err(format!("{s:?} must be a positive size"));
    }
    Ok((n * mult as f64) as u64)
}

/// The node-local root (relative to the working directory if relative),
/// created private or checked to be (`paralog_server::node::prepare_root`).
pub fn prepare_root(root: &Path) -> anyhow::Result<PathBuf> {
    let abs = std::env::current_dir()?.join(root);
    Ok(paralog_server::node::prepare_root(&abs)?)
}

pub fn init_tracing() {
    let level = std::env::var("PARALOG_LOG").unwrap_or_else(|_| "info".into());
    let filter = tracing_subscriber::EnvFilter::try_new(format!("warn,paralog={level}"))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

/// [`init_tracing`] only when `PARALOG_LOG` is set: for the commands that
/// print their own report (`paralog recover` on one node, `paralog stream
/// drain`), whose stderr gains no log lines unless asked.
pub fn init_tracing_if_asked() {
    if std::env::var_os("PARALOG_LOG").is_some() {
        init_tracing();
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    init_tracing();
    paralog_server::open_files::raise_soft_limit();
    // Before any thread exists: every thread created later (the S3
    // runtime's, the status threads) inherits the lowered priorities.
    paralog_server::priority::lower(args.tuning.nice);
    let (node, mpi) = args.job_of_servers.resolve()?;
    let aggregate = args.aggregate.resolve()?;
    let root = prepare_root(&args.at.local.resolve_for(node.as_deref())?)?;
    if let Some(j) = &args.at.job {
        paralog_log::layout::validate_component("job name", j)
            .map_err(|e| anyhow::anyhow!("--job: {e}"))?;
    }
    let remote = args.remote.resolve_checked()?;
    let release = args.release.resolve()?;
    let _lock = paralog_server::node::lock_server(&root, args.at.job.as_deref())?;
    let socket = args
        .socket
        .clone()
        .unwrap_or_else(|| status::default_socket(&root, args.at.job.as_deref()));
    let t = &args.tuning;
    if t.buffer > t.memory {
        bail!("--buffer {} is larger than --memory {}", t.buffer, t.memory);
    }
    let sets = crate::aggregate_args::AggregateArgs::sets(aggregate, &remote, mpi.is_some())?
        .map(std::sync::Arc::new);
    // Every server of a job too: its node's programs read from it.
    crate::aggregate_args::AggregateArgs::index_s3_sets(&root, &remote);
    if let Some(s) = sets.as_ref().filter(|_| mpi.is_some()) {
        // A set's leader receives into these buffers (docs/aggregate.md).
        if s.buffers as u64 * t.buffer > t.memory {
            bail!(
                "--agg-buffers {} of --buffer {} need more than --memory {}",
                s.buffers,
                t.buffer,
                t.memory
            );
        }
    }
    if let Some(mpi) = mpi {
        let streams = crate::stream::stream_place_of(args.stream_remote.as_deref(), &remote)?;
        let mut cfg = args.job_of_servers.config(
            &root,
            args.at.job.clone(),
            remote,
            node.as_deref(),
            t.buffer as usize,
            false,
        )?;
        cfg.sets = sets.clone();
        cfg.streams = streams;
        cfg.stream_release_bytes = release;
        // This node's logged array puts, as a one-node server publishes
        // them; the job's rounds wait for every node's (docs/objects.md
        // "Logged puts in a server job").
        let objects = crate::obj_publish::start_for_job(root.clone())?;
        cfg.puts = Some(objects.puts());
        let (totals, rank) = crate::cluster::run(mpi, cfg, Some(socket))?;
        // A last round: the share directories of versions published.
        objects.finish();
        return Ok(crate::cluster::report(&totals, rank, &root, "server"));
    }
    let server = paralog_server::node::start(
        Config {
            root: root.clone(),
            job: args.at.job.clone(),
            remote: remote.clone(),
            workers: t.workers.max(1),
            pool_bytes: t.memory as usize,
            buf_bytes: t.buffer as usize,
            max_rate: t.max_rate,
            nice: t.nice,
            sets,
        },
        &socket,
        // Its publisher of logged array puts starts below.
        true,
    )?;
    tracing::info!(
        root = %root.display(),
        job = args.at.job.as_deref().unwrap_or("(all)"),
        remote = %remote.describe(),
        socket = %socket.display(),
        workers = t.workers,
        "server ready"
    );
    // Its last rounds run at the first `wait` that finds the files done,
    // else at the stop.
    let streams = server.streams_end();
    streams.set(crate::stream::server_drain(
        args.stream_remote.as_deref(),
        &remote,
        &root,
        release,
        server.stream_releases(),
    )?);
    let objects =
        crate::obj_publish::start(root.clone(), crate::obj_publish::EVERY, server.puts())?;
    server.wait_stop();
    let objects_failed = !objects.finish();
    // After the files: a last round of every stream, so that every event
    // flushed before the program ended is on the remote.
    let streams_failed = !streams.finish().is_empty();
    let _ = std::fs::remove_file(&socket);
    let st = server.status();
    tracing::info!(
        epochs = st.epochs_drained,
        bytes = st.bytes_drained,
        pending = st.epochs_pending,
        "server stopped"
    );
    Ok(if streams_failed || objects_failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
