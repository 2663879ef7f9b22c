//! What a round of the publisher of logged puts left unpublished, and why
//! (docs/objects.md "Waiting for logged puts"). The node server's status
//! and `paralog wait` report it; `paralog obj publish`, `paralog recover`
//! and the server's log print it. Each line names the array and the put,
//! and a put waiting for other nodes' shares names those nodes (from its
//! commit record, version 4), so that a user whose other node's server
//! never ran sees why the version is absent, and where to start it.

use crate::error::Error;
use crate::publish::Published;
use crate::{id_hex, VersionId};

/// One round of the publisher: what it published, and what it left.
#[derive(Debug, Default)]
pub struct Round {
    pub published: Vec<Published>,
    pub pending: Vec<Pending>,
}

/// A logged put committed on this node and not published, or this node's
/// share of a put committed elsewhere that could not be copied.
#[derive(Debug)]
pub struct Pending {
    /// The array's name (empty when no record of the put names it).
    pub name: String,
    pub id: VersionId,
    /// This node's share of a put committed on another node.
    pub share: bool,
    pub why: Why,
}

#[derive(Debug)]
pub enum Why {
    /// Chunks written on other nodes are not in the remote put yet: those
    /// nodes' servers have not copied their shares.
    Shares { missing: String, nodes: Vec<Node> },
    /// An earlier put of the same name waits (versions are numbered in
    /// the order of the commits): this one follows it.
    Behind(VersionId),
    /// The publish (or the share's copy) failed; tried again next round.
    Failed(Error),
}

/// A node whose share a put waits for, as its writers' share records
/// named it (empty name and directory: a record of an older version).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    pub local: String,
    pub writers: Vec<[u8; 16]>,
}

impl Pending {
    /// Whether it can never be published as it is (a damaged record or
    /// chunk, a put the remote refuses): waiting longer does not help. A
    /// failure to reach the remote (I/O, S3) is not lasting.
    pub fn lasting(&self) -> bool {
        match &self.why {
            Why::Failed(e) => !matches!(
                e,
                Error::Io { .. } | Error::Store(_) | Error::Url { .. } | Error::NotFound { .. }
            ),
            _ => false,
        }
    }

    /// The nodes it waits for, by name (a writer's id where no record
    /// names its node).
    pub fn waits_for(&self) -> Vec<String> {
        match &self.why {
            Why::Shares { nodes, .. } => nodes.iter().map(Node::label).collect(),
            _ => Vec::new(),
        }
    }

    /// `array NAME put ID` (or `share of …`).
    pub fn what(&self) -> String {
        let name = if self.name.is_empty() {
            "?"
        } else {
            &self.name
        };
        let kind = if self.share {
            "this node's share of put"
        } else {
            "put"
        };
        format!("array {name} {kind} {}", id_hex(&self.id))
    }

    /// Why it is not published, in one line a user can act on.
    pub fn message(&self) -> String {
        match &self.why {
            Why::Shares { missing, nodes } if nodes.is_empty() => {
                format!("waits for other nodes' shares: {missing}")
            }
            Why::Shares { missing, nodes } => {
                let each: Vec<String> = nodes.iter().map(Node::waiting_for).collect();
                format!("waits for {}: {missing}", each.join("; and "))
            }
            Why::Behind(first) => format!(
                "waits for the earlier put {} of the same name (versions are numbered in commit order)",
                id_hex(first)
            ),
            Why::Failed(e) if self.share => format!("not copied to the remote: {e}"),
            Why::Failed(e) => format!("not published: {e}"),
        }
    }
}

impl Node {
    fn label(&self) -> String {
        if self.name.is_empty() {
            self.writers
                .iter()
                .map(|w| format!("writer {}", id_hex(w)))
                .collect::<Vec<_>>()
                .join(", ")
        } else {
            self.name.clone()
        }
    }

    fn waiting_for(&self) -> String {
        let writers = self.writers.len();
        if self.name.is_empty() {
            return format!(
                "the share of {} on another node (a record of an older version does not name the node)",
                self.label()
            );
        }
        format!(
            "the share of node {} ({writers} writer(s), node-local directory {}), not copied yet: its server (`paralog server --local {}`, or `paralog recover --local {}` there) copies it",
            self.name, self.local, self.local, self.local
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_put_names_the_nodes_and_what_to_run() {
        let p = Pending {
            name: "run/t".into(),
            id: [1; 16],
            share: false,
            why: Why::Shares {
                missing: "2 of 4 chunks not yet copied by their nodes (first: [2, 0])".into(),
                nodes: vec![
                    Node {
                        name: "n1".into(),
                        local: "/l/n1".into(),
                        writers: vec![[2; 16], [3; 16]],
                    },
                    Node {
                        name: String::new(),
                        local: String::new(),
                        writers: vec![[4; 16]],
                    },
                ],
            },
        };
        assert_eq!(
            p.waits_for(),
            ["n1".to_owned(), format!("writer {}", id_hex(&[4; 16]))]
        );
        let m = p.message();
        assert!(
            m.contains("node n1 (2 writer(s), node-local directory /l/n1)"),
            "{m}"
        );
        assert!(m.contains("paralog server --local /l/n1"), "{m}");
        assert!(
            m.contains("does not name the node") && m.contains("first: [2, 0]"),
            "{m}"
        );
        assert_eq!(p.what(), format!("array run/t put {}", id_hex(&[1; 16])));
        assert!(!p.lasting());
    }

    #[test]
    fn damage_is_lasting_a_remote_out_of_reach_is_not() {
        let failed = |e| Pending {
            name: "t".into(),
            id: [0; 16],
            share: true,
            why: Why::Failed(e),
        };
        let damaged = failed(Error::Damaged {
            path: "x".into(),
            offset: 3,
            what: "bad".into(),
        });
        assert!(damaged.lasting());
        assert!(damaged
            .message()
            .starts_with("not copied to the remote: x: damaged at byte 3"));
        let away = failed(Error::Url {
            url: "s3://b/s".into(),
            why: "connection refused".into(),
        });
        assert!(!away.lasting());
    }
}
