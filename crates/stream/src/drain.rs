//! The drain of a stream from the node-local root to a remote (a POSIX
//! directory; the remote's steps are behind `remote::StreamRemote`), in
//! rounds. Each round takes every committed batch that the
//! producers' segments hold past the last cut, makes those bytes durable
//! on the node (one fdatasync per segment), fixes where each partition's
//! events go (offsets and byte positions), appends that *cut* to the
//! local cut log with one fdatasync, and only then applies it: one batch
//! per partition written at its recorded position, fsynced, then the high
//! watermark replaced atomically. A crash anywhere leaves a cut recorded
//! and not applied (applied again, the same bytes at the same positions)
//! or not recorded (taken again by the next round): every flushed event is
//! stored exactly once. A copied local root replays its cut log into a
//! fresh remote byte for byte.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::error::{corrupt, Result, StreamError};
use crate::format::{self, BatchHeader, Cut, PartCut, PartMark, Range};
use crate::format::{BATCH_HEADER_LEN, COMMIT_LEN, KIND_REMOTE_BATCH};
use crate::layout;
use crate::local::{self, LocalSeg};
use crate::publish::header_len;
use crate::remote::{PosixRemote, RoundWrite, StreamRemote};
use crate::segment::Batch;
use crate::take::{read_ranges, take_new};

pub use crate::lag::{local_lag, LocalLag};

#[derive(Debug, Clone, Copy)]
pub struct DrainOptions {
    /// A partition's remote segment is rolled (the next batch starts a new
    /// file) once it holds this many bytes.
    pub roll_bytes: u64,
    /// A round takes about this many bytes of local batches at most (at
    /// least one batch), so that a round's memory stays bounded.
    pub max_round_bytes: u64,
    /// Local retention: once the segments of ended producers that the
    /// published rounds took whole, plus the cut log, amount to this many
    /// bytes, the segments are deleted and the log rewritten to start at a
    /// base record (`release.rs`). `u64::MAX`: keep everything.
    pub release_bytes: u64,
}

impl Default for DrainOptions {
    fn default() -> Self {
        DrainOptions {
            roll_bytes: 64 << 20,
            max_round_bytes: 64 << 20,
            release_bytes: 64 << 20,
        }
    }
}

/// What one call did to one stream.
#[derive(Debug, Clone, Default)]
pub struct DrainReport {
    pub stream: String,
    /// Cuts recorded earlier and applied again now (after a crash, or
    /// into a fresh remote).
    pub replayed: u64,
    /// The new round, if there was anything new.
    pub round: Option<u64>,
    pub events: u64,
    pub bytes: u64,
    /// Segments whose tail is not a committed batch (a flush in progress,
    /// or a producer killed during one): (segment, offset, why).
    pub torn: Vec<(PathBuf, u64, String)>,
    /// Of those, the tails cut off (their producer is gone): (segment, new length).
    pub cut: Vec<(PathBuf, u64)>,
    /// A trim request applied after the round (object remotes), per partition.
    pub trimmed: Vec<crate::retention::Trimmed>,
    /// Local retention after the round: segments deleted, log rebased.
    pub released: crate::release::Released,
}

/// The streams that have a directory under the node-local root.
pub fn local_streams(root: &Path) -> Result<Vec<String>> {
    Ok(layout::entries(&layout::streams_dir(root))?
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| format::valid_name("stream", name).is_ok())
        .collect())
}

/// One round of every stream under `local` (stops at the first error).
pub fn drain_all(local: &Path, remote: &Path, opts: &DrainOptions) -> Result<Vec<DrainReport>> {
    local_streams(local)?
        .iter()
        .map(|s| drain_stream(local, remote, s, opts))
        .collect()
}

/// One round of one stream, with nothing remembered from earlier rounds
/// (reads the whole cut log).
pub fn drain_stream(
    local: &Path,
    remote: &Path,
    stream: &str,
    opts: &DrainOptions,
) -> Result<DrainReport> {
    Drainer::default().drain(local, remote, stream, opts)
}

/// What a stream's last round left: enough for the next round without
/// reading the cut log again. Checked each round (the log's length and
/// the remote watermark must be as it left them; else the log is read
/// again), so another drain of the stream in between is no harm.
#[derive(Debug, Clone)]
struct Known {
    /// The stream's place on the remote it was drained to.
    rdir: PathBuf,
    cuts_len: u64,
    rounds: u64,
    /// The round of the log's base record (0: none).
    base_round: u64,
    n: u32,
    /// Per producer, where the last cut's range of its segment ended.
    taken: HashMap<u64, u64>,
    state: Vec<PartMark>,
}

/// Drains streams round after round (the server, `drain --follow`),
/// remembering each stream's state so that a round costs what is new,
/// not the length of the history.
#[derive(Default)]
pub struct Drainer {
    known: HashMap<String, Known>,
}

impl Drainer {
    /// Apply the cuts the remote lacks, then one new round.
    pub fn drain(
        &mut self,
        local: &Path,
        remote: &Path,
        stream: &str,
        opts: &DrainOptions,
    ) -> Result<DrainReport> {
        self.drain_to(local, &PosixRemote(remote), stream, opts)
    }

    /// [`Drainer::drain`] to any remote (a POSIX directory or an object
    /// remote).
    pub fn drain_to(
        &mut self,
        local: &Path,
        remote: &dyn StreamRemote,
        stream: &str,
        opts: &DrainOptions,
    ) -> Result<DrainReport> {
        let r = self.round(local, remote, stream, opts);
        if r.is_err() {
            self.known.remove(stream);
        }
        r
    }

    /// Rounds until one finds nothing new (a round takes about
    /// `max_round_bytes` at most): everything committed by now is drained.
    /// The reports of the rounds that did something (at least one): the
    /// last one, with nothing new, only if it released (local retention
    /// after the last new round's publication often comes then) or
    /// trimmed.
    pub fn drain_pending(
        &mut self,
        local: &Path,
        remote: &Path,
        stream: &str,
        opts: &DrainOptions,
    ) -> Result<Vec<DrainReport>> {
        self.drain_pending_to(local, &PosixRemote(remote), stream, opts)
    }

    /// [`Drainer::drain_pending`] to any remote.
    pub fn drain_pending_to(
        &mut self,
        local: &Path,
        remote: &dyn StreamRemote,
        stream: &str,
        opts: &DrainOptions,
    ) -> Result<Vec<DrainReport>> {
        let mut out = Vec::new();
        loop {
            let r = self.drain_to(local, remote, stream, opts)?;
            let done = r.round.is_none();
            let did = r.released.base.is_some() || !r.trimmed.is_empty();
            if !done || did || out.is_empty() {
                out.push(r);
            }
            if done {
                return Ok(out);
            }
        }
    }

    fn round(
        &mut self,
        local: &Path,
        remote: &dyn StreamRemote,
        stream: &str,
        opts: &DrainOptions,
    ) -> Result<DrainReport> {
        let dir = layout::existing_local_stream(local, stream)?;
        let _lock = local::lock(&dir.join(layout::DRAIN_LOCK))?;
        crate::job_root::refuse_marked(&dir, stream)?;
        let mut report = DrainReport {
            stream: stream.into(),
            ..Default::default()
        };
        let (segs, seg_parts) = local::segments(&dir, stream)?;
        let cuts_path = dir.join(layout::CUTS);
        let cuts_len = local::log_len(&cuts_path)?;
        let rdir = remote.stream_dir(stream);
        let cached = match self.known.remove(stream) {
            Some(k) if k.rdir == rdir && k.cuts_len == cuts_len => {
                let wm = remote.watermark(stream, k.n)?;
                (wm.round == k.rounds && wm.parts == k.state).then_some(k)
            }
            _ => None,
        };
        let known = match cached {
            Some(k) => Some(k),
            None => replay(remote, stream, &segs, seg_parts, &cuts_path, &mut report)?,
        };
        let Some(mut k) = known else {
            return Ok(report);
        };
        if let Some(p) = seg_parts.filter(|&p| p != k.n) {
            return Err(StreamError::PartitionMismatch {
                stream: stream.into(),
                existing: k.n,
                asked: p,
            });
        }
        let new = take_new(&segs, &k.taken, k.rounds, k.n, opts, &mut report)?;
        if new.is_empty() {
            report.trimmed = remote.after_round(stream, k.n)?;
            report.released = release(&dir, &segs, &cuts_path, &mut k, opts)?;
            self.known.insert(stream.into(), k);
            return Ok(report);
        }
        let frames = part_frames(&new, k.n);
        let round = k.rounds + 1;
        let parts = plan(
            &k.state,
            &frame_sizes(&frames),
            remote.roll_bytes(opts.roll_bytes),
            stream,
        );
        let ranges = new
            .iter()
            .map(|(id, b)| Range {
                producer: *id,
                from: b[0].pos,
                to: b.last().expect("a range has batches").end,
            })
            .collect();
        let cut = Cut {
            round,
            ranges,
            parts,
        };
        k.cuts_len += local::append_cut(&cuts_path, k.cuts_len, &cut)?;
        crate::failpoint::hit("stream.after_cut");
        let bytes = encode_parts(&cut, &frames, &rdir)?;
        let after = after(&cut);
        remote.apply(
            stream,
            k.n,
            RoundWrite {
                cut: &cut,
                bytes: &bytes,
                after: &after,
            },
        )?;
        for r in &cut.ranges {
            k.taken.insert(r.producer, r.to);
        }
        k.rounds = round;
        k.state = after;
        report.round = Some(round);
        report.events = cut.parts.iter().map(|p| p.count).sum();
        report.bytes = cut.parts.iter().map(|p| p.len).sum();
        report.trimmed = remote.after_round(stream, k.n)?;
        report.released = release(&dir, &segs, &cuts_path, &mut k, opts)?;
        self.known.insert(stream.into(), k);
        Ok(report)
    }
}

/// Every cut of the log is published now: release what that made
/// redundant on the node.
fn release(
    dir: &Path,
    segs: &BTreeMap<u64, LocalSeg>,
    cuts_path: &Path,
    k: &mut Known,
    opts: &DrainOptions,
) -> Result<crate::release::Released> {
    let log = crate::release::LogState {
        cuts_path,
        cuts_len: &mut k.cuts_len,
        rounds: k.rounds,
        base_round: &mut k.base_round,
        taken: &mut k.taken,
        state: &k.state,
    };
    crate::release::release(dir, segs, log, opts.release_bytes)
}

/// Read the whole cut log, check it against the remote, and apply the
/// cuts the remote does not have yet. `None`: the stream has no cut and no
/// segment yet.
fn replay(
    remote: &dyn StreamRemote,
    stream: &str,
    segs: &BTreeMap<u64, LocalSeg>,
    seg_parts: Option<u32>,
    cuts_path: &Path,
    report: &mut DrainReport,
) -> Result<Option<Known>> {
    let log = local::read_log(cuts_path)?;
    let n = match (log.partitions(), seg_parts) {
        (Some(a), Some(b)) if a != b => {
            return Err(StreamError::PartitionMismatch {
                stream: stream.into(),
                existing: a,
                asked: b,
            })
        }
        (Some(a), _) | (None, Some(a)) => a,
        (None, None) => return Ok(None),
    };
    remote.ensure(stream, n)?;
    let wm = remote.watermark(stream, n)?;
    let rdir = &remote.stream_dir(stream);
    if wm.parts.len() != n as usize || wm.round > log.rounds() {
        return Err(StreamError::Invalid {
            what: format!(
                "{}: round {} with {} partitions, but this node's cut log ends at round {} with {n}: the remote was drained from another node-local root, or the cut log lost its last record (damaged: look at it)",
                rdir.join(layout::WATERMARK).display(), wm.round, wm.parts.len(), log.rounds()
            ),
        });
    }
    // The cut log is the history: fold it into each partition's state,
    // applying what the remote does not have yet. A base stands for the
    // rounds up to its own, published before it was written.
    let (mut state, mut taken, base_round) = match &log.base {
        Some(b) => {
            if wm.round < b.round || (wm.round == b.round && wm.parts != b.parts) {
                return Err(StreamError::Invalid {
                    what: format!(
                        "{}: round {}, but this node's cut log starts at a base of round {} (the rounds before it were published and their local segments released): this remote is not the one the stream was drained to, or it lost rounds",
                        rdir.join(layout::WATERMARK).display(), wm.round, b.round
                    ),
                });
            }
            (b.parts.clone(), log.taken_base(), b.round)
        }
        None => (vec![PartMark::default(); n as usize], HashMap::new(), 0),
    };
    for cut in &log.cuts {
        for (p, part) in cut.parts.iter().enumerate() {
            if part.first != state[p].next {
                return Err(corrupt(
                    cuts_path,
                    0,
                    format!(
                        "round {} starts partition {p} at offset {}, after {}",
                        cut.round, part.first, state[p].next
                    ),
                ));
            }
        }
        let after = after(cut);
        if cut.round > wm.round {
            let batches = read_ranges(cut, segs, n)?;
            let frames = part_frames(&batches, n);
            let bytes = encode_parts(cut, &frames, rdir)?;
            let round = RoundWrite {
                cut,
                bytes: &bytes,
                after: &after,
            };
            remote.apply(stream, n, round)?;
            report.replayed += 1;
        } else if cut.round == wm.round && wm.parts != after {
            return Err(corrupt(
                &rdir.join(layout::WATERMARK),
                16,
                format!(
                    "the watermark of round {} disagrees with the cut log",
                    wm.round
                ),
            ));
        }
        for r in &cut.ranges {
            taken.insert(r.producer, r.to);
        }
        state = after;
    }
    Ok(Some(Known {
        rdir: rdir.clone(),
        cuts_len: log.len,
        rounds: log.rounds(),
        base_round,
        n,
        taken,
        state,
    }))
}

/// Each partition's state once `cut` is applied.
pub fn after(cut: &Cut) -> Vec<PartMark> {
    cut.parts
        .iter()
        .map(|p| PartMark {
            next: p.first + p.count,
            seg_first: p.seg_first,
            seg_end: p.pos + p.len,
        })
        .collect()
}

/// Each partition's (events, frame bytes) in this round.
fn frame_sizes(frames: &[Vec<&[u8]>]) -> Vec<(u64, u64)> {
    frames
        .iter()
        .map(|f| (f.len() as u64, f.iter().map(|x| x.len() as u64).sum()))
        .collect()
}

/// Where each partition's batch of this round goes, given its (events,
/// frame bytes): after the last batch of its current segment, or at the
/// start of a new segment (the first, or once the current one holds
/// `roll` bytes).
pub(crate) fn plan(
    state: &[PartMark],
    sizes: &[(u64, u64)],
    roll: u64,
    stream: &str,
) -> Vec<PartCut> {
    state
        .iter()
        .zip(sizes)
        .map(|(s, &(count, body))| {
            let len = if count == 0 {
                0
            } else {
                BATCH_HEADER_LEN as u64 + COMMIT_LEN as u64 + body
            };
            let (seg_first, pos) = if count == 0 {
                (s.seg_first, s.seg_end)
            } else if s.seg_end == 0 {
                (s.seg_first, header_len(stream))
            } else if s.seg_end >= roll {
                (s.next, header_len(stream))
            } else {
                (s.seg_first, s.seg_end)
            };
            PartCut {
                first: s.next,
                count,
                seg_first,
                pos,
                len,
            }
        })
        .collect()
}

/// Each partition's frames in cut order: producers by id, batches and
/// events in the order their producer wrote them.
fn part_frames(batches: &[(u64, Vec<Batch>)], n: u32) -> Vec<Vec<&[u8]>> {
    let mut out = vec![Vec::new(); n as usize];
    for b in batches.iter().flat_map(|(_, v)| v) {
        for i in 0..b.frames.len() {
            let f = b.frame(i);
            let p = u32::from_le_bytes(f[4..8].try_into().unwrap());
            out[p as usize].push(f);
        }
    }
    out
}

/// The remote batch of each partition (empty if it has no events this
/// round); its length must be what the cut recorded.
fn encode_parts(cut: &Cut, frames: &[Vec<&[u8]>], rdir: &Path) -> Result<Vec<Vec<u8>>> {
    frames
        .iter()
        .enumerate()
        .map(|(p, f)| encode_part(cut, p as u32, f, rdir))
        .collect()
}

/// Partition `p`'s remote batch of `cut` from its frames in cut order
/// (empty if it has none this round). Its events and bytes must be what
/// the cut recorded: anything else is damage of the segments or of the
/// cut log, refused.
pub(crate) fn encode_part(cut: &Cut, p: u32, f: &[&[u8]], rdir: &Path) -> Result<Vec<u8>> {
    let part = &cut.parts[p as usize];
    let disagree = |what: &str, recorded: u64, found: String| {
        corrupt(
            rdir,
            0,
            format!(
                "round {} recorded {recorded} {what} for partition {p}, the segments {found}",
                cut.round
            ),
        )
    };
    if f.len() as u64 != part.count {
        return Err(disagree("events", part.count, format!("hold {}", f.len())));
    }
    if f.is_empty() {
        return Ok(Vec::new());
    }
    let body: usize = f.iter().map(|x| x.len()).sum();
    let mut b = Vec::with_capacity(BATCH_HEADER_LEN + body + COMMIT_LEN);
    BatchHeader {
        kind: KIND_REMOTE_BATCH,
        body: body as u64,
        count: f.len() as u32,
        partition: p,
        first: part.first,
        round: cut.round,
    }
    .encode(&mut b);
    for x in f {
        b.extend_from_slice(x);
    }
    format::encode_commit(&mut b, 0, part.pos, f.len() as u32);
    if b.len() as u64 != part.len {
        return Err(disagree("bytes", part.len, format!("make {}", b.len())));
    }
    Ok(b)
}
