//! Starting this node's server of a server job: MPI through the servers'
//! coordination library, the status socket, the rounds until the servers
//! finish, and a clean end (every `wait` client answered, MPI finalized).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::mpi::{Comm, MpiError};
use super::{ClusterConfig, ClusterError, Control, Coordinator, Totals};

#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("starting MPI for the server job: {0}")]
    Init(MpiError),
    #[error("the status socket: {0}")]
    Status(#[from] crate::status::StatusError),
    #[error("the server job failed: {0}")]
    Run(#[from] ClusterError),
    #[error("ending MPI in the server job: {0}")]
    Finalize(MpiError),
}

/// Run this node's server of the job until the servers finish, answering
/// `status`/`finish`/`wait` at `socket` if given; the totals (the same on
/// every node) and this node's rank among the servers. `coord_lib`: the
/// coordination library built for the job's MPI.
pub fn run(
    coord_lib: &Path,
    cfg: ClusterConfig,
    socket: Option<PathBuf>,
) -> Result<(Totals, usize), JobError> {
    let comm = Comm::init(coord_lib).map_err(JobError::Init)?;
    let rank = comm.rank();
    let ctl = Arc::new(Control::new(&cfg));
    if let Some(socket) = &socket {
        let c = ctl.clone();
        crate::status::serve_with(socket, move |req, client| super::answer(&c, req, client))?;
    }
    tracing::info!(
        node = %cfg.node,
        server = rank,
        servers = comm.size(),
        root = %cfg.root.display(),
        remote = %cfg.remote.describe(),
        "server of a server job ready"
    );
    let mut coord = Coordinator::new(comm, cfg, ctl.clone());
    let totals = coord.run()?;
    ctl.answered(Duration::from_secs(10));
    coord.finalize().map_err(JobError::Finalize)?;
    if let Some(socket) = &socket {
        let _ = std::fs::remove_file(socket);
    }
    Ok((totals, rank))
}
