//! What one node tells the others at each round: the files it holds, their
//! drain progress, and the manifests and commit marks of every epoch past
//! that progress. Manifests travel as their on-disk bytes, so every server
//! checks their checksums itself and merges exactly what the owner has.
//!
//! The encoding is private to one server job (all servers run the same
//! binary), so it has no version: length-prefixed fields, little-endian.

use std::path::Path;

use paralog_log::format::Manifest;
use paralog_log::layout::{self, EpochFileKind};
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
    /// (rank, manifest bytes as on disk).
    pub manifests: Vec<(u32, Vec<u8>)>,
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
            .any(|r| r.epochs.values().any(|e| e.manifest))
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
                let path = r
                    .dir
                    .join(layout::epoch_file_name(epoch, EpochFileKind::Manifest));
                match std::fs::read(&path) {
                    Ok(bytes) => es.manifests.push((rank, bytes)),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        s.damaged = Some(format!("{}: {e}", path.display()));
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

/// Where a manifest of this node's file directory `dir` lives.
pub fn manifest_path(dir: &str, id: EpochId, rank: u32) -> std::path::PathBuf {
    Path::new(dir)
        .join(layout::gen_dir_name(id.gen))
        .join(layout::rank_dir_name(rank))
        .join(layout::epoch_file_name(id.epoch, EpochFileKind::Manifest))
}

/// Decode a manifest received from `node`, checking its checksum and that it
/// is the one its place says.
pub fn decode_manifest(
    bytes: &[u8],
    path: &Path,
    id: EpochId,
    rank: u32,
) -> Result<Manifest, paralog_log::LogError> {
    let m = Manifest::decode(bytes, path)?;
    m.check_place(id, rank, path)?;
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
                    for (rank, m) in &e.manifests {
                        o.u64(*rank as u64);
                        o.bytes(m);
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
                        let rank = i.u64()? as u32;
                        manifests.push((rank, i.bytes()?));
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
                        manifests: vec![(2, vec![1, 2, 3]), (3, vec![])],
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
