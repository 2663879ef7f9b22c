//! A server job must never wait forever for a dead peer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Watches the coordinator's collectives: one that lasts longer than the
/// peer timeout ends this server with a message (the launcher then stops
/// the others), so that no server waits forever for a dead peer.
pub(super) struct Watchdog {
    since: Arc<AtomicU64>,
    start: Instant,
}

impl Watchdog {
    pub(super) fn start(timeout: Duration, node: String) -> Watchdog {
        let since = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let s = since.clone();
        std::thread::Builder::new()
            .name("watchdog".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_millis(500).min(timeout));
                let t = s.load(Ordering::SeqCst);
                if t == 0 {
                    continue;
                }
                let waited = start.elapsed().saturating_sub(Duration::from_millis(t));
                if waited > timeout {
                    eprintln!(
                        "paralog server (node {node}): no answer from the other servers for {:.0} s (a server died or hangs); stopping. Every local log is kept: restart the server job, or run `paralog recover` as an MPI job",
                        waited.as_secs_f64()
                    );
                    std::process::exit(4);
                }
            })
            .expect("spawn watchdog thread");
        Watchdog { since, start }
    }

    /// Mark the start (`true`) or the end of one wait for the peers, for
    /// code that waits in many steps outside this module (the checkpoint
    /// sets' transfer: each message, not the whole transfer, is watched).
    pub(crate) fn waiting(&self, on: bool) {
        let now = self.start.elapsed().as_millis().max(1) as u64;
        self.since.store(if on { now } else { 0 }, Ordering::SeqCst);
    }

    /// Run one collective under watch.
    pub(super) fn watch<T>(&self, f: impl FnOnce() -> T) -> T {
        let now = self.start.elapsed().as_millis().max(1) as u64;
        self.since.store(now, Ordering::SeqCst);
        let r = f();
        self.since.store(0, Ordering::SeqCst);
        r
    }
}
