//! `paralog wait`: the end of a batch script. Asks this node's server (in a
//! server job: all servers) to drain everything committed and stop, and
//! returns once they did; non-zero with the reason when something could
//! not be drained or the time ran out.

use std::path::PathBuf;
use std::process::ExitCode;

use paralog_server::status::{self, Request};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    local: crate::LocalArg,
    /// The server of this job [default: PARALOG_JOB's, else the all-jobs server]
    #[arg(long)]
    job: Option<String>,
    /// The server's status socket [default: from --local and --job]
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Give up after this many seconds [default: no limit]
    #[arg(long, value_name = "SECS")]
    timeout: Option<f64>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let socket =
        crate::status::find_socket(&args.local, args.job.as_deref(), args.socket.as_deref())?;
    let v = status::request(
        &socket,
        &Request::Wait {
            timeout_s: args.timeout,
        },
    )?;
    if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
        eprintln!("paralog wait: {e}");
        return Ok(ExitCode::from(1));
    }
    if v["drained"] == true {
        let between = match v["bytes_between_nodes"].as_u64() {
            Some(b) if b > 0 => format!(", {b} bytes between nodes"),
            _ => String::new(),
        };
        let parts = match v["parts_by_node"].as_array() {
            Some(p) if !p.is_empty() => {
                let p: Vec<String> = p.iter().map(|n| n.to_string()).collect();
                format!(", parts uploaded by node {}", p.join("/"))
            }
            _ => String::new(),
        };
        println!(
            "paralog wait: everything committed is drained ({} node(s), {} epoch(s), {} bytes{between}{parts})",
            v["nodes"].as_u64().unwrap_or(1),
            v["epochs_drained"],
            v["bytes_drained"]
        );
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("paralog wait: not everything could be drained; every local log is kept:");
    for f in v["failed"].as_array().into_iter().flatten() {
        eprintln!("  {}", f.as_str().unwrap_or("?"));
    }
    Ok(ExitCode::from(3))
}
