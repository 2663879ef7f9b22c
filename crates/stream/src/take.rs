//! What a drain round reads from the node-local segments: the committed
//! batches past the last cut (a new round's), or the ranges a recorded
//! cut took (a round applied again), each checked to be its producer's.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use crate::drain::{DrainOptions, DrainReport};
use crate::error::{corrupt, IoContext, Result, StreamError};
use crate::format::{Cut, KIND_LOCAL_BATCH};
use crate::layout;
use crate::local::{self, LocalSeg};
use crate::segment::{self, Batch, Next};

/// Every committed batch past the last cut, within the round's budget:
/// each segment takes its share (at least one batch), starting from
/// another segment each round so that none starves, and the round stops
/// once the budget is spent. So a round's batches, and each partition's
/// remote batch, stay well below the decoder's limit (`MAX_BODY`).
/// Sorted by producer: the cut order.
pub(crate) fn take_new(
    segs: &BTreeMap<u64, LocalSeg>,
    taken: &HashMap<u64, u64>,
    rounds: u64,
    n: u32,
    opts: &DrainOptions,
    report: &mut DrainReport,
) -> Result<Vec<(u64, Vec<Batch>)>> {
    let share = opts.max_round_bytes / segs.len().max(1) as u64;
    let order: Vec<(&u64, &LocalSeg)> = segs.iter().collect();
    let start = (rounds as usize) % order.len().max(1);
    let mut new = Vec::new();
    let mut total = 0u64;
    for &(&id, seg) in order[start..].iter().chain(&order[..start]) {
        if total >= opts.max_round_bytes {
            break;
        }
        if waits_for_pred(seg, segs, taken) {
            continue;
        }
        let mut pos = taken.get(&id).copied().unwrap_or(seg.header_len);
        if pos == seg.len {
            continue; // nothing new: not even opened (past its end: damage, read_batch says so)
        }
        let file = seg.open()?;
        let mut got = Vec::new();
        let mut used = 0u64;
        while got.is_empty() || used < share {
            match segment::read_batch(&file, &seg.path, pos, seg.len, KIND_LOCAL_BATCH, n)? {
                Next::Batch(b) => {
                    check_producer(&b, id, &seg.path)?;
                    pos = b.end;
                    used += b.bytes.len() as u64;
                    got.push(b);
                }
                Next::End => break,
                Next::Torn(why) => {
                    if local::cut_torn_tail(seg, pos)? {
                        report.cut.push((seg.path.clone(), pos));
                    }
                    report.torn.push((seg.path.clone(), pos, why));
                    break;
                }
            }
        }
        total += used;
        if !got.is_empty() {
            // What the cut takes must survive a crash of the node even if
            // its producer's own fdatasync has not returned yet.
            file.sync_data().ctx("fdatasync", &seg.path)?;
            new.push((id, got));
        }
    }
    new.sort_by_key(|(id, _)| *id);
    Ok(new)
}

/// A rolled segment is not read while the segment it continues is here
/// with bytes no cut took (read at the start of the round): so the
/// producer's batches after its roll go into later rounds than those
/// before, and its order holds in every partition.
fn waits_for_pred(
    seg: &LocalSeg,
    segs: &BTreeMap<u64, LocalSeg>,
    taken: &HashMap<u64, u64>,
) -> bool {
    let Some(pred) = seg.pred.and_then(|p| segs.get(&p).map(|s| (p, s))) else {
        return false;
    };
    taken.get(&pred.0).copied().unwrap_or(pred.1.header_len) < pred.1.len
}

pub(crate) fn check_producer(b: &Batch, id: u64, path: &Path) -> Result<()> {
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
pub(crate) fn read_ranges(
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
            segment::read_committed(&seg.open()?, &seg.path, r.from, r.to, KIND_LOCAL_BATCH, n)?;
        for b in &batches {
            check_producer(b, r.producer, &seg.path)?;
        }
        out.push((r.producer, batches));
    }
    Ok(out)
}
