//! What a drain round writes for each partition (docs/streams.md, the
//! drain): where its batch goes on the remote (after the last batch of its
//! segment, or at the start of a new one), its events in cut order, and
//! the batch's bytes, checked against what the cut recorded. The same for
//! a one-node drain (`drain.rs`) and a server job's owners (`nodes.rs`).

use std::path::Path;

use crate::error::{corrupt, Result};
use crate::format::{self, BatchHeader, Cut, PartCut, PartMark};
use crate::format::{BATCH_HEADER_LEN, COMMIT_LEN, KIND_REMOTE_BATCH};
use crate::publish::header_len;
use crate::segment::Batch;

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
pub(crate) fn frame_sizes(frames: &[Vec<&[u8]>]) -> Vec<(u64, u64)> {
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
pub(crate) fn part_frames(batches: &[(u64, Vec<Batch>)], n: u32) -> Vec<Vec<&[u8]>> {
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
pub(crate) fn encode_parts(cut: &Cut, frames: &[Vec<&[u8]>], rdir: &Path) -> Result<Vec<Vec<u8>>> {
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
