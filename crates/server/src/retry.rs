//! What happens to a file after a failed drain, for both engines: retry it
//! later with a growing delay, or park it (never drained by this server;
//! every local byte kept). The one-node service counts the delay in time,
//! the server job in rounds (no clock may enter a decision that servers
//! share); the bookkeeping is the same.

use paralog_backend::BackendError;

/// Why a drain step failed, and what may help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Trying again later can succeed (a remote failure, a busy file).
    Retry(String),
    /// Never drain this file in this job: a damaged log (`refused`
    /// false), or a remote that refuses it for good (`refused` true).
    Park { why: String, refused: bool },
}

impl Failure {
    /// A damaged or inconsistent local record.
    pub fn damaged(why: impl ToString) -> Failure {
        Failure::Park {
            why: why.to_string(),
            refused: false,
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Failure::Retry(m) | Failure::Park { why: m, .. } => m,
        }
    }
}

/// A remote failure: retried if retrying can help, else the remote
/// refuses the file.
impl From<BackendError> for Failure {
    fn from(e: BackendError) -> Failure {
        if e.retryable() {
            Failure::Retry(e.to_string())
        } else {
            Failure::Park {
                why: e.to_string(),
                refused: true,
            }
        }
    }
}

/// One file's failures so far; `T` is when it may be tried again (an
/// instant, or a round number).
#[derive(Debug, Clone)]
pub struct RetryState<T> {
    /// Failed attempts since the last success.
    pub attempts: u32,
    /// Not to be tried before this.
    pub not_before: Option<T>,
    /// Why the last attempt failed, or why the file is parked.
    pub error: Option<String>,
    /// `Some(refused)` once parked.
    pub parked: Option<bool>,
}

impl<T> Default for RetryState<T> {
    fn default() -> Self {
        RetryState {
            attempts: 0,
            not_before: None,
            error: None,
            parked: None,
        }
    }
}

impl<T: PartialOrd + Copy> RetryState<T> {
    pub fn succeeded(&mut self) {
        self.attempts = 0;
        self.not_before = None;
        self.error = None;
    }

    /// Record a failure; `delay` gives, from the number of failed
    /// attempts, when the next may start. Returns whether it will be
    /// retried.
    pub fn failed(&mut self, f: Failure, delay: impl FnOnce(u32) -> T) -> bool {
        match f {
            Failure::Retry(m) => {
                self.attempts += 1;
                self.not_before = Some(delay(self.attempts));
                self.error = Some(m);
                true
            }
            Failure::Park { why, refused } => {
                self.park(why, refused);
                false
            }
        }
    }

    pub fn park(&mut self, why: String, refused: bool) {
        self.parked = Some(refused);
        self.not_before = None;
        self.error = Some(why);
    }

    pub fn is_parked(&self) -> bool {
        self.parked.is_some()
    }

    /// Waiting for a retry at `now`.
    pub fn waiting(&self, now: T) -> bool {
        self.not_before.is_some_and(|t| now < t)
    }
}

/// The one-node service's delay: 250 ms doubling up to 30 s, plus up to a
/// quarter of jitter (`jitter` in [0, 1)) so that files do not retry in
/// lockstep.
pub fn backoff_time(attempts: u32, jitter: f64) -> std::time::Duration {
    use std::time::Duration;
    const FIRST: Duration = Duration::from_millis(250);
    const MAX: Duration = Duration::from_secs(30);
    let wait = FIRST
        .saturating_mul(1 << attempts.min(16).saturating_sub(1))
        .min(MAX);
    wait + wait.mul_f64(0.25 * jitter)
}

/// The server job's delay, in rounds: 2, 4, ... 64.
pub fn backoff_rounds(attempts: u32) -> u64 {
    1u64 << attempts.min(6)
}

#[cfg(test)]
mod tests {
    use super::*;
    use paralog_backend::ErrorKind;

    fn remote(kind: ErrorKind) -> BackendError {
        BackendError {
            kind,
            target: "t".into(),
            op: "op",
            message: "m".into(),
        }
    }

    #[test]
    fn retryable_remote_errors_stay_retryable() {
        assert!(matches!(
            Failure::from(remote(ErrorKind::Retryable)),
            Failure::Retry(_)
        ));
        assert!(matches!(
            Failure::from(remote(ErrorKind::Permanent)),
            Failure::Park { refused: true, .. }
        ));
    }

    #[test]
    fn retries_grow_then_park() {
        let mut s = RetryState::<u64>::default();
        assert!(s.failed(Failure::Retry("a".into()), |n| 10 + backoff_rounds(n)));
        assert_eq!((s.attempts, s.not_before), (1, Some(12)));
        assert!(s.waiting(11) && !s.waiting(12));
        assert!(s.failed(Failure::Retry("b".into()), |n| 10 + backoff_rounds(n)));
        assert_eq!(s.not_before, Some(14));
        s.succeeded();
        assert_eq!(
            (s.attempts, s.not_before, s.error.as_deref()),
            (0, None, None)
        );
        assert!(!s.failed(Failure::damaged("bad"), |_| 0));
        assert_eq!((s.parked, s.error.as_deref()), (Some(false), Some("bad")));
        assert!(backoff_time(1, 0.0) < backoff_time(2, 0.0));
        assert_eq!(backoff_time(40, 0.0), std::time::Duration::from_secs(30));
        assert_eq!(backoff_rounds(10), 64);
    }
}
