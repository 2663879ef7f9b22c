//! Whether a node's share of a stream is a server job's (docs/streams.md
//! "Many nodes", "Recovery"). Every node of a server job holds the job's
//! cuts, each naming the ranges of every node's producers; a one-node
//! drain of one node would apply, or add, rounds the other nodes' logs do
//! not have, and logs that end up two rounds apart are refused by the next
//! server job. So `paralog recover` on one node refuses such a stream (the
//! job of recovers drains it). Two signs, either enough: the mark a server
//! job of several nodes leaves in the stream's directory before it records
//! anything ([`mark`]), and, for roots older than the mark, a round the
//! remote has not published that names a segment the node does not hold
//! (only those: a drained segment may be deleted once its rounds are
//! published, so a published round naming a missing segment proves
//! nothing).

use std::collections::BTreeSet;
use std::path::Path;

use crate::error::{corrupt, Result, StreamError};
use crate::{layout, local};

/// The mark's file in a stream's node-local directory: `nodes N\n`.
pub const JOB_MARK: &str = "server-job";

/// Why a node's share of a stream is a server job's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobShare {
    /// A server job of `nodes` nodes drained it (its mark).
    Marked { nodes: u64 },
    /// Round `round` of the node's cut log (of `rounds`) names `producer`,
    /// whose segment is not on this node.
    Elsewhere {
        round: u64,
        producer: u64,
        rounds: u64,
    },
}

/// Mark `stream`'s directory under the node-local root `local` as drained
/// by a server job of `nodes` nodes (durably: a temporary, fsync, rename,
/// directory fsync), before the job records a cut of it. A job of one
/// node drains as a one-node drain does and marks nothing; a mark stays.
pub fn mark(local: &Path, stream: &str, nodes: usize) -> Result<()> {
    if nodes < 2 {
        return Ok(());
    }
    let path = layout::stream_dir(local, stream).join(JOB_MARK);
    let text = format!("nodes {nodes}\n");
    if layout::read_small(&path)?.as_deref() == Some(text.as_bytes()) {
        return Ok(());
    }
    layout::write_atomic(&path, text.as_bytes(), 0o600)
}

/// Refuse a one-node drain (`paralog stream drain`, the node server,
/// one-node `recover`) of a stream directory `dir` a server job of
/// several nodes marked: its cut log is the job's, the same on every
/// node, and rounds one node applied or added alone would leave the
/// nodes' logs apart.
pub fn refuse_marked(dir: &Path, stream: &str) -> Result<()> {
    let path = dir.join(JOB_MARK);
    if path.exists() {
        return Err(StreamError::Invalid {
            what: format!(
                "stream {stream}: {} says a server job of several nodes drains it (its cut log is the job's): a one-node drain must not apply or add its rounds; drain it with a server job of the same nodes, or run `paralog recover` as an MPI job on them (docs/streams.md \"Recovery\")",
                path.display()
            ),
        });
    }
    Ok(())
}

/// Whether `stream`'s share under the node-local root `local` is a server
/// job's (`None`: a one-node drain may take it), given the round the
/// remote published (0: none, or unknown: every round is looked at).
pub fn job_share(local: &Path, stream: &str, published: u64) -> Result<Option<JobShare>> {
    let dir = layout::existing_local_stream(local, stream)?;
    let path = dir.join(JOB_MARK);
    if let Some(b) = layout::read_small(&path)? {
        let nodes = std::str::from_utf8(&b)
            .ok()
            .and_then(|t| t.strip_prefix("nodes "))
            .and_then(|t| t.trim_end().parse().ok())
            .ok_or_else(|| corrupt(&path, 0, "not `nodes N`"))?;
        return Ok(Some(JobShare::Marked { nodes }));
    }
    let log = local::read_log(&dir.join(layout::CUTS))?;
    let rounds = log.rounds();
    let cuts = log.cuts;
    // A segment counts as held when its file is there, whatever its state.
    let held: BTreeSet<u64> = layout::entries(&dir)?
        .iter()
        .filter_map(|(name, _)| layout::parse_segment_name(name))
        .collect();
    Ok(cuts.iter().filter(|c| c.round > published).find_map(|c| {
        c.ranges
            .iter()
            .find(|r| !held.contains(&r.producer))
            .map(|r| JobShare::Elsewhere {
                round: c.round,
                producer: r.producer,
                rounds,
            })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{drain_stream, DrainOptions, Partitioner, Producer};

    /// A private directory under a fresh temporary one.
    fn root(t: &tempfile::TempDir, name: &str) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let d = t.path().join(name);
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        d
    }

    #[test]
    fn a_log_naming_another_nodes_segment_is_found() {
        let t = tempfile::tempdir().unwrap();
        let (a, b, remote) = (root(&t, "a"), root(&t, "b"), root(&t, "r"));
        let mut p = Producer::open(&a, "s", 2, Partitioner::RoundRobin).unwrap();
        p.append(None, b"x", None).unwrap();
        p.flush().unwrap();
        let id = p.id();
        drain_stream(&a, &remote, "s", &DrainOptions::default()).unwrap();
        assert_eq!(job_share(&a, "s", 0).unwrap(), None);
        // Node b of the same job: the job's cut log, no segment of it.
        let bdir = layout::stream_dir(&b, "s");
        layout::create_dirs(&b, &bdir, 0o700).unwrap();
        let adir = layout::stream_dir(&a, "s");
        std::fs::copy(adir.join(layout::CUTS), bdir.join(layout::CUTS)).unwrap();
        let found = job_share(&b, "s", 0).unwrap();
        assert_eq!(
            found,
            Some(JobShare::Elsewhere {
                round: 1,
                producer: id,
                rounds: 1
            })
        );
        // Published: its segment may have been deleted since.
        assert_eq!(job_share(&b, "s", 1).unwrap(), None);
        assert!(job_share(&b, "other", 0).is_err());
    }

    #[test]
    fn a_server_jobs_mark_is_found_and_checked() {
        let t = tempfile::tempdir().unwrap();
        let a = root(&t, "a");
        let mut p = Producer::open(&a, "s", 2, Partitioner::RoundRobin).unwrap();
        p.append(None, b"x", None).unwrap();
        p.flush().unwrap();
        mark(&a, "s", 1).unwrap();
        assert_eq!(job_share(&a, "s", 0).unwrap(), None);
        mark(&a, "s", 2).unwrap();
        mark(&a, "s", 2).unwrap();
        assert_eq!(
            job_share(&a, "s", 0).unwrap(),
            Some(JobShare::Marked { nodes: 2 })
        );
        let path = layout::stream_dir(&a, "s").join(JOB_MARK);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        std::fs::write(&path, b"garbage").unwrap();
        let e = job_share(&a, "s", 0).unwrap_err().to_string();
        assert!(e.contains("server-job"), "{e}");
    }
}
