//! `paralog status`: what a running server is doing, one-node server or a
//! server of a server job alike (the one answer type, `Status`). On a
//! terminal, live progress bars (one per file with work, and a total) until
//! everything committed is drained; otherwise, or with `--once`, one table;
//! `--json` for scripts.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use paralog_server::puts::{PutState, PutStatus};
use paralog_server::status::{self, FileState, Request, Status};

#[derive(clap::Args)]
#[command(mut_arg("job", |a| a.help("The server of this job [default: the server of every job, else PARALOG_JOB's]")))]
#[command(
    after_help = "Exit status (the table, the live view and --json alike): 0; 2 when a file is damaged or refused (it will not be drained) or a logged array put failed; 1 when no server answers or the request fails."
)]
pub struct Args {
    #[command(flatten)]
    server: crate::ServerSocket,
    /// One JSON object, for scripts.
    #[arg(long)]
    json: bool,
    /// Print once, even on a terminal.
    #[arg(long)]
    once: bool,
}

/// The socket of the server of `job` (or of every job) on this node.
pub fn find_socket(
    local: &crate::LocalArg,
    job: Option<&str>,
    given: Option<&std::path::Path>,
) -> anyhow::Result<PathBuf> {
    if let Some(s) = given {
        return Ok(s.to_path_buf());
    }
    let root = local.resolve()?;
    let job = job
        .map(str::to_owned)
        .or_else(|| std::env::var("PARALOG_JOB").ok());
    let mut tried = Vec::new();
    if let Some(j) = &job {
        tried.push(status::default_socket(&root, Some(j)));
    }
    tried.push(status::default_socket(&root, None));
    for t in &tried {
        if t.exists() {
            return Ok(t.clone());
        }
    }
    // No job named: the one job server on this node, whatever its name
    // (`paralog run` names its job run-<time>-<pid>).
    if job.is_none() {
        let mut found: Vec<PathBuf> = std::fs::read_dir(&root)
            .map(|d| {
                d.flatten()
                    .map(|e| e.path())
                    .filter(|p| {
                        p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                            n.starts_with(".paralog-server-") && n.ends_with(".sock")
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        found.sort();
        match found.len() {
            1 => return Ok(found.remove(0)),
            0 => {}
            _ => anyhow::bail!(
                "several paralog servers run for {}: give --job (their sockets: {})",
                root.display(),
                paths_list(&found)
            ),
        }
    }
    anyhow::bail!(
        "no paralog server is running for {} (looked for {})",
        root.display(),
        paths_list(&tried)
    )
}

/// Sockets named in an error: "a, b, c".
fn paths_list(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|t| t.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Sizes for people (the report's rule: "1023 B", "5.0 MiB").
pub use paralog_report::html::human_bytes;

fn eta(s: Option<f64>) -> String {
    match s {
        Some(t) if t <= 0.0 => "-".into(),
        Some(t) => format!("{t:.0}s"),
        None => "?".into(),
    }
}

pub fn state_name(s: FileState) -> &'static str {
    match s {
        FileState::Idle => "idle",
        FileState::Queued => "queued",
        FileState::Draining => "draining",
        FileState::Retrying => "RETRYING",
        FileState::Damaged => "DAMAGED",
        FileState::Refused => "REFUSED",
    }
}

pub fn print_table(st: &Status) {
    println!(
        "server pid {} · root {} · job {} · remote {}",
        st.pid,
        st.root,
        st.job.as_deref().unwrap_or("(all)"),
        st.remote
    );
    if let Some(c) = &st.cluster {
        println!(
            "server job of {} node(s) (this is {}), round {}: {} between nodes{}{}",
            c.nodes,
            c.node,
            c.rounds,
            human_bytes(c.bytes_between_nodes),
            parts_by_node(&c.parts_by_node),
            if st.finishing { "; finishing" } else { "" }
        );
        let r = &c.round_cost;
        println!(
            "rounds' summaries: last round sent {}, received {}, took {:.1} ms; in all sent {}, received {}",
            human_bytes(r.last_sent),
            human_bytes(r.last_received),
            r.last_us as f64 / 1000.0,
            human_bytes(r.bytes_sent),
            human_bytes(r.bytes_received)
        );
    }
    println!(
        "drained {} in {} epoch(s) at {}/s; pending {} in {} epoch(s), ETA {}",
        human_bytes(st.bytes_drained),
        st.epochs_drained,
        human_bytes(st.rate_bps as u64),
        human_bytes(st.bytes_pending),
        st.epochs_pending,
        eta(st.eta_s)
    );
    print_puts(st);
    if st.files.is_empty() {
        println!("no captured files yet");
        return;
    }
    println!(
        "{:<9} {:>8} {:>8} {:>11} {:>11} {:>6}  file",
        "state", "epochs", "left", "drained", "pending", "ETA"
    );
    for f in &st.files {
        println!(
            "{:<9} {:>8} {:>8} {:>11} {:>11} {:>6}  {}",
            state_name(f.state),
            f.epochs_drained,
            f.epochs_pending,
            human_bytes(f.bytes_drained),
            human_bytes(f.bytes_pending),
            eta(f.eta_s),
            f.path
        );
        if let Some(m) = &f.message {
            println!("          {m}");
        }
    }
}

fn live(sock: &std::path::Path) -> anyhow::Result<()> {
    let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stdout());
    let style =
        ProgressStyle::with_template("{prefix:>9} [{bar:30}] {bytes:>10}/{total_bytes:<10} {msg}")
            .expect("static template")
            .progress_chars("=> ");
    let total = multi.add(ProgressBar::new(0).with_style(style.clone()));
    total.set_prefix("total");
    let mut bars: std::collections::BTreeMap<String, ProgressBar> = Default::default();
    loop {
        let st = status::request_status(sock, &Request::Status)?;
        for f in &st.files {
            if f.bytes_pending == 0 && f.state == FileState::Idle && !bars.contains_key(&f.path) {
                continue;
            }
            let bar = bars
                .entry(f.path.clone())
                .or_insert_with(|| multi.add(ProgressBar::new(0).with_style(style.clone())));
            bar.set_length(f.bytes_drained + f.bytes_pending);
            bar.set_position(f.bytes_drained);
            bar.set_prefix(state_name(f.state));
            let mut msg = format!(
                "{} ep left, ETA {} {}",
                f.epochs_pending,
                eta(f.eta_s),
                f.path
            );
            if let Some(m) = &f.message {
                msg.push_str(&format!(" ({m})"));
            }
            bar.set_message(msg);
        }
        total.set_length(st.bytes_drained + st.bytes_pending);
        total.set_position(st.bytes_drained);
        total.set_message(format!(
            "{}/s, ETA {}",
            human_bytes(st.rate_bps as u64),
            eta(st.eta_s)
        ));
        if st.idle && st.epochs_pending == 0 {
            total.finish();
            for b in bars.values() {
                b.finish();
            }
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// ` and 2 logged array put(s) not published or copied`, or nothing.
pub fn puts_left(st: &Status) -> String {
    match st.puts.len() {
        0 => String::new(),
        n => format!(" and {n} logged array put(s) not published or copied"),
    }
}

/// One logged put the server's publisher left: `array NAME put ID
/// (waiting): why` (in a server job: `array NAME (node n0) put ID …`,
/// `array NAME node n1's share of put ID …`).
pub fn put_line(p: &PutStatus) -> String {
    let state = match p.state {
        PutState::Waiting => "waiting",
        PutState::Retrying => "RETRYING",
        PutState::Failed => "FAILED",
    };
    // A server job's status lists every node's puts, each with its node.
    let kind = match (&p.node, p.share) {
        (None, true) => "this node's share of put".to_owned(),
        (None, false) => "put".to_owned(),
        (Some(n), true) => format!("node {n}'s share of put"),
        (Some(n), false) => format!("(node {n}) put"),
    };
    format!("array {} {kind} {} ({state}): {}", p.name, p.id, p.message)
}

/// The logged array puts of this node, or of every node of a server job
/// (docs/objects.md "Waiting for logged puts"): how many were
/// published, and a line per put left.
fn print_puts(st: &Status) {
    if st.puts.is_empty() && st.puts_published == 0 {
        return;
    }
    println!(
        "logged array puts: {} published, {} not published",
        st.puts_published,
        st.puts.len()
    );
    for p in &st.puts {
        println!("  {}", put_line(p));
    }
}

/// `, parts uploaded by node 3/1/0`, or nothing.
pub fn parts_by_node(parts: &[u64]) -> String {
    if parts.is_empty() {
        return String::new();
    }
    let p: Vec<String> = parts.iter().map(u64::to_string).collect();
    format!(", parts uploaded by node {}", p.join("/"))
}

/// The files written past capture so far (crate::missed), as lines for
/// the table.
fn print_missed(m: &serde_json::Value) {
    if m["checked"] != true {
        println!(
            "past capture: not checked: {}",
            m["why"].as_str().unwrap_or("?")
        );
        return;
    }
    let lines = m["lines"].as_array().map_or(&[][..], |a| a.as_slice());
    if lines.is_empty() {
        println!(
            "past capture: no file under {} was created or changed past capture so far",
            m["prefix"].as_str().unwrap_or("?")
        );
    }
    for l in lines {
        println!("{}", l.as_str().unwrap_or("?"));
    }
}

/// The exit status for `st`, whatever the output's form: 2 when
/// something committed will not reach the remote (a damaged or refused
/// file; a logged put that can never be published is as lost).
fn exit_code(st: &Status) -> ExitCode {
    let failed_puts = st.puts.iter().any(|p| p.state == PutState::Failed);
    if st.damaged > 0 || failed_puts {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let sock = args.server.find()?;
    let mut st = status::request_status(&sock, &Request::Status)?;
    if args.json {
        let mut v = serde_json::to_value(&st)?;
        // A server job has no `paralog run` snapshot of the prefix.
        if st.cluster.is_none() {
            v["missed"] =
                crate::missed::status_json(std::path::Path::new(&st.root), st.job.as_deref());
        }
        v["streams"] = crate::stream::lag::status_json(&st);
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(exit_code(&st));
    }
    if !args.once && std::io::stdout().is_terminal() {
        live(&sock).with_context(|| format!("following {}", sock.display()))?;
        st = status::request_status(&sock, &Request::Status)?;
    }
    print_table(&st);
    crate::stream::lag::print(&crate::stream::lag::status_json(&st));
    print_missed(&crate::missed::status_json(
        std::path::Path::new(&st.root),
        st.job.as_deref(),
    ));
    Ok(exit_code(&st))
}
