//! Whether a node's cut log of a stream is a server job's (docs/streams.md
//! "Many nodes"): every node of a server job holds the job's cuts, each
//! naming the ranges of every node's producers, so a node whose log names
//! a segment it does not hold drained with other nodes. A one-node drain
//! of such a root would apply, or add, rounds the other nodes' logs do not
//! have: `paralog recover` on one node refuses it (run it as the job of
//! recovers instead), rather than leave the nodes' logs two rounds apart.

use std::collections::BTreeSet;
use std::path::Path;

use crate::error::Result;
use crate::{layout, local};

/// A range of a node's cut log whose producer's segment is not on the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Elsewhere {
    /// The round that names it (the first such).
    pub round: u64,
    pub producer: u64,
    /// Rounds in the node's cut log.
    pub rounds: u64,
}

/// The first range of `stream`'s cut log under the node-local root
/// `local` whose segment this node does not hold (`None`: every range's
/// segment is here, or there is no cut log). A segment counts as held
/// when its file is there, whatever its state.
pub fn ranges_elsewhere(local: &Path, stream: &str) -> Result<Option<Elsewhere>> {
    let dir = layout::existing_local_stream(local, stream)?;
    let (cuts, _) = local::read_cuts(&dir.join(layout::CUTS))?;
    let held: BTreeSet<u64> = layout::entries(&dir)?
        .iter()
        .filter_map(|(name, _)| layout::parse_segment_name(name))
        .collect();
    let rounds = cuts.len() as u64;
    Ok(cuts.iter().find_map(|c| {
        c.ranges
            .iter()
            .find(|r| !held.contains(&r.producer))
            .map(|r| Elsewhere {
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
        assert_eq!(ranges_elsewhere(&a, "s").unwrap(), None);
        // Node b of the same job: the job's cut log, no segment of it.
        let bdir = layout::stream_dir(&b, "s");
        layout::create_dirs(&b, &bdir, 0o700).unwrap();
        let adir = layout::stream_dir(&a, "s");
        std::fs::copy(adir.join(layout::CUTS), bdir.join(layout::CUTS)).unwrap();
        let found = ranges_elsewhere(&b, "s").unwrap();
        assert_eq!(
            found,
            Some(Elsewhere {
                round: 1,
                producer: id,
                rounds: 1
            })
        );
        assert!(ranges_elsewhere(&b, "other").is_err());
    }
}
