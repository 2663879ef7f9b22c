//! The plan made incrementally: each round re-plans only the files whose
//! summary changed on some server since the last plan (the copies say
//! which: delta.rs, [`Dirty`]) and keeps the rest of the last plan; a
//! re-planned file decodes only the manifests it did not hold decoded
//! already (same node, epoch, rank and shipped bytes). The result is the
//! plan a full [`plan::plan`] makes from the same copies, which is what
//! keeps every server's plan the same (planner_tests.rs checks it over
//! random sequences of rounds). A round with nothing changed costs no
//! decoding and no merging: what is pending costs nothing again.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use paralog_log::format::Manifest;
use paralog_log::EpochId;

use super::plan::{self, FileKey, GlobalFile};
use super::summary::{NodeSummary, ShippedManifest};

/// The files whose summary changed since the last plan, on any server.
#[derive(Debug, Default)]
pub struct Dirty {
    /// Every file (a whole summary arrived, a copy was dropped, a node's
    /// name changed).
    pub all: bool,
    pub files: BTreeSet<FileKey>,
}

impl Dirty {
    pub fn file(&mut self, job: &str, rel: &[u8]) {
        if !self.all {
            self.files.insert(FileKey {
                job: job.to_owned(),
                rel: rel.to_vec(),
            });
        }
    }

    pub fn everything(&mut self) {
        self.all = true;
        self.files.clear();
    }
}

/// A manifest as one node shipped it: node, epoch, rank.
type ManifestKey = (usize, EpochId, u32);

/// One file's plan and the manifests decoded for it.
struct Kept {
    plan: Arc<GlobalFile>,
    decoded: HashMap<ManifestKey, (ShippedManifest, Manifest)>,
}

/// What the last plan made, per file, and what it was made with.
#[derive(Default)]
pub struct Planner {
    files: BTreeMap<FileKey, Kept>,
    /// The nodes' names, `whole_opens` and `flush` of the last plan: a
    /// change re-plans everything (names appear in the plan's reasons).
    context: Option<(Vec<String>, bool, bool)>,
    /// Manifests decoded, and reused, since the planner was made (tests).
    pub decoded: u64,
    pub reused: u64,
}

impl Planner {
    /// The plan of `nodes` (every server's copy), given what changed since
    /// the last call.
    pub fn plan(
        &mut self,
        nodes: &[NodeSummary],
        mut dirty: Dirty,
        whole_opens: bool,
        flush: bool,
    ) -> Vec<Arc<GlobalFile>> {
        let context = Some((
            nodes.iter().map(|n| n.node.clone()).collect::<Vec<_>>(),
            whole_opens,
            flush,
        ));
        if context != self.context {
            dirty.everything();
            self.context = context;
        }
        if dirty.all || !dirty.files.is_empty() {
            self.replan(nodes, &dirty, whole_opens, flush);
        }
        self.files.values().map(|k| k.plan.clone()).collect()
    }

    fn replan(&mut self, nodes: &[NodeSummary], dirty: &Dirty, whole_opens: bool, flush: bool) {
        let mut parts = plan::by_file(nodes);
        if dirty.all {
            self.files.retain(|k, _| parts.contains_key(k));
        } else {
            parts.retain(|k, _| dirty.files.contains(k));
            for k in &dirty.files {
                if !parts.contains_key(k) {
                    // No server holds it any more.
                    self.files.remove(k);
                }
            }
        }
        for (key, parts) in parts {
            let old = self
                .files
                .remove(&key)
                .map(|k| k.decoded)
                .unwrap_or_default();
            let mut decoded = HashMap::new();
            let (mut fresh, mut reused) = (0, 0);
            let mut decode = |n: usize, id: EpochId, shipped: &ShippedManifest| {
                let at = (n, id, shipped.rank);
                if let Some((s, m)) = old.get(&at) {
                    if s == shipped {
                        reused += 1;
                        decoded.insert(at, (s.clone(), m.clone()));
                        return Ok(m.clone());
                    }
                }
                fresh += 1;
                let m = plan::decode_shipped(n, id, shipped)?;
                decoded.insert(at, (shipped.clone(), m.clone()));
                Ok(m)
            };
            let g = plan::plan_file(key.clone(), &parts, nodes, whole_opens, flush, &mut decode);
            self.decoded += fresh;
            self.reused += reused;
            self.files.insert(
                key,
                Kept {
                    plan: Arc::new(g),
                    decoded,
                },
            );
        }
    }
}

#[cfg(test)]
#[path = "planner_tests.rs"]
mod tests;
