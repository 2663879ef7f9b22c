//! Local retention in a server job (docs/streams.md "Local retention",
//! "Many nodes"). Every node's cut log holds the job's cuts, the same
//! bytes, so a node alone must not rebase its own: the job releases
//! together, with the one-node steps (`crate::release`: the same
//! functions) and an agreement between them, at a round every node has
//! recorded and the remote has published:
//!
//! 1. each node finds its segments that may go ([`NodeShare::releasable`]:
//!    ended producers whose every byte a cut took, their locks held) and
//!    the producers of the job's log whose segments it keeps; the servers
//!    exchange both;
//! 2. each node deletes its own ([`NodeShare::delete_released`]); an
//!    agreement that every node did;
//! 3. each node replaces its log with the same base
//!    ([`NodeShare::rebase`]: the state after the round, and the
//!    positions of the producers some node keeps, from the exchange).
//!
//! A crash before 3 on every node leaves the logs equal, naming deleted
//! segments only in published rounds (never read again; the next base
//! drops them, no node holding them). A crash during 3 leaves some nodes
//! on the base and some on the cuts, at the same round: the next job
//! copies the base to the others ([`NodeShare::catch_up`], the path of a
//! node one round behind), after checking that it stands for their log.

use std::collections::BTreeSet;
use std::path::PathBuf;

use super::NodeShare;
use crate::error::{corrupt, Result};
use crate::format::{Base, MAGIC_BASE};
use crate::layout;
use crate::local;
use crate::release::{self, Gone};

/// What one node tells the others each round that decides a release
/// (the server job's views carry it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeRelease {
    /// Its cut log's last round, and whether the log is a base alone.
    pub rounds: u64,
    pub based: bool,
    /// Bytes of its segments a release would delete now
    /// ([`NodeShare::releasable`]).
    pub releasable: u64,
    /// Its cut log's length.
    pub log_len: u64,
}

/// Whether the job releases a stream after this round: every node's log
/// at the same round and rebased or not alike (nothing to copy), and
/// **some node** whose segments that may go plus its cut log amount to
/// `threshold` bytes, the one-node rule (`crate::release`) applied to
/// each node; a log that is already a base, with nothing to delete on any
/// node, stays. So each node holds at most about `threshold` of drained
/// segments, as a one-node drain does, however many nodes the job has,
/// and a node rewrites its log once per `threshold` of the busiest node's
/// drained segments, not once per `threshold` of all nodes' together
/// (which would rebase every node N times as often in a job of N alike
/// nodes). A function of the exchanged views alone: the same on every
/// server. `threshold` `u64::MAX`: never.
pub fn release_due(nodes: &[NodeRelease], threshold: u64) -> bool {
    let Some(first) = nodes.first().map(|x| (x.rounds, x.based)) else {
        return false;
    };
    if threshold == u64::MAX || first.0 == 0 || nodes.iter().any(|x| (x.rounds, x.based) != first) {
        return false;
    }
    if first.1 && nodes.iter().all(|x| x.releasable == 0) {
        return false;
    }
    nodes
        .iter()
        .any(|x| x.releasable.saturating_add(x.log_len) >= threshold)
}

/// What this node gives up at the job's release.
pub struct Releasable {
    /// Its segments that may go (their locks held until deleted).
    gone: Vec<Gone>,
    /// The producers of the job's log whose segments this node keeps.
    pub held: Vec<u64>,
}

impl Releasable {
    /// The ids of the segments that go.
    pub fn gone(&self) -> Vec<u64> {
        self.gone.iter().map(|g| g.id).collect()
    }

    /// Their bytes.
    pub fn bytes(&self) -> u64 {
        self.gone.iter().map(|g| g.len).sum()
    }
}

impl NodeShare {
    /// This node's segments that a release would delete now (ended, taken
    /// whole by the log's cuts), and the producers of the log it keeps.
    pub fn releasable(&self) -> Result<Releasable> {
        let (segs, _) = local::segments(&self.dir, &self.stream)?;
        let gone = release::gone(&segs, &self.taken)?;
        let going: BTreeSet<u64> = gone.iter().map(|g| g.id).collect();
        let held = segs
            .keys()
            .filter(|id| self.taken.contains_key(id) && !going.contains(id))
            .copied()
            .collect();
        Ok(Releasable { gone, held })
    }

    /// Step 2 of the job's release: delete this node's segments that go
    /// (and fsync the directory). Only once every node's log holds the
    /// last round and the remote published it.
    pub fn delete_released(&mut self, r: Releasable) -> Result<Vec<(PathBuf, u64)>> {
        // The next round lists the segments again.
        self.listing = None;
        release::delete(&self.dir, &r.gone)
    }

    /// Step 3, once every node deleted its segments: replace the log with
    /// the base of its last round, keeping the positions of the producers
    /// in `held` (every node's [`Releasable::held`]): the same record on
    /// every node.
    pub fn rebase(&mut self, held: &BTreeSet<u64>) -> Result<Base> {
        let mut producers: Vec<(u64, u64)> = self
            .taken
            .iter()
            .filter(|(id, _)| held.contains(id))
            .map(|(a, b)| (*a, *b))
            .collect();
        producers.sort_unstable();
        let base = Base {
            round: self.rounds,
            parts: self.state.clone(),
            producers,
        };
        self.install(base.clone())?;
        Ok(base)
    }

    /// Whether the log is a base alone (rebased at its last round).
    pub fn based(&self) -> bool {
        self.last.is_none() && self.base.is_some()
    }

    /// The cut log's valid length.
    pub fn log_len(&self) -> u64 {
        self.cuts_len
    }

    /// Take the job's last record from a node that holds it: a cut this
    /// log lacks (one round behind), or the base of this log's last round
    /// (the job's release stopped between two nodes' rebases).
    pub fn catch_up(&mut self, rec: &[u8]) -> Result<()> {
        if rec.starts_with(MAGIC_BASE) {
            self.adopt_base(rec)
        } else {
            self.record_bytes(rec).map(|_| ())
        }
    }

    /// Rebase on another node's base, if it stands for this log: its
    /// round and state this log's, every producer it keeps where this log
    /// has it, and no segment it drops still on this node (its events
    /// would be taken again from the start).
    fn adopt_base(&mut self, rec: &[u8]) -> Result<()> {
        let base = Base::decode(rec, &self.cuts_path, 0)?;
        let here = |what: String| {
            corrupt(
                &self.cuts_path,
                0,
                format!(
                    "the job's base of round {} (another node's): {what}",
                    base.round
                ),
            )
        };
        if base.round != self.rounds || base.parts != self.state {
            return Err(here(format!(
                "this log ends at round {} with another state",
                self.rounds
            )));
        }
        if let Some((id, pos)) = base
            .producers
            .iter()
            .find(|(id, pos)| self.taken.get(id) != Some(pos))
        {
            return Err(here(format!(
                "producer {id:016x} at byte {pos}, which this log does not say"
            )));
        }
        let kept: BTreeSet<u64> = base.producers.iter().map(|p| p.0).collect();
        let (segs, _) = local::segments(&self.dir, &self.stream)?;
        if let Some(id) = segs
            .keys()
            .find(|id| self.taken.contains_key(id) && !kept.contains(id))
        {
            return Err(here(format!(
                "it drops producer {id:016x}, whose segment {} is still here",
                self.dir.join(layout::segment_name(*id)).display()
            )));
        }
        self.install(base)
    }

    fn install(&mut self, base: Base) -> Result<()> {
        self.cuts_len = release::write_base(&self.cuts_path, &base)?;
        self.taken = base.producers.iter().copied().collect();
        self.last = None;
        self.base = Some(base);
        Ok(())
    }
}
