//! What each server tells the others of its node's streams every round
//! (docs/streams.md "Many nodes"), and what all of them decide from it
//! alike: per stream, this node's cut log (rounds, last record) and its
//! new committed batches (producer, range, per-partition events and
//! bytes). Encoded with the rounds' private wire (wire.rs).

use std::collections::BTreeMap;

use paralog_stream::nodes::NewRange;

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
            .map(|(i, x)| format!("node {i}: {}", x.rounds))
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
    let mut crcs = v.iter().filter(|x| x.rounds == rounds).map(|x| x.last_crc);
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
        .position(|x| x.rounds == rounds && !x.last.is_empty())
        .unwrap_or(0);
    if rounds > lowest && v[source].last.is_empty() {
        // Every server drops its share, so all send their records next round.
        return Decision::Skip;
    }
    let behind = (0..v.len()).filter(|&i| v[i].rounds < rounds).collect();
    Decision::Go {
        partitions,
        rounds,
        behind,
        source,
        new,
    }
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
}
