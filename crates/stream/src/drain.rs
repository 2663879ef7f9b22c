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
use crate::format::{self, Cut, PartMark, Range};
use crate::layout;
use crate::listing::Listing;
use crate::local::{self, LocalSeg};
use crate::remote::{PosixRemote, RoundWrite, StreamRemote};
use crate::round_plan::{encode_parts, frame_sizes, part_frames};
use crate::take::{read_ranges, take_new};

pub use crate::round_plan::after;
pub(crate) use crate::round_plan::{encode_part, plan};

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
/// not the length of the history, and its segments
/// (`listing.rs`) so that a round of an idle stream costs a `stat` per
/// segment.
#[derive(Default)]
pub struct Drainer {
    known: HashMap<String, Known>,
    listings: HashMap<String, Listing>,
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
        let r = match self.idle_round(local, remote, stream, opts) {
            Ok(Some(r)) => Ok(r),
            Ok(None) => self.round(local, remote, stream, opts),
            Err(e) => Err(e),
        };
        if r.is_err() {
            self.known.remove(stream);
            self.listings.remove(stream);
        }
        r
    }

    /// The next round of every stream lists its segments and checks the
    /// remote (what a last round does: the server's when it stops).
    pub fn relist(&mut self) {
        self.listings.clear();
    }

    /// A round of a stream with nothing to do, when that is sure from
    /// the node alone: its last round here succeeded, its segments as
    /// listed now (`listing.rs`: a `stat` each) hold nothing past what
    /// the cuts took (so no flush since: a flush appends), its cut log
    /// is as that round left it, and no release can be due (the
    /// segments and the log are below the threshold). Then no lock is
    /// taken and the remote is not read (its watermark is checked again
    /// at the next round with work); only an object remote's pending
    /// trim request is looked for, under the lock. `None`: a full round.
    fn idle_round(
        &mut self,
        local: &Path,
        remote: &dyn StreamRemote,
        stream: &str,
        opts: &DrainOptions,
    ) -> Result<Option<DrainReport>> {
        let (Some(k), Some(listing)) = (self.known.get(stream), self.listings.get_mut(stream))
        else {
            return Ok(None);
        };
        let dir = layout::stream_dir(local, stream);
        if k.rdir != remote.stream_dir(stream) || listing.refresh(&dir, stream).is_err() {
            // A full round says what is wrong, if anything is.
            self.listings.remove(stream);
            return Ok(None);
        }
        let segs = &listing.segs;
        let untaken =
            |(id, s): (&u64, &LocalSeg)| *k.taken.get(id).unwrap_or(&s.header_len) != s.len;
        let held: u64 = segs.values().map(|s| s.len).sum();
        let release = opts.release_bytes != u64::MAX
            && k.rounds > 0
            && held.saturating_add(k.cuts_len) >= opts.release_bytes;
        if segs.iter().any(untaken)
            || release
            || local::log_len(&dir.join(layout::CUTS))? != k.cuts_len
        {
            return Ok(None);
        }
        let mut report = DrainReport {
            stream: stream.into(),
            ..Default::default()
        };
        if remote.works_after_rounds() {
            let _lock = local::lock(&dir.join(layout::DRAIN_LOCK))?;
            report.trimmed = remote.after_round(stream, k.n)?;
        }
        Ok(Some(report))
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
        let listing = match self.listings.remove(stream) {
            Some(mut l) => l.refresh(&dir, stream).map(|()| l)?,
            None => Listing::read(&dir, stream)?,
        };
        let report = self.locked_round(remote, stream, opts, &dir, &listing)?;
        // Segments deleted by a release: listed again next round.
        if report.released.segments.is_empty() {
            self.listings.insert(stream.into(), listing);
        }
        Ok(report)
    }

    /// A round under the stream's drain lock, from the segments as listed
    /// now.
    fn locked_round(
        &mut self,
        remote: &dyn StreamRemote,
        stream: &str,
        opts: &DrainOptions,
        dir: &Path,
        listing: &Listing,
    ) -> Result<DrainReport> {
        let mut report = DrainReport {
            stream: stream.into(),
            ..Default::default()
        };
        let (segs, seg_parts) = (&listing.segs, listing.parts);
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
            None => replay(remote, stream, segs, seg_parts, &cuts_path, &mut report)?,
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
        let new = take_new(segs, &k.taken, k.rounds, k.n, opts, &mut report)?;
        if new.is_empty() {
            report.trimmed = remote.after_round(stream, k.n)?;
            report.released = release(dir, segs, &cuts_path, &mut k, opts)?;
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
        report.released = release(dir, segs, &cuts_path, &mut k, opts)?;
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
