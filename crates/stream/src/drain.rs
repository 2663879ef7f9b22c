//! The drain of a stream from the node-local root to a POSIX remote
//! directory, in rounds. Each round takes every committed batch that the
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
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{corrupt, IoContext, Result, StreamError};
use crate::format::{self, BatchHeader, Cut, Header, PartCut, PartMark, Range, Watermark};
use crate::format::{
    BATCH_HEADER_LEN, COMMIT_LEN, KIND_LOCAL_BATCH, KIND_PART_SEGMENT, KIND_REMOTE_BATCH,
    KIND_SEGMENT, KIND_STREAM,
};
use crate::layout;
use crate::segment::{self, Batch, Next};

#[derive(Debug, Clone, Copy)]
pub struct DrainOptions {
    /// A partition's remote segment is rolled (the next batch starts a new
    /// file) once it holds this many bytes.
    pub roll_bytes: u64,
    /// A round takes about this many bytes of local batches at most (at
    /// least one batch), so that a round's memory stays bounded.
    pub max_round_bytes: u64,
}

impl Default for DrainOptions {
    fn default() -> Self {
        DrainOptions {
            roll_bytes: 64 << 20,
            max_round_bytes: 64 << 20,
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
}

/// The streams that have a directory under the node-local root.
pub fn local_streams(root: &Path) -> Result<Vec<String>> {
    let dir = layout::streams_dir(root);
    let mut out = Vec::new();
    let rd = match std::fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e).ctx("list", &dir),
    };
    for ent in rd {
        let name = ent
            .ctx("list", &dir)?
            .file_name()
            .to_string_lossy()
            .into_owned();
        if format::valid_name("stream", &name).is_ok() {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

/// One round of every stream under `local` (stops at the first error).
pub fn drain_all(local: &Path, remote: &Path, opts: &DrainOptions) -> Result<Vec<DrainReport>> {
    local_streams(local)?
        .iter()
        .map(|s| drain_stream(local, remote, s, opts))
        .collect()
}

struct LocalSeg {
    path: PathBuf,
    file: File,
    header_len: u64,
    /// The length when listed: a round reads no further.
    len: u64,
}

/// Replay the cuts the remote lacks, then one new round.
pub fn drain_stream(
    local: &Path,
    remote: &Path,
    stream: &str,
    opts: &DrainOptions,
) -> Result<DrainReport> {
    format::valid_name("stream name", stream)?;
    let dir = layout::stream_dir(local, stream);
    if !dir.is_dir() {
        return Err(StreamError::UnknownStream {
            stream: stream.into(),
            root: local.to_path_buf(),
        });
    }
    let _lock = lock(&dir.join(layout::DRAIN_LOCK))?;
    let mut report = DrainReport {
        stream: stream.into(),
        ..Default::default()
    };
    let (segs, seg_parts) = local_segments(&dir, stream)?;
    let cuts_path = dir.join(layout::CUTS);
    let (cuts, cuts_len) = read_cuts(&cuts_path)?;
    let n = match (cuts.last().map(|c| c.parts.len() as u32), seg_parts) {
        (Some(a), Some(b)) if a != b => {
            return Err(StreamError::PartitionMismatch {
                stream: stream.into(),
                existing: a,
                asked: b,
            })
        }
        (Some(a), _) | (None, Some(a)) => a,
        (None, None) => return Ok(report),
    };
    let rdir = layout::stream_dir(remote, stream);
    ensure_remote(remote, &rdir, stream, n)?;
    let wm_path = rdir.join(layout::WATERMARK);
    let wm = match layout::read_small(&wm_path)? {
        Some(b) => Watermark::decode(&b, &wm_path)?,
        None => Watermark {
            round: 0,
            parts: vec![PartMark::default(); n as usize],
        },
    };
    if wm.parts.len() != n as usize || wm.round > cuts.len() as u64 {
        return Err(StreamError::Invalid {
            what: format!(
                "{}: round {} with {} partitions, but this node's cut log ends at round {} with {n}: the remote was drained from another node-local root",
                wm_path.display(), wm.round, wm.parts.len(), cuts.len()
            ),
        });
    }
    // The cut log is the history: fold it into each partition's state,
    // applying what the remote does not have yet.
    let mut state = vec![PartMark::default(); n as usize];
    for cut in &cuts {
        for (p, part) in cut.parts.iter().enumerate() {
            if part.first != state[p].next {
                return Err(corrupt(
                    &cuts_path,
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
            let batches = read_ranges(cut, &segs, n)?;
            let frames = part_frames(&batches, n);
            let bytes = encode_parts(cut, &frames, &rdir)?;
            apply(&rdir, stream, n, cut, &bytes, &after)?;
            report.replayed += 1;
        } else if cut.round == wm.round && wm.parts != after {
            return Err(corrupt(
                &wm_path,
                16,
                format!(
                    "the watermark of round {} disagrees with the cut log",
                    wm.round
                ),
            ));
        }
        state = after;
    }
    // The new round: every committed batch past the last cut.
    let mut taken: HashMap<u64, u64> = HashMap::new();
    for r in cuts.iter().flat_map(|c| &c.ranges) {
        taken.insert(r.producer, r.to);
    }
    let mut budget = opts.max_round_bytes;
    let mut new: Vec<(u64, Vec<Batch>)> = Vec::new();
    for (&id, seg) in &segs {
        let mut pos = taken.get(&id).copied().unwrap_or(seg.header_len);
        let mut got = Vec::new();
        while budget > 0 {
            match segment::read_batch(&seg.file, &seg.path, pos, seg.len, KIND_LOCAL_BATCH, n)? {
                Next::Batch(b) => {
                    check_producer(&b, id, &seg.path)?;
                    pos = b.end;
                    budget = budget.saturating_sub(b.bytes.len() as u64);
                    got.push(b);
                }
                Next::End => break,
                Next::Torn(why) => {
                    report.torn.push((seg.path.clone(), pos, why));
                    break;
                }
            }
        }
        if !got.is_empty() {
            // What the cut takes must survive a crash of the node even if
            // its producer's own fdatasync has not returned yet.
            seg.file.sync_data().ctx("fdatasync", &seg.path)?;
            new.push((id, got));
        }
    }
    if new.is_empty() {
        return Ok(report);
    }
    let frames = part_frames(&new, n);
    let round = cuts.len() as u64 + 1;
    let parts = plan(&state, &frames, opts.roll_bytes, stream);
    let ranges = new
        .iter()
        .map(|(id, b)| Range {
            producer: *id,
            from: b[0].pos,
            to: b.last().unwrap().end,
        })
        .collect();
    let cut = Cut {
        round,
        ranges,
        parts,
    };
    append_cut(&cuts_path, cuts_len, &cut)?;
    let bytes = encode_parts(&cut, &frames, &rdir)?;
    let after = after(&cut);
    apply(&rdir, stream, n, &cut, &bytes, &after)?;
    report.round = Some(round);
    report.events = cut.parts.iter().map(|p| p.count).sum();
    report.bytes = cut.parts.iter().map(|p| p.len).sum();
    Ok(report)
}

/// Each partition's state once `cut` is applied.
fn after(cut: &Cut) -> Vec<PartMark> {
    cut.parts
        .iter()
        .map(|p| PartMark {
            next: p.first + p.count,
            seg_first: p.seg_first,
            seg_end: p.pos + p.len,
        })
        .collect()
}

fn header_len(stream: &str) -> u64 {
    52 + stream.len() as u64
}

/// Where each partition's batch of this round goes: after the last batch
/// of its current segment, or at the start of a new segment (the first,
/// or once the current one holds `roll` bytes).
fn plan(state: &[PartMark], frames: &[Vec<&[u8]>], roll: u64, stream: &str) -> Vec<PartCut> {
    state
        .iter()
        .zip(frames)
        .map(|(s, f)| {
            let len = if f.is_empty() {
                0
            } else {
                (BATCH_HEADER_LEN + COMMIT_LEN + f.iter().map(|x| x.len()).sum::<usize>()) as u64
            };
            let (seg_first, pos) = if f.is_empty() {
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
                count: f.len() as u64,
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
    let mut out = Vec::with_capacity(frames.len());
    for (p, (part, f)) in cut.parts.iter().zip(frames).enumerate() {
        if f.len() as u64 != part.count {
            return Err(corrupt(
                rdir,
                0,
                format!(
                    "round {} recorded {} events for partition {p}, the segments hold {}",
                    cut.round,
                    part.count,
                    f.len()
                ),
            ));
        }
        if f.is_empty() {
            out.push(Vec::new());
            continue;
        }
        let body: usize = f.iter().map(|x| x.len()).sum();
        let mut b = Vec::with_capacity(BATCH_HEADER_LEN + body + COMMIT_LEN);
        BatchHeader {
            kind: KIND_REMOTE_BATCH,
            body: body as u64,
            count: f.len() as u32,
            partition: p as u32,
            first: part.first,
            round: cut.round,
        }
        .encode(&mut b);
        for x in f {
            b.extend_from_slice(x);
        }
        format::encode_commit(&mut b, 0, part.pos, f.len() as u32);
        if b.len() as u64 != part.len {
            return Err(corrupt(
                rdir,
                0,
                format!(
                    "round {} recorded {} bytes for partition {p}, the segments make {}",
                    cut.round,
                    part.len,
                    b.len()
                ),
            ));
        }
        out.push(b);
    }
    Ok(out)
}

/// Write each partition's batch at its recorded position (cutting
/// whatever an interrupted earlier attempt left past it), fsync, then
/// publish the watermark. Applying a cut twice writes the same bytes.
fn apply(
    rdir: &Path,
    stream: &str,
    n: u32,
    cut: &Cut,
    bytes: &[Vec<u8>],
    after: &[PartMark],
) -> Result<()> {
    for (p, (part, b)) in cut.parts.iter().zip(bytes).enumerate() {
        if part.count == 0 {
            continue;
        }
        let pdir = layout::part_dir(rdir, p as u32);
        layout::create_dirs(rdir, &pdir, 0o755)?;
        let path = layout::part_segment(rdir, p as u32, part.seg_first);
        let existed = path.exists();
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(&path)
            .ctx("open", &path)?;
        if part.pos == header_len(stream) {
            let h = Header {
                kind: KIND_PART_SEGMENT,
                id: 0,
                first: part.seg_first,
                partition: p as u32,
                partitions: n,
                name: stream.into(),
            };
            f.write_all_at(&h.encode(), 0).ctx("write", &path)?;
        }
        f.write_all_at(b, part.pos).ctx("write", &path)?;
        f.set_len(part.pos + part.len).ctx("truncate", &path)?;
        f.sync_all().ctx("fsync", &path)?;
        if !existed {
            layout::sync_dir(&pdir)?;
        }
    }
    let wm = Watermark {
        round: cut.round,
        parts: after.to_vec(),
    };
    layout::write_atomic(&rdir.join(layout::WATERMARK), &wm.encode(), 0o644)
}

/// The remote stream's directory and description (written once).
fn ensure_remote(remote: &Path, rdir: &Path, stream: &str, n: u32) -> Result<()> {
    if !remote.is_dir() {
        return Err(StreamError::Invalid {
            what: format!("remote {} is not a directory", remote.display()),
        });
    }
    layout::create_dirs(remote, rdir, 0o755)?;
    let path = rdir.join(layout::STREAM_RECORD);
    match layout::read_small(&path)? {
        Some(b) => {
            let h = Header::decode(&b, KIND_STREAM, &path)?;
            if h.name != stream || h.partitions != n {
                return Err(StreamError::PartitionMismatch {
                    stream: stream.into(),
                    existing: h.partitions,
                    asked: n,
                });
            }
            Ok(())
        }
        None => {
            let h = Header {
                kind: KIND_STREAM,
                id: 0,
                first: 0,
                partition: 0,
                partitions: n,
                name: stream.into(),
            };
            layout::write_atomic(&path, &h.encode(), 0o644)
        }
    }
}

fn check_producer(b: &Batch, id: u64, path: &Path) -> Result<()> {
    for (i, e) in b.events().enumerate() {
        if e.producer != id || e.seq != b.header.first + i as u64 {
            return Err(corrupt(
                path,
                b.pos,
                format!(
                    "event {i} of the batch is producer {:016x} seq {}, not {id:016x} seq {}",
                    e.producer,
                    e.seq,
                    b.header.first + i as u64
                ),
            ));
        }
    }
    Ok(())
}

/// The batches a recorded cut took: they were committed, so anything
/// else in those ranges is damage.
fn read_ranges(
    cut: &Cut,
    segs: &BTreeMap<u64, LocalSeg>,
    n: u32,
) -> Result<Vec<(u64, Vec<Batch>)>> {
    let mut out = Vec::with_capacity(cut.ranges.len());
    for r in &cut.ranges {
        let seg = segs.get(&r.producer).ok_or_else(|| StreamError::Invalid {
            what: format!(
                "round {} names segment {}, which this node no longer holds",
                cut.round,
                layout::segment_name(r.producer)
            ),
        })?;
        let batches =
            segment::read_committed(&seg.file, &seg.path, r.from, r.to, KIND_LOCAL_BATCH, n)?;
        for b in &batches {
            check_producer(b, r.producer, &seg.path)?;
        }
        out.push((r.producer, batches));
    }
    Ok(out)
}

/// The segments of a stream on this node, by producer, and their
/// partition count (they must agree).
fn local_segments(dir: &Path, stream: &str) -> Result<(BTreeMap<u64, LocalSeg>, Option<u32>)> {
    let mut out = BTreeMap::new();
    let mut parts: Option<u32> = None;
    for ent in std::fs::read_dir(dir).ctx("list", dir)? {
        let ent = ent.ctx("list", dir)?;
        let Some(id) = layout::parse_segment_name(&ent.file_name().to_string_lossy()) else {
            continue;
        };
        let path = ent.path();
        let file = File::open(&path).ctx("open", &path)?;
        let len = file.metadata().ctx("stat", &path)?.len();
        let head = crate::producer::read_head(&path)?;
        if head.len() < 52 || (len as usize) < 52 + stream.len() + 4 {
            continue; // its producer is writing the header now
        }
        let h = Header::decode(&head, KIND_SEGMENT, &path)?;
        if h.name != stream || h.id != id {
            return Err(corrupt(
                &path,
                16,
                format!("header names stream {} producer {:016x}", h.name, h.id),
            ));
        }
        match parts {
            Some(p) if p != h.partitions => {
                return Err(StreamError::PartitionMismatch {
                    stream: stream.into(),
                    existing: p,
                    asked: h.partitions,
                })
            }
            _ => parts = Some(h.partitions),
        }
        out.insert(
            id,
            LocalSeg {
                path,
                file,
                header_len: h.len(),
                len,
            },
        );
    }
    Ok((out, parts))
}

/// The cut log's records, and where its valid part ends. A torn last
/// record (a crash while appending it, before its fdatasync returned:
/// never applied) is ignored and overwritten by the next cut.
pub fn read_cuts(path: &Path) -> Result<(Vec<Cut>, u64)> {
    let b = layout::read_small(path)?.unwrap_or_default();
    let mut cuts = Vec::new();
    let mut pos = 0usize;
    while pos < b.len() {
        let Some(len) = format::record_len(&b[pos..]) else {
            break;
        };
        if len < 36 || pos + len > b.len() {
            break;
        }
        match Cut::decode(&b[pos..pos + len], path, pos as u64) {
            Ok(c) => {
                if c.round != cuts.len() as u64 + 1 {
                    return Err(corrupt(
                        path,
                        pos as u64,
                        format!(
                            "cut of round {} where round {} was expected",
                            c.round,
                            cuts.len() + 1
                        ),
                    ));
                }
                cuts.push(c);
            }
            Err(_) if pos + len == b.len() => break,
            Err(e) => return Err(e),
        }
        pos += len;
    }
    Ok((cuts, pos as u64))
}

/// Append a cut record after the valid part of the log: one write, one
/// fdatasync (and a directory fsync when the log is created).
fn append_cut(path: &Path, at: u64, cut: &Cut) -> Result<()> {
    let existed = path.exists();
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .ctx("open", path)?;
    let rec = cut.encode();
    f.write_all_at(&rec, at).ctx("write", path)?;
    f.set_len(at + rec.len() as u64).ctx("truncate", path)?;
    f.sync_data().ctx("fdatasync", path)?;
    if !existed {
        layout::sync_dir(path.parent().unwrap())?;
    }
    Ok(())
}

/// The stream's drain lock (flock, released when the file closes): one
/// drain of a stream at a time, whoever runs it.
fn lock(path: &Path) -> Result<File> {
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .ctx("open", path)?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error()).ctx("flock", path);
    }
    Ok(f)
}
