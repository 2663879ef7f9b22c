//! Many nodes: the servers of a job run as one MPI job, one per node, and
//! drain in rounds. Each round every server scans its node-local root,
//! all servers exchange what they hold (summaries with the manifests of
//! every undrained epoch), every server computes the same plan, and the
//! servers drain each planned group of epochs together:
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

mod chunks;
mod collective;
pub mod mpi;
pub mod parts;
pub mod plan;
pub mod summary;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use paralog_backend::{Backend, RemoteOp};
use paralog_log::format::ProgressRecord;
use paralog_log::layout;
use paralog_log::reader::{fmt_ids, SourceReader};
use paralog_log::{FileInventory, LogicalFile};

use crate::remote::Remote;
use mpi::{Comm, MpiError, Reduce};
use plan::{GlobalFile, Group};
use summary::NodeSummary;

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
#[derive(Debug, Clone, Default, serde::Serialize)]
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
}

/// State shared with the status socket's threads.
#[derive(Default)]
pub struct Control {
    state: Mutex<ControlState>,
    changed: Condvar,
}

#[derive(Default)]
struct ControlState {
    finish: bool,
    /// `wait` clients not yet answered: the process stays until they are.
    waiters: usize,
    done: Option<Totals>,
    totals: Totals,
    pending_epochs: u64,
    retrying: Vec<String>,
}

impl Control {
    pub fn request_finish(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).finish = true;
    }

    /// Block until the servers finished (everything drained, or they gave
    /// up on some files), or `timeout`.
    pub fn wait_done(&self, timeout: Option<Duration>) -> Option<Totals> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(t) = &s.done {
                return Some(t.clone());
            }
            let wait = match deadline {
                Some(d) => d.checked_duration_since(Instant::now())?,
                None => Duration::from_secs(3600),
            };
            s = self
                .changed
                .wait_timeout(s, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Before the process exits: let the `wait` clients have their answer.
    pub fn answered(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while s.waiters > 0 {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return;
            };
            s = self
                .changed
                .wait_timeout(s, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    fn waiter(&self, delta: isize) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.waiters = s.waiters.saturating_add_signed(delta);
        drop(s);
        self.changed.notify_all();
    }

    pub fn snapshot(&self) -> serde_json::Value {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        serde_json::json!({
            "cluster": true,
            "nodes": s.totals.nodes,
            "rounds": s.totals.rounds,
            "epochs_drained": s.totals.epochs_drained,
            "bytes_drained": s.totals.bytes_drained,
            "bytes_between_nodes": s.totals.bytes_between_nodes,
            "parts_by_node": s.totals.parts_by_node,
            "epochs_pending": s.pending_epochs,
            "retrying": s.retrying,
            "failed": s.totals.failed,
            "finishing": s.finish,
        })
    }
}

/// Watches the coordinator's collectives: one that lasts longer than the
/// peer timeout ends this server with a message (the launcher then stops
/// the others), so that no server waits forever for a dead peer.
struct Watchdog {
    since: Arc<AtomicU64>,
    start: Instant,
}

impl Watchdog {
    fn start(timeout: Duration, node: String) -> Watchdog {
        let since = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let s = since.clone();
        std::thread::Builder::new()
            .name("watchdog".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_millis(500).min(timeout));
                let t = s.load(Ordering::SeqCst);
                if t == 0 {
                    continue;
                }
                let waited = start.elapsed().saturating_sub(Duration::from_millis(t));
                if waited > timeout {
                    eprintln!(
                        "paralog server (node {node}): no answer from the other servers for {:.0} s (a server died or hangs); stopping. Every local log is kept: restart the server job, or run `paralog recover` as an MPI job",
                        waited.as_secs_f64()
                    );
                    std::process::exit(4);
                }
            })
            .expect("spawn watchdog thread");
        Watchdog { since, start }
    }

    /// Run one collective under watch.
    fn watch<T>(&self, f: impl FnOnce() -> T) -> T {
        let now = self.start.elapsed().as_millis().max(1) as u64;
        self.since.store(now, Ordering::SeqCst);
        let r = f();
        self.since.store(0, Ordering::SeqCst);
        r
    }
}

/// A remote failure as a step's outcome: retried later if retrying can help.
pub(crate) fn remote_error(e: paralog_backend::BackendError) -> StepError {
    if e.retryable() {
        StepError::Retry(e.to_string())
    } else {
        StepError::Park(e.to_string())
    }
}

/// A file of the job: (job name, path relative to the prefix).
type FileKey = (String, Vec<u8>);

/// The coordinator: rounds until finished. Every error path keeps the
/// servers' collectives matched: a local failure becomes a flag in the next
/// agreement, never an early return on one node alone.
pub struct Coordinator {
    comm: Comm,
    cfg: ClusterConfig,
    ctl: Arc<Control>,
    dog: Watchdog,
    /// File → (failed attempts, round before which it is not retried).
    backoff: BTreeMap<FileKey, (u32, u64)>,
    /// Files that will not be drained by this job (damaged, permanent).
    parked: BTreeMap<FileKey, String>,
    /// Epochs seen committed with manifests missing, and the round that
    /// first saw them (see plan::plan).
    incomplete: BTreeMap<FileKey, (paralog_log::EpochId, u64)>,
    totals: Totals,
}

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(transparent)]
    Mpi(#[from] MpiError),
    #[error(transparent)]
    Decode(#[from] summary::DecodeError),
}

/// What one step of a group's drain did, agreed by all servers.
pub(crate) enum StepError {
    /// Try the group again in a later round (a remote failure).
    Retry(String),
    /// Never drain this file in this job (a damaged log, a permanent error).
    Park(String),
}

impl Coordinator {
    pub fn new(comm: Comm, cfg: ClusterConfig, ctl: Arc<Control>) -> Coordinator {
        let dog = Watchdog::start(cfg.peer_timeout, cfg.node.clone());
        if cfg.finish_now {
            ctl.request_finish();
        }
        let totals = Totals {
            nodes: comm.size(),
            ..Totals::default()
        };
        Coordinator {
            comm,
            cfg,
            ctl,
            dog,
            backoff: BTreeMap::new(),
            parked: BTreeMap::new(),
            incomplete: BTreeMap::new(),
            totals,
        }
    }

    fn leader(&self) -> bool {
        self.comm.rank() == 0
    }

    /// Every server's message (empty where it had none), joined.
    fn messages(&self, mine: Option<&str>) -> Result<String, MpiError> {
        let (all, counts) = self
            .dog
            .watch(|| self.comm.gather_bytes(mine.unwrap_or("").as_bytes(), None))?;
        let mut out = Vec::new();
        let mut at = 0;
        for c in counts {
            if c > 0 {
                out.push(String::from_utf8_lossy(&all[at..at + c]).into_owned());
            }
            at += c;
        }
        Ok(out.join("; "))
    }

    /// One agreement on a step's local outcomes.
    fn agree(&self, local: Option<StepError>) -> Result<Option<StepError>, MpiError> {
        let code = match &local {
            None => 0,
            Some(StepError::Retry(_)) => 1,
            Some(StepError::Park(_)) => 2,
        };
        let mut v = [code];
        self.dog
            .watch(|| self.comm.allreduce(&mut v, Reduce::Max))?;
        if v[0] == 0 {
            return Ok(None);
        }
        let text = match &local {
            Some(StepError::Retry(m) | StepError::Park(m)) => {
                Some(format!("node {}: {m}", self.cfg.node))
            }
            None => None,
        };
        let all = self.messages(text.as_deref())?;
        Ok(Some(if v[0] == 2 {
            StepError::Park(all)
        } else {
            StepError::Retry(all)
        }))
    }

    /// Rounds until finished; the totals, the same on every server.
    pub fn run(&mut self) -> Result<Totals, ClusterError> {
        let mut round = 0u64;
        loop {
            round += 1;
            let finish_local = self
                .ctl
                .state
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .finish;
            let mine = match summary::collect(
                &self.cfg.root,
                self.cfg.job.as_deref(),
                &self.cfg.node,
                finish_local,
            ) {
                Ok(s) => s,
                Err(e) => {
                    // This round without this node's files; said once per round.
                    tracing::error!(error = %e, "scanning the node-local root failed");
                    NodeSummary {
                        node: self.cfg.node.clone(),
                        finishing: finish_local,
                        scan_failed: true,
                        files: Vec::new(),
                    }
                }
            };
            let (all, counts) = self
                .dog
                .watch(|| self.comm.gather_bytes(&mine.encode(), None))?;
            let mut nodes = Vec::with_capacity(counts.len());
            let mut at = 0;
            for (i, c) in counts.iter().enumerate() {
                nodes.push(NodeSummary::decode(&all[at..at + c], i)?);
                at += c;
            }
            let finishing = nodes.iter().any(|n| n.finishing);
            if nodes.iter().any(|n| n.scan_failed) {
                // A node's files are missing from this round's view: no
                // plan from it (their absence would read as lost logs).
                std::thread::sleep(self.cfg.poll);
                continue;
            }
            let whole = self.whole_opens();
            let files = plan::plan(&nodes, whole, finishing);
            if round == 1 && self.cfg.finish_now && self.leader() {
                // Recovery: what an interrupted drain left half-done on the
                // remote (S3 multipart uploads) goes before anything else.
                for f in &files {
                    self.abort_stale(f);
                }
            }
            let mut worked = false;
            let mut pending = 0u64;
            let mut retrying = Vec::new();
            for f in &files {
                let key = (f.job.clone(), f.rel.clone());
                self.sync_progress(f);
                if self.parked.contains_key(&key) {
                    continue;
                }
                if let Some(why) = &f.blocked {
                    let confirmed = match f.missing {
                        // Seen in an earlier round already: really missing.
                        Some(id) => self
                            .incomplete
                            .get(&key)
                            .is_some_and(|&(seen, r)| seen == id && r < round),
                        None => true,
                    };
                    if confirmed {
                        tracing::error!(file = %f.name(), reason = %why, "not drained; every local log is kept");
                        self.parked.insert(key, why.clone());
                        continue;
                    }
                    let id = f.missing.expect("unconfirmed means missing manifests");
                    self.incomplete
                        .entry(key.clone())
                        .and_modify(|e| {
                            if e.0 != id {
                                *e = (id, round)
                            }
                        })
                        .or_insert((id, round));
                    // Look again next round, without sleeping.
                    pending += 1;
                    worked = true;
                } else {
                    self.incomplete.remove(&key);
                }
                pending += f.pending() as u64;
                if f.groups.is_empty() {
                    continue;
                }
                if self
                    .backoff
                    .get(&key)
                    .is_some_and(|&(_, until)| round < until)
                {
                    retrying.push(f.name());
                    continue;
                }
                if self.backoff.contains_key(&key) && self.leader() {
                    // A retry: what the failed attempt may have left on the
                    // remote (an S3 upload whose abort failed too) goes
                    // first. Only the leader starts and ends uploads.
                    self.abort_stale(f);
                }
                // Only the first group of a file that had nothing drained
                // starts from no object; the next ones from what it made.
                let mut fresh = f.progress.is_none();
                for group in &f.groups {
                    worked = true;
                    match self.drain_group(f, group, fresh)? {
                        Ok(bytes) => {
                            fresh = false;
                            self.backoff.remove(&key);
                            self.totals.epochs_drained += group.ids.len() as u64;
                            self.totals.bytes_drained += bytes;
                            pending = pending.saturating_sub(group.ids.len() as u64);
                        }
                        Err(StepError::Retry(m)) => {
                            let leader = self.leader();
                            let e = self.backoff.entry(key.clone()).or_insert((0, 0));
                            e.0 += 1;
                            // Rounds, not seconds: the same on every server.
                            e.1 = round + (1u64 << e.0.min(6));
                            if leader {
                                tracing::warn!(file = %f.name(), epochs = %fmt_ids(&group.ids), attempt = e.0, error = %m, "drain failed; local data kept, retrying");
                            }
                            retrying.push(f.name());
                            break;
                        }
                        Err(StepError::Park(m)) => {
                            if self.leader() {
                                tracing::error!(file = %f.name(), epochs = %fmt_ids(&group.ids), error = %m, "refusing to drain; every local log is kept");
                            }
                            self.parked.insert(key.clone(), m);
                            break;
                        }
                    }
                }
            }
            self.totals.rounds = round;
            self.totals.failed = self
                .parked
                .iter()
                .map(|((job, rel), why)| format!("{job}:{}: {why}", String::from_utf8_lossy(rel)))
                .collect();
            {
                let mut s = self.ctl.state.lock().unwrap_or_else(|p| p.into_inner());
                s.totals = self.totals.clone();
                s.pending_epochs = pending;
                s.retrying = retrying.clone();
            }
            // Finished when nothing drainable is left: every file drained or
            // parked. Every server sees the same plan, so all stop together.
            if finishing && !worked && pending == 0 && retrying.is_empty() {
                break;
            }
            if !worked {
                std::thread::sleep(self.cfg.poll);
            }
        }
        // The job is over: records kept for the program's reads (S3) go.
        if let Err(e) = self.delete_all_drained() {
            tracing::warn!(error = %e, "deleting drained records at the end failed; `paralog recover` finishes it");
        }
        let t = self.totals.clone();
        {
            let mut s = self.ctl.state.lock().unwrap_or_else(|p| p.into_inner());
            s.done = Some(t.clone());
        }
        self.ctl.changed.notify_all();
        self.dog.watch(|| self.comm.barrier())?;
        Ok(t)
    }

    /// Remove what an interrupted drain of `f` left on the remote (S3:
    /// its unfinished multipart uploads); best effort, said in the log.
    fn abort_stale(&self, f: &GlobalFile) {
        match self.backend(f).map(|b| b.abort_stale(&f.rel)) {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => {
                tracing::info!(file = %f.name(), uploads = n, "aborted unfinished uploads")
            }
            Ok(Err(e)) => {
                tracing::warn!(file = %f.name(), error = %e, "aborting unfinished uploads failed")
            }
            Err(e) => tracing::warn!(file = %f.name(), error = %e, "no remote"),
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
                crate::drain::delete_drained_leftovers(f)?;
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
            if inv.progress.map(|q| (q.gen, q.epoch)) < Some(p) {
                write_progress(&dir, p)?;
            }
            if !keep {
                let inv = FileInventory::scan_dir(&dir)?;
                crate::drain::delete_drained_leftovers(&inv)?;
            }
            Ok(())
        })();
        if let Err(e) = result {
            tracing::warn!(file = %f.name(), error = %e, "updating local progress failed; tried again next round");
        }
    }

    /// Drain one group on every server. `Err` only for a failure of MPI
    /// itself; the inner result is agreed by all servers.
    fn drain_group(
        &mut self,
        f: &GlobalFile,
        g: &Group,
        fresh: bool,
    ) -> Result<Result<u64, StepError>, ClusterError> {
        let me = self.comm.rank();
        // The same drain lock as the one-node server and `recover` take: a
        // one-node `recover` run by hand on this node must not interleave.
        let mut lock = None;
        // 1. The merged file, and a check of every byte this node will send.
        let mut reader = SourceReader::default();
        let local = (|| -> Result<(LogicalFile, Arc<dyn Backend>), StepError> {
            if let Some(dir) = self.my_dir(f) {
                lock = Some(crate::drain::lock_file_dir(&dir).map_err(|e| match e {
                    crate::drain::DrainError::Busy(_) => StepError::Retry(e.to_string()),
                    other => StepError::Park(other.to_string()),
                })?);
            }
            let lf = g
                .logical_file()
                .map_err(|e| StepError::Park(e.to_string()))?;
            for (_, _, piece) in lf.pieces() {
                let src = &lf.sources[piece.source];
                if g.owner.get(&(src.epoch.0, src.rank)) == Some(&me) {
                    reader
                        .verify(src)
                        .map_err(|e| StepError::Park(e.to_string()))?;
                }
            }
            let b = self.backend(f).map_err(remote_error)?;
            Ok((lf, b))
        })();
        let (lf, backend, local_err) = match local {
            Ok((lf, b)) => (Some(lf), Some(b), None),
            Err(e) => (None, None, Some(e)),
        };
        if let Some(e) = self.agree(local_err)? {
            return Ok(Err(e));
        }
        let lf = lf.expect("agreed: every server built it");
        let backend = backend.expect("agreed: every server opened it");
        let shape = paralog_backend::EpochShape {
            epoch: *g.ids.last().expect("groups are not empty"),
            // This node's log (zero if it holds none of the file): only
            // ever makes a re-drain publish a duplicate, never skip one.
            origin: self
                .my_dir(f)
                .map_or([0; 16], |d| paralog_log::reader::origin_of(&d)),
            deleted: lf.deleted,
            min_size: lf.size.min_size,
            size_set: lf.size.size_set,
            base_cut: lf.size.base_cut,
            fresh,
        };
        let parted = backend.parted().filter(|_| !lf.deleted);
        let result = if backend.concurrent_writers() {
            self.drain_shared(f, g, &lf, &shape, backend.as_ref(), &mut reader)?
        } else if let Some(c) = backend.chunked() {
            self.drain_chunked(f, g, &lf, &shape, backend.as_ref(), c, &mut reader)?
        } else if let Some(r) = match parted {
            Some(p) => self.drain_parted(f, g, &lf, &shape, backend.as_ref(), p, &mut reader)?,
            None => None,
        } {
            r
        } else {
            self.drain_gathered(f, g, &lf, &shape, backend.as_ref(), &mut reader)?
        };
        let bytes = match result {
            Ok(b) => b,
            Err(e) => return Ok(Err(e)),
        };
        // 2. Durable everywhere: record it, then free the local records.
        drop(reader);
        let last = shape.epoch;
        if let Some(dir) = self.my_dir(f) {
            let keep = !backend.readable_by_capture();
            let r = write_progress(&dir, last).and_then(|()| {
                if keep {
                    return Ok(());
                }
                let inv = FileInventory::scan_dir(&dir)?;
                for &id in &g.ids {
                    crate::drain::delete_epoch(&inv, id)?;
                }
                Ok(())
            });
            if let Err(e) = r {
                // The remote has it; another node's record proves it, and
                // the next round retries this one.
                tracing::warn!(file = %f.name(), error = %e, "recording progress failed here");
            }
        }
        crate::failpoint::hit("cluster.after_progress");
        Ok(Ok(bytes))
    }

    /// Several servers write one POSIX file: its shape, then everyone's bytes.
    fn drain_shared(
        &self,
        f: &GlobalFile,
        g: &Group,
        lf: &LogicalFile,
        shape: &paralog_backend::EpochShape,
        backend: &dyn Backend,
        reader: &mut SourceReader,
    ) -> Result<Result<u64, StepError>, ClusterError> {
        let me = self.comm.rank();
        let collective = match backend.local_path(&f.rel) {
            Some(p) if self.cfg.posix_writes == PosixWrites::Collective && !lf.deleted => Some(p),
            _ => None,
        };
        // The leader gives the file its shape before anyone writes: bytes
        // past the cut gone, then the epoch's size (every winning byte
        // lies below it), or the deletion. One step and one fsync; the
        // writes that follow only fill bytes in. The file (and its
        // directories) exist before MPI_File_open, which makes neither,
        // and every collective write lands inside the file: ROMIO's
        // two-phase write fills a hole past the end with stale buffer
        // bytes (tests/mpi/README.md), inside the file it reads zeros.
        let shaped = if self.leader() {
            shape_version(backend, &f.rel, shape, lf, None)
        } else {
            Ok(())
        };
        if let Some(e) = self.agree(shaped.err())? {
            return Ok(Err(e));
        }
        let mut mine = 0u64;
        let mut writes = (|| -> Result<(), StepError> {
            if lf.deleted || collective.is_some() {
                return Ok(());
            }
            let mut sink = None;
            let mut buf: Vec<u8> = Vec::new();
            let mut copy = true;
            let w = self.cfg.buf_bytes as u64;
            for &(off, n, source, skip, _) in windows(g, lf, w, Some(me)).iter().flatten() {
                let src = &lf.sources[source];
                let s = match &mut sink {
                    Some(s) => s,
                    None => sink.insert(backend.begin(&f.rel, shape).map_err(remote_error)?),
                };
                if copy {
                    let file = reader
                        .verified_file(src)
                        .map_err(|e| StepError::Park(e.to_string()))?;
                    let at = src.extent.log_pos + skip;
                    copy = s.copy_from(file, at, n, off).map_err(remote_error)?;
                }
                if !copy {
                    buf.resize(n as usize, 0);
                    reader
                        .read(src, skip, &mut buf)
                        .map_err(|e| StepError::Park(e.to_string()))?;
                    s.apply(RemoteOp::Write { off, data: &buf })
                        .map_err(remote_error)?;
                }
                crate::failpoint::hit("cluster.mid_write");
                mine += n;
            }
            if let Some(s) = sink {
                s.commit().map_err(remote_error)?;
            }
            Ok(())
        })();
        if let Some(path) = &collective {
            let (wrote, failed) = self.write_collective(path, g, lf, reader)?;
            mine = wrote;
            if let Some(e) = failed {
                writes = Err(e);
            }
        }
        if let Some(e) = self.agree(writes.err())? {
            return Ok(Err(e));
        }
        Ok(Ok(self.sum(mine)?))
    }

    /// Every server's count, added up (on every server).
    fn sum(&self, mine: u64) -> Result<u64, MpiError> {
        let mut v = [mine as i64];
        self.dog
            .watch(|| self.comm.allreduce(&mut v, Reduce::Sum))?;
        Ok(v[0] as u64)
    }

    /// An object remote: the leader makes the new version from bytes that
    /// every server sends it, window by window, each byte once.
    fn drain_gathered(
        &mut self,
        f: &GlobalFile,
        g: &Group,
        lf: &LogicalFile,
        shape: &paralog_backend::EpochShape,
        backend: &dyn Backend,
        reader: &mut SourceReader,
    ) -> Result<Result<u64, StepError>, ClusterError> {
        let me = self.comm.rank();
        let nodes = self.comm.size();
        let windows = windows(g, lf, self.cfg.buf_bytes as u64, None);
        let mut sink = None;
        let begin = (|| -> Result<(), StepError> {
            if self.leader() {
                sink = Some(backend.begin(&f.rel, shape).map_err(remote_error)?);
                if lf.deleted {
                    sink.as_mut()
                        .expect("just begun")
                        .apply(RemoteOp::Delete)
                        .map_err(remote_error)?;
                } else if let Some(c) = lf.size.base_cut {
                    sink.as_mut()
                        .expect("just begun")
                        .apply(RemoteOp::SetSize(c))
                        .map_err(remote_error)?;
                }
            }
            Ok(())
        })();
        if let Some(e) = self.agree(begin.err())? {
            return Ok(Err(e));
        }
        // The leader writes window k on its own thread while the servers
        // gather window k+1 (at most one more waits in between). A failure
        // (rare: every extent sent was verified in step 1) does not stop
        // the gathers; it is agreed on once, before the version is made.
        let leader = self.leader();
        let mut local: Option<StepError> = None;
        let mut total = 0u64;
        let mut between = 0u64;
        std::thread::scope(|scope| -> Result<(), ClusterError> {
            let (tx, rx) = std::sync::mpsc::sync_channel::<(Vec<(u64, usize, usize)>, Vec<u8>)>(1);
            let writer = sink.take().map(|mut s| {
                scope.spawn(move || {
                    let mut err = None;
                    for (ops, data) in rx {
                        if err.is_some() {
                            continue;
                        }
                        for (off, p, n) in ops {
                            let op = RemoteOp::Write {
                                off,
                                data: &data[p..p + n],
                            };
                            if let Err(e) = s.apply(op) {
                                err = Some(remote_error(e));
                                break;
                            }
                        }
                    }
                    (s, err)
                })
            });
            let mut pack = Vec::new();
            for win in windows.iter().filter(|_| !lf.deleted) {
                crate::failpoint::hit("cluster.mid_write");
                let mut counts = vec![0i64; nodes];
                for c in win {
                    counts[c.4] += c.1 as i64;
                }
                pack.clear();
                for &(_, n, source, skip, owner) in win {
                    if owner != me {
                        continue;
                    }
                    let at = pack.len();
                    pack.resize(at + n as usize, 0);
                    if local.is_none() {
                        if let Err(e) = reader.read(&lf.sources[source], skip, &mut pack[at..]) {
                            local = Some(StepError::Park(e.to_string()));
                        }
                    }
                }
                let all = self
                    .dog
                    .watch(|| self.comm.gather_known(&pack, &counts, Some(0)))?;
                total += counts.iter().sum::<i64>() as u64;
                between += counts[1..].iter().sum::<i64>() as u64;
                if leader {
                    let mut at: Vec<usize> = Vec::with_capacity(nodes);
                    let mut d = 0usize;
                    for &c in &counts {
                        at.push(d);
                        d += c as usize;
                    }
                    let ops = win
                        .iter()
                        .map(|&(off, n, _, _, owner)| {
                            let p = at[owner];
                            at[owner] += n as usize;
                            (off, p, n as usize)
                        })
                        .collect();
                    // The writer only stops early by panicking, which the
                    // join below reports.
                    let _ = tx.send((ops, all));
                }
            }
            drop(tx);
            if let Some(h) = writer {
                let (s, err) = h.join().expect("the leader's writer thread panicked");
                sink = Some(s);
                if local.is_none() {
                    local = err;
                }
            }
            Ok(())
        })?;
        self.totals.bytes_between_nodes += between;
        if let Some(e) = self.agree(local)? {
            return Ok(Err(e));
        }
        let finish = (|| -> Result<(), StepError> {
            let Some(mut s) = sink.take() else {
                return Ok(());
            };
            if !lf.deleted {
                s.apply(crate::drain::size_op(lf)).map_err(remote_error)?;
            }
            s.commit().map_err(remote_error)
        })();
        if let Some(e) = self.agree(finish.err())? {
            return Ok(Err(e));
        }
        Ok(Ok(total))
    }
}

/// A piece of a window: (file offset, length, source, offset in the
/// source, node that holds the source).
type Chunk = (u64, u64, usize, u64, usize);

/// The merged file's pieces (of node `only`'s logs, or all), in offset
/// order, cut into windows of at most `w` bytes.
fn windows(g: &Group, lf: &LogicalFile, w: u64, only: Option<usize>) -> Vec<Vec<Chunk>> {
    let mut windows = Vec::new();
    let mut cur = Vec::new();
    let mut cur_bytes = 0u64;
    for (off, len, piece) in lf.pieces() {
        let src = &lf.sources[piece.source];
        let owner = g.owner[&(src.epoch.0, src.rank)];
        if only.is_some_and(|n| n != owner) {
            continue;
        }
        let mut done = 0;
        while done < len {
            let n = (len - done).min(w - cur_bytes);
            cur.push((off + done, n, piece.source, piece.skip + done, owner));
            cur_bytes += n;
            done += n;
            if cur_bytes == w {
                windows.push(std::mem::take(&mut cur));
                cur_bytes = 0;
            }
        }
    }
    if !cur.is_empty() {
        windows.push(cur);
    }
    windows
}

/// The leader's steps that give a new version its shape: the deletion,
/// or the cut, the bytes other servers stored (`placed`, the object
/// layout), and the size; then made durable.
fn shape_version(
    backend: &dyn Backend,
    rel: &[u8],
    shape: &paralog_backend::EpochShape,
    lf: &LogicalFile,
    placed: Option<&[u8]>,
) -> Result<(), StepError> {
    let mut s = backend.begin(rel, shape).map_err(remote_error)?;
    if lf.deleted {
        s.apply(RemoteOp::Delete).map_err(remote_error)?;
    } else {
        if let Some(c) = lf.size.base_cut {
            s.apply(RemoteOp::SetSize(c)).map_err(remote_error)?;
        }
        if let Some(p) = placed {
            s.place(p).map_err(remote_error)?;
        }
        s.apply(crate::drain::size_op(lf)).map_err(remote_error)?;
    }
    s.commit().map_err(remote_error)
}

fn write_progress(dir: &Path, (gen, epoch): (u64, u64)) -> Result<(), paralog_log::LogError> {
    let path = dir.join(layout::PROGRESS_FILE);
    let tmp = dir.join(format!("{}.tmp", layout::PROGRESS_FILE));
    paralog_log::durable::write_atomic(&path, &tmp, &ProgressRecord { gen, epoch }.encode())
}

/// Answer one status-socket connection of a server in a server job.
pub fn answer(ctl: &Control, conn: std::os::unix::net::UnixStream) -> std::io::Result<()> {
    use crate::status::Request;
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(&conn).read_line(&mut line)?;
    let reply = match serde_json::from_str::<Request>(&line) {
        Ok(Request::Status) => ctl.snapshot(),
        Ok(Request::Finish) => {
            ctl.request_finish();
            serde_json::json!({ "finishing": true })
        }
        Ok(Request::Wait { timeout_s }) => {
            ctl.waiter(1);
            ctl.request_finish();
            let reply = match ctl.wait_done(timeout_s.map(Duration::from_secs_f64)) {
                Some(t) => {
                    let mut v = serde_json::to_value(&t).unwrap_or_default();
                    v["drained"] = serde_json::Value::Bool(t.failed.is_empty());
                    v
                }
                None => {
                    let mut v = ctl.snapshot();
                    v["error"] = "timed out before everything was drained".into();
                    v
                }
            };
            let r = write_reply(&conn, &reply);
            ctl.waiter(-1);
            return r;
        }
        Ok(Request::Drain { .. } | Request::Stop) => serde_json::json!({
            "error": "a server of a server job answers status, finish and wait (`paralog wait`); to stop without draining, end the server job"
        }),
        Err(e) => serde_json::json!({ "error": format!("bad request: {e}") }),
    };
    write_reply(&conn, &reply)
}

fn write_reply(
    conn: &std::os::unix::net::UnixStream,
    reply: &serde_json::Value,
) -> std::io::Result<()> {
    use std::io::Write;
    let mut text = reply.to_string();
    text.push('\n');
    let mut w = conn;
    w.write_all(text.as_bytes())?;
    w.flush()
}
