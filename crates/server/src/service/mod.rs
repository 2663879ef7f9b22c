//! The running server: a queue of files with committed epochs to drain, a
//! fixed set of worker threads that drain them (each file by one worker at a
//! time, so its epochs stay in order; different files in parallel), retries
//! with backoff when the remote fails, and the numbers `status` reports.
//!
//! Work arrives from the watcher (inotify, see `watch.rs`) and from full
//! scans (at start, on a queue overflow, before a `drain` request answers).

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use paralog_log::Inventory;

use crate::limit::RateLimit;
use crate::pool::BufferPool;
use crate::remote::Remote;
use crate::retry::RetryState;
use crate::status::{rate, FileState, FileStatus, Status};

mod worker;

use worker::worker;

#[derive(Debug, Clone)]
pub struct Config {
    /// The node-local root (PARALOG_LOCAL).
    pub root: PathBuf,
    /// Only this job; `None`: every job under the root.
    pub job: Option<String>,
    pub remote: Remote,
    /// Worker threads: files drained in parallel.
    pub workers: usize,
    /// Memory for drain buffers, in all.
    pub pool_bytes: usize,
    pub buf_bytes: usize,
    /// Bytes per second for all workers together; `None`: no cap.
    pub max_rate: Option<u64>,
    /// Nice value for the workers (0: unchanged).
    pub nice: i32,
    /// `--aggregate`: files drained into checkpoint sets (aggregate/);
    /// without rules, members of published sets rewritten in this job.
    pub sets: Option<Arc<crate::aggregate::Sets>>,
}

#[derive(Debug, Default)]
struct Entry {
    job: String,
    path: String,
    queued: bool,
    busy: bool,
    /// Something changed while a worker had it: look again afterwards.
    dirty: bool,
    epochs_drained: u64,
    epochs_pending: u64,
    bytes_drained: u64,
    bytes_pending: u64,
    busy_time: Duration,
    /// Times a worker took it (each a scan of its directory).
    scans: u64,
    /// When the worker that has it now took it.
    busy_since: Option<Instant>,
    /// Since when it waits for the other file of a rename (rename.rs).
    waiting_since: Option<Instant>,
    /// Failures: retrying after a remote failure, or parked (a damaged
    /// epoch, or a remote that refuses the file for good: nothing more of
    /// this file is drained).
    retry: RetryState<Instant>,
}

#[derive(Default)]
struct Sched {
    files: BTreeMap<PathBuf, Entry>,
    queue: VecDeque<PathBuf>,
    busy_workers: usize,
    active_since: Option<Instant>,
    active_total: Duration,
    bytes_drained: u64,
    epochs_drained: u64,
    /// A `finish` request came: stop once everything is drained.
    finishing: bool,
    stop: bool,
}

impl Sched {
    fn active(&self, now: Instant) -> Duration {
        self.active_total + self.active_since.map_or(Duration::ZERO, |s| now - s)
    }

    /// No file is waiting or being drained (damaged files count as done).
    fn idle(&self) -> bool {
        self.busy_workers == 0 && self.queue.is_empty()
    }

    /// An epoch of `file` drained (`bytes` sent, `local` bytes of the log
    /// no longer pending): the totals and the file's own numbers.
    fn count_drained(&mut self, file: &Path, bytes: u64, local: u64) -> Option<&Entry> {
        self.bytes_drained += bytes;
        self.epochs_drained += 1;
        let e = self.files.get_mut(file)?;
        e.bytes_drained += bytes;
        e.epochs_drained += 1;
        e.epochs_pending = e.epochs_pending.saturating_sub(1);
        e.bytes_pending = e.bytes_pending.saturating_sub(local);
        Some(e)
    }
}

struct Inner {
    cfg: Config,
    deleter: crate::delete::Deleter,
    /// `drain` requests under way (the job is ending): while any is,
    /// nothing is held back for a backend that prefers whole opens.
    flush: std::sync::atomic::AtomicUsize,
    pool: BufferPool,
    limit: Option<RateLimit>,
    sched: Mutex<Sched>,
    /// Workers wait here for work.
    work: Condvar,
    /// `wait_idle` and `wait_stop` wait here.
    changed: Condvar,
    started: Instant,
    /// What the streams' drain released (crate::streams), for `status`.
    stream_released: crate::streams::ReleaseCounts,
    /// The logged array puts' publisher reports here (crate::puts).
    puts: crate::puts::Puts,
    /// The streams' last rounds, which a `wait` runs (crate::streams).
    streams_end: crate::streams::StreamsEnd,
}

/// A handle on the running server; clones share it.
#[derive(Clone)]
pub struct Server {
    inner: Arc<Inner>,
}

impl Server {
    /// Start the workers (the caller starts the watcher, which finds the
    /// work already on disk with its first scan).
    pub fn start(cfg: Config) -> Server {
        let inner = Arc::new(Inner {
            deleter: crate::delete::Deleter::start(),
            flush: std::sync::atomic::AtomicUsize::new(0),
            pool: BufferPool::new(cfg.pool_bytes, cfg.buf_bytes),
            limit: cfg.max_rate.map(RateLimit::new),
            cfg,
            sched: Mutex::new(Sched::default()),
            work: Condvar::new(),
            changed: Condvar::new(),
            started: Instant::now(),
            stream_released: Default::default(),
            puts: crate::puts::Puts::default(),
            streams_end: Default::default(),
        });
        for i in 0..inner.cfg.workers.max(1) {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name(format!("drain-{i}"))
                .spawn(move || {
                    crate::priority::lower(inner.cfg.nice);
                    worker(&inner)
                })
                .expect("spawning a drain worker");
        }
        Server { inner }
    }

    pub fn config(&self) -> &Config {
        &self.inner.cfg
    }

    /// Where the streams' drain counts its releases (`crate::streams::start`).
    pub fn stream_releases(&self) -> crate::streams::ReleaseCounts {
        self.inner.stream_released.clone()
    }

    /// Where the publisher of logged array puts reports its rounds.
    pub fn puts(&self) -> crate::puts::Puts {
        self.inner.puts.clone()
    }

    /// The streams' last rounds: a `wait` whose files and puts are done
    /// runs them (the server's stop runs them otherwise).
    pub fn streams_end(&self) -> crate::streams::StreamsEnd {
        self.inner.streams_end.clone()
    }

    fn lock(&self) -> MutexGuard<'_, Sched> {
        lock(&self.inner)
    }

    /// Whether a job is served by this server.
    pub fn serves_job(&self, job: &str) -> bool {
        self.inner.cfg.job.as_deref().is_none_or(|j| j == job)
    }

    /// Something changed under a file directory: drain it when a worker is
    /// free (once, however many events arrive meanwhile).
    pub fn notify(&self, file_dir: &Path) {
        let mut s = self.lock();
        let job = file_dir
            .parent()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let e = s
            .files
            .entry(file_dir.to_path_buf())
            .or_insert_with(|| Entry {
                job,
                path: file_dir.display().to_string(),
                ..Entry::default()
            });
        if e.retry.is_parked() {
            return;
        }
        if e.busy {
            e.dirty = true;
            return;
        }
        if !e.queued {
            e.queued = true;
            s.queue.push_back(file_dir.to_path_buf());
            self.inner.work.notify_one();
        }
    }

    /// Queue every file directory of the served jobs (start, lost events,
    /// before answering `drain`). Returns the directories found.
    pub fn rescan(&self) -> Result<Vec<PathBuf>, paralog_log::LogError> {
        let dirs = file_dirs(&self.inner.cfg.root, self.inner.cfg.job.as_deref())?;
        for d in &dirs {
            self.notify(d);
        }
        Ok(dirs)
    }

    /// Wait until every committed epoch found by a fresh scan is drained, or
    /// a file cannot progress (damaged), or `timeout` passes; then until a
    /// round of the logged puts' publisher begun after the call left
    /// nothing that may still publish (crate::puts). Files that are
    /// retrying after a remote failure keep this waiting, and so do puts
    /// waiting for other nodes' shares.
    pub fn wait_idle(&self, timeout: Option<Duration>) -> Result<Status, paralog_log::LogError> {
        use std::sync::atomic::Ordering::SeqCst;
        self.inner.flush.fetch_add(1, SeqCst);
        let r = self.wait_idle_flushing(timeout);
        self.inner.flush.fetch_sub(1, SeqCst);
        r
    }

    fn wait_idle_flushing(
        &self,
        timeout: Option<Duration>,
    ) -> Result<Status, paralog_log::LogError> {
        let puts_mark = self.inner.puts.mark();
        self.rescan()?;
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut s = self.lock();
        loop {
            if s.idle() || s.stop {
                // Idle means the local records of what drained are gone too.
                drop(s);
                let wait = deadline.map_or(Duration::from_secs(3600), |d| {
                    d.saturating_duration_since(Instant::now())
                });
                self.inner.deleter.wait_empty(wait);
                s = self.lock();
                break;
            }
            let wait = match deadline {
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        break;
                    }
                    d - now
                }
                None => Duration::from_secs(3600),
            };
            s = self
                .inner
                .changed
                .wait_timeout(s, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        drop(s);
        self.inner.puts.wait_settled(puts_mark, deadline);
        Ok(self.status())
    }

    /// Drain everything committed, then stop, without making the caller
    /// wait (a `finish` request).
    pub fn finish(&self) {
        self.lock().finishing = true;
        let server = self.clone();
        std::thread::spawn(move || {
            if let Err(e) = server.wait_idle(None) {
                tracing::error!(error = %e, "final scan failed");
            }
            server.request_stop();
        });
    }

    pub fn status(&self) -> Status {
        let (puts, puts_published) = self.inner.puts.snapshot();
        let s = self.lock();
        let now = Instant::now();
        let files: Vec<FileStatus> = s
            .files
            .values()
            .map(|e| {
                let state = if e.retry.parked == Some(true) {
                    FileState::Refused
                } else if e.retry.is_parked() {
                    FileState::Damaged
                } else if e.busy {
                    FileState::Draining
                } else if e.retry.not_before.is_some() {
                    FileState::Retrying
                } else if e.queued {
                    FileState::Queued
                } else {
                    FileState::Idle
                };
                let busy = e.busy_time + e.busy_since.map_or(Duration::ZERO, |t| now - t);
                FileStatus {
                    job: e.job.clone(),
                    path: e.path.clone(),
                    state,
                    epochs_drained: e.epochs_drained,
                    epochs_pending: e.epochs_pending,
                    bytes_drained: e.bytes_drained,
                    bytes_pending: e.bytes_pending,
                    rate_bps: rate(e.bytes_drained, busy.as_secs_f64()),
                    eta_s: None,
                    attempts: e.retry.attempts,
                    message: e.retry.error.clone(),
                    scans: e.scans,
                }
            })
            .collect();
        Status {
            pid: std::process::id(),
            root: self.inner.cfg.root.display().to_string(),
            job: self.inner.cfg.job.clone(),
            remote: self.inner.cfg.remote.describe(),
            uptime_s: (now - self.inner.started).as_secs_f64(),
            drain_active_s: s.active(now).as_secs_f64(),
            bytes_drained: s.bytes_drained,
            epochs_drained: s.epochs_drained,
            idle: s.idle(),
            finishing: s.finishing,
            files,
            puts,
            puts_published,
            cluster: None,
            stream_released: self.inner.stream_released.snapshot(),
            // The totals are derived (`summed`).
            ..Status::default()
        }
        .summed()
    }

    /// Ask the server to stop (after `wait_idle`, if the caller wants the
    /// drain finished). Workers finish the epoch they are applying.
    pub fn request_stop(&self) {
        let mut s = self.lock();
        s.stop = true;
        self.inner.work.notify_all();
        self.inner.changed.notify_all();
    }

    /// Block until `request_stop`, then until no worker is mid-epoch.
    pub fn wait_stop(&self) {
        let mut s = self.lock();
        while !s.stop || s.busy_workers > 0 {
            s = self
                .inner
                .changed
                .wait(s)
                .unwrap_or_else(|p| p.into_inner());
        }
        drop(s);
        // Not needed for safety (leftovers are removed later), but a clean
        // stop leaves a clean node-local root.
        self.inner.deleter.wait_empty(Duration::from_secs(60));
    }
}

fn lock(inner: &Inner) -> MutexGuard<'_, Sched> {
    inner.sched.lock().unwrap_or_else(|p| p.into_inner())
}

/// The file directories of the served jobs under `root`.
pub fn file_dirs(root: &Path, job: Option<&str>) -> Result<Vec<PathBuf>, paralog_log::LogError> {
    let inv = Inventory::scan(root)?;
    Ok(inv
        .jobs
        .iter()
        .filter(|j| job.is_none_or(|n| n == j.name))
        .flat_map(|j| j.files.iter().map(|f| f.dir.clone()))
        .collect())
}
