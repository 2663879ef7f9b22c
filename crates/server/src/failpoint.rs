//! Crash injection for the crash tests: `PARALOG_FAILPOINT=NAME[:N]` makes
//! the process kill itself with SIGKILL the Nth time (default: first) it
//! reaches the point NAME (crates/settings `failpoint`); the server's hits
//! are logged through tracing.

use std::sync::OnceLock;

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

/// `PARALOG_FAILPOINT_REGION_DELAY_MS=N`: sleep N ms after each block a
/// node writes into its own region (`--agg-mode own`), so that a test can
/// make one node's region outlast `--peer-timeout`.
pub fn region_delay() {
    static DELAY: OnceLock<Option<std::time::Duration>> = OnceLock::new();
    let d = DELAY.get_or_init(|| {
        std::env::var("PARALOG_FAILPOINT_REGION_DELAY_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(std::time::Duration::from_millis)
    });
    if let Some(d) = d {
        std::thread::sleep(*d);
    }
}

pub fn hit(name: &str) {
    paralog_settings::failpoint::hit_then(name, || {
        tracing::warn!(point = name, "failpoint reached: killing the process")
    });
}
