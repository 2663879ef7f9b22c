//! `paralog wait`: the end of a batch script. Asks this node's server (in a
//! server job: all servers) to drain everything committed (a one-node
//! server: and publish every logged array put committed here, or copy its
//! shares) and stop, and returns once they did; non-zero with the reason when something could
//! not be drained or the time ran out. Both engines answer with the same
//! `WaitAnswer`.

use std::process::ExitCode;

use paralog_server::status::{self, FileState, Request, StatusError, WaitAnswer};

#[derive(clap::Args)]
#[command(mut_arg("job", |a| a.help("The server of this job [default: PARALOG_JOB's, else the all-jobs server]")))]
pub struct Args {
    #[command(flatten)]
    server: crate::ServerSocket,
    /// Give up after this many seconds [default: no limit]
    #[arg(long, value_name = "SECS")]
    timeout: Option<f64>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let socket = args.server.find()?;
    let answer: WaitAnswer = match status::request_as(
        &socket,
        &Request::Wait {
            timeout_s: args.timeout,
        },
    ) {
        Ok(a) => a,
        Err(StatusError::Server { message, .. }) => {
            eprintln!("paralog wait: {message}");
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e.into()),
    };
    let st = &answer.status;
    if answer.drained {
        let (nodes, between, parts) = match &st.cluster {
            Some(c) => (
                c.nodes,
                c.bytes_between_nodes,
                crate::status::parts_by_node(&c.parts_by_node),
            ),
            None => (1, 0, String::new()),
        };
        let between = if between > 0 {
            format!(", {between} bytes between nodes")
        } else {
            String::new()
        };
        let puts = if st.puts_published > 0 {
            format!(", {} logged array put(s) published", st.puts_published)
        } else {
            String::new()
        };
        println!(
            "paralog wait: everything committed is drained ({nodes} node(s), {} epoch(s), {} bytes{between}{parts}{puts})",
            st.epochs_drained, st.bytes_drained
        );
        return Ok(ExitCode::SUCCESS);
    }
    if answer.timed_out {
        eprintln!(
            "paralog wait: the time ran out with {} epoch(s) not drained{}; every local log is kept:",
            st.epochs_pending,
            crate::status::puts_left(st)
        );
    } else {
        eprintln!("paralog wait: not everything could be drained; every local log is kept:");
    }
    for f in &st.files {
        match (&f.message, f.state) {
            (Some(m), _) => eprintln!("  {}: {m}", f.path),
            (None, FileState::Idle) if f.epochs_pending == 0 => {}
            (None, state) => eprintln!(
                "  {}: {} epoch(s) pending ({})",
                f.path,
                f.epochs_pending,
                crate::status::state_name(state)
            ),
        }
    }
    for p in &st.puts {
        eprintln!("  {}", crate::status::put_line(p));
    }
    for (stream, why) in &answer.streams_failed {
        eprintln!("  stream {stream}: not drained: {why} (its events stay on the node; `paralog recover` drains them)");
    }
    Ok(ExitCode::from(3))
}
