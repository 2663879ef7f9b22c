//! This process's part of the job's timeline (`paralog_log::timeline`,
//! docs/report.md): when it started, each consistency point (its local
//! commit to the global commit, rank, epoch, bytes) and its exit, one line
//! each appended to `<local>/.paralog-timeline-<job>/capture-<pid>`. After
//! the epoch is committed; never an fsync, no thread: an open, one write
//! and a close per point, next to a commit that costs two fsyncs and an
//! agreement. A process without a consistency point writes nothing.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use paralog_log::timeline::{self, Event};
use paralog_log::RankLog;

use crate::settings::Config;

static DIR: OnceLock<PathBuf> = OnceLock::new();
/// The process whose start line is written (a forked child writes its own).
static STARTED: AtomicU32 = AtomicU32::new(0);
static CPS: AtomicU64 = AtomicU64::new(0);

/// Start recording for this process (once; the exit line at exit).
pub fn init(cfg: &Config) {
    if DIR.set(timeline::dir(&cfg.local, &cfg.job)).is_ok() {
        // SAFETY: registering a plain extern "C" function.
        unsafe {
            libc::atexit(at_exit);
        }
    }
}

/// What a consistency point of one open is, taken before its epoch is
/// marked committed (a one-process writer then moves to its next one).
pub struct Point {
    rank: u32,
    size: u32,
    gen: u64,
    bytes: u64,
    path: Vec<u8>,
}

impl Point {
    pub fn of(log: &RankLog) -> Point {
        Point {
            rank: log.rank(),
            size: log.comm_size(),
            gen: log.ident().gen,
            bytes: log.epoch_data_bytes(),
            path: log.ident().rel.clone(),
        }
    }
}

/// Epoch `epoch` of the open is committed now; its consistency point
/// took `took`.
pub fn consistency_point(took: Duration, p: Point, epoch: u64) {
    let t1 = timeline::now_us();
    record(Event::Cp(timeline::Cp {
        pid: std::process::id(),
        t0: t1.saturating_sub(took.as_micros() as u64),
        t1,
        rank: p.rank,
        size: p.size,
        gen: p.gen,
        epoch,
        bytes: p.bytes,
        path: p.path,
    }));
}

fn record(ev: Event) {
    let Some(dir) = DIR.get() else { return };
    let pid = std::process::id();
    let mut text = String::new();
    if STARTED.swap(pid, Ordering::Relaxed) != pid {
        // This process's first line (a forked child's counts are not its
        // parent's).
        CPS.store(0, Ordering::Relaxed);
        text.push_str(
            &Event::Start {
                pid,
                t: process_start_us(),
            }
            .encode(),
        );
    }
    if matches!(ev, Event::Cp(_)) {
        CPS.fetch_add(1, Ordering::Relaxed);
    }
    text.push_str(&ev.encode());
    // One line on stderr per process, not one per consistency point.
    static WARNED: AtomicBool = AtomicBool::new(false);
    if let Err(e) = timeline::append(dir, &format!("capture-{pid}"), &text) {
        if !WARNED.swap(true, Ordering::Relaxed) {
            crate::report::line(&format!(
                "writing the timeline in {}: {e} (the run goes on; `paralog report` will lack this process)",
                dir.display()
            ));
        }
    }
}

extern "C" fn at_exit() {
    // Never unwind out of an exit handler.
    let _ = std::panic::catch_unwind(|| {
        let Some(_g) = crate::guard::Guard::enter() else {
            return;
        };
        let pid = std::process::id();
        if STARTED.load(Ordering::Relaxed) != pid {
            return; // no consistency point: a launcher or a helper
        }
        record(Event::End {
            pid,
            t: timeline::now_us(),
            bytes: crate::stats::bytes_captured(),
            cps: CPS.load(Ordering::Relaxed),
        });
    });
}

/// When this process started, from /proc (its start in clock ticks since
/// boot); now if that cannot be read.
fn process_start_us() -> u64 {
    let now = timeline::now_us();
    let ticks = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // Field 22, counted after the parenthesised command name.
            let rest = &s[s.rfind(')')? + 1..];
            rest.split_whitespace().nth(19)?.parse::<u64>().ok()
        });
    // SAFETY: sysconf and clock_gettime with a valid out-pointer.
    let (hz, boot) = unsafe {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let hz = libc::sysconf(libc::_SC_CLK_TCK);
        let ok = libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) == 0;
        (
            hz,
            ok.then(|| ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000),
        )
    };
    match (ticks, boot) {
        (Some(t), Some(boot)) if hz > 0 => {
            let since_boot = t * 1_000_000 / hz as u64;
            now.saturating_sub(boot.saturating_sub(since_boot))
        }
        _ => now,
    }
}
