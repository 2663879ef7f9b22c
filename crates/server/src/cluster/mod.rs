//! Many nodes: the servers of a job run as one MPI job, one per node, and
//! drain in rounds. Each round every server scans its node-local root,
//! all servers exchange what changed in what they hold (summaries with the
//! manifests of every undrained epoch, sent as changes: delta.rs), every
//! server computes the same plan, and the servers drain each planned group
//! of epochs together:
//!
//! - a POSIX remote (several writers may write one file): the leader cuts
//!   the file if the epochs say so and gives it the epoch's size, then
//!   every server writes the winning bytes whose logs it holds (no two
//!   servers write the same byte); an agreement after each step;
//! - the object layout: every server stores its bytes in a chunk of its
//!   own and sends the leader where they lie; the leader publishes the
//!   version (chunks.rs);
//! - S3: the leader starts a multipart upload and shares it, each part is
//!   gathered at and uploaded by one server, each byte sent once, and the
//!   leader completes the upload (parts.rs); an object of one part: the
//!   bytes are gathered at the leader window by window, each byte sent
//!   once, and the leader makes the new version.
//!
//! Progress is recorded on every node only after the remote holds the
//! group durably, so any node's progress record is proof for all. No clocks
//! enter a decision that the servers must share: retries count rounds.
//! docs/cluster.md.

mod agree;
mod chunks;
mod collective;
pub mod control;
mod delta;
mod exchange;
mod gather;
mod group;
pub mod job;
pub mod mpi;
pub mod parts;
pub mod plan;
mod planner;
mod posix;
mod puts;
mod renamed;
mod sets;
mod streams;
mod streams_apply;
mod streams_release;
mod streams_view;
pub mod summary;
#[cfg(test)]
mod summary_steps;
mod watchdog;
mod wire;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use paralog_backend::Backend;
use paralog_log::reader::fmt_ids;
use paralog_log::FileInventory;

use crate::remote::Remote;
use crate::retry::{backoff_rounds, RetryState};
use crate::status::{FileState, FileStatus};
use crate::step;
pub use control::{answer, Control};
use mpi::{Comm, MpiError};
use plan::{FileKey, GlobalFile};
use watchdog::Watchdog;

pub struct ClusterConfig {
    pub root: PathBuf,
    pub job: Option<String>,
    pub remote: Remote,
    pub node: String,
    /// Bytes of one window of an object upload's gather (and of one read).
    pub buf_bytes: usize,
    /// Time between rounds when there is nothing to do.
    pub poll: Duration,
    /// Drain everything, then stop (recover; `paralog wait` sets it later).
    pub finish_now: bool,
    /// A collective that takes longer than this means a peer died or hangs.
    pub peer_timeout: Duration,
    /// How the servers write a POSIX remote's bytes.
    pub posix_writes: PosixWrites,
    /// `--aggregate`: member files drain into checkpoint sets (sets.rs).
    pub sets: Option<Arc<crate::aggregate::Sets>>,
    /// Where the shared event streams drain (streams.rs); `None`: they
    /// are not drained.
    pub streams: Option<paralog_stream::StreamPlace>,
    /// Local retention of the streams: once some node's drained segments
    /// that may go plus its cut log amount to this many bytes, the job
    /// releases every node's (streams_release.rs); `u64::MAX`: never.
    pub stream_release_bytes: u64,
    /// Where this node's publisher of logged array puts reports its
    /// rounds (puts.rs); `None`: none runs, the job does not wait for
    /// puts.
    pub puts: Option<crate::puts::Puts>,
}

/// How the servers write the bytes of an epoch into a POSIX remote file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PosixWrites {
    /// Each server writes its own bytes (`copy_file_range` from its log
    /// where it can), then fsyncs: measured faster (docs/benchmarks.md §8).
    #[default]
    Independent,
    /// Collective MPI-IO (`MPI_File_write_all`): the MPI library's
    /// aggregation and file-system tuning (collective.rs).
    Collective,
}

/// What the servers did, the same on every node.
#[derive(Debug, Clone, Default)]
pub struct Totals {
    pub nodes: usize,
    pub rounds: u64,
    pub epochs_drained: u64,
    pub bytes_drained: u64,
    /// Bytes that one server sent another to assemble a version (each byte
    /// at most once).
    pub bytes_between_nodes: u64,
    /// Parts of shared uploads (S3) that each server uploaded.
    pub parts_by_node: Vec<u64>,
    /// Files that could not be drained, with the reason.
    pub failed: Vec<String>,
    /// Checkpoint sets published (`--aggregate`).
    pub sets_published: u64,
    /// The most receive-buffer bytes a set's leader held at once, and its
    /// pool (`--agg-buffers` buffers).
    pub set_leader_peak: u64,
    pub set_leader_pool: u64,
    /// Stream rounds applied (new cuts and cuts applied again).
    pub stream_rounds: u64,
    /// Events those rounds stored, and per server the events it appended
    /// as the owner of their partitions.
    pub stream_events: u64,
    pub stream_events_by_node: Vec<u64>,
    /// Event frames' bytes one server sent another (each at most once).
    pub stream_bytes_between_nodes: u64,
    /// Logged array puts the nodes' publishers published, and what they
    /// left, each naming its node (puts.rs).
    pub puts_published: u64,
    pub puts_left: Vec<crate::puts::PutStatus>,
}

/// What one round found and did, the same on every server.
#[derive(Default)]
struct Round {
    number: u64,
    /// Some group was drained or tried (or must be looked at again at once).
    worked: bool,
    /// Epochs committed and not drained yet.
    pending: u64,
    /// Files waiting for a retry.
    retrying: usize,
    /// The job is ending: drain everything committed now.
    finishing: bool,
}

/// The coordinator: rounds until finished. Every error path keeps the
/// servers' collectives matched: a local failure becomes a flag in the next
/// agreement, never an early return on one node alone.
pub struct Coordinator {
    comm: Comm,
    cfg: ClusterConfig,
    ctl: Arc<Control>,
    dog: Watchdog,
    /// Files that failed: retried after a number of rounds, or parked
    /// (never drained by this job: damaged, refused for good).
    retries: BTreeMap<FileKey, RetryState<u64>>,
    /// Epochs seen committed with manifests missing, and the round that
    /// first saw them (see plan::plan).
    incomplete: BTreeMap<FileKey, (paralog_log::EpochId, u64)>,
    /// Rounds in a row each file has waited for the other file of a
    /// rename (renamed.rs).
    waits: BTreeMap<FileKey, u64>,
    totals: Totals,
    /// What each file drained so far, for `status`.
    drained: BTreeMap<FileKey, FileDrained>,
    /// Time spent draining groups, all files.
    active: Duration,
    /// The checkpoint sets' rounds (sets.rs).
    sets: sets::SetRounds,
    /// The streams' rounds (streams.rs).
    streams: streams::StreamRounds,
    /// The logged puts' agreement (puts.rs).
    puts: puts::PutRounds,
    /// What the rounds' exchanges cost (exchange.rs), for `status`.
    round_cost: crate::status::RoundCost,
    /// What this server last sent, and every server's summary as received
    /// (delta.rs).
    outbox: delta::Outbox,
    copies: delta::Copies,
    /// The last plan, kept for the next round (planner.rs).
    planner: planner::Planner,
    /// What the last scan of the node-local root read (summary::collect).
    scan_cache: paralog_log::reader::ScanCache,
}

/// One file's drain so far (the time is this server's own: for the rate
/// `status` shows, never for a decision).
#[derive(Debug, Clone, Copy, Default)]
struct FileDrained {
    epochs: u64,
    bytes: u64,
    busy: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(transparent)]
    Mpi(#[from] MpiError),
    #[error(transparent)]
    Decode(#[from] wire::DecodeError),
}

impl Coordinator {
    pub fn new(comm: Comm, cfg: ClusterConfig, ctl: Arc<Control>) -> Coordinator {
        let dog = Watchdog::start(cfg.peer_timeout, cfg.node.clone());
        if cfg.finish_now {
            ctl.request_finish();
        }
        let copies = delta::Copies::new(comm.size());
        let totals = Totals {
            nodes: comm.size(),
            ..Totals::default()
        };
        Coordinator {
            comm,
            cfg,
            ctl,
            dog,
            retries: BTreeMap::new(),
            incomplete: BTreeMap::new(),
            waits: BTreeMap::new(),
            totals,
            drained: BTreeMap::new(),
            active: Duration::ZERO,
            sets: sets::SetRounds::default(),
            streams: streams::StreamRounds::default(),
            puts: puts::PutRounds::default(),
            round_cost: crate::status::RoundCost::default(),
            outbox: delta::Outbox::default(),
            copies,
            planner: planner::Planner::default(),
            scan_cache: paralog_log::reader::ScanCache::new(),
        }
    }

    fn leader(&self) -> bool {
        self.comm.rank() == 0
    }

    /// Rounds until finished; the totals, the same on every server.
    pub fn run(&mut self) -> Result<Totals, ClusterError> {
        let mut number = 0u64;
        loop {
            number += 1;
            let Some(exchange::Planned {
                mut files,
                finishing,
            }) = self.exchange_and_plan(number)?
            else {
                // A node's files are missing from this round's view: no
                // plan from it (their absence would read as lost logs).
                std::thread::sleep(self.cfg.poll);
                continue;
            };
            files.retain(|f| !self.is_set_member(f));
            if number == 1 && self.cfg.finish_now && self.leader() {
                // Recovery: what an interrupted drain left half-done on the
                // remote (S3 multipart uploads) goes before anything else.
                for f in &files {
                    self.abort_stale(f);
                }
            }
            let mut round = Round {
                number,
                finishing,
                ..Round::default()
            };
            self.show_all(&files);
            for f in &files {
                self.drain_file(f, &mut round)?;
            }
            self.drain_sets(finishing, &mut round)?;
            self.drain_streams(finishing, &mut round)?;
            let puts_done = self.agree_puts(finishing)?;
            self.publish(&round);
            // Finished when nothing drainable is left: every file drained or
            // parked, and no logged put that may still be published. Every
            // server sees the same plan and agreement, so all stop together.
            if finishing && !round.worked && round.pending == 0 && round.retrying == 0 && puts_done
            {
                break;
            }
            if !round.worked {
                std::thread::sleep(self.cfg.poll);
            }
        }
        self.end()
    }

    /// One file in one round: park it if its logs cannot be drained, wait
    /// out its backoff, else drain its planned groups in order.
    fn drain_file(&mut self, f: &GlobalFile, round: &mut Round) -> Result<(), ClusterError> {
        let key = f.key();
        self.sync_progress(f);
        if self.retries.get(&key).is_some_and(RetryState::is_parked) {
            return Ok(());
        }
        if let Some(why) = &f.blocked {
            if self.blocked_for_good(f, &key, round.number) {
                tracing::error!(file = %f.name(), reason = %why, "not drained; every local log is kept");
                self.retries
                    .entry(key.clone())
                    .or_default()
                    .park(why.clone(), false);
                self.show(f, &key, 0, false);
                return Ok(());
            }
            // Look again next round, without sleeping.
            round.pending += 1;
            round.worked = true;
        } else {
            self.incomplete.remove(&key);
        }
        round.pending += f.pending() as u64;
        if f.groups.is_empty() {
            return Ok(());
        }
        let retry = self.retries.get(&key);
        if retry.is_some_and(|r| r.waiting(round.number)) {
            round.retrying += 1;
            return Ok(());
        }
        // A retry: what the failed attempt may have left on the remote (an
        // S3 upload whose abort failed too) goes first. Only the leader
        // starts and ends uploads. Not done (the remote still down), it is
        // asked again once this attempt succeeded (its retry state gone).
        let stale_left =
            retry.is_some_and(|r| r.attempts > 0) && self.leader() && !self.abort_stale(f);
        let result = self.drain_groups(f, &key, round);
        if stale_left && !self.retries.contains_key(&key) {
            self.abort_stale(f);
        }
        result
    }

    /// The drain of `f`'s planned groups in order (or its renames), up to
    /// the first that fails.
    fn drain_groups(
        &mut self,
        f: &GlobalFile,
        key: &FileKey,
        round: &mut Round,
    ) -> Result<(), ClusterError> {
        if renamed::holds_rename(f) {
            // The one drain step of renames, on the node that holds them.
            return self.drain_file_renamed(f, key, round);
        }
        // Only the first group of a file that had nothing drained starts
        // from no object; the next ones from what it made.
        let mut fresh = f.progress.is_none();
        for (done, group) in f.groups.iter().enumerate() {
            round.worked = true;
            self.show(f, key, done, true);
            let started = Instant::now();
            let result = self.drain_group(f, group, fresh)?;
            let busy = started.elapsed();
            self.active += busy;
            let tally = self.drained.entry(key.clone()).or_default();
            tally.busy += busy;
            let failure = match result {
                Ok(bytes) => {
                    fresh = false;
                    self.retries.remove(key);
                    tally.epochs += group.ids.len() as u64;
                    tally.bytes += bytes;
                    self.totals.epochs_drained += group.ids.len() as u64;
                    self.totals.bytes_drained += bytes;
                    round.pending = round.pending.saturating_sub(group.ids.len() as u64);
                    self.show(f, key, done + 1, false);
                    continue;
                }
                Err(failure) => failure,
            };
            self.group_failed(f, key, &group.ids, failure, round, done);
            break;
        }
        Ok(())
    }

    /// A group of `f` (epochs `ids`, after `done` groups) failed on every
    /// server: retried after some rounds, or parked.
    fn group_failed(
        &mut self,
        f: &GlobalFile,
        key: &FileKey,
        ids: &[paralog_log::EpochId],
        failure: crate::retry::Failure,
        round: &mut Round,
        done: usize,
    ) {
        let leader = self.leader();
        let msg = failure.message().to_owned();
        let state = self.retries.entry(key.clone()).or_default();
        // Rounds, not seconds: the same on every server.
        if state.failed(failure, |n| round.number + backoff_rounds(n)) {
            if leader {
                tracing::warn!(file = %f.name(), epochs = %fmt_ids(ids), attempt = state.attempts, error = %msg, "drain failed; local data kept, retrying");
            }
            round.retrying += 1;
        } else if leader {
            tracing::error!(file = %f.name(), epochs = %fmt_ids(ids), error = %msg, "refusing to drain; every local log is kept");
        }
        self.show(f, key, done, false);
    }

    /// Where `f` stands for `status`, once `done` of its planned groups
    /// were drained this round; `draining`: the next one is under way.
    fn file_status(
        &self,
        f: &GlobalFile,
        key: &FileKey,
        done: usize,
        draining: bool,
    ) -> FileStatus {
        let drained = self.drained.get(key).copied().unwrap_or_default();
        let retry = self.retries.get(key);
        let left = &f.groups[done.min(f.groups.len())..];
        let state = match retry.and_then(|r| r.parked) {
            Some(true) => FileState::Refused,
            Some(false) => FileState::Damaged,
            None if draining => FileState::Draining,
            None if retry.is_some_and(|r| r.not_before.is_some()) => FileState::Retrying,
            None if !left.is_empty() => FileState::Queued,
            None => FileState::Idle,
        };
        FileStatus {
            job: f.job.clone(),
            path: String::from_utf8_lossy(&f.path).into_owned(),
            state,
            epochs_drained: drained.epochs,
            epochs_pending: (left.iter().map(|g| g.ids.len()).sum::<usize>() + f.waiting) as u64,
            bytes_drained: drained.bytes,
            bytes_pending: left.iter().map(plan::Group::log_bytes).sum::<u64>() + f.waiting_bytes,
            rate_bps: crate::status::rate(drained.bytes, drained.busy.as_secs_f64()),
            eta_s: None,
            attempts: retry.map_or(0, |r| r.attempts),
            message: retry.and_then(|r| r.error.clone()),
            scans: 0,
        }
    }

    /// Tell the status socket where `f` stands now (see [`Self::file_status`]).
    fn show(&self, f: &GlobalFile, key: &FileKey, done: usize, draining: bool) {
        let status = self.file_status(f, key, done, draining);
        let mut s = self.ctl.lock();
        s.files.insert(key.clone(), status);
        s.totals = self.totals.clone();
        s.active = self.active;
    }

    /// A new round's plan: every file as it stands before the round.
    fn show_all(&self, files: &[Arc<GlobalFile>]) {
        let all = files
            .iter()
            .map(|f| {
                let key = f.key();
                let status = self.file_status(f, &key, 0, false);
                (key, status)
            })
            .collect();
        let mut s = self.ctl.lock();
        s.files = all;
        s.totals = self.totals.clone();
        s.active = self.active;
    }

    /// Whether what blocks `f` is for good: a damaged log, or manifests
    /// still missing in a later round than the one that first saw them
    /// missing (one round can see a moment of another node's commit).
    fn blocked_for_good(&mut self, f: &GlobalFile, key: &FileKey, round: u64) -> bool {
        let Some(id) = f.missing else {
            return true;
        };
        let first = self.incomplete.entry(key.clone()).or_insert((id, round));
        if first.0 != id {
            *first = (id, round);
        }
        first.1 < round
    }

    /// What this round left: the totals the servers print at the end,
    /// and the status socket's.
    fn publish(&mut self, round: &Round) {
        self.totals.rounds = round.number;
        self.totals.failed = self
            .retries
            .iter()
            .filter(|(_, r)| r.is_parked())
            .map(|(k, r)| {
                format!(
                    "{}:{}: {}",
                    k.job,
                    String::from_utf8_lossy(&k.rel),
                    r.error.as_deref().unwrap_or("")
                )
            })
            .chain(self.sets.failed())
            .chain(self.streams.failed())
            .chain(self.puts.failed(self.cfg.finish_now))
            .collect();
        self.totals.puts_published = self.puts.published;
        self.totals.puts_left = self.puts.left.clone();
        let mut s = self.ctl.lock();
        s.files.extend(self.sets.parked_rows());
        s.totals = self.totals.clone();
        s.active = self.active;
    }

    /// The job is over: records kept for the program's reads (S3) go, the
    /// `wait` clients get the totals, and every server leaves together.
    fn end(&mut self) -> Result<Totals, ClusterError> {
        if let Err(e) = self.delete_all_drained() {
            tracing::warn!(error = %e, "deleting drained records at the end failed; `paralog recover` finishes it");
        }
        let t = self.totals.clone();
        self.ctl.set_done();
        self.dog.watch(|| self.comm.barrier())?;
        Ok(t)
    }

    /// Remove what an interrupted drain of `f` left on the remote (S3:
    /// its unfinished multipart uploads); best effort, said in the log;
    /// whether it was done.
    fn abort_stale(&self, f: &GlobalFile) -> bool {
        match self.backend(f) {
            Ok(b) => step::abort_stale(b.as_ref(), &f.rel, &f.name()),
            Err(e) => {
                tracing::warn!(file = %f.name(), error = %e, "no remote");
                false
            }
        }
    }

    fn delete_all_drained(&self) -> Result<(), paralog_log::LogError> {
        let inv = paralog_log::Inventory::scan(&self.cfg.root)?;
        for j in inv
            .jobs
            .iter()
            .filter(|j| self.cfg.job.as_ref().is_none_or(|n| *n == j.name))
        {
            for f in &j.files {
                step::delete_drained_leftovers(f)?;
            }
        }
        Ok(())
    }

    pub fn finalize(self) -> Result<(), MpiError> {
        self.comm.finalize()
    }

    fn whole_opens(&self) -> bool {
        match &self.cfg.remote {
            Remote::Url(_, b) => b.whole_opens(),
            Remote::Prefix => false,
        }
    }

    fn backend(&self, f: &GlobalFile) -> Result<Arc<dyn Backend>, paralog_backend::BackendError> {
        self.cfg.remote.backend_for_record(&f.path, &f.rel)
    }

    /// This node's directory of `f`, if it holds any of it.
    fn my_dir(&self, f: &GlobalFile) -> Option<PathBuf> {
        f.holders
            .iter()
            .find(|(n, _)| *n == self.comm.rank())
            .map(|(_, d)| PathBuf::from(d))
    }

    /// Bring this node's progress record up to the servers' (another
    /// node's record proves the remote has those epochs), then delete what
    /// it proves drained.
    fn sync_progress(&self, f: &GlobalFile) {
        let (Some(dir), Some(p)) = (self.my_dir(f), f.progress) else {
            return;
        };
        let keep = self.backend(f).is_ok_and(|b| !b.readable_by_capture());
        let result = (|| -> Result<(), paralog_log::LogError> {
            let inv = FileInventory::scan_dir(&dir)?;
            if inv.progress.map(|q| q.id()) < Some(p) {
                step::write_progress(&dir, p)?;
            }
            if !keep {
                let inv = FileInventory::scan_dir(&dir)?;
                step::delete_drained_leftovers(&inv)?;
            }
            Ok(())
        })();
        if let Err(e) = result {
            tracing::warn!(file = %f.name(), error = %e, "updating local progress failed; tried again next round");
        }
    }
}
