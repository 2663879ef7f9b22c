//! The server job drains the shared event streams (docs/streams.md "Many
//! nodes"). Each round, after the files: every server sends the others
//! its node's view of each stream (its cut log's rounds and last record,
//! its new committed batches: one allgather, streams_view.rs), and all
//! decide alike. A node whose cut log lacks the job's last round (its
//! server died between the others' records and its own) copies it from
//! them; cuts recorded and not published (the remote's watermark is
//! older) are applied again; then, if any node has new batches, the
//! servers make one cut of all of them (`paralog_stream::nodes::make_cut`,
//! the same on every server), every node records it durably, and only
//! then is it applied: every node sends each partition's frames of the
//! ranges it holds to the partition's owner (server `p mod N` on a
//! directory; the leader on an object remote, which publishes one index
//! per round), one gather per owner, each frame sent once and never from
//! its owner's own node; the owners write their batches and fsync; after
//! an agreement the leader publishes the watermark. Every step ends in an
//! agreement, so that a failure anywhere stops the stream on every
//! server at the same step; the next round starts again from the cut
//! logs and the watermark. After a round that left every cut published,
//! when the views say enough can go, the job releases the nodes' drained
//! segments and rebases every cut log alike (streams_release.rs).

use std::collections::{BTreeMap, BTreeSet};

use paralog_stream::nodes::{self, NodeShare};
use paralog_stream::{DrainOptions, DrainReport, StreamPlace, StreamRemote};

use super::mpi::MpiError;
use super::streams_view::{self, Decision, NodeViews, View};
use super::{ClusterError, Coordinator, Round};
use crate::retry::Failure;

/// Failed rounds of a stream, at the end of a job, before it is given up
/// (reported in `failed`; every local segment and cut log kept).
const FINISH_ATTEMPTS: u32 = 5;

#[derive(Default)]
pub(super) struct StreamRounds {
    /// This node's share of each stream (its cut log, its drain lock).
    shares: BTreeMap<String, NodeShare>,
    /// Failed rounds in a row per stream (the same on every server).
    failures: BTreeMap<String, u32>,
    /// Streams given up at the end of the job, and why.
    parked: BTreeMap<String, String>,
    /// Per stream, the round of the last record this server sent whole
    /// (and whether it was a base).
    sent: BTreeMap<String, (u64, bool)>,
    /// Per stream, the round every server knows the remote published
    /// (checked or written in this job): an idle stream's round skips the
    /// leader's check.
    published: BTreeMap<String, u64>,
    /// The last error logged per stream (each logged once).
    said: BTreeMap<String, String>,
}

impl StreamRounds {
    pub(super) fn failed(&self) -> impl Iterator<Item = String> + '_ {
        self.parked
            .iter()
            .map(|(s, why)| format!("stream {s}: not drained ({why}); local segments kept"))
    }
}

/// How one stream's round ended, the same on every server.
enum Outcome {
    Nothing,
    Worked,
    Failed(String),
}

impl Coordinator {
    /// One round of every stream (nothing without a stream remote).
    pub(super) fn drain_streams(
        &mut self,
        finishing: bool,
        round: &mut Round,
    ) -> Result<(), ClusterError> {
        let Some(place) = self.cfg.streams.clone() else {
            return Ok(());
        };
        let mine = self.my_stream_views();
        let bytes = streams_view::encode(&mine);
        let (all, counts) = self.dog.watch(|| self.comm.gather_bytes(&bytes, None))?;
        let mut views: Vec<NodeViews> = Vec::with_capacity(counts.len());
        let mut at = 0;
        for (i, c) in counts.iter().enumerate() {
            views.push(streams_view::decode(&all[at..at + c], i)?);
            at += c;
        }
        let names: BTreeSet<&String> = views.iter().flat_map(|v| v.keys()).collect();
        for name in names {
            if self.streams.parked.contains_key(name) {
                continue;
            }
            let per_node: Vec<Option<&View>> = views.iter().map(|v| v.get(name)).collect();
            let decision = streams_view::decide(name, &per_node);
            let release = streams_view::release_due(&per_node, self.cfg.stream_release_bytes);
            let outcome = match decision {
                Decision::Idle => Outcome::Nothing,
                Decision::Skip => Outcome::Failed(
                    "a node could not read its share, or a record to copy was not sent whole (every share is read again next round)".into(),
                ),
                Decision::Refuse(why) => Outcome::Failed(why),
                Decision::Go {
                    partitions,
                    rounds,
                    behind,
                    source,
                    new,
                } => {
                    let ranges = per_node
                        .iter()
                        .flat_map(|v| v.map(|v| v.ranges.clone()).unwrap_or_default())
                        .collect();
                    let last = per_node[source].map(|v| v.last.clone()).unwrap_or_default();
                    let go = Go {
                        stream: name,
                        partitions,
                        rounds,
                        behind: &behind,
                        last: &last,
                        new,
                        ranges,
                    };
                    self.stream_round(&place, go)?
                }
            };
            // Every cut of every node's log is published now: release
            // what that made redundant, when it is due.
            let outcome = match outcome {
                Outcome::Failed(_) => outcome,
                _ if !release => outcome,
                _ => match self.release_stream(name)? {
                    None => Outcome::Worked,
                    Some(why) => Outcome::Failed(why),
                },
            };
            self.stream_outcome(name, outcome, finishing, round);
        }
        Ok(())
    }

    /// Count one stream's outcome (the same on every server).
    fn stream_outcome(&mut self, name: &str, outcome: Outcome, finishing: bool, round: &mut Round) {
        match outcome {
            Outcome::Nothing => {
                self.streams.failures.remove(name);
            }
            Outcome::Worked => {
                self.streams.failures.remove(name);
                self.streams.said.remove(name);
                round.worked = true;
            }
            Outcome::Failed(why) => {
                // Read again from the cut log next round (and the remote).
                self.streams.shares.remove(name);
                self.streams.published.remove(name);
                let n = self.streams.failures.entry(name.into()).or_default();
                *n += 1;
                if self.streams.said.get(name) != Some(&why) {
                    tracing::error!(stream = %name, error = %why, "stream not drained this round (tried again)");
                    self.streams.said.insert(name.into(), why.clone());
                }
                if finishing && *n >= FINISH_ATTEMPTS {
                    self.streams.parked.insert(name.into(), why);
                } else {
                    round.retrying += 1;
                }
            }
        }
    }

    /// This node's view of every stream under its root: every stream it
    /// has a directory of, and every stream it holds a share of.
    fn my_stream_views(&mut self) -> NodeViews {
        let mut out = NodeViews::new();
        let listed = match paralog_stream::drain::local_streams(&self.cfg.root) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, "listing the node's streams failed");
                // Each stream this node already knows waits for it.
                for name in self.streams.shares.keys() {
                    let failed = View {
                        failed: true,
                        ..View::default()
                    };
                    out.insert(name.clone(), failed);
                }
                return out;
            }
        };
        let opts = DrainOptions {
            release_bytes: self.cfg.stream_release_bytes,
            ..DrainOptions::default()
        };
        let mut names: BTreeSet<String> = listed.into_iter().collect();
        names.extend(self.streams.shares.keys().cloned());
        for name in names {
            let view = self.share_view(&name, &opts).unwrap_or_else(|e| {
                tracing::error!(stream = %name, error = %e, "reading the stream's share of this node failed");
                self.streams.shares.remove(&name);
                View {
                    failed: true,
                    ..View::default()
                }
            });
            out.insert(name, view);
        }
        out
    }

    fn share_view(&mut self, name: &str, opts: &DrainOptions) -> paralog_stream::Result<View> {
        let fresh = !self.streams.shares.contains_key(name);
        let sent = self.streams.sent.get(name).copied();
        let share = self.share(name)?;
        let mut report = DrainReport::default();
        // One listing of the segments gives the new batches and what a
        // release would delete (only counted when one may come).
        let new = share.take_new(opts, &mut report)?;
        let record = share.last_record();
        let last_crc = match record.len() {
            0 => 0,
            n => u32::from_le_bytes(record[n - 4..].try_into().expect("4 bytes")),
        };
        let (rounds, based) = (share.rounds(), share.based());
        let log_len = share.log_len();
        let whole = fresh || sent != Some((rounds, based));
        self.streams.sent.insert(name.into(), (rounds, based));
        for (path, at) in &report.cut {
            tracing::info!(segment = %path.display(), length = at, "a dead producer's torn tail cut off");
        }
        Ok(View {
            failed: false,
            partitions: new.partitions.unwrap_or(0),
            rounds,
            last_crc,
            last: if whole { record } else { Vec::new() },
            based,
            releasable: new.releasable,
            log_len,
            ranges: new.ranges,
        })
    }

    /// This node's share of `name`, opened (its cut log read) the first time.
    pub(super) fn share(&mut self, name: &str) -> paralog_stream::Result<&mut NodeShare> {
        if !self.streams.shares.contains_key(name) {
            // Marked before this job records a cut: a one-node recover of
            // this node must not apply or add rounds of the job's log.
            let s = NodeShare::open(&self.cfg.root, name, self.comm.size())?;
            self.streams.shares.insert(name.into(), s);
        }
        Ok(self.streams.shares.get_mut(name).expect("opened above"))
    }

    /// One stream's round once all servers decided to go: catch a node's
    /// log up, apply what the remote lacks, then a new cut.
    fn stream_round(&mut self, place: &StreamPlace, go: Go<'_>) -> Result<Outcome, MpiError> {
        let me = self.comm.rank();
        let stream = go.stream;
        // 1. A node that missed the last record copies it: a cut (one round
        // behind) or a base (the job's release stopped between rebases).
        if !go.behind.is_empty() {
            let local = go
                .behind
                .contains(&me)
                .then(|| self.share(stream).and_then(|s| s.catch_up(go.last)).err());
            if let Some(f) = self.agree(local.flatten().map(failure))? {
                return Ok(Outcome::Failed(f.message().into()));
            }
            if go.behind.contains(&me) {
                if go.last.starts_with(paralog_stream::format::MAGIC_BASE) {
                    tracing::info!(stream = %stream, round = go.rounds, "this node's cut log was not rebased at the job's last round: the others' base copied");
                } else {
                    tracing::info!(stream = %stream, round = go.rounds, "this node's cut log lacked the job's last round: copied from the others");
                }
            }
        }
        // 2. The leader checks the remote against its log; everyone learns
        // the published round. An idle round skips it when this job
        // published or checked the last round and no log changed since;
        // a round with a new cut never does (a remote emptied or drained
        // by someone else in between is refused, not written into).
        let remote = place.remote();
        let known = self.streams.published.get(stream) == Some(&go.rounds);
        let w = if known && go.behind.is_empty() && !go.new {
            go.rounds
        } else {
            match self.published_round(&*remote, stream, go.partitions)? {
                Ok(w) => w,
                Err(f) => return Ok(Outcome::Failed(f.message().into())),
            }
        };
        self.streams.published.insert(stream.into(), w);
        // 3. Cuts recorded and not published: applied again, the same bytes.
        let mut worked = !go.behind.is_empty();
        for k in w + 1..=go.rounds {
            let (cut, local) = match self.share(stream).and_then(|s| s.cut(k)) {
                Ok(c) => (Some(c), None),
                Err(e) => (None, Some(failure(e))),
            };
            if let Some(f) = self.agree(local)? {
                return Ok(Outcome::Failed(f.message().into()));
            }
            let cut = cut.expect("every server has the cut after the agreement");
            if let Some(why) = self.apply_cut(place, &*remote, stream, go.partitions, &cut)? {
                return Ok(Outcome::Failed(why));
            }
            tracing::info!(stream = %stream, round = k, "a recorded cut applied again");
            worked = true;
        }
        // 4. A new cut, unless a node's log changed this round (its new
        // ranges were taken before it had the last record).
        if !go.new || worked {
            self.after_stream_round(&*remote, stream, go.partitions);
            return Ok(if worked {
                Outcome::Worked
            } else {
                Outcome::Nothing
            });
        }
        let made = self.share(stream).and_then(|s| {
            let state = match s.state() {
                [] => vec![Default::default(); go.partitions as usize],
                st => st.to_vec(),
            };
            let roll = remote.roll_bytes(DrainOptions::default().roll_bytes);
            let cut = nodes::make_cut(go.rounds + 1, &state, go.ranges, roll, stream)?;
            s.record(&cut)?;
            Ok(cut)
        });
        let (cut, local) = match made {
            Ok(c) => (Some(c), None),
            Err(e) => (None, Some(failure(e))),
        };
        // Recorded on every node before anything of it is applied.
        if let Some(f) = self.agree(local)? {
            return Ok(Outcome::Failed(f.message().into()));
        }
        let cut = cut.expect("every server recorded the cut after the agreement");
        if let Some(why) = self.apply_cut(place, &*remote, stream, go.partitions, &cut)? {
            return Ok(Outcome::Failed(why));
        }
        self.after_stream_round(&*remote, stream, go.partitions);
        Ok(Outcome::Worked)
    }

    /// Every server knows the remote published `round` of `stream`.
    pub(super) fn streams_published(&mut self, stream: &str, round: u64) {
        self.streams.published.insert(stream.into(), round);
    }

    /// The round the remote published, checked by the leader against its
    /// cut log (the description written the first time), told to all.
    fn published_round(
        &mut self,
        remote: &dyn StreamRemote,
        stream: &str,
        partitions: u32,
    ) -> Result<Result<u64, Failure>, MpiError> {
        let published = if self.leader() {
            self.share(stream).and_then(|s| {
                remote.ensure(stream, partitions)?;
                let wm = remote.watermark(stream, partitions)?;
                s.check_watermark(&wm, &remote.stream_dir(stream))?;
                Ok(wm.round)
            })
        } else {
            Ok(0)
        };
        let (w, local) = match published {
            Ok(w) => (w, None),
            Err(e) => (0, Some(failure(e))),
        };
        if let Some(f) = self.agree(local)? {
            return Ok(Err(f));
        }
        Ok(Ok(self.sum(w)?))
    }

    /// The leader's work after a stream's round, new data or not: on an
    /// object remote a pending trim request applied (only the drain PUTs
    /// the index), as the one-node drain does. Its failure is the
    /// leader's to log and retry next round; no other server depends on it.
    fn after_stream_round(&self, remote: &dyn StreamRemote, stream: &str, n: u32) {
        if !self.leader() {
            return;
        }
        match remote.after_round(stream, n) {
            Ok(trimmed) => {
                for t in trimmed.iter().filter(|t| !t.segments.is_empty()) {
                    tracing::info!(stream = %stream, partition = t.partition, objects = t.segments.len(), bytes = t.bytes, first_offset = t.first, "stream trimmed (a trim request applied)");
                }
            }
            Err(e) => {
                tracing::warn!(stream = %stream, error = %e, "applying a trim request failed; tried again next round")
            }
        }
    }
}

/// What all servers decided for a stream that goes ahead this round.
struct Go<'a> {
    stream: &'a str,
    partitions: u32,
    rounds: u64,
    behind: &'a [usize],
    last: &'a [u8],
    new: bool,
    ranges: Vec<paralog_stream::nodes::NewRange>,
}

fn failure(e: paralog_stream::StreamError) -> Failure {
    Failure::Retry(e.to_string())
}
