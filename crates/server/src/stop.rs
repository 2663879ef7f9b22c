//! The stop signal of a thread that runs a round every interval (the
//! streams' drain, the logged puts' publisher): it sleeps between rounds
//! and wakes at once when told to stop, for its last round.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

#[derive(Clone, Default)]
pub struct Stop(Arc<(Mutex<bool>, Condvar)>);

impl Stop {
    /// Wait up to `every`, less if stopped meanwhile: whether it is
    /// stopped. A poisoned lock still reads (the flag is a plain bool).
    pub fn wait(&self, every: Duration) -> bool {
        let (m, cv) = &*self.0;
        let stopped = m.lock().unwrap_or_else(|p| p.into_inner());
        let (stopped, _) = cv
            .wait_timeout_while(stopped, every, |st| !*st)
            .unwrap_or_else(|p| p.into_inner());
        *stopped
    }

    /// Stop, waking the waiting thread.
    pub fn stop(&self) {
        let (m, cv) = &*self.0;
        *m.lock().unwrap_or_else(|p| p.into_inner()) = true;
        cv.notify_all();
    }
}
