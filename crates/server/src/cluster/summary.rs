//! What one node tells the others at each round: the files it holds, their
//! drain progress, and the manifests and commit marks of every epoch past
//! that progress. Manifests travel as their on-disk bytes with where they
//! are (a format-1 manifest file, or a format-2 data log's commit record),
//! so every server checks them itself and merges exactly what the owner
//! has.
//!
//! The encoding is private to one server job (all servers run the same
//! binary), so it has no version: length-prefixed fields, little-endian.

use std::path::Path;

use paralog_log::format::Manifest;
use paralog_log::layout;
use paralog_log::reader::{read_rank_manifest, ManifestLoc, RankRecord};
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

impl ShippedManifest {
    pub fn loc(&self) -> ManifestLoc {
        ManifestLoc {
            path: self.path.clone().into(),
            offset: self.offset,
            version: self.version,
        }
    }
}

/// What this node holds under `root` (one job, or all).
pub fn collect(
    root: &Path,
    job: Option<&str>,
    node: &str,
    finishing: bool,
) -> Result<NodeSummary, paralog_log::LogError> {
    let inv = Inventory::scan(root)?;
    let mut files = Vec::new();
    for j in inv
        .jobs
        .iter()
        .filter(|j| job.is_none_or(|name| name == j.name))
    {
        for f in &j.files {
            if let Some(s) = file_summary(&j.name, f) {
                files.push(s);
            }
        }
    }
    Ok(NodeSummary {
        node: node.to_owned(),
        finishing,
        scan_failed: false,
        files,
    })
}

fn file_summary(job: &str, f: &FileInventory) -> Option<FileSummary> {
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
                match read_rank_manifest(&r.dir, epoch) {
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

// ---- encoding ----

#[derive(Default)]
struct Out(Vec<u8>);

impl Out {
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    fn bool(&mut self, b: bool) {
        self.0.push(b as u8);
    }
    fn opt_id(&mut self, p: Option<EpochId>) {
        self.bool(p.is_some());
        let id = p.unwrap_or_default();
        self.u64(id.gen);
        self.u64(id.epoch);
    }
}

/// A summary from another server could not be read (servers of different
/// builds in one job).
#[derive(Debug, thiserror::Error)]
#[error("summary from server {from}: {what} at byte {at}")]
pub struct DecodeError {
    pub from: usize,
    pub what: &'static str,
    pub at: usize,
}

struct In<'a> {
    b: &'a [u8],
    at: usize,
    from: usize,
}

impl In<'_> {
    fn err(&self, what: &'static str) -> DecodeError {
        DecodeError {
            from: self.from,
            what,
            at: self.at,
        }
    }
    fn take(&mut self, n: usize) -> Result<&[u8], DecodeError> {
        if self.b.len() - self.at < n {
            return Err(self.err("truncated"));
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        let s = self.take(8)?;
        Ok(u64::from_le_bytes(s.try_into().expect("8 bytes")))
    }
    fn len(&mut self) -> Result<usize, DecodeError> {
        let n = self.u64()?;
        if n > (self.b.len() - self.at) as u64 {
            return Err(self.err("length past the end"));
        }
        Ok(n as usize)
    }
    fn bytes(&mut self) -> Result<Vec<u8>, DecodeError> {
        let n = self.len()?;
        Ok(self.take(n)?.to_vec())
    }
    fn string(&mut self) -> Result<String, DecodeError> {
        String::from_utf8(self.bytes()?).map_err(|_| self.err("not UTF-8"))
    }
    fn bool(&mut self) -> Result<bool, DecodeError> {
        Ok(self.take(1)?[0] != 0)
    }
    fn opt_id(&mut self) -> Result<Option<EpochId>, DecodeError> {
        let some = self.bool()?;
        let id = EpochId::new(self.u64()?, self.u64()?);
        Ok(some.then_some(id))
    }
}

impl NodeSummary {
    pub fn encode(&self) -> Vec<u8> {
        let mut o = Out::default();
        o.bytes(self.node.as_bytes());
        o.bool(self.finishing);
        o.bool(self.scan_failed);
        o.u64(self.files.len() as u64);
        for f in &self.files {
            o.bytes(f.job.as_bytes());
            o.bytes(f.dir.as_bytes());
            o.bytes(&f.path);
            o.bytes(&f.rel);
            o.opt_id(f.progress);
            o.bool(f.damaged.is_some());
            o.bytes(f.damaged.as_deref().unwrap_or("").as_bytes());
            o.u64(f.gens.len() as u64);
            for g in &f.gens {
                o.u64(g.gen);
                o.bool(g.closed);
                o.u64(g.ranks.len() as u64);
                for &r in &g.ranks {
                    o.u64(r as u64);
                }
                o.u64(g.epochs.len() as u64);
                for e in &g.epochs {
                    o.u64(e.epoch);
                    o.bool(e.marked);
                    o.u64(e.manifests.len() as u64);
                    for m in &e.manifests {
                        o.u64(m.rank as u64);
                        o.bytes(m.path.as_bytes());
                        o.u64(m.offset);
                        o.u64(m.version as u64);
                        o.bytes(&m.bytes);
                    }
                }
            }
        }
        o.0
    }

    pub fn decode(b: &[u8], from: usize) -> Result<NodeSummary, DecodeError> {
        let mut i = In { b, at: 0, from };
        let node = i.string()?;
        let finishing = i.bool()?;
        let scan_failed = i.bool()?;
        let nfiles = i.len()?;
        let mut files = Vec::with_capacity(nfiles.min(1 << 16));
        for _ in 0..nfiles {
            let job = i.string()?;
            let dir = i.string()?;
            let path = i.bytes()?;
            let rel = i.bytes()?;
            let progress = i.opt_id()?;
            let has_damage = i.bool()?;
            let damage = i.string()?;
            let ngens = i.len()?;
            let mut gens = Vec::new();
            for _ in 0..ngens {
                let gen = i.u64()?;
                let closed = i.bool()?;
                let nranks = i.len()?;
                let mut ranks = Vec::new();
                for _ in 0..nranks {
                    ranks.push(i.u64()? as u32);
                }
                let nepochs = i.len()?;
                let mut epochs = Vec::new();
                for _ in 0..nepochs {
                    let epoch = i.u64()?;
                    let marked = i.bool()?;
                    let nm = i.len()?;
                    let mut manifests = Vec::new();
                    for _ in 0..nm {
                        manifests.push(ShippedManifest {
                            rank: i.u64()? as u32,
                            path: i.string()?,
                            offset: i.u64()?,
                            version: i.u64()? as u16,
                            bytes: i.bytes()?,
                        });
                    }
                    epochs.push(EpochSummary {
                        epoch,
                        marked,
                        manifests,
                    });
                }
                gens.push(GenSummary {
                    gen,
                    closed,
                    ranks,
                    epochs,
                });
            }
            files.push(FileSummary {
                job,
                dir,
                path,
                rel,
                progress,
                damaged: has_damage.then_some(damage),
                gens,
            });
        }
        if i.at != b.len() {
            return Err(i.err("trailing bytes"));
        }
        Ok(NodeSummary {
            node,
            finishing,
            scan_failed,
            files,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_truncation() {
        let s = NodeSummary {
            node: "n1".into(),
            finishing: true,
            scan_failed: false,
            files: vec![FileSummary {
                job: "j".into(),
                dir: "/l/j/f-1".into(),
                path: b"/p/a".to_vec(),
                rel: b"a".to_vec(),
                progress: Some(EpochId::new(1, 3)),
                damaged: None,
                gens: vec![GenSummary {
                    gen: 1,
                    closed: true,
                    ranks: vec![2, 3],
                    epochs: vec![EpochSummary {
                        epoch: 4,
                        marked: true,
                        manifests: vec![
                            ShippedManifest {
                                rank: 2,
                                path: "/l/j/f-1/g000001/r0000002/e0000000004.data".into(),
                                offset: 8192,
                                version: 2,
                                bytes: vec![1, 2, 3],
                            },
                            ShippedManifest {
                                rank: 3,
                                ..ShippedManifest::default()
                            },
                        ],
                    }],
                }],
            }],
        };
        let b = s.encode();
        assert_eq!(NodeSummary::decode(&b, 0).unwrap(), s);
        for cut in 0..b.len() {
            assert!(NodeSummary::decode(&b[..cut], 1).is_err(), "cut at {cut}");
        }
    }
}
