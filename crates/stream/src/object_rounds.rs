//! How a round changes the object index (docs/streams.md "Object
//! remotes"), apart from any I/O: the round's new objects appended, small
//! objects chosen for compaction, compacted ones swapped in (the small
//! ones retired), retired ones expired after the grace period, and where
//! a reader finds an offset. The drain on an object remote
//! (`object_remote.rs`) adds each round's objects, then compacts and
//! expires (`object_compact.rs`); each function states the order of the
//! PUTs and DELETEs it needs.

use std::path::Path;

use crate::error::{corrupt, Result, StreamError};
use crate::format::PartMark;
use crate::objects::{Object, ObjectIndex, PartIndex, Retired};

impl ObjectIndex {
    /// The index of a stream with nothing published (round 0).
    pub fn empty(partitions: u32) -> ObjectIndex {
        ObjectIndex {
            round: 0,
            parts: vec![PartIndex::default(); partitions as usize],
            retired: Vec::new(),
        }
    }

    /// Add round `round`'s objects (per partition, `None`: nothing this
    /// round). Each must start at its partition's high watermark: a cut
    /// that does not is a drain bug or a remote from elsewhere, refused.
    /// The objects are PUT before the index that names them.
    pub fn add_round(&mut self, round: u64, new: &[Option<Object>], index: &Path) -> Result<()> {
        if new.len() != self.parts.len() || round != self.round + 1 {
            return Err(StreamError::Invalid {
                what: format!(
                    "{}: round {round} with {} partitions after round {} with {}",
                    index.display(),
                    new.len(),
                    self.round,
                    self.parts.len()
                ),
            });
        }
        for (p, (part, obj)) in self.parts.iter().zip(new).enumerate() {
            if let Some(o) = obj.filter(|o| o.first != part.next || o.first >= o.end) {
                return Err(corrupt(
                    index,
                    0,
                    format!(
                        "round {round}'s object {}..{} of partition {p} does not start at its high watermark {}",
                        o.first, o.end, part.next
                    ),
                ));
            }
        }
        for (part, obj) in self.parts.iter_mut().zip(new) {
            if let Some(o) = obj {
                part.next = o.end;
                part.objects.push(*o);
            }
        }
        self.round = round;
        Ok(())
    }

    /// The runs of adjacent objects to compact: per partition, each
    /// maximal run of at least `min_run` objects smaller than `small`
    /// bytes, cut so that no compacted object passes `max` bytes. The
    /// drain GETs a run's objects, writes their batches under one header
    /// as a new object, then calls [`ObjectIndex::compact`]. A
    /// partition's last object is never in a run: it is the one the
    /// drain's cut log checks the index against ([`ObjectIndex::marks`]).
    pub fn compaction_runs(&self, small: u64, min_run: usize, max: u64) -> Vec<(u32, Vec<Object>)> {
        let mut out = Vec::new();
        for (p, part) in self.parts.iter().enumerate() {
            let mut run: Vec<Object> = Vec::new();
            let mut flush = |run: &mut Vec<Object>| {
                if run.len() >= min_run.max(2) {
                    out.push((p as u32, std::mem::take(run)));
                }
                run.clear();
            };
            let keep = part.objects.len().saturating_sub(1);
            for o in &part.objects[..keep] {
                let size: u64 = run.iter().map(|r| r.bytes).sum();
                if o.bytes >= small || size + o.bytes > max {
                    flush(&mut run);
                }
                if o.bytes < small {
                    run.push(*o);
                }
            }
            flush(&mut run);
        }
        out
    }

    /// Swap `into` (already PUT) in for the run of `partition`'s objects
    /// it covers, retiring them at round `round`. The run must be in the
    /// index exactly, else nothing changes and the error says why.
    pub fn compact(
        &mut self,
        partition: u32,
        into: Object,
        round: u64,
        index: &Path,
    ) -> Result<()> {
        let part = self
            .parts
            .get_mut(partition as usize)
            .ok_or_else(|| corrupt(index, 0, format!("no partition {partition} to compact")))?;
        let a = part.objects.iter().position(|o| o.first == into.first);
        let b = part.objects.iter().position(|o| o.end == into.end);
        let (Some(a), Some(b)) = (a, b) else {
            return Err(corrupt(
                index,
                0,
                format!(
                    "partition {partition} has no run of objects covering {}..{}",
                    into.first, into.end
                ),
            ));
        };
        if b <= a {
            return Err(corrupt(
                index,
                0,
                format!(
                    "compacting {}..{} of partition {partition} replaces one object with itself",
                    into.first, into.end
                ),
            ));
        }
        let old: Vec<Object> = part.objects.splice(a..=b, [into]).collect();
        self.retired.extend(old.into_iter().map(|object| Retired {
            partition,
            object,
            round,
        }));
        Ok(())
    }

    /// Take out the retired objects whose grace period of `grace` rounds
    /// has passed by `round`. The drain DELETEs them before it PUTs the
    /// index without them: a crash in between leaves them listed, and the
    /// next round deletes them again (a missing object is no error).
    pub fn expire(&mut self, round: u64, grace: u64) -> Vec<(u32, Object)> {
        let (gone, kept): (Vec<Retired>, Vec<Retired>) = self
            .retired
            .drain(..)
            .partition(|r| r.round.saturating_add(grace) <= round);
        self.retired = kept;
        gone.into_iter().map(|r| (r.partition, r.object)).collect()
    }

    /// The POSIX watermark's view of the index, for the drain's cut log
    /// checks: an object is what the POSIX drain writes with a segment
    /// rolled every round (`roll_bytes` 0), so each partition's last
    /// object is its last segment, ending at the object's length.
    pub fn marks(&self) -> Vec<PartMark> {
        self.parts
            .iter()
            .map(|p| match p.objects.last() {
                Some(o) => PartMark {
                    next: p.next,
                    seg_first: o.first,
                    seg_end: o.bytes,
                },
                None => PartMark {
                    next: p.next,
                    seg_first: p.next,
                    seg_end: 0,
                },
            })
            .collect()
    }

    /// The object that holds `offset` of `partition`, `None` at or past
    /// the high watermark; an offset below the first object was trimmed.
    pub fn locate(&self, stream: &str, partition: u32, offset: u64) -> Result<Option<Object>> {
        let Some(part) = self.parts.get(partition as usize) else {
            return Err(StreamError::Invalid {
                what: format!("stream {stream} has no partition {partition}"),
            });
        };
        if offset >= part.next {
            return Ok(None);
        }
        let i = part.objects.partition_point(|o| o.end <= offset);
        match part.objects.get(i) {
            Some(o) if o.first <= offset => Ok(Some(*o)),
            first => Err(StreamError::Trimmed {
                stream: stream.into(),
                partition,
                offset,
                first: first.map_or(part.next, |o| o.first),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "/remote/s/index";

    fn o(first: u64, end: u64, bytes: u64) -> Object {
        Object { first, end, bytes }
    }

    #[test]
    fn rounds_append_and_a_wrong_start_is_refused() {
        let mut ix = ObjectIndex::empty(2);
        ix.add_round(1, &[Some(o(0, 3, 90)), None], Path::new(P))
            .unwrap();
        ix.add_round(2, &[Some(o(3, 5, 60)), Some(o(0, 1, 30))], Path::new(P))
            .unwrap();
        assert_eq!(ix.parts[0].next, 5);
        assert_eq!(ix.parts[1].objects, vec![o(0, 1, 30)]);
        let before = ix.clone();
        let err = ix
            .add_round(3, &[Some(o(6, 7, 10)), None], Path::new(P))
            .unwrap_err()
            .to_string();
        assert!(err.contains(P) && err.contains("high watermark 5"), "{err}");
        assert!(ix.add_round(5, &[None, None], Path::new(P)).is_err());
        assert_eq!(ix, before);
        // What the drain publishes decodes to the same index.
        assert_eq!(ObjectIndex::decode(&ix.encode(), Path::new(P)).unwrap(), ix);
    }

    #[test]
    fn small_runs_compact_retire_and_expire_after_the_grace() {
        let mut ix = ObjectIndex::empty(1);
        let sizes = [10, 20, 5000, 30, 40, 50, 60];
        for (i, b) in sizes.iter().enumerate() {
            let i = i as u64;
            ix.add_round(i + 1, &[Some(o(i, i + 1, *b))], Path::new(P))
                .unwrap();
        }
        // Runs below 100 bytes, at most 100 bytes compacted: 0..2, 3..5
        // (60 would pass the maximum: it starts a run of one, not kept).
        let runs = ix.compaction_runs(100, 2, 100);
        assert_eq!(
            runs,
            vec![
                (0, vec![o(0, 1, 10), o(1, 2, 20)]),
                (0, vec![o(3, 4, 30), o(4, 5, 40)]),
            ]
        );
        ix.compact(0, o(0, 2, 30), 8, Path::new(P)).unwrap();
        ix.compact(0, o(3, 5, 70), 9, Path::new(P)).unwrap();
        assert_eq!(
            ix.parts[0].objects,
            vec![
                o(0, 2, 30),
                o(2, 3, 5000),
                o(3, 5, 70),
                o(5, 6, 50),
                o(6, 7, 60)
            ]
        );
        assert_eq!(ix.retired.len(), 4);
        assert_eq!(ObjectIndex::decode(&ix.encode(), Path::new(P)).unwrap(), ix);
        // A run the index does not hold is refused.
        assert!(ix.compact(0, o(1, 3, 1), 9, Path::new(P)).is_err());
        // Grace of 2 rounds: round 9 expires nothing, 10 the first two.
        assert!(ix.expire(9, 2).is_empty());
        assert_eq!(ix.expire(10, 2), vec![(0, o(0, 1, 10)), (0, o(1, 2, 20))]);
        assert_eq!(ix.expire(11, 2).len(), 2);
        assert!(ix.retired.is_empty());
    }

    #[test]
    fn locate_finds_the_object_or_says_trimmed() {
        let mut ix = ObjectIndex::empty(1);
        // Nothing published: the POSIX drain's initial state.
        assert_eq!(ix.marks(), vec![PartMark::default()]);
        ix.parts[0] = PartIndex {
            next: 9,
            objects: vec![o(3, 5, 1), o(5, 9, 1)],
        };
        assert_eq!(ix.locate("s", 0, 3).unwrap(), Some(o(3, 5, 1)));
        assert_eq!(ix.locate("s", 0, 5).unwrap(), Some(o(5, 9, 1)));
        assert_eq!(ix.locate("s", 0, 8).unwrap(), Some(o(5, 9, 1)));
        assert_eq!(ix.locate("s", 0, 9).unwrap(), None);
        let err = ix.locate("s", 0, 2).unwrap_err();
        assert!(
            matches!(err, StreamError::Trimmed { first: 3, .. }),
            "{err}"
        );
        assert!(ix.locate("s", 1, 0).is_err());
    }
}
