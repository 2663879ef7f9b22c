//! Logged array puts in the server's drain (docs/objects.md "Waiting for
//! logged puts"). The publisher of logged puts is the CLI's
//! (`crates/cli/src/obj_publish.rs`: this crate does not know array
//! objects); it reports each round here, and the server's status and its
//! `drain`/`wait` answers read it: a wait is over when the file drain is
//! idle AND a publisher round that began after the request left nothing
//! that may still publish. One mechanism for both: the same wait, the same
//! status, the same timeout. A server of a server job reads it in its
//! rounds instead of blocking on it (cluster/puts.rs: [`Puts::since`]),
//! so that the job's end waits for every node's publisher.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Why a logged put is not published yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PutState {
    /// For other nodes' shares, or behind an earlier put of its name.
    Waiting,
    /// The publish failed (the remote out of reach): tried every round.
    Retrying,
    /// It can never be published as it is (a damaged record or chunk):
    /// kept on the node, never tried to the end of a wait.
    Failed,
}

/// A logged put committed on this node and not published yet, or this
/// node's share of another node's put that could not be copied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutStatus {
    /// The array's name.
    pub name: String,
    /// The put's id (32 hex digits).
    pub id: String,
    /// This node's share of a put committed on another node.
    pub share: bool,
    pub state: PutState,
    /// The nodes whose shares it waits for, by name.
    pub waits_for: Vec<String>,
    pub message: String,
    /// In a server job's status: the node whose publisher reported it
    /// (cluster/puts.rs); a one-node server's are all its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// What the publisher's rounds found; clones share it.
#[derive(Clone, Default)]
pub struct Puts(Arc<(Mutex<Board>, Condvar)>);

#[derive(Default)]
struct Board {
    /// A publisher reports here: waits wait for its rounds.
    attached: bool,
    /// Rounds begun, and the last one that ended.
    begun: u64,
    ended: u64,
    published: u64,
    pending: Vec<PutStatus>,
    /// Counts the rounds that changed `published` or `pending`: a server
    /// job sends its node's puts to the others only when it moved.
    generation: u64,
    /// A round is wanted now (a wait began, or the publisher stops).
    kicked: bool,
}

impl Puts {
    fn lock(&self) -> MutexGuard<'_, Board> {
        self.0 .0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A publisher runs from now on.
    pub fn attach(&self) {
        self.lock().attached = true;
    }

    /// The publisher ended: no round will come; waits stop waiting.
    pub fn detach(&self) {
        self.lock().attached = false;
        self.0 .1.notify_all();
    }

    /// A round begins: its number.
    pub fn begin_round(&self) -> u64 {
        let mut b = self.lock();
        b.begun += 1;
        b.begun
    }

    /// Round `n` ended, having published `published` puts and left
    /// `pending`.
    pub fn end_round(&self, n: u64, published: u64, pending: Vec<PutStatus>) {
        let mut b = self.lock();
        b.ended = n;
        if published > 0 || b.pending != pending {
            b.generation += 1;
        }
        b.published += published;
        b.pending = pending;
        self.0 .1.notify_all();
    }

    /// Between two rounds: sleep up to `every`, less when a round is
    /// wanted now ([`Puts::kick`]; a wait makes one at once instead of up
    /// to `every` later).
    pub fn nap(&self, every: Duration) {
        let b = self.lock();
        let (mut b, _) = self
            .0
             .1
            .wait_timeout_while(b, every, |b| !b.kicked)
            .unwrap_or_else(|p| p.into_inner());
        b.kicked = false;
    }

    /// Wake the publisher for a round now.
    pub fn kick(&self) {
        self.lock().kicked = true;
        self.0 .1.notify_all();
    }

    /// What the last round left, and the puts published so far.
    pub fn snapshot(&self) -> (Vec<PutStatus>, u64) {
        let b = self.lock();
        (b.pending.clone(), b.published)
    }

    /// Where a wait starts: it needs a round begun after this.
    pub(crate) fn mark(&self) -> u64 {
        self.lock().begun
    }

    /// Where the rounds stand for a wait that started at `mark` (a
    /// server job's agreement, cluster/puts.rs, which cannot block).
    pub(crate) fn since(&self, mark: u64) -> Since {
        let b = self.lock();
        let ended = b.ended > mark;
        Since {
            generation: b.generation,
            ended: ended || !b.attached,
            settled: settled(&b, mark),
            published: b.published,
            pending: b.pending.clone(),
        }
    }

    /// Wait until a round begun after `mark` left nothing that may still
    /// be published (failed puts do not count: waiting does not help
    /// them), or no publisher runs, or `deadline` passes: whether settled.
    pub(crate) fn wait_settled(&self, mark: u64, deadline: Option<Instant>) -> bool {
        self.kick();
        let mut b = self.lock();
        loop {
            if settled(&b, mark) {
                return true;
            }
            let left = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(l) if !l.is_zero() => l,
                    _ => return false,
                },
                None => Duration::from_secs(3600),
            };
            b = self
                .0
                 .1
                .wait_timeout(b, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// No publisher, or a round begun after `mark` left nothing that may
/// still be published (failed puts do not count: waiting does not help
/// them).
fn settled(b: &Board, mark: u64) -> bool {
    !b.attached || (b.ended > mark && b.pending.iter().all(|p| p.state == PutState::Failed))
}

/// The rounds since a mark ([`Puts::since`]).
#[derive(Debug, Clone)]
pub(crate) struct Since {
    /// Changes when a round publishes or leaves other puts.
    pub generation: u64,
    /// A round begun after the mark ended (or no publisher runs).
    pub ended: bool,
    /// ... and left nothing that may still publish.
    pub settled: bool,
    /// Published so far, and what the last round left.
    pub published: u64,
    pub pending: Vec<PutStatus>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(state: PutState) -> PutStatus {
        PutStatus {
            name: "t".into(),
            id: "00".repeat(16),
            share: false,
            state,
            waits_for: vec!["n1".into()],
            message: "waits".into(),
            node: None,
        }
    }

    #[test]
    fn a_wait_needs_a_round_begun_after_it_that_left_nothing_to_publish() {
        let puts = Puts::default();
        // No publisher: nothing to wait for.
        assert!(puts.wait_settled(puts.mark(), Some(Instant::now())));
        puts.attach();
        // A round that began before the wait does not count, even empty.
        let before = puts.begin_round();
        let mark = puts.mark();
        puts.end_round(before, 0, Vec::new());
        assert!(!puts.wait_settled(mark, Some(Instant::now() + Duration::from_millis(20))));
        // A later round still waiting for a share: not settled.
        let n = puts.begin_round();
        puts.end_round(n, 0, vec![put(PutState::Waiting)]);
        assert!(!puts.wait_settled(mark, Some(Instant::now() + Duration::from_millis(20))));
        // A round from another thread that leaves only a failed put: settled.
        let p = puts.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            let n = p.begin_round();
            p.end_round(n, 1, vec![put(PutState::Failed)]);
        });
        assert!(puts.wait_settled(mark, None));
        t.join().unwrap();
        assert_eq!(puts.snapshot().1, 1);
        // A publisher gone wakes a waiter with no deadline.
        let n = puts.begin_round();
        puts.end_round(n, 0, vec![put(PutState::Retrying)]);
        let mark = puts.mark();
        let p = puts.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            p.detach();
        });
        assert!(puts.wait_settled(mark, None));
        t.join().unwrap();
        // A wait wakes a napping publisher at once.
        let p = puts.clone();
        let started = Instant::now();
        let t = std::thread::spawn(move || p.nap(Duration::from_secs(60)));
        std::thread::sleep(Duration::from_millis(20));
        puts.wait_settled(puts.mark(), Some(Instant::now()));
        t.join().unwrap();
        assert!(started.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn a_server_jobs_view_of_the_rounds_since_its_mark() {
        let puts = Puts::default();
        puts.attach();
        let mark = puts.mark();
        let s = puts.since(mark);
        assert!(!s.ended && !s.settled);
        // A round that leaves a put waiting: ended, not settled; what it
        // left changed the generation.
        let n = puts.begin_round();
        puts.end_round(n, 0, vec![put(PutState::Waiting)]);
        let s = puts.since(mark);
        assert!(s.ended && !s.settled && s.pending.len() == 1);
        // The same left again: nothing new to send to the other servers.
        let n = puts.begin_round();
        puts.end_round(n, 0, vec![put(PutState::Waiting)]);
        assert_eq!(puts.since(mark).generation, s.generation);
        // Published: settled, and a new generation.
        let n = puts.begin_round();
        puts.end_round(n, 1, Vec::new());
        let t = puts.since(mark);
        assert!(t.settled && t.published == 1 && t.generation > s.generation);
        // A later mark needs a later round.
        assert!(!puts.since(puts.mark()).ended);
        // No publisher: nothing to wait for.
        puts.detach();
        let s = puts.since(puts.mark());
        assert!(s.ended && s.settled);
    }
}
