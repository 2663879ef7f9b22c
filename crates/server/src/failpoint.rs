//! Crash injection for the crash tests: `PARALOG_FAILPOINT=NAME[:N]` makes
//! the process kill itself with SIGKILL the Nth time (default: first) it
//! reaches the point NAME. Unset, a check costs one load of a cached value.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

static TARGET: OnceLock<Option<(String, u64)>> = OnceLock::new();
static HITS: AtomicU64 = AtomicU64::new(0);

/// The crash windows the drain exposes, in order.
pub const POINTS: &[&str] = &[
    "drain.mid_write",
    "drain.before_fsync",
    "drain.after_fsync",
    "drain.after_progress",
    "drain.mid_delete",
];

/// `PARALOG_FAILPOINT_DELETE_DELAY_MS=N`: sleep N ms at each step of a
/// drained epoch's deletion, so that tests can read through every
/// intermediate state of it while a real server drains.
pub fn delete_delay() {
    static DELAY: OnceLock<Option<std::time::Duration>> = OnceLock::new();
    let d = DELAY.get_or_init(|| {
        std::env::var("PARALOG_FAILPOINT_DELETE_DELAY_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(std::time::Duration::from_millis)
    });
    if let Some(d) = d {
        std::thread::sleep(*d);
    }
}

pub fn hit(name: &str) {
    let target = TARGET.get_or_init(|| {
        let v = std::env::var("PARALOG_FAILPOINT").ok()?;
        let (n, count) = match v.split_once(':') {
            Some((n, c)) => (n.to_owned(), c.parse().unwrap_or(1)),
            None => (v, 1),
        };
        Some((n, count))
    });
    if let Some((n, count)) = target {
        if n == name && HITS.fetch_add(1, Ordering::SeqCst) + 1 == *count {
            tracing::warn!(point = name, "failpoint reached: killing the process");
            // SAFETY: sending a signal to ourselves.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }
    }
}
