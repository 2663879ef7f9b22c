//! An optional bandwidth cap for the drain (a token bucket shared by the
//! workers), so that a user can keep the drain from competing with the
//! program for a shared link. Off by default.

use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct RateLimit {
    bytes_per_sec: f64,
    state: Mutex<(Instant, f64)>,
}

impl RateLimit {
    pub fn new(bytes_per_sec: u64) -> RateLimit {
        RateLimit {
            bytes_per_sec: bytes_per_sec as f64,
            state: Mutex::new((Instant::now(), 0.0)),
        }
    }

    /// Account for `n` bytes about to be sent; wait if over the cap.
    pub fn take(&self, n: usize) {
        let wait = {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            // Tokens refill at the cap, up to one second's worth.
            let refill = now.duration_since(st.0).as_secs_f64() * self.bytes_per_sec;
            st.1 = (st.1 + refill).min(self.bytes_per_sec);
            st.0 = now;
            st.1 -= n as f64;
            if st.1 < 0.0 {
                Duration::from_secs_f64(-st.1 / self.bytes_per_sec)
            } else {
                Duration::ZERO
            }
        };
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }
}
