//! Compaction and expiry on an object remote, run by the drain in each
//! round after the round's objects are PUT and before the index is
//! (docs/streams.md "Object remotes"). Each round writes one object per
//! partition, so a stream drained often is many small objects; runs of
//! them are rewritten as one object covering the same offsets (the same
//! batches under one header, each commit record naming its position in
//! the new object: the same events, not the same bytes), PUT before the
//! index that names it; the small ones are retired and deleted once a
//! grace period of rounds has passed, before the index without them is
//! PUT. Everything here is a function of the index and the objects, so a
//! re-drain (after a crash, or of a copied root into a fresh remote)
//! compacts the same runs into the same bytes.

use std::path::PathBuf;

use crate::error::{corrupt, Result};
use crate::format::{self, Header, COMMIT_LEN, KIND_PART_SEGMENT, KIND_REMOTE_BATCH};
use crate::object_remote::{stream_key, ObjectStore};
use crate::objects::{object_key, Object, ObjectIndex};
use crate::segment::{self, Next};

/// When the drain compacts, and how long retired objects stay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compaction {
    /// Objects smaller than this are compacted (0: never)...
    pub small: u64,
    /// ...once at least this many are adjacent (at least 2): a compacted
    /// object still small is rewritten with the next run, so this bounds
    /// the bytes rewritten per round to about `small / (min_run - 1)`.
    pub min_run: usize,
    /// No compacted object passes this.
    pub max: u64,
    /// Rounds a retired object stays after the round that retired it, for
    /// readers holding an older index (at the server's 100 ms, 10 s).
    pub grace: u64,
}

impl Default for Compaction {
    fn default() -> Self {
        Compaction {
            small: 1 << 20,
            min_run: 8,
            max: 64 << 20,
            grace: 100,
        }
    }
}

impl Compaction {
    /// Every round's objects kept as written (each the POSIX drain's
    /// segment of that round, byte for byte).
    pub const OFF: Compaction = Compaction {
        small: 0,
        min_run: 2,
        max: 0,
        grace: 0,
    };
}

/// Compact the runs of small objects of `ix` (which holds round `round`
/// already) and delete the retired objects whose grace has passed; `ix`
/// is then what the round PUTs.
pub(crate) fn run<S: ObjectStore + ?Sized>(
    store: &S,
    stream: &str,
    round: u64,
    c: &Compaction,
    ix: &mut ObjectIndex,
) -> Result<()> {
    let index_path = PathBuf::from(store.describe(&stream_key(stream, crate::objects::INDEX)));
    let n = ix.parts.len() as u32;
    for (p, objs) in ix.compaction_runs(c.small, c.min_run, c.max) {
        let into = rewrite(store, stream, p, n, &objs)?;
        ix.compact(p, into, round, &index_path)?;
    }
    for (p, o) in ix.expire(round, c.grace) {
        store.delete(&stream_key(stream, &object_key(p, o.first, o.end)))?;
    }
    Ok(())
}

/// GET each object of the run, check it, and PUT their batches as one.
fn rewrite<S: ObjectStore + ?Sized>(
    store: &S,
    stream: &str,
    p: u32,
    n: u32,
    objs: &[Object],
) -> Result<Object> {
    let (first, end) = (objs[0].first, objs[objs.len() - 1].end);
    let mut out = Header {
        kind: KIND_PART_SEGMENT,
        id: 0,
        first,
        partition: p,
        partitions: n,
        name: stream.into(),
    }
    .encode();
    for o in objs {
        let key = stream_key(stream, &object_key(p, o.first, o.end));
        let path = PathBuf::from(store.describe(&key));
        let b = store.get(&key)?.ok_or_else(|| {
            corrupt(
                &path,
                0,
                "the index names this object, and the store has none",
            )
        })?;
        let h = Header::decode(&b, KIND_PART_SEGMENT, &path)?;
        if b.len() as u64 != o.bytes || h.name != stream || h.partition != p || h.first != o.first {
            return Err(corrupt(
                &path,
                0,
                "object is not the one the index names (length, stream, partition or offset)",
            ));
        }
        let (mut pos, mut next) = (h.len(), o.first);
        loop {
            match segment::read_batch(&b[..], &path, pos, b.len() as u64, KIND_REMOTE_BATCH, n)? {
                Next::Batch(batch) if batch.header.first == next && batch.header.partition == p => {
                    let at = out.len();
                    out.extend_from_slice(&batch.bytes[..batch.bytes.len() - COMMIT_LEN]);
                    format::encode_commit(&mut out, at, at as u64, batch.header.count);
                    next += u64::from(batch.header.count);
                    pos = batch.end;
                }
                Next::Batch(batch) => {
                    return Err(corrupt(
                        &path,
                        batch.pos,
                        format!(
                            "batch of partition {} at offset {} where partition {p} offset {next} was expected",
                            batch.header.partition, batch.header.first
                        ),
                    ))
                }
                Next::End if next == o.end => break,
                Next::End => {
                    return Err(corrupt(
                        &path,
                        pos,
                        format!("object ends at offset {next}, its name says {}", o.end),
                    ))
                }
                Next::Torn(why) => return Err(corrupt(&path, pos, why)),
            }
        }
    }
    store.put(&stream_key(stream, &object_key(p, first, end)), &out)?;
    Ok(Object {
        first,
        end,
        bytes: out.len() as u64,
    })
}
