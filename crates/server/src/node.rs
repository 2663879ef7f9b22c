//! Starting a node server: the private node-local root, the one-server-
//! per-job lock, and the one-node service with its watcher and status
//! socket. `paralog server` and `paralog run` call this; the server job
//! starts through `cluster::start`.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::service::{Config, Server};
use crate::status::{self, StatusError};
use crate::watch::Watcher;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{path}: {op}: {error}")]
    Io {
        path: PathBuf,
        op: &'static str,
        error: std::io::Error,
    },
    #[error("node-local directory {0} is not a directory")]
    NotADirectory(PathBuf),
    #[error("node-local directory {path} belongs to uid {owner}, not to you (uid {me}): its data would not be private")]
    NotYours { path: PathBuf, owner: u32, me: u32 },
    #[error("another paralog server already serves {what} (lock {} is held)", lock.display())]
    Busy { what: String, lock: PathBuf },
    #[error(transparent)]
    Status(#[from] StatusError),
}

fn io<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(std::io::Error) -> StartError + 'a {
    move |error| StartError::Io {
        path: path.to_path_buf(),
        op,
        error,
    }
}

/// The node-local root, created 0700 if missing, made 0700 if others
/// could read it; refused if another user owns it (its data would not be
/// private). `root` must be absolute.
pub fn prepare_root(root: &Path) -> Result<PathBuf, StartError> {
    let root = paralog_settings::normalize(root);
    if !root.exists() {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .recursive(true)
            .create(&root)
            .map_err(io(&root, "creating the node-local directory"))?;
    }
    let md = std::fs::metadata(&root).map_err(io(&root, "stat"))?;
    if !md.is_dir() {
        return Err(StartError::NotADirectory(root));
    }
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    if md.uid() != me {
        return Err(StartError::NotYours {
            path: root,
            owner: md.uid(),
            me,
        });
    }
    if md.mode() & 0o077 != 0 {
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700))
            .map_err(io(&root, "making it private (0700)"))?;
        tracing::warn!(root = %root.display(), "node-local directory was readable by others: made it 0700");
    }
    Ok(root)
}

/// One server per job (or per root) at a time: held for the life of the
/// server, released by the kernel if it dies; the file is removed on drop.
pub struct ServerLock {
    _file: File,
    path: PathBuf,
}

impl Drop for ServerLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

pub fn lock_server(root: &Path, job: Option<&str>) -> Result<ServerLock, StartError> {
    let name = match job {
        Some(j) => format!("{}server-{j}.lock", paralog_log::layout::RUNTIME_PREFIX),
        None => format!("{}server.lock", paralog_log::layout::RUNTIME_PREFIX),
    };
    let path = root.join(name);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(io(&path, "open"))?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(StartError::Busy {
            what: job.map_or_else(|| root.display().to_string(), |j| format!("job {j}")),
            lock: path,
        });
    }
    Ok(ServerLock { _file: file, path })
}

/// Start the one-node service: its workers, the watcher on the root
/// (inotify, on a thread of its own) and the status socket at `socket`.
/// `logged_puts`: a publisher of logged array puts will report to it
/// (`Server::puts`, crate::puts), so that a `wait` or `drain` that comes
/// before its first round waits for that round.
pub fn start(cfg: Config, socket: &Path, logged_puts: bool) -> Result<Server, StartError> {
    let root = cfg.root.clone();
    let server = Server::start(cfg);
    if logged_puts {
        server.puts().attach();
    }
    let watcher = Watcher::new(server.clone()).map_err(io(&root, "watching (inotify)"))?;
    status::serve(server.clone(), socket)?;
    std::thread::Builder::new()
        .name("watch".into())
        .spawn(move || {
            if let Err(e) = watcher.run() {
                tracing::error!(error = %e, "inotify failed: new epochs are found only by full scans now");
            }
        })
        .map_err(io(&root, "starting the watcher thread"))?;
    Ok(server)
}
