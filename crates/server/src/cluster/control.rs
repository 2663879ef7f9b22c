//! The status socket of a server in a server job: `status`, `finish` and
//! `wait` requests answered from state the round loop keeps up to date.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use super::Totals;
use crate::status::{Client, Request};

/// State shared with the status socket's threads.
#[derive(Default)]
pub struct Control {
    pub(super) state: Mutex<ControlState>,
    pub(super) changed: Condvar,
}

#[derive(Default)]
pub(super) struct ControlState {
    pub(super) finish: bool,
    /// `wait` clients not yet answered: the process stays until they are.
    waiters: usize,
    pub(super) done: Option<Totals>,
    pub(super) totals: Totals,
    pub(super) pending_epochs: u64,
    pub(super) retrying: Vec<String>,
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

/// Answer one request to a server of a server job.
pub fn answer(ctl: &Control, req: Request, client: &Client) -> std::io::Result<()> {
    let reply = match req {
        Request::Status => ctl.snapshot(),
        Request::Finish => {
            ctl.request_finish();
            serde_json::json!({ "finishing": true })
        }
        Request::Wait { timeout_s } => {
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
            let r = client.reply(&reply);
            ctl.waiter(-1);
            return r;
        }
        Request::Drain { .. } | Request::Stop => serde_json::json!({
            "error": "a server of a server job answers status, finish and wait (`paralog wait`); to stop without draining, end the server job"
        }),
    };
    client.reply(&reply)
}
