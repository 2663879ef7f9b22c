//! The first half of a round: every server scans its node-local root and
//! sends all what changed in its summary since the last round (one
//! allgather, delta.rs), and every server merges the summaries into the
//! same plan. Measured (bytes and time of each part) for
//! `status`, and in the log at debug level: docs/cluster.md, "What a round
//! costs".

use std::sync::Arc;
use std::time::Instant;

use super::plan::GlobalFile;
use super::summary::{self, NodeSummary};
use super::{ClusterError, Coordinator};
use crate::status::RoundCost;

/// A round's plan: every file, and whether the job is ending.
pub(super) struct Planned {
    pub files: Vec<Arc<GlobalFile>>,
    pub finishing: bool,
}

/// Microseconds from `a` to `b`, for the counters.
fn us(a: Instant, b: Instant) -> u64 {
    b.duration_since(a).as_micros() as u64
}

impl Coordinator {
    /// Exchange the summaries' changes and plan; `None` when a node could
    /// not scan its root (its absent files would read as lost logs) or a
    /// copy of a node's summary is not whole: no plan.
    pub(super) fn exchange_and_plan(
        &mut self,
        round: u64,
    ) -> Result<Option<Planned>, ClusterError> {
        let t0 = Instant::now();
        let summary = self.my_summary();
        let mine = self.outbox.message(&summary, round);
        let t1 = Instant::now();
        let (all, counts) = self.dog.watch(|| self.comm.gather_bytes(&mine, None))?;
        let t2 = Instant::now();
        let mut at = 0;
        for (i, c) in counts.iter().enumerate() {
            // Every server applies the same bytes to the same copies: a
            // change that does not fit fails on all of them alike.
            if let Err(why) = self.copies.apply(i, &all[at..at + c])? {
                if self.leader() {
                    tracing::warn!(node = i, reason = %why.0, "a round's change did not fit; that server sends its whole summary next round");
                }
            }
            at += c;
        }
        let held = self.copies.round(self.comm.rank());
        self.outbox.sent(summary, held);
        let planned = self.copies.usable().then(|| {
            // Only the files changed since the last plan are planned again
            // (planner.rs): the same plan as from scratch.
            let dirty = self.copies.take_dirty();
            let nodes = &self.copies.summaries;
            let finishing = nodes.iter().any(|n| n.finishing);
            let whole_opens = self.whole_opens();
            Planned {
                files: self.planner.plan(nodes, dirty, whole_opens, finishing),
                finishing,
            }
        });
        let t3 = Instant::now();
        let (scan, exchange, plan) = (us(t0, t1), us(t1, t2), us(t2, t3));
        self.count_round(mine.len() as u64, all.len() as u64, [scan, exchange, plan]);
        Ok(planned)
    }

    /// This node's summary; on a failed scan, one that says so.
    fn my_summary(&mut self) -> NodeSummary {
        let finish_local = self.ctl.lock().finish;
        summary::collect(
            &self.cfg.root,
            self.cfg.job.as_deref(),
            &self.cfg.node,
            finish_local,
            &mut self.scan_cache,
        )
        .unwrap_or_else(|e| {
            // Read everything again next time.
            self.scan_cache = paralog_log::reader::ScanCache::new();
            // This round without this node's files; said once per round.
            tracing::error!(error = %e, "scanning the node-local root failed");
            NodeSummary {
                node: self.cfg.node.clone(),
                finishing: finish_local,
                scan_failed: true,
                files: Vec::new(),
            }
        })
    }

    /// Add one round's bytes and times (scan, exchange, plan; µs) to the
    /// counters `status` shows.
    fn count_round(&mut self, sent: u64, received: u64, [scan, exchange, plan]: [u64; 3]) {
        tracing::debug!(
            sent,
            received,
            scan_us = scan,
            exchange_us = exchange,
            plan_us = plan,
            "round exchange"
        );
        let c: &mut RoundCost = &mut self.round_cost;
        c.rounds += 1;
        c.bytes_sent += sent;
        c.bytes_received += received;
        c.scan_us += scan;
        c.exchange_us += exchange;
        c.plan_us += plan;
        c.last_sent = sent;
        c.last_received = received;
        c.last_us = scan + exchange + plan;
        self.ctl.lock().round_cost = c.clone();
    }
}
