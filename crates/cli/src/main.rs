//! `paralog`: the command-line front of the log, capture and server crates.
//! Logic lives in the libraries; this binary parses, calls and reports.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod aggregate_args;
mod check_symbols;
mod cluster;
mod doctor;
mod env;
mod extract;
mod get;
mod inspect;
mod materialize;
mod missed;
mod obj;
mod obj_logged;
mod obj_parse;
mod obj_publish;
mod obj_s3;
mod obj_view;
mod obj_watch;
mod recover;
mod recover_streams;
mod remote;
mod report;
mod run;
mod server;
mod sets;
mod status;
mod stream;
mod wait;

#[derive(Parser)]
#[command(
    name = "paralog",
    version,
    about = "Host-side log for parallel output: capture, drain, recover"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Which I/O entry points a program uses, and whether capture handles them.
    CheckSymbols(check_symbols::Args),
    /// Whether a run would work on this node: settings, libraries, MPI,
    /// node-local directory, remote, free space, inotify; with the fixes.
    Doctor(doctor::Args),
    /// Print the `export` lines that turn capture on (for batch scripts).
    Env(env::Args),
    /// Write a checkpoint set's members as ordinary files, every block verified.
    Extract(extract::Args),
    /// Read an object back from an object remote (objstore:///root/NAME).
    Get(get::Args),
    /// List what a node-local root holds: jobs, files, opens, epochs, ranks, extents.
    Inspect(inspect::Args),
    /// Write the logical file at a committed epoch from the node-local log.
    Materialize(materialize::Args),
    /// Array objects: init, ls, info, get [--slice], verify, put, begin/write/commit/abort, rm, puts, gc, view.
    Obj(obj::Args),
    /// Drain every committed epoch not yet drained, in order (after a crash).
    Recover(recover::Args),
    /// Write the HTML report of a job (timeline plot, summary) and a PNG
    /// of its timeline, from what the run recorded on this node.
    Report(report::Args),
    /// Run a program with capture on, a server draining it, and a summary.
    Run(run::Args),
    /// The node server: drain committed epochs to the remote as they appear.
    Server(server::Args),
    /// The checkpoint sets under a remote: members, containers, bytes, complete or not.
    Sets(sets::Args),
    /// What a running server is doing (live on a terminal, --json for scripts).
    Status(status::Args),
    /// Shared event streams: ls, describe, cat, drain, produce (docs/streams.md).
    Stream(stream::Args),
    /// Wait until everything committed is drained (on every node of a server
    /// job), then let the servers exit: the end of a batch script.
    Wait(wait::Args),
}

/// `--local` and `--job`: a node-local root and a job of it. A command
/// whose `--job` means more than "only this job" says so with
/// `#[command(mut_arg("job", ...))]`.
#[derive(clap::Args, Debug)]
pub struct LocalJob {
    #[command(flatten)]
    pub local: LocalArg,
    /// Only this job.
    #[arg(long)]
    pub job: Option<String>,
}

/// `--local`, `--job` and `--socket`: the status socket of a running
/// server (`status`, `wait`).
#[derive(clap::Args, Debug)]
pub struct ServerSocket {
    #[command(flatten)]
    pub at: LocalJob,
    /// The server's status socket [default: from --local and --job]
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
}

impl ServerSocket {
    /// The socket to talk to: the given one, or the job's server, or the
    /// all-jobs server, whichever exists.
    pub fn find(&self) -> anyhow::Result<PathBuf> {
        status::find_socket(
            &self.at.local,
            self.at.job.as_deref(),
            self.socket.as_deref(),
        )
    }
}

/// The node-local root, from `--local` or `PARALOG_LOCAL`.
#[derive(clap::Args, Debug)]
pub struct LocalArg {
    /// Node-local log directory [env: PARALOG_LOCAL]
    #[arg(long, value_name = "DIR")]
    local: Option<PathBuf>,
}

impl LocalArg {
    /// The directory, with `{node}` standing for this node's name
    /// (PARALOG_NODE, else the host name).
    pub fn resolve(&self) -> anyhow::Result<PathBuf> {
        let node = std::env::var("PARALOG_NODE").ok();
        self.resolve_for(node.as_deref())
    }

    /// The directory, with `{node}` standing for `node` (default: the host
    /// name).
    pub fn resolve_for(&self, node: Option<&str>) -> anyhow::Result<PathBuf> {
        let raw = match &self.local {
            Some(p) => p.clone(),
            None => std::env::var_os("PARALOG_LOCAL")
                .map(PathBuf::from)
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "no node-local directory: give --local DIR or set PARALOG_LOCAL"
                    )
                })?,
        };
        if !raw.to_string_lossy().contains("{node}") {
            return Ok(raw);
        }
        let name = paralog_settings::node_name(node).map_err(|e| anyhow::anyhow!(e))?;
        Ok(paralog_settings::expand_node(&raw, &name))
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Commands that print for pipelines die quietly when the reader goes
    // away (`| head`), as Unix tools do. Not those that talk to a network
    // or a socket (server, run, recover, status): a peer resetting a
    // connection must be an error they handle, not a signal that kills
    // them (Rust ignores SIGPIPE by default; children get it back).
    if matches!(
        cli.cmd,
        Cmd::CheckSymbols(_)
            | Cmd::Env(_)
            | Cmd::Inspect(_)
            | Cmd::Materialize(_)
            | Cmd::Sets(_)
            | Cmd::Stream(_)
    ) {
        // SAFETY: restoring the default disposition of one signal at start-up.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let result = match cli.cmd {
        Cmd::CheckSymbols(a) => check_symbols::run(a),
        Cmd::Doctor(a) => doctor::run(a),
        Cmd::Env(a) => env::run(a),
        Cmd::Extract(a) => extract::run(a),
        Cmd::Get(a) => get::run(a),
        Cmd::Inspect(a) => inspect::run(a),
        Cmd::Materialize(a) => materialize::run(a),
        Cmd::Obj(a) => obj::run(a),
        Cmd::Recover(a) => recover::run(a),
        Cmd::Report(a) => report::run(a),
        Cmd::Run(a) => run::run(a),
        Cmd::Server(a) => server::run(a),
        Cmd::Sets(a) => sets::run(a),
        Cmd::Status(a) => status::run(a),
        Cmd::Stream(a) => stream::run(a),
        Cmd::Wait(a) => wait::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("paralog: {e:#}");
            ExitCode::from(1)
        }
    }
}
