//! The server job's strategy for checkpoint sets (`--aggregate`,
//! docs/aggregate.md "Many nodes"): member files are taken out of the
//! per-file plan; each round the servers exchange what they hold of each
//! set (one allgather), compute the same set plans, and publish every set
//! that is complete together (`aggregate::across`). A set failure is
//! retried after a backoff counted in rounds, and parked after a few.

use std::collections::BTreeMap;

use crate::aggregate::across::{self, Ctx};
use crate::aggregate::nodes::{self, JobSet, Verdict};
use crate::retry::backoff_rounds;
use crate::status::{FileState, FileStatus};

use super::plan::{FileKey, GlobalFile};
use super::{ClusterError, Coordinator, Round};

/// Attempts before a set is parked (its local data kept for `recover`).
const ATTEMPTS: u32 = 4;
/// Rounds a set may wait for a member at the end of the job before it is
/// reported not published (one round can see a commit half-way).
const FINISH_ROUNDS: u64 = 3;

#[derive(Default)]
pub(super) struct SetRounds {
    /// Failed attempts and the round before which a set is not tried again.
    retry: BTreeMap<JobSet, (u32, u64)>,
    /// The round the end of the job first found a set not complete.
    unfinished: BTreeMap<JobSet, u64>,
    /// Sets the servers will not publish in this job, and why.
    parked: BTreeMap<JobSet, String>,
    /// What all sets did (the same on every server).
    pub(super) published: u64,
    pub(super) leader_peak: u64,
}

impl SetRounds {
    /// The sets not published, for the totals' `failed`.
    pub(super) fn failed(&self) -> impl Iterator<Item = String> + '_ {
        self.parked.iter().map(|(k, why)| {
            format!(
                "{}: checkpoint set {} not published ({why}); local data kept",
                k.0,
                String::from_utf8_lossy(&k.2)
            )
        })
    }

    /// A status row per set not published, keyed by its directory (never
    /// a file's path): member files are not in the per-file status, so
    /// without it `wait` would find nothing refused and say everything
    /// committed was drained (it exits 3 and names the set instead).
    pub(super) fn parked_rows(&self) -> impl Iterator<Item = (FileKey, FileStatus)> + '_ {
        self.parked.iter().map(|(k, why)| {
            let key = FileKey {
                job: k.0.clone(),
                rel: k.2.clone(),
            };
            let row = FileStatus {
                job: k.0.clone(),
                path: String::from_utf8_lossy(&k.2).into_owned(),
                state: FileState::Refused,
                epochs_drained: 0,
                epochs_pending: 0,
                bytes_drained: 0,
                bytes_pending: 0,
                rate_bps: 0.0,
                eta_s: None,
                attempts: 0,
                message: Some(format!(
                    "checkpoint set not published ({why}); local data kept"
                )),
                scans: 0,
            };
            (key, row)
        })
    }
}

impl Coordinator {
    /// `f` is a member of a set (drained by [`Self::drain_sets`]).
    pub(super) fn is_set_member(&self, f: &GlobalFile) -> bool {
        self.cfg
            .sets
            .as_ref()
            .is_some_and(|s| s.rules.matches(&f.rel).is_some())
    }

    /// One round of the sets: exchange, plan, publish what is complete.
    pub(super) fn drain_sets(
        &mut self,
        finishing: bool,
        round: &mut Round,
    ) -> Result<(), ClusterError> {
        let Some(sets) = self.cfg.sets.clone() else {
            return Ok(());
        };
        let local = nodes::collect(
            &sets,
            &self.cfg.remote,
            &self.cfg.root,
            self.cfg.job.as_deref(),
        );
        // A first byte 0: this node could not scan, so nobody may take
        // the absence of its members for anything this round.
        let (mine, files) = match local {
            Ok(l) => {
                let mut v = vec![1u8];
                v.extend(nodes::encode(&l.summary));
                (v, l.files)
            }
            Err(e) => {
                tracing::error!(error = %e, "scanning checkpoint-set members failed");
                (vec![0u8], BTreeMap::new())
            }
        };
        let (all, counts) = self.dog.watch(|| self.comm.gather_bytes(&mine, None))?;
        let mut views = Vec::with_capacity(counts.len());
        let mut at = 0;
        let mut complete_view = true;
        for (n, &c) in counts.iter().enumerate() {
            let b = &all[at..at + c];
            at += c;
            if b.first() != Some(&1) {
                complete_view = false;
                views.push(Vec::new());
                continue;
            }
            views.push(nodes::decode(&b[1..], n).map_err(|e| {
                ClusterError::Mpi(super::mpi::MpiError::Call {
                    op: "checkpoint-set summary",
                    message: e.to_string(),
                })
            })?);
        }
        if !complete_view {
            return Ok(());
        }
        let k = if sets.per_node {
            self.comm.size()
        } else {
            sets.containers as usize
        };
        let plans = nodes::plan(&views, k, finishing, sets.incomplete());
        for p in plans {
            if self.sets.parked.contains_key(&p.key) {
                continue;
            }
            match &p.verdict {
                Verdict::Refuse(why) => {
                    if self.leader() {
                        tracing::error!(set = %p.name(), reason = %why, "checkpoint set not published; local data kept");
                    }
                    self.sets.parked.insert(p.key.clone(), why.clone());
                    continue;
                }
                Verdict::Wait(why) => {
                    round.pending += 1;
                    if finishing {
                        let first = *self
                            .sets
                            .unfinished
                            .entry(p.key.clone())
                            .or_insert(round.number);
                        if round.number >= first + FINISH_ROUNDS {
                            self.sets.parked.insert(p.key.clone(), why.clone());
                            round.pending -= 1;
                        } else {
                            round.worked = true;
                        }
                    }
                    continue;
                }
                Verdict::Publish => {}
            }
            if let Some(&(_, not_before)) = self.sets.retry.get(&p.key) {
                if round.number < not_before {
                    round.retrying += 1;
                    continue;
                }
            }
            round.worked = true;
            let empty = Vec::new();
            let mine = files.get(&p.key).unwrap_or(&empty);
            let ctx = Ctx {
                comm: &self.comm,
                sets: &sets,
                remote: &self.cfg.remote,
                block: transfer_block(self.cfg.buf_bytes),
                peers: &|on| self.dog.waiting(on),
            };
            // Each message is watched, not the whole publish (a large set
            // takes long; a dead peer does not answer one message).
            let out = across::publish(&ctx, &p, &p.key.0, mine)?;
            self.totals.bytes_between_nodes += out.between;
            self.sets.leader_peak = self.sets.leader_peak.max(out.leader_peak);
            match out.version {
                Some(_) => {
                    self.sets.retry.remove(&p.key);
                    self.sets.published += 1;
                    self.totals.epochs_drained += out.epochs;
                    self.totals.bytes_drained += out.bytes;
                }
                None => {
                    let why = out.error.unwrap_or_default();
                    let e = self.sets.retry.entry(p.key.clone()).or_insert((0, 0));
                    e.0 += 1;
                    e.1 = round.number + backoff_rounds(e.0);
                    if e.0 >= ATTEMPTS {
                        self.sets.parked.insert(p.key.clone(), why.clone());
                    } else {
                        round.retrying += 1;
                    }
                    tracing::warn!(set = %p.name(), attempt = e.0, error = %why, "publishing a checkpoint set failed; local data kept");
                }
            }
        }
        self.totals.sets_published = self.sets.published;
        self.totals.set_leader_peak = self.sets.leader_peak;
        self.totals.set_leader_pool =
            (sets.buffers * (transfer_block(self.cfg.buf_bytes) + 16)) as u64;
        Ok(())
    }
}

/// A transfer block: the server's buffer size, a whole number of the set
/// record's checksum blocks.
fn transfer_block(buf_bytes: usize) -> usize {
    let b = paralog_aggregate::format::DEFAULT_BLOCK as usize;
    buf_bytes.max(b).next_multiple_of(b)
}
