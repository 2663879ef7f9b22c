//! `paralog`: the command-line front of the log, capture and server crates.
//! Logic lives in the libraries; this binary parses, calls and reports.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod inspect;
mod materialize;

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
    /// List what a node-local root holds: jobs, files, opens, epochs, ranks, extents.
    Inspect(inspect::Args),
    /// Write the logical file at a committed epoch from the node-local log.
    Materialize(materialize::Args),
}

/// The node-local root, from `--local` or `PARALOG_LOCAL`.
#[derive(clap::Args, Debug)]
pub struct LocalArg {
    /// Node-local log directory [env: PARALOG_LOCAL]
    #[arg(long, value_name = "DIR")]
    local: Option<PathBuf>,
}

impl LocalArg {
    pub fn resolve(&self) -> anyhow::Result<PathBuf> {
        match &self.local {
            Some(p) => Ok(p.clone()),
            None => std::env::var_os("PARALOG_LOCAL")
                .map(PathBuf::from)
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "no node-local directory: give --local DIR or set PARALOG_LOCAL"
                    )
                }),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Inspect(a) => inspect::run(a),
        Cmd::Materialize(a) => materialize::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("paralog: {e:#}");
            ExitCode::from(1)
        }
    }
}
