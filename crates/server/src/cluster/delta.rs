//! A round's summaries as changes: each server sends only what changed in
//! its summary since the state every server already holds of it (files
//! gone, a file's header when it changed, its epochs gone, new or changed),
//! keyed by round numbers, and every server applies every server's change
//! to its copy of that server's summary. The plan is then computed from the
//! copies exactly as from full summaries: what crosses between nodes in a
//! round grows with what changed in it, not with everything pending.
//!
//! Every server applies the same bytes (one allgather) to the same copies,
//! so they stay equal everywhere; a change that does not fit the copy it is
//! meant for (its base round is not the one held, an epoch to remove is not
//! there, the counts after it differ) makes every server drop that copy
//! and plan nothing until the sender's next message, which is then a full
//! summary (base 0), as the first one of a server job always is.

use super::planner::Dirty;
use super::summary::{key_of, EpochSummary, FileSummary, NodeSummary};
use super::wire::{DecodeError, In, Out};

/// What this server sent last, and the round since which every server holds it.
#[derive(Default)]
pub struct Outbox {
    prev: Option<(u64, NodeSummary)>,
    /// The flags of the last message (the copies hold them, scan failures
    /// included).
    flags: Option<(String, bool, bool)>,
    /// The round the copies hold once this round's message is applied.
    expect: Option<u64>,
}

impl Outbox {
    /// This round's message for the summary `cur`: empty when nothing
    /// changed (the copies stay as they are).
    pub fn message(&mut self, cur: &NodeSummary, round: u64) -> Vec<u8> {
        let flags = Some((cur.node.clone(), cur.finishing, cur.scan_failed));
        let same_flags = flags == self.flags;
        self.flags = flags;
        if cur.scan_failed {
            // Nothing to apply: the copies keep their files.
            self.expect = self.prev.as_ref().map(|p| p.0);
            return encode(None, cur, round, 0, false);
        }
        match &self.prev {
            Some((base, prev)) => {
                let m = encode(Some(prev), cur, round, *base, same_flags);
                self.expect = Some(if m.is_empty() { *base } else { round });
                m
            }
            None => {
                self.expect = Some(round);
                encode(None, cur, round, 0, false)
            }
        }
    }

    /// After the exchange: `held`, the round of the copy of this server's
    /// summary that every server now holds (if it is not the one expected,
    /// the next message is a full summary).
    pub fn sent(&mut self, cur: NodeSummary, held: Option<u64>) {
        if cur.scan_failed {
            return;
        }
        self.prev = match (held, self.expect) {
            (Some(h), Some(e)) if h == e => Some((h, cur)),
            _ => None,
        };
    }
}

/// Every server's summary as this server holds it (the same on all).
pub struct Copies {
    pub summaries: Vec<NodeSummary>,
    /// The round of each copy; `None`: no usable copy until a full summary.
    rounds: Vec<Option<u64>>,
    /// The files changed in some copy since the last plan (planner.rs).
    dirty: Dirty,
}

/// Why a change could not be applied (the copy is dropped; a full summary
/// follows).
#[derive(Debug, PartialEq, Eq)]
pub struct Resync(pub String);

impl Copies {
    pub fn new(nodes: usize) -> Copies {
        Copies {
            summaries: vec![NodeSummary::default(); nodes],
            rounds: vec![None; nodes],
            dirty: Dirty {
                all: true,
                ..Dirty::default()
            },
        }
    }

    /// The files changed in some copy since the last call (the next plan
    /// re-plans them).
    pub fn take_dirty(&mut self) -> Dirty {
        std::mem::take(&mut self.dirty)
    }

    /// Whether every copy is whole and from a server that scanned its root
    /// this round: only then may a plan be made.
    pub fn usable(&self) -> bool {
        self.rounds.iter().all(Option::is_some) && !self.summaries.iter().any(|s| s.scan_failed)
    }

    /// The round of server `n`'s copy.
    pub fn round(&self, n: usize) -> Option<u64> {
        self.rounds[n]
    }

    /// Apply server `n`'s message; a message that does not fit drops the copy.
    pub fn apply(&mut self, n: usize, bytes: &[u8]) -> Result<Result<(), Resync>, DecodeError> {
        if bytes.is_empty() {
            // Nothing changed since the copy held.
            return Ok(match self.rounds[n] {
                Some(_) => Ok(()),
                None => Err(Resync("no change to a copy not held".into())),
            });
        }
        let m = Message::decode(bytes, n)?;
        let s = &mut self.summaries[n];
        if s.node != m.node {
            // Names appear in the plan's reasons.
            self.dirty.everything();
        }
        s.node = m.node.clone();
        s.finishing = m.finishing;
        s.scan_failed = m.scan_failed;
        if m.scan_failed {
            return Ok(Ok(()));
        }
        let result = apply(s, self.rounds[n], m, &mut self.dirty);
        if result.is_err() {
            // Part of it may have been applied: plan everything again once
            // the copy is whole.
            self.dirty.everything();
        }
        self.rounds[n] = result.as_ref().ok().copied();
        Ok(result.map(|_| ()))
    }
}

/// Epochs changed in one file.
#[derive(Debug)]
struct FileChange {
    job: String,
    dir: String,
    /// Its header (every field but the epochs), when new or changed.
    header: Option<FileSummary>,
    /// (open, epoch) gone from it.
    removed: Vec<(u64, u64)>,
    /// (open, epoch summary) new or changed.
    upserts: Vec<(u64, EpochSummary)>,
}

#[derive(Debug)]
struct Message {
    node: String,
    finishing: bool,
    scan_failed: bool,
    round: u64,
    /// The round of the copy this changes; 0: from nothing.
    base: u64,
    /// Files and epochs once applied: a check.
    files: u64,
    epochs: u64,
    removed_files: Vec<(String, String)>,
    changes: Vec<FileChange>,
}

/// (open, epoch) of every epoch of `f`, in order.
fn epochs_of(f: &FileSummary) -> impl Iterator<Item = (u64, &EpochSummary)> {
    f.gens
        .iter()
        .flat_map(|g| g.epochs.iter().map(move |e| (g.gen, e)))
}

/// How many epochs `f` lists.
fn count(f: &FileSummary) -> u64 {
    f.gens.iter().map(|g| g.epochs.len() as u64).sum()
}

/// Every field of a file's summary but its epochs.
fn same_header(a: &FileSummary, b: &FileSummary) -> bool {
    a.job == b.job
        && a.dir == b.dir
        && a.path == b.path
        && a.rel == b.rel
        && a.progress == b.progress
        && a.damaged == b.damaged
        && a.gens.len() == b.gens.len()
        && a.gens
            .iter()
            .zip(&b.gens)
            .all(|(x, y)| x.gen == y.gen && x.closed == y.closed && x.ranks == y.ranks)
}

/// The change from `prev` (none: from nothing) to `cur`. Both list their
/// files in key order and their epochs in (open, epoch) order (collect).
/// With `may_be_empty` (the copies hold `cur`'s flags) no change at all is
/// no bytes.
fn encode(
    prev: Option<&NodeSummary>,
    cur: &NodeSummary,
    round: u64,
    base: u64,
    may_be_empty: bool,
) -> Vec<u8> {
    let mut o = Out::default();
    o.bytes(cur.node.as_bytes());
    o.bool(cur.finishing);
    o.bool(cur.scan_failed);
    o.u64(round);
    o.u64(base);
    o.u64(cur.files.len() as u64);
    o.u64(cur.files.iter().map(count).sum());
    let empty = Vec::new();
    let old = prev.map_or(&empty, |p| &p.files);
    let mut removed = Out::default();
    let mut nremoved = 0u64;
    let mut changes = Out::default();
    let mut nchanges = 0u64;
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < cur.files.len() {
        let ord = match (old.get(i), cur.files.get(j)) {
            (Some(a), Some(b)) => key_of(a).cmp(&key_of(b)),
            (Some(_), None) => std::cmp::Ordering::Less,
            _ => std::cmp::Ordering::Greater,
        };
        match ord {
            std::cmp::Ordering::Less => {
                removed.bytes(old[i].job.as_bytes());
                removed.bytes(old[i].dir.as_bytes());
                nremoved += 1;
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                nchanges += file_change(&mut changes, None, &cur.files[j]) as u64;
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                nchanges += file_change(&mut changes, Some(&old[i]), &cur.files[j]) as u64;
                i += 1;
                j += 1;
            }
        }
    }
    if may_be_empty && nremoved == 0 && nchanges == 0 {
        return Vec::new();
    }
    o.u64(nremoved);
    o.0.extend_from_slice(&removed.0);
    o.u64(nchanges);
    o.0.extend_from_slice(&changes.0);
    o.0
}

/// Write the change of one file, if any; whether there was one.
fn file_change(o: &mut Out, prev: Option<&FileSummary>, cur: &FileSummary) -> bool {
    let header = prev.is_none_or(|p| !same_header(p, cur));
    let mut removed = Vec::new();
    let mut upserts = Vec::new();
    let mut old = prev.into_iter().flat_map(epochs_of).peekable();
    for (gen, e) in epochs_of(cur) {
        while let Some(&(g, x)) = old.peek() {
            if (g, x.epoch) >= (gen, e.epoch) {
                break;
            }
            removed.push((g, x.epoch));
            old.next();
        }
        match old.peek() {
            Some(&(g, x)) if (g, x.epoch) == (gen, e.epoch) => {
                if x != e {
                    upserts.push((gen, e));
                }
                old.next();
            }
            _ => upserts.push((gen, e)),
        }
    }
    removed.extend(old.map(|(g, x)| (g, x.epoch)));
    if !header && removed.is_empty() && upserts.is_empty() {
        return false;
    }
    o.bytes(cur.job.as_bytes());
    o.bytes(cur.dir.as_bytes());
    o.bool(header);
    if header {
        o.file_header(cur);
    }
    o.u64(removed.len() as u64);
    for (g, e) in removed {
        o.u64(g);
        o.u64(e);
    }
    o.u64(upserts.len() as u64);
    for (g, e) in upserts {
        o.u64(g);
        o.epoch(e);
    }
    true
}

impl Message {
    fn decode(b: &[u8], from: usize) -> Result<Message, DecodeError> {
        let mut i = In::new(b, from);
        let node = i.string()?;
        let finishing = i.bool()?;
        let scan_failed = i.bool()?;
        let (round, base, files, epochs) = (i.u64()?, i.u64()?, i.u64()?, i.u64()?);
        let removed_files = i.list(|i| Ok((i.string()?, i.string()?)))?;
        let changes = i.list(|i| {
            let (job, dir) = (i.string()?, i.string()?);
            let header = if i.bool()? {
                Some(i.file_header()?)
            } else {
                None
            };
            let removed = i.list(|i| Ok((i.u64()?, i.u64()?)))?;
            let upserts = i.list(|i| Ok((i.u64()?, i.epoch()?)))?;
            Ok(FileChange {
                job,
                dir,
                header,
                removed,
                upserts,
            })
        })?;
        i.done()?;
        Ok(Message {
            node,
            finishing,
            scan_failed,
            round,
            base,
            files,
            epochs,
            removed_files,
            changes,
        })
    }
}

/// Apply `m` to the copy `s` of round `held`; the copy's new round. Every
/// file it changes is marked in `dirty`, under its key before and after.
fn apply(
    s: &mut NodeSummary,
    held: Option<u64>,
    m: Message,
    dirty: &mut Dirty,
) -> Result<u64, Resync> {
    if m.base == 0 {
        dirty.everything();
        s.files.clear();
    } else if held != Some(m.base) {
        return Err(Resync(format!(
            "a change from round {} to a copy of round {held:?}",
            m.base
        )));
    }
    let find = |s: &NodeSummary, job: &str, dir: &str| {
        s.files.binary_search_by(|f| key_of(f).cmp(&(job, dir)))
    };
    for (job, dir) in &m.removed_files {
        let at = find(s, job, dir).map_err(|_| Resync(format!("no file {dir} to remove")))?;
        let gone = s.files.remove(at);
        dirty.file(&gone.job, &gone.rel);
    }
    for c in m.changes {
        let missing = |what: &str| Resync(format!("{}: no {what}", c.dir));
        if let Ok(at) = find(s, &c.job, &c.dir) {
            dirty.file(&s.files[at].job, &s.files[at].rel);
        }
        let at = match (find(s, &c.job, &c.dir), c.header) {
            (Ok(at), Some(h)) => {
                replace_header(&mut s.files[at], h);
                at
            }
            (Err(at), Some(h)) => {
                s.files.insert(at, h);
                at
            }
            (Ok(at), None) => at,
            (Err(_), None) => return Err(missing("file")),
        };
        let f = &mut s.files[at];
        dirty.file(&f.job, &f.rel);
        for (gen, epoch) in c.removed {
            let g = f.gens.iter_mut().find(|g| g.gen == gen);
            let Some(g) = g else {
                // The header dropped the whole open (a drained open).
                continue;
            };
            let Ok(k) = g.epochs.binary_search_by_key(&epoch, |e| e.epoch) else {
                return Err(missing("epoch to remove"));
            };
            g.epochs.remove(k);
        }
        for (gen, e) in c.upserts {
            let Some(g) = f.gens.iter_mut().find(|g| g.gen == gen) else {
                return Err(missing("open of an epoch"));
            };
            match g.epochs.binary_search_by_key(&e.epoch, |x| x.epoch) {
                Ok(k) => g.epochs[k] = e,
                Err(k) => g.epochs.insert(k, e),
            }
        }
    }
    let epochs: u64 = s.files.iter().map(count).sum();
    if (s.files.len() as u64, epochs) != (m.files, m.epochs) {
        return Err(Resync(format!(
            "{} files and {epochs} epochs after the change, the sender has {} and {}",
            s.files.len(),
            m.files,
            m.epochs
        )));
    }
    Ok(m.round)
}

/// A file's new header over its old summary: the epochs of the opens that
/// stay are kept.
fn replace_header(f: &mut FileSummary, mut h: FileSummary) {
    for g in &mut h.gens {
        if let Some(old) = f.gens.iter_mut().find(|o| o.gen == g.gen) {
            g.epochs = std::mem::take(&mut old.epochs);
        }
    }
    *f = h;
}

#[cfg(test)]
#[path = "delta_tests.rs"]
mod tests;
