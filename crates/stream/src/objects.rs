//! The layout of a stream on an object remote (S3, the object layout;
//! docs/streams.md "Object remotes", docs/streams-format.md kind 10): the
//! object names and the object index, the record that replaces the POSIX
//! watermark there.
//!
//! An object store has no append and no rename, and a listing is neither
//! atomic nor cheap, so each round's partition batch is its own immutable
//! object named by the offsets it covers, and one small index object,
//! replaced last, names every object a reader may read: a reader never
//! lists. A compacted object covers the offsets of several small ones
//! under a new name (its end differs), so no name is ever rewritten with
//! other bytes; the small ones stay in the index's retired list until a
//! grace period of rounds has passed, so that a reader holding an older
//! index still finds them.
//!
//! ```text
//! <prefix>/.paralog-streams/<stream>/
//!     stream                                  the description (kind 3)
//!     index                                   the object index (kind 10)
//!     p<partition:05>/<first:020>-<end:020>   offsets first..end: a part
//!                                             segment header, then batches
//!     groups/<group>                          a group's offsets (kind 9)
//!     trim                                    a trim request (kind 11) the
//!                                             drain applies (object_trim.rs)
//! ```

use std::path::Path;

use crate::error::{corrupt, Result};
use crate::format::{
    check_record, common, put_u64s, seal, u32_at, u64_at, u64s, KIND_OBJECT_INDEX,
    MAGIC_OBJECT_INDEX, MAX_PARTITIONS,
};

pub const INDEX: &str = "index";

/// The key of the object holding offsets `first..end` of `partition`,
/// relative to the stream's directory.
pub fn object_key(partition: u32, first: u64, end: u64) -> String {
    format!("p{partition:05}/{first:020}-{end:020}")
}

/// The partition and offsets of an object key (`None`: not one).
pub fn parse_object_key(key: &str) -> Option<(u32, u64, u64)> {
    let (dir, name) = key.split_once('/')?;
    let p = dir.strip_prefix('p').filter(|d| d.len() == 5)?;
    let (a, b) = name.split_once('-')?;
    let digits = |s: &str| s.len() == 20 && s.bytes().all(|c| c.is_ascii_digit());
    if !digits(a) || !digits(b) || !p.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let (first, end) = (a.parse().ok()?, b.parse().ok()?);
    (first < end).then_some((p.parse().ok()?, first, end))
}

/// One immutable object: offsets `first..end`, `bytes` long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Object {
    pub first: u64,
    pub end: u64,
    pub bytes: u64,
}

/// A partition's published state: offsets below `next` are readable, in
/// `objects` (ascending, contiguous, the last ending at `next`; the
/// offsets before the first were trimmed).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PartIndex {
    pub next: u64,
    pub objects: Vec<Object>,
}

/// An object replaced by a compacted one at `round`, deleted once the
/// grace period after it has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retired {
    pub partition: u32,
    pub object: Object,
    pub round: u64,
}

/// The high watermark of a stream on an object remote after `round`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectIndex {
    pub round: u64,
    pub parts: Vec<PartIndex>,
    pub retired: Vec<Retired>,
}

const HEAD: usize = 40;
const PART: usize = 16;
const OBJ: usize = 24;
const RETIRED: usize = 40;

impl ObjectIndex {
    pub fn encode(&self) -> Vec<u8> {
        let objects: usize = self.parts.iter().map(|p| p.objects.len()).sum();
        let len = HEAD + PART * self.parts.len() + OBJ * objects + RETIRED * self.retired.len() + 4;
        let mut b = Vec::with_capacity(len);
        common(&mut b, MAGIC_OBJECT_INDEX, KIND_OBJECT_INDEX, len);
        b.extend_from_slice(&self.round.to_le_bytes());
        for v in [self.parts.len(), objects, self.retired.len(), 0] {
            b.extend_from_slice(&(v as u32).to_le_bytes());
        }
        for p in &self.parts {
            b.extend_from_slice(&p.next.to_le_bytes());
            b.extend_from_slice(&(p.objects.len() as u32).to_le_bytes());
            b.extend_from_slice(&0u32.to_le_bytes());
        }
        for o in self.parts.iter().flat_map(|p| &p.objects) {
            put_u64s(&mut b, &[o.first, o.end, o.bytes]);
        }
        for r in &self.retired {
            b.extend_from_slice(&r.partition.to_le_bytes());
            b.extend_from_slice(&0u32.to_le_bytes());
            put_u64s(
                &mut b,
                &[r.object.first, r.object.end, r.object.bytes, r.round],
            );
        }
        seal(&mut b, 0);
        b
    }

    /// Decode and check an index: lengths, checksum, and that each
    /// partition's objects are contiguous and end at its high watermark.
    pub fn decode(b: &[u8], path: &Path) -> Result<ObjectIndex> {
        check_record(b, MAGIC_OBJECT_INDEX, &[KIND_OBJECT_INDEX], path, 0)?;
        let bad = |at: u64, why: String| Err(corrupt(path, at, why));
        if b.len() < HEAD + 4 {
            return bad(0, "object index shorter than its header".into());
        }
        let (n, objects, retired) = (
            u32_at(b, 24) as usize,
            u32_at(b, 28) as usize,
            u32_at(b, 32) as usize,
        );
        let want = HEAD as u64
            + (PART * n) as u64
            + (OBJ * objects) as u64
            + (RETIRED * retired) as u64
            + 4;
        if n == 0 || n > MAX_PARTITIONS as usize || u32_at(b, 36) != 0 || b.len() as u64 != want {
            return bad(24, "object index's counts disagree with its length".into());
        }
        let mut o = HEAD + PART * n;
        let mut parts = Vec::with_capacity(n);
        for p in 0..n {
            let at = HEAD + PART * p;
            let (next, count) = (u64_at(b, at), u32_at(b, at + 8) as usize);
            if u32_at(b, at + 12) != 0 || o + OBJ * count > HEAD + PART * n + OBJ * objects {
                return bad(at as u64, format!("partition {p}'s object count is wrong"));
            }
            let mut objs = Vec::with_capacity(count);
            for _ in 0..count {
                let [first, end, bytes] = u64s(b, o);
                let obj = Object { first, end, bytes };
                let gap = objs.last().is_some_and(|l: &Object| l.end != obj.first);
                if obj.first >= obj.end || gap {
                    return bad(
                        o as u64,
                        format!("partition {p}'s objects are not contiguous"),
                    );
                }
                objs.push(obj);
                o += OBJ;
            }
            if objs.last().is_some_and(|l| l.end != next) {
                return bad(
                    at as u64,
                    format!("partition {p}'s high watermark {next} is not where its objects end"),
                );
            }
            parts.push(PartIndex {
                next,
                objects: objs,
            });
        }
        if o != HEAD + PART * n + OBJ * objects {
            return bad(
                28,
                "object count disagrees with the partitions' counts".into(),
            );
        }
        let mut out = Vec::with_capacity(retired);
        for _ in 0..retired {
            let partition = u32_at(b, o);
            let [first, end, bytes, round] = u64s(b, o + 8);
            let object = Object { first, end, bytes };
            if partition as usize >= n || u32_at(b, o + 4) != 0 || object.first >= object.end {
                return bad(
                    o as u64,
                    "retired object names no partition or offsets".into(),
                );
            }
            out.push(Retired {
                partition,
                object,
                round,
            });
            o += RETIRED;
        }
        Ok(ObjectIndex {
            round: u64_at(b, 16),
            parts,
            retired: out,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_refuse_others() {
        let k = object_key(3, 0, 14);
        assert_eq!(k, "p00003/00000000000000000000-00000000000000000014");
        assert_eq!(parse_object_key(&k), Some((3, 0, 14)));
        for bad in [
            "p3/00000000000000000000-00000000000000000014",
            "p00003/00000000000000000014-00000000000000000014",
            "p00003/0000000000000000000-00000000000000000014",
            "p00003/00000000000000000000-0000000000000000001x",
            "p00003/00000000000000000000.seg",
            "groups/g",
        ] {
            assert_eq!(parse_object_key(bad), None, "{bad}");
        }
    }

    fn index(objects: Vec<Object>, next: u64) -> ObjectIndex {
        ObjectIndex {
            round: 1,
            parts: vec![PartIndex { next, objects }],
            retired: vec![],
        }
    }

    #[test]
    fn a_gap_an_overlap_or_a_watermark_past_the_objects_is_refused() {
        let o = |first, end| Object {
            first,
            end,
            bytes: 100,
        };
        let p = Path::new("/remote/s/index");
        let ok = index(vec![o(0, 4), o(4, 9)], 9);
        assert_eq!(ObjectIndex::decode(&ok.encode(), p).unwrap(), ok);
        // Everything trimmed: no object, the high watermark kept.
        let empty = index(vec![], 9);
        assert_eq!(ObjectIndex::decode(&empty.encode(), p).unwrap(), empty);
        for (bad, why) in [
            (index(vec![o(0, 4), o(5, 9)], 9), "not contiguous"),
            (index(vec![o(0, 5), o(4, 9)], 9), "not contiguous"),
            (index(vec![o(4, 4)], 4), "not contiguous"),
            (
                index(vec![o(0, 4), o(4, 9)], 12),
                "is not where its objects end",
            ),
        ] {
            let err = ObjectIndex::decode(&bad.encode(), p)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("/remote/s/index") && err.contains(why),
                "{err}"
            );
        }
    }
}
