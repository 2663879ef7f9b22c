//! Retention on an object remote (`paralog stream trim` on S3 and the
//! object layout; docs/streams.md "Retention"). Only the drain PUTs a
//! stream's index, so a trim does not touch it: `paralog stream trim`
//! PUTs a small *trim request* (kind 11) beside it, and the drain applies
//! it after its next round ([`apply_request`]), under the node's drain
//! lock: whole objects deleted from each partition's start, never its
//! last (the one the cut log is checked against), so the watermark the
//! drain knows is unchanged and a trim never changes a round.
//!
//! Order of the store's operations, so that a crash anywhere leaves an
//! index whose objects all exist: the index with the trimmed objects
//! moved to its retired list is PUT first (readers no longer read them;
//! one holding the older index finds an object gone, reads the index
//! again and is told the offset was trimmed); then they are deleted;
//! then the index without them is PUT; then the request is deleted. A
//! crash after the first PUT leaves them retired (deleted by the expiry
//! after the grace period, as compacted ones are); a crash before the
//! request is deleted applies it again, to the same effect (its age is
//! an absolute time).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::{corrupt, Result};
use crate::format::{check_record, common, put_u64s, seal, u32_at, u64_at, KIND_TRIM, MAGIC_TRIM};
use crate::object_remote::{stream_key, ObjectStore};
use crate::objects::{object_key, Object, ObjectIndex, Retired, INDEX};
use crate::retention::Trimmed;

/// The request's key in the stream's place.
pub const TRIM_REQUEST: &str = "trim";

/// What a trim request keeps of each partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrimRule {
    /// Delete the objects the store last wrote before this time (ns since
    /// the epoch: the requester's clock minus the age asked for).
    Before(u64),
    /// Keep the newest objects holding at least this many bytes.
    KeepBytes(u64),
}

/// A trim request (docs/streams-format.md kind 11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrimRequest {
    pub rule: TrimRule,
    /// When it was asked for (ns since the epoch), for messages.
    pub asked_ns: u64,
}

const LEN: usize = 48;

impl TrimRequest {
    pub fn encode(&self) -> Vec<u8> {
        let (mode, value) = match self.rule {
            TrimRule::Before(t) => (1u32, t),
            TrimRule::KeepBytes(b) => (2, b),
        };
        let mut b = Vec::with_capacity(LEN);
        common(&mut b, MAGIC_TRIM, KIND_TRIM, LEN);
        b.extend_from_slice(&mode.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        put_u64s(&mut b, &[value, self.asked_ns]);
        b.extend_from_slice(&0u32.to_le_bytes());
        seal(&mut b, 0);
        b
    }

    pub fn decode(b: &[u8], path: &Path) -> Result<TrimRequest> {
        check_record(b, MAGIC_TRIM, &[KIND_TRIM], path, 0)?;
        if b.len() != LEN || u32_at(b, 20) != 0 || u32_at(b, 40) != 0 {
            return Err(corrupt(path, 12, "trim request of the wrong length"));
        }
        let value = u64_at(b, 24);
        let rule = match u32_at(b, 16) {
            1 => TrimRule::Before(value),
            2 => TrimRule::KeepBytes(value),
            m => {
                return Err(corrupt(
                    path,
                    16,
                    format!("trim request of unknown mode {m}"),
                ))
            }
        };
        Ok(TrimRequest {
            rule,
            asked_ns: u64_at(b, 32),
        })
    }
}

/// Nanoseconds since the epoch of `t` (0 before it).
pub fn epoch_ns(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos().min(u128::from(u64::MAX)) as u64)
}

/// PUT a trim request for `stream` (replacing one not applied yet).
pub fn request<S: ObjectStore + ?Sized>(store: &S, stream: &str, rule: TrimRule) -> Result<()> {
    let req = TrimRequest {
        rule,
        asked_ns: epoch_ns(SystemTime::now()),
    };
    store.put(&stream_key(stream, TRIM_REQUEST), &req.encode())
}

/// Whether a trim request of `stream` is waiting for the drain.
pub fn pending<S: ObjectStore + ?Sized>(store: &S, stream: &str) -> Result<bool> {
    Ok(store.get(&stream_key(stream, TRIM_REQUEST))?.is_some())
}

/// What an applied trim took from each partition, comparing the index
/// before the request with the index after it.
pub fn compare(before: &ObjectIndex, after: &ObjectIndex) -> Vec<Trimmed> {
    before
        .parts
        .iter()
        .zip(&after.parts)
        .enumerate()
        .map(|(p, (b, a))| {
            let first = a.objects.first().map_or(a.next, |o| o.first);
            let gone: Vec<&Object> = b.objects.iter().filter(|o| o.end <= first).collect();
            Trimmed {
                partition: p as u32,
                segments: gone.iter().map(|o| o.first).collect(),
                bytes: gone.iter().map(|o| o.bytes).sum(),
                first,
            }
        })
        .collect()
}

/// Apply the stream's trim request, if there is one, to the published
/// index `ix` (the drain's, after its round). What was deleted per
/// partition (empty: no request).
pub(crate) fn apply_request<S: ObjectStore + ?Sized>(
    store: &S,
    stream: &str,
    ix: &mut ObjectIndex,
) -> Result<Vec<Trimmed>> {
    let req_key = stream_key(stream, TRIM_REQUEST);
    let Some(b) = store.get(&req_key)? else {
        return Ok(Vec::new());
    };
    let req = TrimRequest::decode(&b, &PathBuf::from(store.describe(&req_key)))?;
    let index_key = stream_key(stream, INDEX);
    let before = ix.clone();
    let mut gone: Vec<(u32, Object)> = Vec::new();
    for (p, part) in ix.parts.iter_mut().enumerate() {
        let p = p as u32;
        let n = chosen(store, stream, p, &part.objects, req.rule)?;
        let first = part.objects.get(n).map_or(part.next, |o| o.first);
        gone.extend(part.objects.drain(..n).map(|o| (p, o)));
        // Compacted-away objects wholly below the new start go at once too.
        let (old, kept): (Vec<Retired>, Vec<Retired>) = std::mem::take(&mut ix.retired)
            .into_iter()
            .partition(|r| r.partition == p && r.object.end <= first);
        ix.retired = kept;
        gone.extend(old.into_iter().map(|r| (p, r.object)));
    }
    if !gone.is_empty() {
        let retired_at = ix.round;
        ix.retired
            .extend(gone.iter().map(|&(partition, object)| Retired {
                partition,
                object,
                round: retired_at,
            }));
        store.put(&index_key, &ix.encode())?;
        crate::failpoint::hit("stream.trim_retired");
        for (p, o) in &gone {
            store.delete(&stream_key(stream, &object_key(*p, o.first, o.end)))?;
        }
        ix.retired
            .retain(|r| !gone.contains(&(r.partition, r.object)));
        store.put(&index_key, &ix.encode())?;
    }
    store.delete(&req_key)?;
    Ok(compare(&before, ix))
}

/// How many of a partition's first objects the rule deletes: never the
/// last (rounds are checked against it), and from the oldest on, stopping
/// at the first kept.
fn chosen<S: ObjectStore + ?Sized>(
    store: &S,
    stream: &str,
    p: u32,
    objects: &[Object],
    rule: TrimRule,
) -> Result<usize> {
    let candidates = objects.len().saturating_sub(1);
    let mut left: u64 = objects.iter().map(|o| o.bytes).sum();
    for (i, o) in objects[..candidates].iter().enumerate() {
        let go = match rule {
            TrimRule::KeepBytes(keep) => left - o.bytes >= keep,
            TrimRule::Before(t) => {
                let key = stream_key(stream, &object_key(p, o.first, o.end));
                let at = store.modified(&key)?.ok_or_else(|| {
                    corrupt(
                        &PathBuf::from(store.describe(&key)),
                        0,
                        "the index names this object, and the store has none",
                    )
                })?;
                epoch_ns(at) < t
            }
        };
        if !go {
            return Ok(i);
        }
        left -= o.bytes;
    }
    Ok(candidates)
}

/// The rule for `--older-than age`, asked now.
pub fn older_than(age: Duration) -> TrimRule {
    TrimRule::Before(epoch_ns(SystemTime::now()).saturating_sub(age.as_nanos() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_damage_is_named() {
        let p = Path::new("/s3/b/.paralog-streams/s/trim");
        for rule in [TrimRule::Before(17), TrimRule::KeepBytes(1 << 20)] {
            let r = TrimRequest { rule, asked_ns: 99 };
            assert_eq!(TrimRequest::decode(&r.encode(), p).unwrap(), r);
        }
        let mut b = TrimRequest {
            rule: TrimRule::KeepBytes(5),
            asked_ns: 1,
        }
        .encode();
        b[26] ^= 1;
        let err = TrimRequest::decode(&b, p).unwrap_err().to_string();
        assert!(err.contains("/s3/b/.paralog-streams/s/trim"), "{err}");
    }
}
