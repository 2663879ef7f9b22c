//! `paralog server` and `paralog recover` started as one MPI job, one
//! process per node: the servers act together (docs/cluster.md).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use paralog_server::cluster::mpi::Comm;
use paralog_server::cluster::{ClusterConfig, Control, Coordinator, Totals};

use crate::env::Mpi;
use crate::remote::Remote;

/// The MPI a process was launched by, from what each launcher puts in the
/// environment of its processes (Open MPI's mpirun, MPICH's Hydra, and the
/// PMI that Slurm's srun sets for MPICH).
pub fn launched_by() -> Option<Mpi> {
    let set = |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty());
    if set("OMPI_COMM_WORLD_SIZE") {
        Some(Mpi::Openmpi)
    } else if set("PMI_SIZE") || set("PMI_RANK") || set("PMIX_RANK") {
        Some(Mpi::Mpich)
    } else {
        None
    }
}

/// Where the coordination library of `mpi` is: next to this executable.
fn coord_lib(mpi: Mpi) -> anyhow::Result<PathBuf> {
    let lib = crate::env::lib_dir()?.join(format!("libparalog_coord_{}.so", mpi.name()));
    if !lib.is_file() {
        anyhow::bail!("{} is missing: build it with `make build`", lib.display());
    }
    Ok(lib)
}

pub struct Job {
    pub mpi: Mpi,
    pub root: PathBuf,
    pub job: Option<String>,
    pub remote: Remote,
    pub node: String,
    pub buf_bytes: usize,
    pub socket: Option<PathBuf>,
    pub finish_now: bool,
    pub peer_timeout: Duration,
    pub posix_writes: paralog_server::cluster::PosixWrites,
}

/// Run this node's server of the job until the servers finish; the totals
/// (the same on every node) and this node's rank among the servers.
pub fn run(job: Job) -> anyhow::Result<(Totals, usize)> {
    let lib = coord_lib(job.mpi)?;
    let comm = Comm::init(&lib).context("starting MPI for the server job")?;
    let rank = comm.rank();
    let ctl = Arc::new(Control::default());
    let answered = ctl.clone();
    if let Some(socket) = &job.socket {
        let c = ctl.clone();
        paralog_server::status::serve_with(socket, move |conn| {
            paralog_server::cluster::answer(&c, conn)
        })?;
    }
    tracing::info!(
        node = %job.node,
        server = rank,
        servers = comm.size(),
        root = %job.root.display(),
        remote = %job.remote.describe(),
        "server of a server job ready"
    );
    let mut coord = Coordinator::new(
        comm,
        ClusterConfig {
            root: job.root.clone(),
            job: job.job.clone(),
            remote: job.remote,
            node: job.node.clone(),
            buf_bytes: job.buf_bytes,
            poll: Duration::from_millis(200),
            finish_now: job.finish_now,
            peer_timeout: job.peer_timeout,
            posix_writes: job.posix_writes,
        },
        ctl,
    );
    let totals = coord.run().context("the server job failed")?;
    answered.answered(Duration::from_secs(10));
    coord.finalize().context("ending MPI in the server job")?;
    if let Some(socket) = &job.socket {
        let _ = std::fs::remove_file(socket);
    }
    Ok((totals, rank))
}

/// Print what the servers did (once, from the first server) and choose the
/// exit status: non-zero when something could not be drained.
pub fn report(t: &Totals, rank: usize, root: &Path, what: &str) -> ExitCode {
    if rank == 0 {
        let parts: Vec<String> = t.parts_by_node.iter().map(|n| n.to_string()).collect();
        println!(
            "paralog {what}: {} node(s), {} epoch(s), {} bytes drained, {} bytes between nodes{}",
            t.nodes,
            t.epochs_drained,
            t.bytes_drained,
            t.bytes_between_nodes,
            if parts.is_empty() {
                String::new()
            } else {
                format!(", parts uploaded by node {}", parts.join("/"))
            }
        );
        for f in &t.failed {
            println!("paralog {what}: NOT DRAINED: {f}");
        }
        if !t.failed.is_empty() {
            println!(
                "paralog {what}: every committed byte is kept in each node's {}; once the cause is fixed, run `paralog recover` as an MPI job (one process per node) to finish the drain",
                root.display()
            );
        }
    }
    if t.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    }
}
