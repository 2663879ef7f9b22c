//! `paralog server` and `paralog recover` started as one MPI job, one
//! process per node: the servers act together (docs/cluster.md).

use paralog_server::cluster::{ClusterConfig, Totals};
use paralog_server::puts::PutState;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::env::Mpi;

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

/// Run this node's server of the job with the coordination library of
/// `mpi` (`paralog_server::cluster::job`).
pub fn run(
    mpi: Mpi,
    cfg: ClusterConfig,
    socket: Option<PathBuf>,
) -> anyhow::Result<(Totals, usize)> {
    Ok(paralog_server::cluster::job::run(
        &coord_lib(mpi)?,
        cfg,
        socket,
    )?)
}

/// Print what the servers did (once, from the first server) and choose the
/// exit status: non-zero when something could not be drained, from the
/// first server alone, after its lines: a launcher that sees another
/// process end non-zero first may kill the job before the first server's
/// lines are forwarded (Open MPI's mpirun did, so `recover` failed saying
/// nothing). The job's status (mpirun's, srun's) is non-zero all the same.
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
        if t.stream_rounds > 0 {
            let by: Vec<String> = t
                .stream_events_by_node
                .iter()
                .map(|n| n.to_string())
                .collect();
            println!(
                "paralog {what}: streams: {} round(s), {} event(s) stored (appended by node {}), {} bytes of events between nodes",
                t.stream_rounds,
                t.stream_events,
                by.join("/"),
                t.stream_bytes_between_nodes
            );
        }
        if t.sets_published > 0 {
            println!(
                "paralog {what}: {} checkpoint set(s) published; a leader held at most {} bytes of receive buffers (pool {})",
                t.sets_published, t.set_leader_peak, t.set_leader_pool
            );
        }
        if t.puts_published > 0 || !t.puts_left.is_empty() {
            println!(
                "paralog {what}: {} logged array put(s) published, {} not published",
                t.puts_published,
                t.puts_left.len()
            );
        }
        // Those that may still be published (another node's share, not
        // in this job); the others are in `failed`.
        for p in t.puts_left.iter().filter(|p| p.state == PutState::Waiting) {
            println!("paralog {what}: logged {}", crate::status::put_line(p));
        }
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
    if t.failed.is_empty() || rank != 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    }
}
