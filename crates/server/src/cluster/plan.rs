//! The merged view of all nodes: which epochs of which file are globally
//! committed and not yet drained, with every rank's manifest, and which node
//! holds each rank's data. Every server computes the same plan from the same
//! gathered summaries (same order, no clocks), so their collective steps
//! match without further talk.

use std::collections::BTreeMap;
use std::path::PathBuf;

use paralog_log::format::Manifest;
use paralog_log::reader::{committed_prefix, fmt_ids};
use paralog_log::{EpochId, LogicalFile};

use super::summary::{decode_manifest, FileSummary, NodeSummary, ShippedManifest};

/// A file of the job, whichever node holds it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileKey {
    pub job: String,
    /// Relative to the prefix.
    pub rel: Vec<u8>,
}

/// One file as all nodes hold it.
#[derive(Debug)]
pub struct GlobalFile {
    pub job: String,
    pub rel: Vec<u8>,
    pub path: Vec<u8>,
    /// The last epoch any node recorded as drained: the remote holds it
    /// (progress is written only after every node's part is durable).
    pub progress: Option<EpochId>,
    /// Node index and that node's file directory, for every node that has one.
    pub holders: Vec<(usize, String)>,
    /// What to drain now: groups of consecutive epochs, each applied as one
    /// new remote state.
    pub groups: Vec<Group>,
    /// Why draining stops before the next epoch (a damaged or missing log).
    pub blocked: Option<String>,
    /// The blocking epoch, when what blocks it is missing manifests: that
    /// can be a view of a moment (see [`plan`]), so it counts only when a
    /// later round still sees it.
    pub missing: Option<EpochId>,
    /// Committed epochs waiting for their open to end (whole-open backends).
    pub waiting: usize,
    /// The data-log bytes of those epochs, all nodes.
    pub waiting_bytes: u64,
}

#[derive(Debug)]
pub struct Group {
    pub ids: Vec<EpochId>,
    /// Every rank's manifest of every epoch of the group, with the path it
    /// has on its own node.
    pub epochs: Vec<(EpochId, Vec<(Manifest, PathBuf)>)>,
    /// Which node holds each rank's data logs of each open.
    pub owner: BTreeMap<RankOfOpen, usize>,
}

/// One rank's log of one open (generation) of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RankOfOpen {
    pub open: u64,
    pub rank: u32,
}

impl Group {
    /// The node holding the log a source of the merged file comes from.
    pub fn node_of(&self, src: &paralog_log::reader::SourceExtent) -> Option<usize> {
        self.owner
            .get(&RankOfOpen {
                open: src.epoch.gen,
                rank: src.rank,
            })
            .copied()
    }

    /// The bytes of the group's data logs, all ranks of all nodes (what
    /// `status` counts as pending, as the one-node server does).
    pub fn log_bytes(&self) -> u64 {
        self.epochs
            .iter()
            .flat_map(|(_, ms)| ms)
            .map(|(m, _)| m.data_len)
            .sum()
    }

    /// The file after the group's epochs, merged over all ranks of all nodes.
    pub fn logical_file(&self) -> Result<LogicalFile, paralog_log::LogError> {
        let mut lf = LogicalFile::default();
        for (id, manifests) in &self.epochs {
            lf.apply_epoch(*id, manifests)?;
        }
        Ok(lf)
    }
}

impl GlobalFile {
    pub fn key(&self) -> FileKey {
        FileKey {
            job: self.job.clone(),
            rel: self.rel.clone(),
        }
    }

    pub fn name(&self) -> String {
        format!("{}:{}", self.job, String::from_utf8_lossy(&self.path))
    }

    pub fn pending(&self) -> usize {
        self.groups.iter().map(|g| g.ids.len()).sum::<usize>() + self.waiting
    }
}

#[derive(Default)]
struct EpochView {
    marked: bool,
    /// rank → (node, manifest as shipped)
    manifests: BTreeMap<u32, (usize, ShippedManifest)>,
}

/// Merge the nodes' summaries. `whole_opens`: the backend takes the epochs
/// of an open together once it ended (or at the end, `flush`).
///
/// The nodes scan at slightly different moments, so one round can see a
/// rank's commit mark (written after the agreement) from one node and,
/// from another node that scanned a moment earlier, no manifest yet of its
/// own ranks. Every scan of the next round starts after this round's
/// exchange, hence after that mark, hence after every manifest of the
/// epoch was durable: an epoch still incomplete then is really missing.
pub fn plan(nodes: &[NodeSummary], whole_opens: bool, flush: bool) -> Vec<GlobalFile> {
    by_file(nodes)
        .into_iter()
        .map(|(key, parts)| plan_file(key, &parts, nodes, whole_opens, flush, &mut decode_shipped))
        .collect()
}

/// Every node's part of each file: (node index, its summary of the file),
/// by file, in key order.
pub(super) type Parts<'a> = Vec<(usize, &'a FileSummary)>;

pub(super) fn by_file(nodes: &[NodeSummary]) -> BTreeMap<FileKey, Parts<'_>> {
    let mut by_file: BTreeMap<FileKey, Parts<'_>> = BTreeMap::new();
    for (n, s) in nodes.iter().enumerate() {
        for f in &s.files {
            by_file
                .entry(FileKey {
                    job: f.job.clone(),
                    rel: f.rel.clone(),
                })
                .or_default()
                .push((n, f));
        }
    }
    by_file
}

/// How a plan decodes a shipped manifest of an epoch held by a node:
/// [`decode_shipped`], or the same through the incremental planner's kept
/// manifests (planner.rs).
pub(super) type Decode<'a> =
    dyn FnMut(usize, EpochId, &ShippedManifest) -> Result<Manifest, paralog_log::LogError> + 'a;

/// Decode a shipped manifest, checking it (summary::decode_manifest).
pub(super) fn decode_shipped(
    _node: usize,
    id: EpochId,
    shipped: &ShippedManifest,
) -> Result<Manifest, paralog_log::LogError> {
    decode_manifest(shipped, id)
}

/// One file's plan from every node's part of it: a function of `parts`,
/// the nodes' names, `whole_opens` and `flush` only.
pub(super) fn plan_file(
    FileKey { job, rel }: FileKey,
    parts: &[(usize, &FileSummary)],
    nodes: &[NodeSummary],
    whole_opens: bool,
    flush: bool,
    decode: &mut Decode<'_>,
) -> GlobalFile {
    let mut g = GlobalFile {
        job,
        rel,
        path: parts[0].1.path.clone(),
        progress: parts.iter().filter_map(|(_, f)| f.progress).max(),
        holders: parts.iter().map(|(n, f)| (*n, f.dir.clone())).collect(),
        groups: Vec::new(),
        blocked: None,
        missing: None,
        waiting: 0,
        waiting_bytes: 0,
    };
    if let Some((n, f)) = parts.iter().find(|(_, f)| f.damaged.is_some()) {
        g.blocked = Some(format!(
            "on node {}: {}",
            nodes[*n].node,
            f.damaged.as_deref().unwrap_or("")
        ));
        return g;
    }
    if let Some((n, f)) = parts.iter().find(|(_, f)| f.path != g.path) {
        g.blocked = Some(format!(
            "node {} holds {} for {:?}, another node for {:?}",
            nodes[*n].node,
            f.dir,
            String::from_utf8_lossy(&f.path),
            String::from_utf8_lossy(&g.path)
        ));
        return g;
    }
    if let Err(e) = fill(&mut g, nodes, parts, whole_opens, flush, decode) {
        g.blocked = Some(e);
    }
    g
}

fn fill(
    g: &mut GlobalFile,
    nodes: &[NodeSummary],
    parts: &[(usize, &FileSummary)],
    whole_opens: bool,
    flush: bool,
    decode: &mut Decode<'_>,
) -> Result<(), String> {
    let mut epochs: BTreeMap<EpochId, EpochView> = BTreeMap::new();
    let mut closed: BTreeMap<u64, bool> = BTreeMap::new();
    // Which node has a directory for each rank of each open: names the
    // node whose log is missing when a committed epoch lacks a manifest.
    let mut rank_homes: BTreeMap<RankOfOpen, Vec<usize>> = BTreeMap::new();
    for (n, f) in parts {
        for gs in &f.gens {
            *closed.entry(gs.gen).or_default() |= gs.closed;
            for &r in &gs.ranks {
                rank_homes
                    .entry(RankOfOpen {
                        open: gs.gen,
                        rank: r,
                    })
                    .or_default()
                    .push(*n);
            }
            for es in &gs.epochs {
                let id = EpochId::new(gs.gen, es.epoch);
                if Some(id) <= g.progress {
                    continue;
                }
                let v = epochs.entry(id).or_default();
                v.marked |= es.marked;
                for shipped in &es.manifests {
                    let rank = &shipped.rank;
                    if let Some((other, _)) = v.manifests.get(rank) {
                        return Err(format!(
                            "epoch {id} rank {rank} has a manifest on node {} and on node {}",
                            nodes[*other].node, nodes[*n].node
                        ));
                    }
                    v.manifests.insert(*rank, (*n, shipped.clone()));
                }
            }
        }
    }
    // Decode everything first: a bad manifest anywhere stops the file.
    let mut decoded: BTreeMap<EpochId, Vec<(Manifest, PathBuf, usize)>> = BTreeMap::new();
    let mut comm_sizes: BTreeMap<EpochId, u32> = BTreeMap::new();
    for (&id, v) in &epochs {
        let mut ms: Vec<(Manifest, PathBuf, usize)> = Vec::new();
        for (n, shipped) in v.manifests.values() {
            let path = shipped.loc().path;
            let m =
                decode(*n, id, shipped).map_err(|e| format!("on node {}: {e}", nodes[*n].node))?;
            if let Some((first, p, _)) = ms.first() {
                if first.comm_size != m.comm_size {
                    return Err(format!(
                        "epoch {id}: {} says {} ranks, {} says {}",
                        p.display(),
                        first.comm_size,
                        path.display(),
                        m.comm_size
                    ));
                }
            }
            comm_sizes.insert(id, m.comm_size);
            ms.push((m, path, *n));
        }
        decoded.insert(id, ms);
    }
    let ids: Vec<EpochId> = epochs.keys().copied().collect();
    let complete = |id: &EpochId| {
        let have = epochs[id].manifests.len() as u32;
        comm_sizes.get(id).is_some_and(|&c| c == have)
    };
    let committed: Vec<bool> = ids
        .iter()
        .map(|id| epochs[id].marked || complete(id))
        .collect();
    let order = committed_prefix(&ids, &committed);
    let last_gen = ids.last().map(|id| id.gen);
    // An open ended once it was closed, or a later open began.
    let ended = |gen| closed.get(&gen).copied().unwrap_or(false) || last_gen > Some(gen);
    let (groups, waiting) = crate::step::open_groups(&order, whole_opens, flush, ended);
    g.waiting = waiting;
    // The epochs held back are the last ones.
    g.waiting_bytes = order[order.len() - waiting..]
        .iter()
        .flat_map(|id| decoded.get(id).into_iter().flatten())
        .map(|(m, _, _)| m.data_len)
        .sum();
    for ids in groups {
        // A committed epoch must have every rank's manifest somewhere, or it
        // would be applied without that rank's bytes.
        for id in ids {
            if !complete(id) {
                let have: Vec<u32> = epochs[id].manifests.keys().copied().collect();
                let size = comm_sizes.get(id).copied().unwrap_or(0);
                let missing: Vec<String> = (0..size)
                    .filter(|r| !have.contains(r))
                    .map(|r| {
                        match rank_homes.get(&RankOfOpen {
                            open: id.gen,
                            rank: r,
                        }) {
                            Some(ns) => format!(
                                "rank {r} (its log is on node {}, without this epoch)",
                                ns.iter()
                                    .map(|&n| nodes[n].node.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                            None => format!("rank {r} (no node holds its log)"),
                        }
                    })
                    .collect();
                // A node with no record of this open at all is where the
                // missing ranks most likely ran (a lost disk, a wiped root).
                let silent: Vec<&str> = nodes
                    .iter()
                    .enumerate()
                    .filter(|(n, _)| {
                        !rank_homes
                            .iter()
                            .any(|(home, ns)| home.open == id.gen && ns.contains(n))
                    })
                    .map(|(_, s)| s.node.as_str())
                    .collect();
                let mut why = if size == 0 {
                    "no node holds any manifest of it".to_owned()
                } else {
                    format!("no manifest of {}", missing.join("; "))
                };
                if !silent.is_empty() {
                    why += &format!(
                        "; node(s) holding no record of this open: {} (a lost or wiped node-local disk?)",
                        silent.join(", ")
                    );
                }
                g.missing = Some(*id);
                return Err(format!(
                    "epoch {} is committed but {why}; it and the later epochs stay local",
                    fmt_ids(&[*id])
                ));
            }
        }
        let mut owner = BTreeMap::new();
        let mut group_epochs = Vec::new();
        for id in ids {
            let ms = decoded.remove(id).unwrap_or_default();
            for (m, _, n) in &ms {
                owner.insert(
                    RankOfOpen {
                        open: id.gen,
                        rank: m.rank,
                    },
                    *n,
                );
            }
            group_epochs.push((*id, ms.into_iter().map(|(m, p, _)| (m, p)).collect()));
        }
        g.groups.push(Group {
            ids: ids.to_vec(),
            epochs: group_epochs,
            owner,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::summary::{EpochSummary, FileSummary, GenSummary};
    use super::*;
    use paralog_log::{Extent, FileIdent, Op};

    fn manifest(rank: u32, epoch: u64, off: u64, len: u64) -> Vec<u8> {
        Manifest {
            ident: FileIdent {
                job: "j".into(),
                path: b"/p/f".to_vec(),
                rel: b"f".to_vec(),
                gen: 1,
            },
            rank,
            comm_size: 4,
            epoch,
            data_len: 8192,
            ops: vec![Op::Extent(Extent {
                file_off: off,
                len,
                log_pos: 4096,
                crc: 0,
            })],
        }
        .encode_version(1)
    }

    /// Node `n` holds ranks 2n and 2n+1; `epochs`: (epoch, marked, ranks with a manifest).
    fn node(n: u32, epochs: &[(u64, bool, &[u32])]) -> NodeSummary {
        NodeSummary {
            node: format!("n{n}"),
            finishing: false,
            scan_failed: false,
            files: vec![FileSummary {
                job: "j".into(),
                dir: format!("/l/n{n}/j/f"),
                path: b"/p/f".to_vec(),
                rel: b"f".to_vec(),
                progress: None,
                damaged: None,
                gens: vec![GenSummary {
                    gen: 1,
                    closed: false,
                    ranks: vec![2 * n, 2 * n + 1],
                    epochs: epochs
                        .iter()
                        .map(|&(e, marked, ranks)| {
                            EpochSummary::of_ranks(e, marked, ranks, |r| {
                                let path = format!("/l/n{n}/j/f/g000001/r{r:07}/e{e:010}.manifest");
                                (path, 0, 1, manifest(r, e, 100 * r as u64 + e, 10))
                            })
                        })
                        .collect(),
                }],
            }],
        }
    }

    #[test]
    fn an_epoch_is_committed_by_the_union_of_all_nodes() {
        // No marks: every rank's manifest exists, but on two nodes.
        let nodes = [
            node(0, &[(1, false, &[0, 1])]),
            node(1, &[(1, false, &[2, 3])]),
        ];
        let files = plan(&nodes, false, false);
        assert_eq!(files.len(), 1);
        let f = &files[0];
        assert!(f.blocked.is_none(), "{:?}", f.blocked);
        assert_eq!(f.groups.len(), 1);
        let g = &f.groups[0];
        assert_eq!(g.owner[&RankOfOpen { open: 1, rank: 0 }], 0);
        assert_eq!(g.owner[&RankOfOpen { open: 1, rank: 3 }], 1);
        let lf = g.logical_file().unwrap();
        assert_eq!(lf.data_bytes(), 40);
        // Half of it alone is not committed: nothing to drain, nothing wrong.
        let files = plan(&nodes[..1], false, false);
        assert!(files[0].groups.is_empty() && files[0].blocked.is_none());
    }

    #[test]
    fn a_marked_epoch_without_some_ranks_blocks_and_names_the_node() {
        // Epoch 1 complete; epoch 2 marked on node 0, node 1 shows no
        // manifest of it (a scan a moment early, or a lost disk).
        let nodes = [
            node(0, &[(1, false, &[0, 1]), (2, true, &[0, 1])]),
            node(1, &[(1, false, &[2, 3])]),
        ];
        let files = plan(&nodes, false, false);
        let f = &files[0];
        assert_eq!(f.groups.len(), 1, "epoch 1 still drains");
        assert_eq!(f.missing, Some(EpochId::new(1, 2)));
        let why = f.blocked.as_deref().unwrap();
        assert!(why.contains("rank 2") && why.contains("node n1"), "{why}");
    }

    #[test]
    fn a_rank_on_two_nodes_is_refused() {
        let nodes = [
            node(0, &[(1, false, &[0, 1])]),
            node(1, &[(1, false, &[1, 2, 3])]),
        ];
        let why = plan(&nodes, false, false)[0].blocked.clone().unwrap();
        assert!(
            why.contains("rank 1") && why.contains("n0") && why.contains("n1"),
            "{why}"
        );
    }
}
