//! Crash injection for the streams' crash tests, with the server's
//! setting (docs/server.md): `PARALOG_FAILPOINT=NAME[:N]` makes the process
//! kill itself with SIGKILL the Nth time (default: first) it reaches NAME.
//! Unset, a check costs one load of a cached value.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The crash windows of a drain round, in order, then those of a local
/// release after it (segments deleted; the base written, not renamed).
pub const POINTS: &[&str] = &[
    "stream.torn_cut",
    "stream.after_cut",
    "stream.mid_apply",
    "stream.before_watermark",
    "stream.release_deleted",
    "stream.base_written",
];

static TARGET: OnceLock<Option<(String, u64)>> = OnceLock::new();
static HITS: AtomicU64 = AtomicU64::new(0);

fn target() -> &'static Option<(String, u64)> {
    TARGET.get_or_init(|| {
        let v = std::env::var("PARALOG_FAILPOINT").ok()?;
        Some(match v.split_once(':') {
            Some((n, c)) => (n.to_owned(), c.parse().unwrap_or(1)),
            None => (v, 1),
        })
    })
}

/// Whether NAME is the point asked for (to prepare what it leaves).
pub fn armed(name: &str) -> bool {
    target().as_ref().is_some_and(|(n, _)| n == name)
}

pub fn hit(name: &str) {
    if let Some((n, count)) = target() {
        if n == name && HITS.fetch_add(1, Ordering::SeqCst) + 1 == *count {
            // SAFETY: sending a signal to ourselves.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }
    }
}
