//! A server job's round and release run here for several node-local
//! roots without MPI (each node's pieces handed to the owners as bytes),
//! as crates/server/src/cluster/streams*.rs runs them.

use std::collections::BTreeSet;
use std::path::Path;

use paralog_stream::format::{Base, Cut};
use paralog_stream::nodes::{self, NodeShare};
use paralog_stream::{DrainOptions, DrainReport};

use super::{walk, S};

const N: u32 = 3;

/// Every file below `dir` (relative name, bytes), sorted.
pub fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<_> = walk(dir)
        .into_iter()
        .map(|e| {
            let rel = e.strip_prefix(dir).unwrap().display().to_string();
            (rel, std::fs::read(&e).unwrap())
        })
        .collect();
    out.sort();
    out
}

/// One round of the job over `shares` (node i = shares[i]) to the
/// directory `remote`: cut, record everywhere, pieces to owners p mod
/// nodes, each owner's batches written, the watermark. The frames' bytes
/// sent between nodes.
pub fn job_round(shares: &mut [NodeShare], remote: &Path) -> u64 {
    let cut = job_cut(shares);
    job_apply(shares, &cut, remote)
}

/// The job's next cut of every node's new batches, recorded on every
/// node (not applied).
pub fn job_cut(shares: &mut [NodeShare]) -> Cut {
    let mut ranges = Vec::new();
    let mut parts = N;
    for s in shares.iter_mut() {
        let new = s
            .take_new(&DrainOptions::default(), &mut DrainReport::default())
            .unwrap();
        parts = new.partitions.unwrap_or(parts);
        ranges.extend(new.ranges);
    }
    let state = match shares[0].state() {
        [] => vec![Default::default(); parts as usize],
        st => st.to_vec(),
    };
    let round = shares[0].rounds() + 1;
    let cut = nodes::make_cut(round, &state, ranges, 64 << 20, S).unwrap();
    for s in shares.iter_mut() {
        s.record(&cut).unwrap();
    }
    cut
}

/// Apply `cut` (recorded on every node): each node's pieces to the
/// owners (p mod nodes), their batches written, then the watermark. The
/// frames' bytes sent between nodes.
pub fn job_apply(shares: &[NodeShare], cut: &Cut, remote: &Path) -> u64 {
    let parts = cut.parts.len() as u32;
    let k = shares.len();
    let owner = |p: u32| p as usize % k;
    let mut sent = vec![Vec::new(); k];
    let mut between = 0;
    for (i, s) in shares.iter().enumerate() {
        let (out, bytes) = s.pieces(cut, k, &owner).unwrap();
        between += bytes
            .iter()
            .enumerate()
            .filter(|&(o, _)| o != i)
            .map(|(_, b)| b)
            .sum::<u64>();
        for (o, b) in out.into_iter().enumerate() {
            sent[o].push(b);
        }
    }
    let rdir = paralog_stream::layout::stream_dir(remote, S);
    std::fs::create_dir_all(&rdir).unwrap();
    for (o, got) in sent.iter().enumerate() {
        let got: Vec<&[u8]> = got.iter().map(Vec::as_slice).collect();
        for (p, b) in nodes::assemble(cut, &got, &|p| owner(p) == o, &rdir).unwrap() {
            nodes::apply_part(&rdir, S, parts, p, &cut.parts[p as usize], &b).unwrap();
        }
    }
    nodes::publish_watermark(&rdir, cut.round, &nodes::after(cut)).unwrap();
    between
}

/// The job's release over `shares`: each node's segments that may go
/// and the producers it keeps, every node's deleted, then the same base
/// written everywhere. The base and the ids deleted.
pub fn job_release(shares: &mut [NodeShare]) -> (Base, Vec<u64>) {
    let found: Vec<_> = shares.iter().map(|s| s.releasable().unwrap()).collect();
    let held: BTreeSet<u64> = found.iter().flat_map(|r| r.held.clone()).collect();
    let gone: Vec<u64> = found.iter().flat_map(|r| r.gone()).collect();
    for (s, r) in shares.iter_mut().zip(found) {
        s.delete_released(r).unwrap();
    }
    let bases: Vec<Base> = shares
        .iter_mut()
        .map(|s| s.rebase(&held).unwrap())
        .collect();
    assert!(
        bases.iter().all(|b| *b == bases[0]),
        "the nodes' bases differ"
    );
    (bases[0].clone(), gone)
}
