//! What a server reports, and the status endpoint: a Unix socket private
//! to the user (mode 0600 in the 0700 node-local root). One JSON request per
//! connection, one JSON line back. Both engines (the one-node service and a
//! server of a server job) answer with the same types:
//!
//! - `{"cmd":"status"}`: a [`Status`].
//! - `{"cmd":"drain","timeout_s":T}` (one-node service): waits until every
//!   committed epoch is drained and every logged array put committed here
//!   published (crate::puts) (or a file is damaged, or T seconds pass; no
//!   T: no limit), then a [`Status`].
//! - `{"cmd":"finish"}`: `{"finishing":true}` at once; the server drains
//!   everything committed, then stops.
//! - `{"cmd":"wait","timeout_s":T}`: `finish`, answered when the drain is
//!   over, logged array puts included (or T seconds passed) with a
//!   [`WaitAnswer`].
//! - `{"cmd":"stop"}` (one-node service): `{"stopping":true}`; the server
//!   exits once no worker is mid-epoch.
//!
//! A request a server cannot answer gets `{"error":"..."}`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::service::Server;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileState {
    /// Nothing to drain.
    Idle,
    /// Waiting for a worker.
    Queued,
    Draining,
    /// The remote failed; local data kept; trying again after a backoff.
    Retrying,
    /// A local epoch failed its checks: it and later epochs stay local.
    Damaged,
    /// The remote refuses this file for good (no such bucket, access
    /// denied): nothing more is tried; every local byte is kept.
    Refused,
}

/// One file, with the same fields whichever engine drains it. In a server
/// job the file is the job's on every node, its bytes all nodes' data logs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileStatus {
    pub job: String,
    pub path: String,
    pub state: FileState,
    pub epochs_drained: u64,
    pub epochs_pending: u64,
    pub bytes_drained: u64,
    /// Local data-log bytes of the committed epochs not yet drained.
    pub bytes_pending: u64,
    /// Bytes drained per second of this file's drain.
    pub rate_bps: f64,
    pub eta_s: Option<f64>,
    /// Failed attempts since the last success.
    pub attempts: u32,
    /// Why the last attempt failed, or why the file is not drained.
    pub message: Option<String>,
    /// How many times a worker of the one-node server took the file and
    /// scanned its directory (0 in a server job; absent before session 34).
    #[serde(default)]
    pub scans: u64,
}

/// What a server reports (`status`, `drain`), the same for both engines.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Status {
    pub pid: u32,
    pub root: String,
    pub job: Option<String>,
    pub remote: String,
    pub uptime_s: f64,
    /// Time during which at least one worker was draining.
    pub drain_active_s: f64,
    pub bytes_drained: u64,
    pub epochs_drained: u64,
    pub bytes_pending: u64,
    pub epochs_pending: u64,
    /// Bytes drained per second of drain activity.
    pub rate_bps: f64,
    pub eta_s: Option<f64>,
    /// Nothing queued, nothing being drained.
    pub idle: bool,
    /// Files that will not be drained (damaged or refused).
    pub damaged: usize,
    pub retrying: usize,
    /// A `finish` (or in a server job `wait`) request came: the server
    /// stops once everything committed is drained.
    pub finishing: bool,
    pub files: Vec<FileStatus>,
    /// Logged array puts committed on this node and not published yet
    /// (this node's shares not copied yet), and those published so far
    /// (docs/objects.md "Waiting for logged puts"): `wait` and `drain`
    /// wait for them too. A server job's: every node's, each naming its
    /// node, as the last round saw them (cluster/puts.rs).
    #[serde(default)]
    pub puts: Vec<crate::puts::PutStatus>,
    #[serde(default)]
    pub puts_published: u64,
    /// Only in a server job: what the servers do together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterStatus>,
    /// Per stream, what local retention released on this node since the
    /// server started (docs/streams.md "Status"; the streams' other
    /// numbers are read from the node-local root by `paralog status`).
    #[serde(default)]
    pub stream_released: BTreeMap<String, StreamReleased>,
}

/// What local retention gave back of one stream on this node: the
/// drained segments deleted and their bytes (the files' lengths, headers
/// included), and the releases that did it (each a rebase of the cut log).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamReleased {
    pub segments: u64,
    pub bytes: u64,
    pub releases: u64,
}

/// What exists only in a server job (docs/cluster.md).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStatus {
    /// The node of the server that answered.
    pub node: String,
    pub nodes: usize,
    /// Rounds so far.
    pub rounds: u64,
    /// Bytes one server sent another to assemble a version.
    pub bytes_between_nodes: u64,
    /// Parts of shared S3 uploads each server uploaded, in node order.
    pub parts_by_node: Vec<u64>,
    /// Stream rounds applied, the events they stored, per server the
    /// events it appended as its partitions' owner, and the event frames'
    /// bytes sent between servers (docs/streams.md "Many nodes").
    #[serde(default)]
    pub stream_rounds: u64,
    #[serde(default)]
    pub stream_events: u64,
    #[serde(default)]
    pub stream_events_by_node: Vec<u64>,
    #[serde(default)]
    pub stream_bytes_between_nodes: u64,
    /// What the rounds cost this server so far (docs/cluster.md, "What a
    /// round costs").
    #[serde(default)]
    pub round_cost: RoundCost,
}

/// What this server's rounds cost, summed over the rounds (and the last
/// round's alone): the bytes of the summaries' exchange and the time of its
/// parts. Measured, never used for a decision.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundCost {
    /// Rounds measured (every exchange, planned or not).
    pub rounds: u64,
    /// Bytes this server sent into the rounds' allgathers (its summaries).
    pub bytes_sent: u64,
    /// Bytes it received from them (every server's, its own included).
    pub bytes_received: u64,
    /// Microseconds scanning the node-local root and encoding the summary.
    pub scan_us: u64,
    /// Microseconds in the allgathers (waiting for the slowest server
    /// included).
    pub exchange_us: u64,
    /// Microseconds decoding the summaries and computing the plan.
    pub plan_us: u64,
    /// The last round's bytes sent and received, and its time (all parts).
    pub last_sent: u64,
    pub last_received: u64,
    pub last_us: u64,
}

/// The answer to `wait`: whether everything committed was drained (then
/// the servers stop), and the state it ended in.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WaitAnswer {
    pub drained: bool,
    /// The time given ran out first; the servers go on draining.
    pub timed_out: bool,
    pub status: Status,
    /// Streams whose last rounds failed (stream, why): their events stay
    /// on the node (a one-node server; a server job says so in `status`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams_failed: Vec<(String, String)>,
}

impl Status {
    /// What both engines derive the same way from what they count: each
    /// file's ETA, the overall rate, and the totals over the files.
    pub(crate) fn summed(mut self) -> Status {
        let overall = rate(self.bytes_drained, self.drain_active_s);
        for f in &mut self.files {
            let r = if f.rate_bps > 0.0 {
                f.rate_bps
            } else {
                overall
            };
            f.eta_s = eta(f.bytes_pending, r);
        }
        self.rate_bps = overall;
        self.bytes_pending = self.files.iter().map(|f| f.bytes_pending).sum();
        self.epochs_pending = self.files.iter().map(|f| f.epochs_pending).sum();
        self.eta_s = eta(self.bytes_pending, overall);
        // Files that will not be drained, whatever the reason.
        self.damaged = self
            .files
            .iter()
            .filter(|f| matches!(f.state, FileState::Damaged | FileState::Refused))
            .count();
        self.retrying = self
            .files
            .iter()
            .filter(|f| f.state == FileState::Retrying)
            .count();
        self
    }
}

/// Bytes per second over `secs` of drain activity.
pub(crate) fn rate(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / secs
    } else {
        0.0
    }
}

fn eta(pending: u64, rate: f64) -> Option<f64> {
    (pending == 0)
        .then_some(0.0)
        .or((rate > 0.0).then(|| pending as f64 / rate))
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "lowercase")]
pub enum Request {
    Status,
    Drain {
        timeout_s: Option<f64>,
    },
    /// Drain everything, then stop, without making the client wait.
    Finish,
    /// Drain everything, answer when done (or after T seconds), then stop:
    /// `paralog wait`.
    Wait {
        timeout_s: Option<f64>,
    },
    Stop,
}

/// Where a server's socket is by default: in the node-local root, named
/// for the job it serves (the root is 0700, so only its owner connects).
pub fn default_socket(root: &Path, job: Option<&str>) -> PathBuf {
    match job {
        Some(j) => root.join(format!(".paralog-server-{j}.sock")),
        None => root.join(".paralog-server.sock"),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("{path}: {what}: {error}")]
    Io {
        path: PathBuf,
        what: &'static str,
        error: std::io::Error,
    },
    #[error("{path}: a socket path must be shorter than 108 bytes; give a shorter --socket")]
    TooLong { path: PathBuf },
    #[error("{path}: a server is already listening there")]
    InUse { path: PathBuf },
    #[error("{path}: bad answer from the server: {error}")]
    Protocol {
        path: PathBuf,
        error: serde_json::Error,
    },
    /// The server answered with an error.
    #[error("{path}: server: {message}")]
    Server { path: PathBuf, message: String },
}

fn io<'a>(path: &'a Path, what: &'static str) -> impl FnOnce(std::io::Error) -> StatusError + 'a {
    move |error| StatusError::Io {
        path: path.to_path_buf(),
        what,
        error,
    }
}

/// One client of the status socket: its request, and where the answer
/// goes (one JSON line in one write).
pub struct Client {
    conn: UnixStream,
}

impl Client {
    pub fn reply(&self, v: &impl Serialize) -> std::io::Result<()> {
        let mut text = serde_json::to_string(v).map_err(std::io::Error::other)?;
        text.push('\n');
        let mut w = &self.conn;
        w.write_all(text.as_bytes())?;
        w.flush()
    }
}

/// Bind the endpoint (replacing a stale socket left by a dead server) and
/// serve the one-node service on it.
pub fn serve(server: Server, path: &Path) -> Result<(), StatusError> {
    serve_with(path, move |req, client| answer(&server, req, client))
}

/// Bind the endpoint and answer each request with `handler`, each client
/// on a thread of its own (a `drain` or `wait` request may wait long). The
/// protocol is here, for both engines: one request line per connection,
/// parsed; a bad one answered with an error; the handler answers the rest.
pub fn serve_with<H>(path: &Path, handler: H) -> Result<(), StatusError>
where
    H: Fn(Request, &Client) -> std::io::Result<()> + Send + Sync + 'static,
{
    let handler = move |conn: UnixStream| -> std::io::Result<()> {
        let mut line = String::new();
        BufReader::new(&conn).read_line(&mut line)?;
        let client = Client { conn };
        match serde_json::from_str::<Request>(&line) {
            Ok(req) => handler(req, &client),
            Err(e) => client.reply(&error_answer(format!("bad request: {e}"))),
        }
    };
    if path.as_os_str().len() >= 108 {
        return Err(StatusError::TooLong {
            path: path.to_path_buf(),
        });
    }
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(StatusError::InUse {
                path: path.to_path_buf(),
            });
        }
        std::fs::remove_file(path).map_err(io(path, "remove stale socket"))?;
    }
    let listener = UnixListener::bind(path).map_err(io(path, "bind"))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(io(path, "chmod 0600"))?;
    let owned = path.to_path_buf();
    let handler = std::sync::Arc::new(handler);
    std::thread::Builder::new()
        .name("status".into())
        .spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let handler = handler.clone();
                let path = owned.clone();
                let _ = std::thread::Builder::new()
                    .name("status-client".into())
                    .spawn(move || {
                        if let Err(e) = handler(conn) {
                            tracing::debug!(socket = %path.display(), error = %e, "status client");
                        }
                    });
            }
        })
        .map_err(io(path, "spawn status thread"))?;
    Ok(())
}

fn answer(server: &Server, req: Request, client: &Client) -> std::io::Result<()> {
    match req {
        Request::Status => client.reply(&server.status()),
        Request::Drain { timeout_s } => {
            match server.wait_idle(timeout_s.map(Duration::from_secs_f64)) {
                Ok(s) => client.reply(&s),
                Err(e) => client.reply(&error_answer(e)),
            }
        }
        Request::Finish => {
            server.finish();
            client.reply(&serde_json::json!({ "finishing": true }))
        }
        Request::Wait { timeout_s } => {
            let timeout = timeout_s.map(Duration::from_secs_f64);
            let started = std::time::Instant::now();
            let status = match server.wait_idle(timeout) {
                Ok(s) => s,
                Err(e) => return client.reply(&error_answer(e)),
            };
            let files_done = status.idle
                && status.damaged == 0
                && status.retrying == 0
                && status.puts.is_empty();
            // Then the streams' last rounds: every event flushed by now on
            // the remote, or the streams that could not be (the server
            // stops either way: their events stay on the node for
            // `recover`).
            let streams_failed = if files_done {
                server.streams_end().finish()
            } else {
                Vec::new()
            };
            let drained = files_done && streams_failed.is_empty();
            let timed_out = !files_done && timeout.is_some_and(|t| started.elapsed() >= t);
            // Answer first: the process may exit as soon as it stops.
            client.reply(&WaitAnswer {
                drained,
                timed_out,
                status,
                streams_failed,
            })?;
            if files_done {
                server.request_stop();
            }
            Ok(())
        }
        Request::Stop => {
            // Answer first: the process may exit as soon as it stops.
            client.reply(&serde_json::json!({ "stopping": true }))?;
            server.request_stop();
            Ok(())
        }
    }
}

/// The answer to a request that failed or that this server does not serve.
pub(crate) fn error_answer(e: impl std::fmt::Display) -> serde_json::Value {
    serde_json::json!({ "error": e.to_string() })
}

/// Send one request to a server and read its answer.
pub fn request(path: &Path, req: &Request) -> Result<serde_json::Value, StatusError> {
    let conn = UnixStream::connect(path).map_err(io(path, "connect to the server"))?;
    let mut w = &conn;
    let text = serde_json::to_string(req).expect("requests serialize");
    writeln!(w, "{text}").map_err(io(path, "send request"))?;
    let mut line = String::new();
    BufReader::new(&conn)
        .read_line(&mut line)
        .map_err(io(path, "read answer"))?;
    serde_json::from_str(&line).map_err(|error| StatusError::Protocol {
        path: path.to_path_buf(),
        error,
    })
}

/// A server's answer of type `T` (a [`Status`] to `status` and `drain`, a
/// [`WaitAnswer`] to `wait`); an error answer is [`StatusError::Server`].
pub fn request_as<T: serde::de::DeserializeOwned>(
    path: &Path,
    req: &Request,
) -> Result<T, StatusError> {
    let v = request(path, req)?;
    if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
        return Err(StatusError::Server {
            path: path.to_path_buf(),
            message: e.to_owned(),
        });
    }
    serde_json::from_value(v).map_err(|error| StatusError::Protocol {
        path: path.to_path_buf(),
        error,
    })
}

/// A [`Status`] from a server (for `status` and `drain` requests).
pub fn request_status(path: &Path, req: &Request) -> Result<Status, StatusError> {
    request_as(path, req)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(state: FileState, pending: u64, rate_bps: f64) -> FileStatus {
        FileStatus {
            job: "j".into(),
            path: "/p/f".into(),
            state,
            epochs_drained: 1,
            epochs_pending: 2,
            bytes_drained: 100,
            bytes_pending: pending,
            rate_bps,
            eta_s: None,
            attempts: 0,
            message: None,
            scans: 0,
        }
    }

    fn status(files: Vec<FileStatus>, cluster: Option<ClusterStatus>) -> Status {
        Status {
            pid: 1,
            root: "/l".into(),
            job: Some("j".into()),
            remote: "/r".into(),
            uptime_s: 10.0,
            drain_active_s: 2.0,
            bytes_drained: 400,
            epochs_drained: 4,
            bytes_pending: 0,
            epochs_pending: 0,
            rate_bps: 0.0,
            eta_s: None,
            idle: false,
            damaged: 0,
            retrying: 0,
            finishing: false,
            files,
            puts: Vec::new(),
            puts_published: 0,
            cluster,
            stream_released: BTreeMap::from([(
                "tele".into(),
                StreamReleased {
                    segments: 3,
                    bytes: 4096,
                    releases: 1,
                },
            )]),
        }
        .summed()
    }

    #[test]
    fn totals_are_summed_over_the_files_the_same_for_both_engines() {
        let st = status(
            vec![
                file(FileState::Draining, 1000, 50.0),
                file(FileState::Retrying, 300, 0.0),
                file(FileState::Damaged, 0, 0.0),
                file(FileState::Refused, 0, 0.0),
            ],
            None,
        );
        assert_eq!((st.bytes_pending, st.epochs_pending), (1300, 8));
        assert_eq!((st.damaged, st.retrying), (2, 1));
        assert_eq!(st.rate_bps, 200.0);
        assert_eq!(st.eta_s, Some(6.5));
        // A file's own rate, else the overall one; nothing pending: done.
        let etas: Vec<_> = st.files.iter().map(|f| f.eta_s).collect();
        assert_eq!(etas, [Some(20.0), Some(1.5), Some(0.0), Some(0.0)]);
    }

    #[test]
    fn only_a_server_job_says_cluster_and_both_read_back() {
        let one = serde_json::to_value(status(vec![file(FileState::Idle, 0, 0.0)], None)).unwrap();
        assert!(one.get("cluster").is_none(), "{one}");
        let job = status(
            vec![],
            Some(ClusterStatus {
                node: "n0".into(),
                nodes: 3,
                rounds: 7,
                bytes_between_nodes: 5,
                parts_by_node: vec![1, 2, 0],
                round_cost: RoundCost {
                    rounds: 7,
                    bytes_sent: 700,
                    ..RoundCost::default()
                },
                ..ClusterStatus::default()
            }),
        );
        let v = serde_json::to_value(&job).unwrap();
        assert_eq!(v["cluster"]["parts_by_node"], serde_json::json!([1, 2, 0]));
        assert_eq!(v["stream_released"]["tele"]["bytes"], 4096);
        for v in [one, v] {
            let back: Status = serde_json::from_value(v.clone()).unwrap();
            assert_eq!(serde_json::to_value(back).unwrap(), v);
        }
        let w = WaitAnswer {
            drained: false,
            timed_out: true,
            status: job,
            streams_failed: vec![("tele".into(), "remote gone".into())],
        };
        let back: WaitAnswer = serde_json::from_str(&serde_json::to_string(&w).unwrap()).unwrap();
        assert!(back.timed_out && back.status.cluster.is_some_and(|c| c.nodes == 3));
        assert_eq!(back.streams_failed, w.streams_failed);
    }
}
