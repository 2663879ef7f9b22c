//! Checkpoint sets across the nodes of a server job (docs/aggregate.md,
//! "Many nodes"): what each node holds of each set (exchanged every round,
//! one allgather of these summaries), and the plan every server computes
//! from them alike: which sets are complete, the K groups of neighbouring
//! nodes, the leader of each (the node with the most bytes of the set;
//! ties: the lowest index) and the container each leader writes.
//!
//! The encoding is private to one server job (every server runs the same
//! binary), so it has no version: length-prefixed, little-endian.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::drain::DrainError;
use crate::remote::Remote;

use super::scan::{scan_job, MemberFile};
use super::{Sets, REWRITE};

/// A set of a job: (job, rule index, set directory).
pub type JobSet = (String, u64, Vec<u8>);

/// One node's view of one set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeSet {
    pub key: JobSet,
    /// The writers on this node moved on: a newer set of the same rule
    /// appeared here after every member of this one (this node's clock
    /// compares this node's files only).
    pub moved_on: bool,
    pub members: Vec<NodeMember>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeMember {
    pub member: Vec<u8>,
    /// Its writer finished it: all committed, its last open ended.
    pub finished: bool,
    /// Epochs committed and not in the published set yet.
    pub pending: bool,
    /// Bytes of its pending epochs in this node's log.
    pub bytes: u64,
    /// Its program deleted it (its newest pending epoch): final, whoever
    /// writes the set on.
    pub deleted: bool,
}

/// This node's member files, by set (kept for the transfer), and the
/// summary the other servers get.
pub(crate) struct Local {
    pub files: BTreeMap<JobSet, Vec<MemberFile>>,
    pub summary: Vec<NodeSet>,
}

/// Scan the jobs under `root` (one, or all) for set members. Members of
/// sets only a published record names (no rule) are left to the one-node
/// drain: the server job follows the rules alone, so that every server
/// decides from the same facts.
pub(crate) fn collect(
    sets: &Sets,
    remote: &Remote,
    root: &Path,
    job: Option<&str>,
) -> Result<Local, DrainError> {
    let inv = paralog_log::Inventory::scan(root).map_err(DrainError::Local)?;
    let mut files = BTreeMap::new();
    for j in inv.jobs.iter().filter(|j| job.is_none_or(|n| n == j.name)) {
        let by_set = scan_job(sets, remote, &j.dir)?;
        for ((rule, set), fs) in by_set {
            if rule == REWRITE {
                continue;
            }
            files.insert((j.name.clone(), rule as u64, set), fs);
        }
    }
    let summary = files
        .iter()
        .map(|(key, fs)| {
            let newest = fs.iter().map(|f| f.created).max();
            let moved_on = files.iter().any(|(k, other)| {
                k.0 == key.0
                    && k.1 == key.1
                    && k.2 != key.2
                    && other.iter().map(|f| f.created).min() > newest
            });
            NodeSet {
                key: key.clone(),
                moved_on,
                members: fs
                    .iter()
                    .map(|f| NodeMember {
                        member: f.member.clone(),
                        finished: f.finished,
                        pending: !f.pending.is_empty(),
                        bytes: f.pending.iter().map(|&id| f.inv.local_bytes(id)).sum(),
                        deleted: f.deleted,
                    })
                    .collect(),
            }
        })
        .collect();
    Ok(Local { files, summary })
}

// ---- encoding -------------------------------------------------------

fn put(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

pub fn encode(sets: &[NodeSet]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(sets.len() as u32).to_le_bytes());
    for s in sets {
        put(&mut out, s.key.0.as_bytes());
        out.extend_from_slice(&s.key.1.to_le_bytes());
        put(&mut out, &s.key.2);
        out.push(s.moved_on as u8);
        out.extend_from_slice(&(s.members.len() as u32).to_le_bytes());
        for m in &s.members {
            put(&mut out, &m.member);
            out.push(m.finished as u8 | (m.pending as u8) << 1 | (m.deleted as u8) << 2);
            out.extend_from_slice(&m.bytes.to_le_bytes());
        }
    }
    out
}

#[derive(Debug, thiserror::Error)]
#[error("node {node}'s checkpoint-set summary is malformed at byte {at}")]
pub struct DecodeError {
    pub node: usize,
    pub at: usize,
}

struct Cur<'a> {
    b: &'a [u8],
    at: usize,
    node: usize,
}

impl Cur<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], DecodeError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let Some(end) = end else {
            return Err(DecodeError {
                node: self.node,
                at: self.at,
            });
        };
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    fn bytes(&mut self) -> Result<Vec<u8>, DecodeError> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
}

pub fn decode(b: &[u8], node: usize) -> Result<Vec<NodeSet>, DecodeError> {
    let mut c = Cur { b, at: 0, node };
    let n = c.u32()?;
    let mut out = Vec::new();
    for _ in 0..n {
        let job = String::from_utf8_lossy(&c.bytes()?).into_owned();
        let rule = c.u64()?;
        let set = c.bytes()?;
        let moved_on = c.u8()? != 0;
        let m = c.u32()?;
        let mut members = Vec::new();
        for _ in 0..m {
            let member = c.bytes()?;
            let flags = c.u8()?;
            let bytes = c.u64()?;
            members.push(NodeMember {
                member,
                finished: flags & 1 != 0,
                pending: flags & 2 != 0,
                bytes,
                deleted: flags & 4 != 0,
            });
        }
        out.push(NodeSet {
            key: (job, rule, set),
            moved_on,
            members,
        });
    }
    if c.at != b.len() {
        return Err(DecodeError { node, at: c.at });
    }
    Ok(out)
}

// ---- the plan -------------------------------------------------------

/// One group of neighbouring nodes and what it writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Its nodes, `first..end`.
    pub first: usize,
    pub end: usize,
    /// The node that receives the others' members and writes the container.
    pub leader: usize,
    /// The container's index in the set record.
    pub container: u32,
}

/// What every server decides about one set, alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetPlan {
    pub key: JobSet,
    /// Every member with the node holding it, sorted by (node, member): a
    /// sender sends its members in this order.
    pub members: Vec<(usize, NodeMember)>,
    /// Publish now; else why not (yet).
    pub verdict: Verdict,
    /// The groups that write a container (a group without members writes
    /// none, except the first one when the previous version is copied).
    pub groups: Vec<Group>,
    /// Every member finished (else `recover --incomplete`).
    pub complete: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Publish,
    /// Not yet: members being written, or no newer set yet.
    Wait(String),
    /// Never by the server job (a member written from several nodes).
    Refuse(String),
}

impl SetPlan {
    /// The group node `n` belongs to.
    pub fn group_of(&self, n: usize) -> Option<&Group> {
        self.groups.iter().find(|g| (g.first..g.end).contains(&n))
    }

    /// The set directory, for messages.
    pub fn name(&self) -> String {
        String::from_utf8_lossy(&self.key.2).into_owned()
    }
}

/// The group of node `n` among `m` nodes in `k` groups: ⌊n·k/m⌋, which
/// makes exactly k groups of neighbours (the seed's ⌊n / ⌈m/k⌉⌋ can make
/// fewer).
pub fn group_index(n: usize, k: usize, m: usize) -> usize {
    n * k / m
}

/// The plan of every set with pending epochs, from every node's summary
/// (in node order). `k`: containers per set (at most one per node);
/// `finishing`: the job is ending (every set whose members all finished is
/// published; with `incomplete`, the others too).
pub fn plan(nodes: &[Vec<NodeSet>], k: usize, finishing: bool, incomplete: bool) -> Vec<SetPlan> {
    let m = nodes.len().max(1);
    let k = k.clamp(1, m);
    let mut by_key: BTreeMap<JobSet, Vec<(usize, &NodeSet)>> = BTreeMap::new();
    for (n, sets) in nodes.iter().enumerate() {
        for s in sets {
            by_key.entry(s.key.clone()).or_default().push((n, s));
        }
    }
    let mut out = Vec::new();
    for (key, held) in &by_key {
        let mut members: Vec<(usize, NodeMember)> = held
            .iter()
            .flat_map(|(n, s)| s.members.iter().map(|m| (*n, m.clone())))
            .collect();
        members.sort_by(|a, b| (a.0, &a.1.member).cmp(&(b.0, &b.1.member)));
        if !members.iter().any(|(_, m)| m.pending) {
            continue;
        }
        let mut seen: BTreeMap<&[u8], usize> = BTreeMap::new();
        let mut several = None;
        for (n, mm) in &members {
            if let Some(other) = seen.insert(&mm.member, *n) {
                several = Some(format!(
                    "member {} is written from nodes {other} and {n}: the server job aggregates members each written from one node (file per process)",
                    String::from_utf8_lossy(&mm.member)
                ));
            }
        }
        let unfinished: Vec<String> = members
            .iter()
            .filter(|(_, m)| !m.finished)
            .map(|(_, m)| String::from_utf8_lossy(&m.member).into_owned())
            .collect();
        let complete = unfinished.is_empty();
        let moved_on = held.iter().all(|(_, s)| s.moved_on);
        // Only deletions pending (`rm -r` of a set, on a restart): nothing
        // more can come to those members, and the program deleting them
        // waits for the drain (its `rmdir`), not for a newer set.
        let deletions = members.iter().all(|(_, m)| !m.pending || m.deleted);
        let verdict = if let Some(why) = several {
            Verdict::Refuse(why)
        } else if !(complete || finishing && incomplete) {
            Verdict::Wait(format!(
                "members still being written: {}",
                unfinished.join(", ")
            ))
        } else if !(finishing || moved_on || deletions) {
            Verdict::Wait("waiting for a newer set on every node or the end of the job".into())
        } else {
            Verdict::Publish
        };
        // Bytes per node, and the groups that hold members.
        let mut bytes = vec![0u64; m];
        let mut holds = BTreeSet::new();
        for (n, mm) in &members {
            bytes[*n] += mm.bytes;
            holds.insert(*n);
        }
        let mut groups = Vec::new();
        for g in 0..k {
            let first = (0..m).find(|&n| group_index(n, k, m) == g).unwrap_or(m);
            let end = (first..m).find(|&n| group_index(n, k, m) != g).unwrap_or(m);
            // The first group also copies the previous version's members
            // no new epoch touched, so it always writes a container.
            if g > 0 && !(first..end).any(|n| holds.contains(&n)) {
                continue;
            }
            // Most bytes; ties: the lowest index.
            let leader = (first..end)
                .max_by(|&a, &b| bytes[a].cmp(&bytes[b]).then(b.cmp(&a)))
                .unwrap_or(first);
            groups.push(Group {
                first,
                end,
                leader,
                container: groups.len() as u32,
            });
        }
        out.push(SetPlan {
            key: key.clone(),
            members,
            verdict,
            groups,
            complete,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(name: &str, moved_on: bool, members: &[(&str, u64)]) -> NodeSet {
        NodeSet {
            key: ("t".into(), 0, name.as_bytes().to_vec()),
            moved_on,
            members: members
                .iter()
                .map(|(m, b)| NodeMember {
                    member: m.as_bytes().to_vec(),
                    finished: true,
                    pending: true,
                    bytes: *b,
                    deleted: false,
                })
                .collect(),
        }
    }

    /// The verdict on the one set of `nodes`.
    fn verdict(nodes: &[Vec<NodeSet>], k: usize, finishing: bool) -> Verdict {
        plan(nodes, k, finishing, false).remove(0).verdict
    }

    #[test]
    fn k_groups_always() {
        // The seed's grouping makes 5 groups of 10 nodes for K = 6.
        let groups: BTreeSet<usize> = (0..10).map(|n| group_index(n, 6, 10)).collect();
        assert_eq!(groups.len(), 6);
    }

    #[test]
    fn leader_has_most_bytes_ties_lowest() {
        let nodes = vec![
            vec![set("s", true, &[("a", 10)])],
            vec![set("s", true, &[("b", 30)])],
            vec![set("s", true, &[("c", 20)])],
            vec![set("s", true, &[("d", 20)])],
        ];
        let p = plan(&nodes, 2, false, false);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].verdict, Verdict::Publish);
        let leaders: Vec<usize> = p[0].groups.iter().map(|g| g.leader).collect();
        assert_eq!(leaders, vec![1, 2]);
        let p = plan(&nodes, 1, false, false);
        assert_eq!(p[0].groups[0].leader, 1);
        assert_eq!((p[0].groups[0].first, p[0].groups[0].end), (0, 4));
    }

    #[test]
    fn deletions_alone_do_not_wait_for_a_newer_set() {
        // `rm -r` of a set on a restart: no newer set will come.
        let mut deleting = set("s", false, &[("a", 0), ("b", 0)]);
        deleting.members.iter_mut().for_each(|m| m.deleted = true);
        assert_eq!(
            verdict(&[vec![deleting.clone()], vec![]], 2, false),
            Verdict::Publish
        );
        // A member still being written beside them: the set waits.
        deleting.members[1].deleted = false;
        let waits = verdict(&[vec![deleting]], 1, false);
        assert!(matches!(waits, Verdict::Wait(_)), "{waits:?}");
    }

    #[test]
    fn waits_until_every_node_moved_on_and_refuses_shared_members() {
        let nodes = vec![
            vec![set("s", true, &[("a", 10)])],
            vec![set("s", false, &[("b", 30)])],
        ];
        assert!(matches!(verdict(&nodes, 2, false), Verdict::Wait(_)));
        assert_eq!(verdict(&nodes, 2, true), Verdict::Publish);
        let shared = [
            vec![set("s", true, &[("a", 10)])],
            vec![set("s", true, &[("a", 30)])],
        ];
        assert!(matches!(verdict(&shared, 2, true), Verdict::Refuse(_)));
    }

    #[test]
    fn summaries_round_trip() {
        let s = vec![set("ckpt/s1", true, &[("a", 10), ("b/c", 7)])];
        assert_eq!(decode(&encode(&s), 0).unwrap(), s);
        assert!(decode(&encode(&s)[..10], 3).is_err());
    }
}
