//! A node's share of a server job's drain of a stream (docs/streams.md
//! "Many nodes"). The servers agree on one cut per round from every
//! node's new batches ([`make_cut`]: the same function of the same
//! gathered ranges on every server), every node records it in its own
//! cut log ([`NodeShare::record`]) before anything is applied, every node
//! sends each partition's frames of the ranges it holds to the
//! partition's owner ([`NodeShare::pieces`]), and each owner assembles
//! and writes its partitions' batches ([`assemble`], [`apply_part`]);
//! the leader publishes the watermark last. The batches are the ones a
//! one-node drain of the same ranges writes: frames by producer id, then
//! in their producer's order, at the positions the cut recorded.
//!
//! Every node's cut log holds the same records (the job's cuts, every
//! node's ranges), so the node's quota and lag (`lag.rs`, `quota.rs`)
//! read what the drain took from it as on one node: ranges of producers
//! the node does not hold are simply not its segments.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

use crate::drain::{self, DrainOptions, DrainReport};
use crate::error::{corrupt, Result, StreamError};
use crate::format::{self, Cut, PartMark, Watermark, KIND_LOCAL_BATCH};
use crate::layout;
use crate::listing::Listing;
use crate::local;
use crate::segment;

mod release;

pub use crate::drain::after;
pub use crate::publish::{apply_part, publish_watermark};
pub use release::{release_due, NodeRelease, Releasable};

/// A piece's header: range index, partition, events (u32 each), then the
/// frames' length (u64).
const PIECE_HEADER: usize = 20;

/// A producer's new batches in a round, as the servers exchange them:
/// bytes `from..to` of its segment, and per partition (events, frame bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRange {
    pub producer: u64,
    pub from: u64,
    pub to: u64,
    pub parts: Vec<(u64, u64)>,
}

/// What a node has for a round ([`NodeShare::take_new`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewBatches {
    /// The partition count its segments or cut log fix (`None`: neither yet).
    pub partitions: Option<u32>,
    pub ranges: Vec<NewRange>,
    /// Bytes of its segments a release would delete now (0 with local
    /// retention off, and when its segments taken whole and its cut log
    /// are below the threshold: no release can be due on this node).
    pub releasable: u64,
}

/// One stream's drain state on this node, for a server job: its cut log
/// (the job's cuts) and the drain lock, held while the share lives so that
/// a one-node drain of the stream cannot interleave.
pub struct NodeShare {
    stream: String,
    dir: PathBuf,
    _lock: File,
    cuts_path: PathBuf,
    cuts_len: u64,
    rounds: u64,
    n: Option<u32>,
    /// Per producer, where the last cut's range of its segment ended.
    taken: HashMap<u64, u64>,
    /// Each partition's state after the last cut.
    state: Vec<PartMark>,
    last: Option<Cut>,
    /// The log's base record, if it starts with one.
    base: Option<format::Base>,
    /// The segments as the last round listed them (`listing.rs`: an idle
    /// stream's round `stat`s them, no more).
    listing: Option<Listing>,
}

impl NodeShare {
    /// The stream's share on the node-local root `local` of a server job
    /// of `nodes` nodes (its directory made if this node has no producer
    /// of it yet: the cut log is kept on every node), marked as the job's
    /// before the job records anything ([`crate::job_root::mark`]: a
    /// one-node drain or recover neither applies its rounds nor releases
    /// its segments: the job releases them, `nodes/release.rs`). Reads the whole cut log once, checking its chain.
    pub fn open(local: &Path, stream: &str, nodes: usize) -> Result<NodeShare> {
        format::valid_name("stream name", stream)?;
        let dir = layout::stream_dir(local, stream);
        layout::create_dirs(local, &dir, 0o700)?;
        let lock = local::lock(&dir.join(layout::DRAIN_LOCK))?;
        crate::job_root::mark(local, stream, nodes)?;
        let cuts_path = dir.join(layout::CUTS);
        let log = local::read_log(&cuts_path)?;
        let cuts_len = log.len;
        let mut share = NodeShare {
            stream: stream.into(),
            dir,
            _lock: lock,
            cuts_path,
            cuts_len,
            rounds: 0,
            n: None,
            taken: HashMap::new(),
            state: Vec::new(),
            last: None,
            base: None,
            listing: None,
        };
        if let Some(b) = &log.base {
            // A one-node drain released this root's history before it
            // was drained by a server job: start from its base.
            share.rounds = b.round;
            share.n = Some(b.parts.len() as u32);
            share.state = b.parts.clone();
            share.taken = log.taken_base();
            share.base = log.base.clone();
        }
        for cut in log.cuts {
            share.fold(cut)?;
        }
        Ok(share)
    }

    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// Rounds in this node's cut log.
    pub fn rounds(&self) -> u64 {
        self.rounds
    }

    /// The partition count its cut log fixes (`None`: no cut yet).
    pub fn partitions(&self) -> Option<u32> {
        self.n
    }

    /// Each partition's state after the last cut.
    pub fn state(&self) -> &[PartMark] {
        &self.state
    }

    /// The log's last record as stored (empty: none): its last cut, or
    /// its base when no cut follows it; for the servers to compare their
    /// logs and to give a node that missed it.
    pub fn last_record(&self) -> Vec<u8> {
        match (&self.last, &self.base) {
            (Some(c), _) => c.encode(),
            (None, Some(b)) => b.encode(),
            (None, None) => Vec::new(),
        }
    }

    /// What this node has for the round, from one listing of its
    /// segments: their partition count, checked against the cut log's,
    /// every committed batch past the last cut within the round's budget
    /// (as ranges with their per-partition sizes), and, unless local
    /// retention is off (`opts.release_bytes` `u64::MAX`), the bytes of
    /// its segments a release would delete now ([`Self::releasable`]).
    pub fn take_new(
        &mut self,
        opts: &DrainOptions,
        report: &mut DrainReport,
    ) -> Result<NewBatches> {
        let listing = match self.listing.take() {
            Some(mut l) => l.refresh(&self.dir, &self.stream).map(|()| l)?,
            None => Listing::read(&self.dir, &self.stream)?,
        };
        let r = self.take_listed(&listing, opts, report);
        // Kept only after a round that worked (a failed one lists again).
        if r.is_ok() {
            self.listing = Some(listing);
        }
        r
    }

    fn take_listed(
        &self,
        listing: &Listing,
        opts: &DrainOptions,
        report: &mut DrainReport,
    ) -> Result<NewBatches> {
        let (segs, seg_parts) = (&listing.segs, listing.parts);
        let n = match (self.n, seg_parts) {
            (Some(a), Some(b)) if a != b => {
                return Err(StreamError::PartitionMismatch {
                    stream: self.stream.clone(),
                    existing: a,
                    asked: b,
                })
            }
            (Some(a), _) | (None, Some(a)) => a,
            (None, None) => return Ok(NewBatches::default()),
        };
        let new = crate::take::take_new(segs, &self.taken, self.rounds, n, opts, report)?;
        let ranges = new
            .iter()
            .map(|(id, batches)| {
                let mut parts = vec![(0u64, 0u64); n as usize];
                for b in batches {
                    for i in 0..b.frames.len() {
                        let f = b.frame(i);
                        let p = frame_partition(f) as usize;
                        parts[p].0 += 1;
                        parts[p].1 += f.len() as u64;
                    }
                }
                NewRange {
                    producer: *id,
                    from: batches[0].pos,
                    to: batches.last().expect("a range has batches").end,
                    parts,
                }
            })
            .collect();
        // The same listing: a segment with new batches is not taken whole,
        // so it is not among them. Looked at (a lock tried on each segment
        // taken whole) only when this node's segments taken whole and its
        // log could reach the threshold: below it, this node's own count
        // cannot make a release due (`release_due`), and 0 decides the
        // same (when every log is a base alone, the logs are the same
        // record, so no node's log reaches it either).
        let whole: u64 = segs
            .iter()
            .filter(|&(id, s)| *self.taken.get(id).unwrap_or(&s.header_len) == s.len)
            .map(|(_, s)| s.len)
            .sum();
        let releasable = match opts.release_bytes {
            u64::MAX => 0,
            t if whole.saturating_add(self.cuts_len) < t => 0,
            _ => crate::release::gone(segs, &self.taken)?
                .iter()
                .map(|g| g.len)
                .sum(),
        };
        Ok(NewBatches {
            partitions: Some(n),
            ranges,
            releasable,
        })
    }

    /// Record `cut` (the job's next round) in this node's cut log: one
    /// write, one fdatasync. Refused unless it follows the log.
    pub fn record(&mut self, cut: &Cut) -> Result<()> {
        self.check_next(cut)?;
        self.cuts_len += local::append_cut(&self.cuts_path, self.cuts_len, cut)?;
        crate::failpoint::hit("stream.after_cut");
        self.fold(cut.clone())
    }

    /// Record a cut that other nodes recorded and this one missed (its
    /// server died between their records and its own), from their bytes.
    pub fn record_bytes(&mut self, rec: &[u8]) -> Result<Cut> {
        let cut = Cut::decode(rec, &self.cuts_path, self.cuts_len)?;
        self.record(&cut)?;
        Ok(cut)
    }

    /// The cut of round `round` (from memory for the last, else from the log).
    pub fn cut(&self, round: u64) -> Result<Cut> {
        if let Some(c) = self.last.as_ref().filter(|c| c.round == round) {
            return Ok(c.clone());
        }
        let log = local::read_log(&self.cuts_path)?;
        let first = log.base.as_ref().map_or(0, |b| b.round) + 1;
        log.cuts
            .into_iter()
            .nth(round.wrapping_sub(first) as usize)
            .filter(|_| round >= first)
            .ok_or_else(|| StreamError::Invalid {
                what: format!(
                    "{}: no round {round} (the log ends at round {})",
                    self.cuts_path.display(),
                    self.rounds
                ),
            })
    }

    /// The remote's watermark must be one this log made: not past its
    /// last round, and equal to the state after the round it names.
    pub fn check_watermark(&self, wm: &Watermark, rdir: &Path) -> Result<()> {
        if wm.round > self.rounds || (wm.round > 0 && Some(wm.parts.len() as u32) != self.n) {
            return Err(StreamError::Invalid {
                what: format!(
                    "{}: round {} with {} partitions, but the cut log {} ends at round {}: the remote was drained from other node-local roots (a one-node drain?), or the cut log lost records",
                    rdir.join(layout::WATERMARK).display(),
                    wm.round,
                    wm.parts.len(),
                    self.cuts_path.display(),
                    self.rounds
                ),
            });
        }
        let want = match &self.base {
            Some(b) if wm.round < b.round => {
                return Err(StreamError::Invalid {
                    what: format!(
                        "{}: round {}, but the cut log {} starts at a base of round {} (the rounds before it were published and their local segments released): this remote is not the one the stream was drained to, or it lost rounds",
                        rdir.join(layout::WATERMARK).display(),
                        wm.round,
                        self.cuts_path.display(),
                        b.round
                    ),
                })
            }
            Some(b) if wm.round == b.round => Some(b.parts.clone()),
            _ if wm.round == 0 => Some(wm.parts.clone()),
            _ => Some(after(&self.cut(wm.round)?)),
        };
        if want.as_ref() != Some(&wm.parts) {
            return Err(corrupt(
                &rdir.join(layout::WATERMARK),
                16,
                format!(
                    "the watermark of round {} disagrees with the cut log",
                    wm.round
                ),
            ));
        }
        Ok(())
    }

    /// What this node sends each server for `cut`: per destination (the
    /// owner of each partition, `owner(p)`), the frames of the ranges
    /// this node holds, as pieces (range, partition, events, bytes, then
    /// the frames); and per destination the frames' bytes. A range whose
    /// segment is not here is another node's.
    pub fn pieces(
        &self,
        cut: &Cut,
        servers: usize,
        owner: &dyn Fn(u32) -> usize,
    ) -> Result<(Vec<Vec<u8>>, Vec<u64>)> {
        let n = cut.parts.len() as u32;
        let (segs, _) = local::segments(&self.dir, &self.stream)?;
        let mut out = vec![Vec::new(); servers];
        let mut bytes = vec![0u64; servers];
        for (i, r) in cut.ranges.iter().enumerate() {
            let Some(seg) = segs.get(&r.producer) else {
                continue;
            };
            let batches = segment::read_committed(
                &seg.open()?,
                &seg.path,
                r.from,
                r.to,
                KIND_LOCAL_BATCH,
                n,
            )?;
            let mut by_part: BTreeMap<u32, Vec<&[u8]>> = BTreeMap::new();
            for b in &batches {
                crate::take::check_producer(b, r.producer, &seg.path)?;
                for j in 0..b.frames.len() {
                    let f = b.frame(j);
                    by_part.entry(frame_partition(f)).or_default().push(f);
                }
            }
            for (p, frames) in by_part {
                let d = owner(p);
                let len: usize = frames.iter().map(|f| f.len()).sum();
                let o = &mut out[d];
                o.extend_from_slice(&(i as u32).to_le_bytes());
                o.extend_from_slice(&p.to_le_bytes());
                o.extend_from_slice(&(frames.len() as u32).to_le_bytes());
                o.extend_from_slice(&(len as u64).to_le_bytes());
                for f in frames {
                    o.extend_from_slice(f);
                }
                bytes[d] += len as u64;
            }
        }
        Ok((out, bytes))
    }

    fn check_next(&self, cut: &Cut) -> Result<()> {
        let chained = cut.round == self.rounds + 1
            && self.n.is_none_or(|n| n as usize == cut.parts.len())
            && cut
                .parts
                .iter()
                .zip(
                    self.state
                        .iter()
                        .chain(std::iter::repeat(&PartMark::default())),
                )
                .all(|(p, s)| p.first == s.next);
        if chained {
            return Ok(());
        }
        Err(corrupt(
            &self.cuts_path,
            self.cuts_len,
            format!(
                "round {} with {} partitions does not follow round {} of this log",
                cut.round,
                cut.parts.len(),
                self.rounds
            ),
        ))
    }

    fn fold(&mut self, cut: Cut) -> Result<()> {
        self.check_next(&cut)?;
        for r in &cut.ranges {
            self.taken.insert(r.producer, r.to);
        }
        self.rounds = cut.round;
        self.n = Some(cut.parts.len() as u32);
        self.state = after(&cut);
        self.last = Some(cut);
        Ok(())
    }
}

/// The partition a frame names (its bytes 4..8).
fn frame_partition(f: &[u8]) -> u32 {
    u32::from_le_bytes(f[4..8].try_into().expect("a frame has a header"))
}

/// The job's cut of round `round` from every node's new ranges: ranges by
/// producer id (the one-node drain's order), each partition's batch
/// placed after its state. The same on every server. Two nodes holding
/// one producer (a copied node-local root) are refused.
pub fn make_cut(
    round: u64,
    state: &[PartMark],
    mut ranges: Vec<NewRange>,
    roll: u64,
    stream: &str,
) -> Result<Cut> {
    ranges.sort_by_key(|r| r.producer);
    if let Some(w) = ranges.windows(2).find(|w| w[0].producer == w[1].producer) {
        return Err(StreamError::Invalid {
            what: format!(
                "stream {stream}: two nodes hold producer {:016x}'s segment (a copied node-local root?)",
                w[0].producer
            ),
        });
    }
    let mut sizes = vec![(0u64, 0u64); state.len()];
    for r in &ranges {
        if r.parts.len() != state.len() {
            return Err(StreamError::PartitionMismatch {
                stream: stream.into(),
                existing: state.len() as u32,
                asked: r.parts.len() as u32,
            });
        }
        for (s, p) in sizes.iter_mut().zip(&r.parts) {
            s.0 += p.0;
            s.1 += p.1;
        }
    }
    Ok(Cut {
        round,
        ranges: ranges
            .iter()
            .map(|r| format::Range {
                producer: r.producer,
                from: r.from,
                to: r.to,
            })
            .collect(),
        parts: drain::plan(state, &sizes, roll, stream),
    })
}

/// An owner's batches of `cut`: the pieces every node sent it
/// (`received`, its own included), checked (each range's frames of a
/// partition from one node only, each frame whole and of its partition)
/// and put in cut order; each owned partition's batch encoded and checked
/// against the cut (events and bytes). `(partition, batch)` for every
/// partition `owned` with events this round.
pub fn assemble(
    cut: &Cut,
    received: &[&[u8]],
    owned: &dyn Fn(u32) -> bool,
    rdir: &Path,
) -> Result<Vec<(u32, Vec<u8>)>> {
    let bad = |what: String| corrupt(rdir, 0, format!("round {}: {what}", cut.round));
    let n = cut.parts.len() as u32;
    let mut got: BTreeMap<(u32, u32), Vec<&[u8]>> = BTreeMap::new();
    for (node, mut b) in received.iter().copied().enumerate() {
        while !b.is_empty() {
            if b.len() < PIECE_HEADER {
                return Err(bad(format!("a piece from server {node} is cut short")));
            }
            let range = u32::from_le_bytes(b[0..4].try_into().unwrap());
            let p = u32::from_le_bytes(b[4..8].try_into().unwrap());
            let count = u32::from_le_bytes(b[8..12].try_into().unwrap());
            let len = u64::from_le_bytes(b[12..20].try_into().unwrap()) as usize;
            if p >= n || !owned(p) || range as usize >= cut.ranges.len() {
                return Err(bad(format!(
                    "server {node} sent range {range} of partition {p}, which is not this server's"
                )));
            }
            let body = b
                .get(PIECE_HEADER..PIECE_HEADER + len)
                .ok_or_else(|| bad(format!("a piece from server {node} is cut short")))?;
            let frames = split_frames(body, p)
                .filter(|f| f.len() == count as usize)
                .ok_or_else(|| {
                    bad(format!(
                        "server {node}'s frames of partition {p} do not parse as {count} events"
                    ))
                })?;
            if got.insert((p, range), frames).is_some() {
                return Err(bad(format!(
                    "range {range} of partition {p} came from two servers (two nodes hold producer {:016x})",
                    cut.ranges[range as usize].producer
                )));
            }
            b = &b[PIECE_HEADER + len..];
        }
    }
    let mut out = Vec::new();
    for p in (0..n).filter(|&p| owned(p) && cut.parts[p as usize].count > 0) {
        let frames: Vec<&[u8]> = got
            .range((p, 0)..=(p, u32::MAX))
            .flat_map(|(_, f)| f.iter().copied())
            .collect();
        out.push((p, drain::encode_part(cut, p, &frames, rdir)?));
    }
    Ok(out)
}

/// A piece's frames (each a u32 length, then that many bytes, naming
/// partition `p`); `None` if they do not parse.
fn split_frames(mut b: &[u8], p: u32) -> Option<Vec<&[u8]>> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let len = 4 + u32::from_le_bytes(b.get(0..4)?.try_into().ok()?) as usize;
        let f = b.get(..len).filter(|f| f.len() >= 8)?;
        if frame_partition(f) != p {
            return None;
        }
        out.push(f);
        b = &b[len..];
    }
    Some(out)
}
