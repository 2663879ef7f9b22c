//! What `paralog run` reports when the program ends: the counters capture
//! left, the timeline record of the run, files written past capture, the
//! summary.

use std::path::Path;
use std::time::Duration;

use paralog_log::timeline;
use paralog_server::status::Status;
use paralog_settings::counters::ProcessCounters;

use super::Args;
use crate::missed::Missed;
use crate::status::human_bytes;

#[derive(Default)]
pub(super) struct Counters {
    pub(super) processes: u64,
    pub(super) bytes: u64,
    pub(super) max_epochs: u64,
    pub(super) max_sync: Duration,
    pub(super) sum_sync: Duration,
    /// Epochs capture refused to commit (bytes bypassed it), one line each.
    pub(super) refused: Vec<String>,
}

pub(super) fn read_counters(dir: &Path) -> Counters {
    let mut c = Counters::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return c;
    };
    for e in entries.flatten() {
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        if e.path().extension().is_some_and(|x| x == "refused") {
            c.refused.extend(text.lines().map(str::to_owned));
            continue;
        }
        let Some(p) = ProcessCounters::decode(&text) else {
            continue;
        };
        let (epochs, bytes) = (p.epochs, p.bytes);
        if epochs == 0 && bytes == 0 {
            continue; // a launcher or helper process: it captured nothing
        }
        let sync = Duration::from_nanos(p.sync_ns);
        c.processes += 1;
        c.bytes += bytes;
        c.max_epochs = c.max_epochs.max(epochs);
        c.max_sync = c.max_sync.max(sync);
        c.sum_sync += sync;
    }
    c
}

/// The program's run in the job's timeline (docs/report.md).
pub(super) fn record_run(
    root: &Path,
    job: &str,
    (t0, t1): (u64, u64),
    code: u8,
    command: &[String],
) {
    let pid = std::process::id();
    let line = timeline::Event::Run {
        pid,
        t0,
        t1,
        status: i32::from(code),
        command: command.join(" ").into_bytes(),
    }
    .encode();
    let dir = timeline::dir(root, job);
    if let Err(e) = timeline::append(&dir, &format!("run-{pid}"), &line) {
        eprintln!("paralog: writing the timeline in {}: {e}", dir.display());
    }
}

/// The MISSED lines on stderr; whether a file was missed.
pub(super) fn print_missed(m: Missed) -> bool {
    match m {
        Missed::TooLarge => {
            eprintln!(
                "paralog: the prefix holds too many files to check for files written past capture"
            );
            false
        }
        Missed::Files { files, lines } => {
            for line in lines {
                eprintln!("paralog: {line}");
            }
            !files.is_empty()
        }
    }
}

pub(super) fn summary(
    args: &Args,
    code: u8,
    program_time: Duration,
    total_time: Duration,
    c: &Counters,
    at_end: Option<&Status>,
    fin: &Status,
) {
    let overlapped = at_end.map_or(0.0, |s| s.drain_active_s);
    let after = (total_time - program_time).as_secs_f64();
    let mean_sync = if c.processes > 0 {
        c.sum_sync.as_secs_f64() / c.processes as f64
    } else {
        0.0
    };
    eprintln!(
        "paralog: summary of job {} ({})",
        fin.job.as_deref().unwrap_or("?"),
        args.command.join(" ")
    );
    eprintln!(
        "  program            exit status {code}, {:.2} s",
        program_time.as_secs_f64()
    );
    eprintln!(
        "  captured           {} by {} process(es), {} epoch(s) per rank at most",
        human_bytes(c.bytes),
        c.processes,
        c.max_epochs
    );
    eprintln!(
        "  consistency points {:.1} ms per rank on average, {:.1} ms at most (local commit + agreement)",
        mean_sync * 1e3,
        c.max_sync.as_secs_f64() * 1e3
    );
    eprintln!(
        "  drained            {} in {} epoch(s) to {}",
        human_bytes(fin.bytes_drained),
        fin.epochs_drained,
        fin.remote
    );
    eprintln!(
        "  drain time         {:.2} s while the program ran, then {:.2} s of waiting after it ended ({:.2} s end to end)",
        overlapped,
        after,
        total_time.as_secs_f64()
    );
}
