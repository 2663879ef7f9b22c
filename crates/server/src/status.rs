//! What the server reports, and the status endpoint: a Unix socket private
//! to the user (mode 0600 in the 0700 node-local root). One JSON request per
//! connection, one JSON line back:
//!
//! - `{"cmd":"status"}`: a [`Status`].
//! - `{"cmd":"drain","timeout_s":T}`: waits until every committed epoch is
//!   drained (or a file is damaged, or T seconds pass; no T: no limit),
//!   then a [`Status`].
//! - `{"cmd":"finish"}`: `{"finishing":true}` at once; the server drains
//!   everything committed, then stops.
//! - `{"cmd":"stop"}`: `{"stopping":true}`; the server exits once no worker
//!   is mid-epoch.

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

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileStatus {
    pub job: String,
    pub path: String,
    pub state: FileState,
    pub epochs_drained: u64,
    pub epochs_pending: u64,
    pub bytes_drained: u64,
    pub bytes_pending: u64,
    pub rate_bps: f64,
    pub eta_s: Option<f64>,
    pub attempts: u32,
    pub message: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
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
    pub damaged: usize,
    pub retrying: usize,
    pub files: Vec<FileStatus>,
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
    pub fn reply(&self, v: &serde_json::Value) -> std::io::Result<()> {
        let mut text = v.to_string();
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
            Err(e) => client.reply(&serde_json::json!({ "error": format!("bad request: {e}") })),
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
    let reply = match req {
        Request::Status => serde_json::to_value(server.status()),
        Request::Drain { timeout_s } => {
            let timeout = timeout_s.map(Duration::from_secs_f64);
            match server.wait_idle(timeout) {
                Ok(s) => serde_json::to_value(s),
                Err(e) => Ok(serde_json::json!({ "error": e.to_string() })),
            }
        }
        Request::Finish => {
            let server = server.clone();
            std::thread::spawn(move || {
                if let Err(e) = server.wait_idle(None) {
                    tracing::error!(error = %e, "final scan failed");
                }
                server.request_stop();
            });
            Ok(serde_json::json!({ "finishing": true }))
        }
        Request::Wait { timeout_s } => {
            let timeout = timeout_s.map(Duration::from_secs_f64);
            let reply = match server.wait_idle(timeout) {
                Ok(s) if s.idle && s.damaged == 0 && s.retrying == 0 => {
                    serde_json::json!({ "drained": true, "epochs_drained": s.epochs_drained, "bytes_drained": s.bytes_drained, "nodes": 1 })
                }
                Ok(s) => {
                    let why: Vec<String> = s
                        .files
                        .iter()
                        .filter_map(|f| f.message.as_ref().map(|m| format!("{}: {m}", f.path)))
                        .collect();
                    serde_json::json!({ "drained": false, "epochs_pending": s.epochs_pending, "failed": why })
                }
                Err(e) => serde_json::json!({ "error": e.to_string() }),
            };
            // Answer first: the process may exit as soon as it stops.
            client.reply(&reply)?;
            if reply["drained"] == true {
                server.request_stop();
            }
            return Ok(());
        }
        Request::Stop => {
            // Answer first: the process may exit as soon as it stops.
            client.reply(&serde_json::json!({ "stopping": true }))?;
            server.request_stop();
            return Ok(());
        }
    }
    .map_err(std::io::Error::other)?;
    client.reply(&reply)
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

/// A [`Status`] from a server (for `status` and `drain` requests).
pub fn request_status(path: &Path, req: &Request) -> Result<Status, StatusError> {
    let v = request(path, req)?;
    if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
        return Err(StatusError::Io {
            path: path.to_path_buf(),
            what: "server",
            error: std::io::Error::other(e.to_owned()),
        });
    }
    serde_json::from_value(v).map_err(|error| StatusError::Protocol {
        path: path.to_path_buf(),
        error,
    })
}
