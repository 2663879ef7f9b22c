//! The status socket of a server in a server job: `status`, `finish` and
//! `wait` requests answered from state the round loop keeps up to date,
//! with the one-node service's types ([`Status`], [`WaitAnswer`]).

use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use super::plan::FileKey;
use super::{ClusterConfig, Totals};
use crate::status::{
    error_answer, Client, ClusterStatus, FileState, FileStatus, Request, RoundCost, Status,
    WaitAnswer,
};

/// State shared with the status socket's threads.
pub struct Control {
    pub(super) state: Mutex<ControlState>,
    pub(super) changed: Condvar,
    started: Instant,
    root: String,
    job: Option<String>,
    remote: String,
    node: String,
}

#[derive(Default)]
pub(super) struct ControlState {
    pub(super) finish: bool,
    /// `wait` clients not yet answered: the process stays until they are.
    waiters: usize,
    /// The servers finished.
    done: bool,
    pub(super) totals: Totals,
    /// Time spent draining groups.
    pub(super) active: Duration,
    /// Every file of the plan, as the round loop last saw it.
    pub(super) files: BTreeMap<FileKey, FileStatus>,
    /// What the rounds' exchanges cost this server.
    pub(super) round_cost: RoundCost,
    /// What the job's releases deleted on this node (streams_release.rs).
    pub(super) stream_released: crate::streams::ReleaseCounts,
}

impl Control {
    pub fn new(cfg: &ClusterConfig) -> Control {
        Control {
            state: Mutex::default(),
            changed: Condvar::new(),
            started: Instant::now(),
            root: cfg.root.display().to_string(),
            job: cfg.job.clone(),
            remote: cfg.remote.describe(),
            node: cfg.node.clone(),
        }
    }

    pub fn request_finish(&self) {
        self.lock().finish = true;
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, ControlState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The servers finished: wake the `wait` clients.
    pub(super) fn set_done(&self) {
        self.lock().done = true;
        self.changed.notify_all();
    }

    /// Block until the servers finished (everything drained, or they gave
    /// up on some files), or `timeout`; whether they finished.
    pub fn wait_done(&self, timeout: Option<Duration>) -> bool {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut s = self.lock();
        loop {
            if s.done {
                return true;
            }
            let wait = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(w) => w,
                    None => return false,
                },
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
        let mut s = self.lock();
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
        let mut s = self.lock();
        s.waiters = s.waiters.saturating_add_signed(delta);
        drop(s);
        self.changed.notify_all();
    }

    /// The status of the job's drain as this server knows it (the same on
    /// every server but for `pid`, `root`, `node` and the times).
    pub fn snapshot(&self) -> Status {
        let s = self.lock();
        let files: Vec<FileStatus> = s.files.values().cloned().collect();
        Status {
            pid: std::process::id(),
            root: self.root.clone(),
            job: self.job.clone(),
            remote: self.remote.clone(),
            uptime_s: self.started.elapsed().as_secs_f64(),
            drain_active_s: s.active.as_secs_f64(),
            bytes_drained: s.totals.bytes_drained,
            epochs_drained: s.totals.epochs_drained,
            idle: files.iter().all(|f| {
                matches!(
                    f.state,
                    FileState::Idle | FileState::Damaged | FileState::Refused
                )
            }),
            finishing: s.finish,
            files,
            cluster: Some(ClusterStatus {
                node: self.node.clone(),
                nodes: s.totals.nodes,
                rounds: s.totals.rounds,
                bytes_between_nodes: s.totals.bytes_between_nodes,
                parts_by_node: s.totals.parts_by_node.clone(),
                stream_rounds: s.totals.stream_rounds,
                stream_events: s.totals.stream_events,
                stream_events_by_node: s.totals.stream_events_by_node.clone(),
                stream_bytes_between_nodes: s.totals.stream_bytes_between_nodes,
                round_cost: s.round_cost.clone(),
            }),
            stream_released: s.stream_released.snapshot(),
            // Every node's, as the last round's agreement saw them.
            puts: s.totals.puts_left.clone(),
            puts_published: s.totals.puts_published,
            // The totals are derived (`summed`).
            ..Status::default()
        }
        .summed()
    }
}

/// Answer one request to a server of a server job.
pub fn answer(ctl: &Control, req: Request, client: &Client) -> std::io::Result<()> {
    match req {
        Request::Status => client.reply(&ctl.snapshot()),
        Request::Finish => {
            ctl.request_finish();
            client.reply(&serde_json::json!({ "finishing": true }))
        }
        Request::Wait { timeout_s } => {
            ctl.waiter(1);
            ctl.request_finish();
            let done = ctl.wait_done(timeout_s.map(Duration::from_secs_f64));
            let status = ctl.snapshot();
            let r = client.reply(&WaitAnswer {
                // Once done, a put left can never be published as it is.
                drained: done && status.damaged == 0 && status.puts.is_empty(),
                timed_out: !done,
                status,
                // A server job's streams: part of `done` (docs/streams.md).
                streams_failed: Vec::new(),
            });
            ctl.waiter(-1);
            r
        }
        Request::Drain { .. } | Request::Stop => client.reply(&error_answer(
            "a server of a server job answers status, finish and wait (`paralog wait`); to stop without draining, end the server job",
        )),
    }
}
