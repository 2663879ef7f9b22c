//! What each server tells the others of its node's streams every round
//! (docs/streams.md "Many nodes"), and what all of them decide from it
//! alike: per stream, this node's cut log (rounds, last record) and its
//! new committed batches (producer, range, per-partition events and
//! bytes). Encoded with the rounds' private wire (wire.rs).

use std::collections::BTreeMap;

use paralog_stream::nodes::{self, NewRange, NodeRelease};

use super::wire::{DecodeError, In, Out};

/// One node's view of one stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct View {
    /// This node could not read its share of the stream this round.
    pub failed: bool,
    /// The partition count its segments or cut log fix (0: none yet).
    pub partitions: u32,
    pub rounds: u64,
    /// Its cut log's last record's CRC-32C (its last 4 bytes; 0: none):
    /// what the servers compare every round.
    pub last_crc: u32,
    /// The record itself, only when this node's log changed since it last
    /// sent it (or its share was opened again): what a node a round
    /// behind copies. An idle stream's view stays a few tens of bytes.
    pub last: Vec<u8>,
    /// Its last record is a base (the log was rebased at its last round).
    pub based: bool,
    /// Bytes of its segments a release would delete now, and its cut
    /// log's length: what decides that the job releases (streams_release.rs).
    pub releasable: u64,
    pub log_len: u64,
    pub ranges: Vec<NewRange>,
}

/// Every stream a node told of, by name.
pub(super) type NodeViews = BTreeMap<String, View>;

pub(super) fn encode(views: &NodeViews) -> Vec<u8> {
    let mut o = Out::default();
    o.u64(views.len() as u64);
    for (name, v) in views {
        o.bytes(name.as_bytes());
        o.bool(v.failed);
        o.u64(v.partitions as u64);
        o.u64(v.rounds);
        o.u64(v.last_crc as u64);
        o.bytes(&v.last);
        o.bool(v.based);
        o.u64(v.releasable);
        o.u64(v.log_len);
        o.u64(v.ranges.len() as u64);
        for r in &v.ranges {
            o.u64(r.producer);
            o.u64(r.from);
            o.u64(r.to);
            o.u64(r.parts.len() as u64);
            for &(count, bytes) in &r.parts {
                o.u64(count);
                o.u64(bytes);
            }
        }
    }
    o.0
}

pub(super) fn decode(b: &[u8], from: usize) -> Result<NodeViews, DecodeError> {
    let mut i = In::new(b, from);
    let mut out = NodeViews::new();
    let n = i.len()?;
    for _ in 0..n {
        let name = i.string()?;
        let failed = i.bool()?;
        let partitions = i.u64()? as u32;
        let rounds = i.u64()?;
        let last_crc = i.u64()? as u32;
        let last = i.bytes()?;
        let (based, releasable, log_len) = (i.bool()?, i.u64()?, i.u64()?);
        let ranges = i.list(|i| {
            let (producer, from, to) = (i.u64()?, i.u64()?, i.u64()?);
            let parts = i.list(|i| Ok((i.u64()?, i.u64()?)))?;
            Ok(NewRange {
                producer,
                from,
                to,
                parts,
            })
        })?;
        out.insert(
            name,
            View {
                failed,
                partitions,
                rounds,
                last_crc,
                last,
                based,
                releasable,
                log_len,
                ranges,
            },
        );
    }
    i.done()?;
    Ok(out)
}

/// What every server decides for one stream from all nodes' views (a
/// function of the gathered bytes alone: the same on every server).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Decision {
    /// Nothing to do (no node has a cut or a batch of it).
    Idle,
    /// Some node could not read its share: nothing this round.
    Skip,
    /// The nodes' logs cannot belong to one job's drain: why.
    Refuse(String),
    Go {
        partitions: u32,
        /// The rounds the longest cut logs hold.
        rounds: u64,
        /// Nodes whose log lacks that last round, and the node whose
        /// record they copy.
        behind: Vec<usize>,
        source: usize,
        /// Some node has new batches.
        new: bool,
    },
}

/// The decision for `stream` given each node's view (`None`: the node
/// has no directory of it, the same as no cut and no batch).
pub(super) fn decide(stream: &str, views: &[Option<&View>]) -> Decision {
    let empty = View::default();
    let v: Vec<&View> = views.iter().map(|x| x.unwrap_or(&empty)).collect();
    if v.iter().any(|x| x.failed) {
        return Decision::Skip;
    }
    let mut counts: Vec<u32> = v.iter().map(|x| x.partitions).filter(|&p| p > 0).collect();
    counts.sort_unstable();
    counts.dedup();
    let partitions = match counts[..] {
        [] => return Decision::Idle,
        [p] => p,
        _ => {
            return Decision::Refuse(format!(
                "stream {stream}: the nodes' segments or cut logs have different partition counts ({counts:?})"
            ))
        }
    };
    let rounds = v.iter().map(|x| x.rounds).max().unwrap_or(0);
    let lowest = v.iter().map(|x| x.rounds).min().unwrap_or(0);
    let new = v.iter().any(|x| !x.ranges.is_empty());
    if rounds == 0 && !new {
        return Decision::Idle;
    }
    let per_node = || {
        v.iter()
            .enumerate()
            .map(|(i, x)| {
                format!(
                    "node {i}: {}{}",
                    x.rounds,
                    if x.based { " (base)" } else { "" }
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    // Every node records a round before any applies it, and records the
    // next only after all applied it: the logs differ by one round at most.
    if rounds > lowest + 1 {
        return Decision::Refuse(format!(
            "stream {stream}: the nodes' cut logs end at different rounds ({}): they were not drained together by one server job (a one-node drain of some node, or a lost node-local root); drain each node's streams the way they were drained before",
            per_node()
        ));
    }
    // A log rebased at its last round is ahead of one that is not (the
    // job's release stopped between two nodes' rebases): the others copy
    // the base. A base is written only after every node recorded and
    // published its round, so no node is then a round behind.
    let key = |x: &View| (x.rounds, x.based);
    let top = v.iter().map(|x| key(x)).max().unwrap_or_default();
    if top.1 && lowest < rounds {
        return Decision::Refuse(format!(
            "stream {stream}: a node's cut log starts at a base of round {rounds} and another's ends before it ({}): they were not drained together by one server job",
            per_node()
        ));
    }
    let mut crcs = v.iter().filter(|x| key(x) == top).map(|x| x.last_crc);
    let first = crcs.next();
    if crcs.any(|c| Some(c) != first) {
        return Decision::Refuse(format!(
            "stream {stream}: the nodes' cut logs hold different records of round {rounds}"
        ));
    }
    // A node behind copies the record from a node that sent it whole (one
    // whose log changed since it last sent it: the node ahead recorded
    // it, or every share was opened again after a failure or a restart).
    let source = v
        .iter()
        .position(|x| key(x) == top && !x.last.is_empty())
        .unwrap_or(0);
    let behind: Vec<usize> = (0..v.len()).filter(|&i| key(v[i]) < top).collect();
    if !behind.is_empty() && v[source].last.is_empty() {
        // Every server drops its share, so all send their records next round.
        return Decision::Skip;
    }
    Decision::Go {
        partitions,
        rounds,
        behind,
        source,
        new,
    }
}

/// Whether the job releases the stream's drained segments after this
/// round (streams_release.rs): the rule is the stream crate's
/// (`paralog_stream::nodes::release_due`: some node's segments that may
/// go and its log reach `threshold`), from every node's view; not while a
/// node could not read its share.
pub(super) fn release_due(views: &[Option<&View>], threshold: u64) -> bool {
    let empty = View::default();
    let v: Vec<&View> = views.iter().map(|x| x.unwrap_or(&empty)).collect();
    if v.iter().any(|x| x.failed) {
        return false;
    }
    let each: Vec<NodeRelease> = v
        .iter()
        .map(|x| NodeRelease {
            rounds: x.rounds,
            based: x.based,
            releasable: x.releasable,
            log_len: x.log_len,
        })
        .collect();
    nodes::release_due(&each, threshold)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(partitions: u32, rounds: u64, last: &[u8], ranges: usize) -> View {
        View {
            failed: false,
            partitions,
            rounds,
            last_crc: crc(last),
            last: last.to_vec(),
            based: false,
            releasable: 0,
            log_len: 100,
            ranges: (0..ranges as u64)
                .map(|i| NewRange {
                    producer: i,
                    from: 60,
                    to: 100 + i,
                    parts: vec![(1, 50); partitions as usize],
                })
                .collect(),
        }
    }

    fn crc(b: &[u8]) -> u32 {
        b.iter()
            .fold(7, |a, &x| a.wrapping_mul(31).wrapping_add(x as u32))
    }

    #[test]
    fn views_cross_the_wire_unchanged() {
        let mut m = NodeViews::new();
        m.insert("a".into(), view(3, 7, b"record", 2));
        m.insert(
            "b".into(),
            View {
                failed: true,
                ..View::default()
            },
        );
        let b = encode(&m);
        assert_eq!(decode(&b, 1).unwrap(), m);
        assert!(decode(&b[..b.len() - 1], 1).is_err());
    }

    #[test]
    fn the_decision_follows_the_logs() {
        let a = view(3, 4, b"r4", 1);
        let b = view(3, 3, b"r3", 0);
        let c = view(0, 0, b"", 0);
        assert_eq!(
            decide("s", &[Some(&b), Some(&a)]),
            Decision::Go {
                partitions: 3,
                rounds: 4,
                behind: vec![0],
                source: 1,
                new: true
            }
        );
        // A node with no directory of the stream yet is at round 0.
        let first = view(3, 1, b"r1", 0);
        assert_eq!(
            decide("s", &[None, Some(&first)]),
            Decision::Go {
                partitions: 3,
                rounds: 1,
                behind: vec![0],
                source: 1,
                new: false
            }
        );
        // A node with no log at all and others far ahead: refused.
        let far = view(3, 9, b"r9", 0);
        assert!(matches!(
            decide("s", &[Some(&far), Some(&c)]),
            Decision::Refuse(_)
        ));
        // Two records of one round: refused.
        let other = view(3, 4, b"R4", 0);
        assert!(matches!(
            decide("s", &[Some(&a), Some(&other)]),
            Decision::Refuse(_)
        ));
        assert!(matches!(
            decide("s", &[Some(&a), Some(&view(2, 4, b"r4", 0))]),
            Decision::Refuse(_)
        ));
        assert_eq!(decide("s", &[Some(&c), None]), Decision::Idle);
        // The node ahead did not send its record whole: nothing this round.
        let unsent = View {
            last: Vec::new(),
            ..a.clone()
        };
        assert_eq!(decide("s", &[Some(&unsent), Some(&b)]), Decision::Skip);
        let failed = View {
            failed: true,
            ..View::default()
        };
        assert_eq!(decide("s", &[Some(&a), Some(&failed)]), Decision::Skip);
    }

    /// A log rebased at its last round is ahead of one that is not: the
    /// others copy its base; a base ahead of a log a round behind cannot
    /// come from one job.
    #[test]
    fn a_base_is_copied_to_the_nodes_not_rebased() {
        let base = View {
            based: true,
            ..view(3, 4, b"b4", 0)
        };
        let cuts = view(3, 4, b"r4", 0);
        assert_eq!(
            decide("s", &[Some(&cuts), Some(&base), Some(&cuts)]),
            Decision::Go {
                partitions: 3,
                rounds: 4,
                behind: vec![0, 2],
                source: 1,
                new: false
            }
        );
        // Rebased everywhere, then a new cut on one node only: copied.
        let next = view(3, 5, b"r5", 0);
        assert!(matches!(
            decide("s", &[Some(&base), Some(&next)]),
            Decision::Go { behind, .. } if behind == vec![0]
        ));
        assert!(matches!(
            decide("s", &[Some(&base), Some(&view(3, 3, b"r3", 0))]),
            Decision::Refuse(_)
        ));
        let other = View {
            based: true,
            ..view(3, 4, b"B4", 0)
        };
        assert!(matches!(
            decide("s", &[Some(&base), Some(&other)]),
            Decision::Refuse(_)
        ));
    }

    #[test]
    fn a_release_is_due_when_every_log_agrees_and_enough_can_go() {
        let a = View {
            releasable: 600,
            ..view(3, 4, b"r4", 0)
        };
        let b = view(3, 4, b"r4", 0);
        assert!(release_due(&[Some(&a), Some(&b)], 700));
        assert!(!release_due(&[Some(&a), Some(&b)], 701));
        // Each node by itself: 400 + 400 on two nodes is not 700.
        let c = View {
            releasable: 300,
            ..a.clone()
        };
        assert!(!release_due(&[Some(&c), Some(&c)], 401));
        assert!(release_due(&[Some(&c), Some(&c)], 400));
        assert!(!release_due(&[Some(&a), Some(&b)], u64::MAX));
        // A node behind, or not rebased alike: not this round.
        assert!(!release_due(&[Some(&a), Some(&view(3, 3, b"r3", 0))], 1));
        let based = View {
            based: true,
            ..b.clone()
        };
        assert!(!release_due(&[Some(&a), Some(&based)], 1));
        // A base with nothing to delete stays; with something, it goes.
        assert!(!release_due(&[Some(&based), Some(&based)], 1));
        let some = View {
            releasable: 1,
            ..based.clone()
        };
        assert!(release_due(&[Some(&based), Some(&some)], 1));
        assert!(!release_due(&[Some(&view(0, 0, b"", 0)), None], 1));
    }
}
