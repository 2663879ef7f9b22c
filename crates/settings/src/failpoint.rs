//! Crash injection for the crash tests: `PARALOG_FAILPOINT=NAME[:N]` makes
//! the process kill itself with SIGKILL the Nth time (default: first) it
//! reaches the point NAME. Unset, a check costs one load of a cached value.
//!
//! Here, beside the setting's entry in the table, so that every process
//! that has crash windows (the node server, and the array objects' library
//! inside an application's ranks) reads the setting the same way; each
//! caller says in its own log how it died.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

static TARGET: OnceLock<Option<(String, u64)>> = OnceLock::new();
static HITS: AtomicU64 = AtomicU64::new(0);

/// At the point `name`: if it is the failpoint's Nth hit, `announce` (one
/// line in the caller's log), then SIGKILL to this process.
pub fn hit_then(name: &str, announce: impl FnOnce()) {
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
            announce();
            // SAFETY: sending a signal to ourselves.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }
    }
}
