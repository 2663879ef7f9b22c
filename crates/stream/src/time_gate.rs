//! The watermark order's gate (docs/streams.md "What order means"):
//! an event of event time `t` is handed out only once every partition has
//! passed `t` (delivered an event at or after it, or holds one read
//! ahead), or has been silent for the idle timeout. Partitions are
//! assumed to be in time order themselves (one producer per partition,
//! or events keyed by their source): an event below a time already handed
//! out (a partition that went back in time, or a silent one that came
//! back with older events) is handed out at once and counted as late,
//! never held back or dropped.

use std::time::{Duration, Instant};

pub(crate) struct TimeGate {
    idle: Duration,
    /// Per partition, the greatest event time handed out.
    seen: Vec<Option<i64>>,
    /// Per partition, when it last had an event to give (read ahead or
    /// newly published): silent since then.
    active: Vec<Instant>,
    /// The greatest event time handed out.
    last: Option<i64>,
    pub late: u64,
    pub last_was_late: bool,
}

impl TimeGate {
    pub fn new(partitions: usize, idle: Duration) -> TimeGate {
        TimeGate {
            idle,
            seen: vec![None; partitions],
            active: vec![Instant::now(); partitions],
            last: None,
            late: 0,
            last_was_late: false,
        }
    }

    pub fn set_idle(&mut self, idle: Duration) {
        self.idle = idle;
    }

    /// Partition `p` has an event to give (or newly published offsets).
    pub fn touch(&mut self, p: usize) {
        self.active[p] = Instant::now();
    }

    /// Whether the event of time `t` (the smallest of the partitions'
    /// next events) may go, given which partitions have one read ahead.
    pub fn allows(&self, t: i64, has_next: impl Fn(usize) -> bool) -> bool {
        let now = Instant::now();
        (0..self.seen.len()).all(|q| {
            has_next(q)
                || self.seen[q].is_some_and(|s| s >= t)
                || now.duration_since(self.active[q]) >= self.idle
        })
    }

    /// The event of time `t` from partition `p` was handed out.
    pub fn handed(&mut self, p: usize, t: i64) {
        self.last_was_late = self.last.is_some_and(|l| t < l);
        if self.last_was_late {
            self.late += 1;
        }
        self.last = Some(self.last.map_or(t, |l| l.max(t)));
        self.seen[p] = Some(self.seen[p].map_or(t, |s| s.max(t)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_for_every_partition_then_for_the_idle_timeout() {
        let mut g = TimeGate::new(2, Duration::from_millis(50));
        // Partition 1 has nothing yet: 10 waits.
        assert!(!g.allows(10, |q| q == 0));
        assert!(g.allows(10, |_| true));
        g.handed(0, 10);
        g.handed(1, 20);
        // Partition 0 passed 10 only: 15 waits for it, 10 does not.
        assert!(g.allows(10, |q| q == 1));
        assert!(!g.allows(15, |q| q == 1));
        std::thread::sleep(Duration::from_millis(60));
        assert!(
            g.allows(15, |q| q == 1),
            "partition 0 silent past the timeout"
        );
        g.touch(0);
        assert!(!g.allows(15, |q| q == 1), "partition 0 active again");
        g.handed(0, 5);
        assert!(g.last_was_late && g.late == 1);
    }
}
