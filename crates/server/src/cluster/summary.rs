//! What one node tells the others at each round: the files it holds, their
//! drain progress, and the manifests and commit marks of every epoch past
//! that progress. Manifests travel as their on-disk bytes with where they
//! are (a format-1 manifest file, or a format-2 data log's commit record),
//! so every server checks them itself and merges exactly what the owner
//! has.
//!
//! The servers send each other only what changed since the last round
//! (delta.rs, encoded by wire.rs).

use std::path::Path;

use paralog_log::format::Manifest;
use paralog_log::layout;
use paralog_log::reader::{read_rank_manifest_cached, ManifestLoc, RankRecord, ScanCache};
use paralog_log::{EpochId, FileInventory, Inventory};

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeSummary {
    pub node: String,
    /// Someone on this node asked for everything to be drained and the
    /// servers to stop (`paralog wait`, or recover).
    pub finishing: bool,
    /// This node could not scan its root this round: its files are not in
    /// the summary, so nobody may conclude anything from their absence.
    pub scan_failed: bool,
    pub files: Vec<FileSummary>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FileSummary {
    pub job: String,
    /// This node's file directory (its own paths only mean something here).
    pub dir: String,
    pub path: Vec<u8>,
    pub rel: Vec<u8>,
    pub progress: Option<EpochId>,
    /// Why this node cannot take part in draining the file (an unreadable
    /// path or progress record).
    pub damaged: Option<String>,
    pub gens: Vec<GenSummary>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GenSummary {
    pub gen: u64,
    /// A rank's close marker is here.
    pub closed: bool,
    /// Ranks of this open whose logs are on this node.
    pub ranks: Vec<u32>,
    pub epochs: Vec<EpochSummary>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EpochSummary {
    pub epoch: u64,
    pub marked: bool,
    pub manifests: Vec<ShippedManifest>,
}

/// One rank's manifest as its node holds it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShippedManifest {
    pub rank: u32,
    /// The file it is in, on its node (the manifest file or the data log).
    pub path: String,
    /// Its offset in that file, and its format.
    pub offset: u64,
    pub version: u16,
    /// Its bytes as on disk.
    pub bytes: Vec<u8>,
}

#[cfg(test)]
impl EpochSummary {
    /// A test's epoch `e` with one manifest per rank of `ranks`: (path,
    /// offset, format version, bytes) of rank `r` from `manifest`.
    pub(crate) fn of_ranks(
        e: u64,
        marked: bool,
        ranks: &[u32],
        manifest: impl Fn(u32) -> (String, u64, u16, Vec<u8>),
    ) -> EpochSummary {
        let manifests = ranks
            .iter()
            .map(|&rank| {
                let (path, offset, version, bytes) = manifest(rank);
                ShippedManifest {
                    rank,
                    path,
                    offset,
                    version,
                    bytes,
                }
            })
            .collect();
        EpochSummary {
            epoch: e,
            marked,
            manifests,
        }
    }
}

impl ShippedManifest {
    pub fn loc(&self) -> ManifestLoc {
        ManifestLoc {
            path: self.path.clone().into(),
            offset: self.offset,
            version: self.version,
        }
    }
}

/// What this node holds under `root` (one job, or all). `cache` keeps
/// what this scan read for the next one: only what is new or changed since
/// the last round is read (a `stat` of everything else).
pub fn collect(
    root: &Path,
    job: Option<&str>,
    node: &str,
    finishing: bool,
    cache: &mut ScanCache,
) -> Result<NodeSummary, paralog_log::LogError> {
    cache.begin();
    let inv = Inventory::scan_cached(root, cache)?;
    let mut files = Vec::new();
    for j in inv
        .jobs
        .iter()
        .filter(|j| job.is_none_or(|name| name == j.name))
    {
        for f in &j.files {
            if let Some(s) = file_summary(&j.name, f, cache) {
                files.push(s);
            }
        }
    }
    cache.sweep();
    // In one order, whatever the directory listing's: the rounds' deltas
    // (delta.rs) are computed file by file in this order.
    files.sort_by(|a, b| key_of(a).cmp(&key_of(b)));
    Ok(NodeSummary {
        node: node.to_owned(),
        finishing,
        scan_failed: false,
        files,
    })
}

/// A file of one node's summary: its job and its directory there.
pub fn key_of(f: &FileSummary) -> (&str, &str) {
    (&f.job, &f.dir)
}

fn file_summary(job: &str, f: &FileInventory, cache: &mut ScanCache) -> Option<FileSummary> {
    let any_manifest = f.gens.values().any(|g| {
        g.ranks
            .values()
            .any(|r| r.epochs.values().any(|e| e.manifest.is_some()))
    });
    let mut s = FileSummary {
        job: job.to_owned(),
        dir: f.dir.display().to_string(),
        progress: f.progress.map(|p| p.id()),
        ..FileSummary::default()
    };
    match &f.record {
        Some(r) => {
            s.path = r.path.clone();
            s.rel = r.rel.clone();
        }
        // Being created: the path record comes before any epoch.
        None if !any_manifest => return None,
        None => {
            s.damaged = Some(format!(
                "{}: no readable path record: {}",
                f.dir.join(layout::PATH_FILE).display(),
                f.path_error.as_deref().unwrap_or("missing")
            ));
            return Some(s);
        }
    }
    if let Some(e) = &f.progress_error {
        s.damaged = Some(format!(
            "{}: {e}",
            f.dir.join(layout::PROGRESS_FILE).display()
        ));
        return Some(s);
    }
    for (&gen, g) in &f.gens {
        let mut gs = GenSummary {
            gen,
            closed: g.ranks.values().any(|r| r.closed),
            ranks: g.ranks.keys().copied().collect(),
            epochs: Vec::new(),
        };
        let epochs: std::collections::BTreeSet<u64> = g
            .ranks
            .values()
            .flat_map(|r| r.epochs.keys().copied())
            .filter(|&e| Some(EpochId::new(gen, e)) > s.progress)
            .collect();
        for epoch in epochs {
            let mut es = EpochSummary {
                epoch,
                ..EpochSummary::default()
            };
            for (&rank, r) in &g.ranks {
                let Some(files) = r.epochs.get(&epoch) else {
                    continue;
                };
                es.marked |= files.mark;
                // Looked up by name even when the listing missed it: see
                // FileInventory::manifests.
                match read_rank_manifest_cached(&r.dir, epoch, cache) {
                    Ok(RankRecord::Found { bytes, loc }) => es.manifests.push(ShippedManifest {
                        rank,
                        path: loc.path.display().to_string(),
                        offset: loc.offset,
                        version: loc.version,
                        bytes,
                    }),
                    Ok(RankRecord::Missing) => {}
                    // A commit that did not finish, unless this node holds
                    // proof the epoch was committed: then damage.
                    Ok(RankRecord::Torn(e)) => {
                        if f.commit_evidence(EpochId::new(gen, epoch)) {
                            s.damaged = Some(e.to_string());
                            return Some(s);
                        }
                    }
                    Err(e) => {
                        s.damaged = Some(e.to_string());
                        return Some(s);
                    }
                }
            }
            gs.epochs.push(es);
        }
        s.gens.push(gs);
    }
    Some(s)
}

/// Decode a manifest received from another node, checking its checksum and
/// that it is the one its place says.
pub fn decode_manifest(
    shipped: &ShippedManifest,
    id: EpochId,
) -> Result<Manifest, paralog_log::LogError> {
    let loc = shipped.loc();
    let m = loc.decode(&shipped.bytes)?;
    m.check_place(id, shipped.rank, &loc.path)?;
    Ok(m)
}
