//! A map from file ranges to where their newest bytes are: inserting a range
//! replaces whatever it overlaps (last writer wins). The writer keeps one per
//! epoch (values: log position, checksum, phase) and one across the open's
//! epochs for reads of its own bytes (values: epoch, log position); the
//! reader builds one for the logical file (values: which manifest extent
//! holds the bytes).

use std::collections::BTreeMap;

/// What a map value must know to be cut and glued.
pub trait Piece: Clone {
    /// The value for the sub-range `[skip, skip + len)` of a range of `full` bytes.
    fn slice(&self, skip: u64, len: u64, full: u64) -> Self;
    /// The value for `self` (of `len` bytes) followed directly by `next`
    /// (of `next_len` bytes), if the two can be one range.
    fn join(&self, len: u64, next: &Self, next_len: u64) -> Option<Self>;
}

/// Implements [`Piece`] for a value that is a position in one of several
/// sources (`$source`: which one, `$pos`: where in it): a sub-range starts
/// `skip` further in, and two ranges are one when they come from the same
/// source and the second starts where the first ends. The writer's own
/// bytes, the reader's logical file and the tests use this one rule.
macro_rules! position_piece {
    ($t:ident { $source:ident, $pos:ident }) => {
        impl $crate::extent_map::Piece for $t {
            fn slice(&self, skip: u64, _len: u64, _full: u64) -> Self {
                $t {
                    $source: self.$source,
                    $pos: self.$pos + skip,
                }
            }

            fn join(&self, len: u64, next: &Self, _next_len: u64) -> Option<Self> {
                (self.$source == next.$source && self.$pos + len == next.$pos)
                    .then(|| self.slice(0, len, len))
            }
        }
    };
}
pub(crate) use position_piece;

#[derive(Debug, Clone)]
pub struct ExtentMap<V> {
    /// start offset -> (length, value); ranges never overlap, never empty.
    map: BTreeMap<u64, (u64, V)>,
}

impl<V> Default for ExtentMap<V> {
    fn default() -> Self {
        ExtentMap {
            map: BTreeMap::new(),
        }
    }
}

/// One range returned by [`ExtentMap::lookup`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Covered<V> {
    pub off: u64,
    pub len: u64,
    /// `None`: no value covers this range (a hole, as far as this map knows).
    pub value: Option<V>,
}

impl<V: Piece> ExtentMap<V> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Ranges in offset order: (offset, length, value).
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64, &V)> {
        self.map.iter().map(|(&off, (len, v))| (off, *len, v))
    }

    /// End of the last range (0 when empty).
    pub fn end(&self) -> u64 {
        self.map
            .iter()
            .next_back()
            .map_or(0, |(&off, (len, _))| off + len)
    }

    /// The range that ends exactly at `off`, if any: (offset, length, value).
    pub fn ending_at(&self, off: u64) -> Option<(u64, u64, &V)> {
        self.map
            .range(..off)
            .next_back()
            .filter(|(&o, (l, _))| o + l == off)
            .map(|(&o, (l, v))| (o, *l, v))
    }

    /// Make `[off, off + len)` point at `value`, replacing what was there.
    pub fn insert(&mut self, off: u64, len: u64, value: V) {
        if len == 0 {
            return;
        }
        // An append (the range starts where the last one ends, so nothing
        // overlaps it): one map operation instead of five, as most writes
        // of a checkpoint are appends.
        if let Some(mut last) = self.map.last_entry() {
            let l_off = *last.key();
            let (l_len, l_val) = last.get_mut();
            if l_off + *l_len == off {
                match l_val.join(*l_len, &value, len) {
                    Some(joined) => {
                        *l_len += len;
                        *l_val = joined;
                    }
                    None => {
                        self.map.insert(off, (len, value));
                    }
                }
                return;
            }
        }
        let end = off + len;
        self.punch(off, end);
        let (mut off, mut len, mut value) = (off, len, value);
        // Glue to the left neighbour when contiguous (keeps appends one range).
        if let Some((&l_off, (l_len, l_val))) = self.map.range(..off).next_back() {
            if l_off + l_len == off {
                if let Some(joined) = l_val.join(*l_len, &value, len) {
                    self.map.remove(&l_off);
                    len += off - l_off;
                    off = l_off;
                    value = joined;
                }
            }
        }
        if let Some((&r_off, (r_len, r_val))) = self.map.range(off + len..).next() {
            if r_off == off + len {
                if let Some(joined) = value.join(len, r_val, *r_len) {
                    let r_len = *r_len;
                    self.map.remove(&r_off);
                    len += r_len;
                    value = joined;
                }
            }
        }
        self.map.insert(off, (len, value));
    }

    /// Drop everything at or beyond `size` (a truncation).
    pub fn truncate(&mut self, size: u64) {
        self.punch(size, u64::MAX);
    }

    /// Remove `[start, end)` from the map, cutting ranges that straddle it.
    fn punch(&mut self, start: u64, end: u64) {
        if let Some((&l_off, (l_len, l_val))) = self.map.range(..start).next_back() {
            let l_end = l_off + l_len;
            if l_end > start {
                let full = *l_len;
                let left = l_val.slice(0, start - l_off, full);
                let right = (l_end > end).then(|| {
                    (
                        end,
                        l_end - end,
                        l_val.slice(end - l_off, l_end - end, full),
                    )
                });
                self.map.insert(l_off, (start - l_off, left));
                if let Some((r_off, r_len, r_val)) = right {
                    self.map.insert(r_off, (r_len, r_val));
                    return;
                }
            }
        }
        let inside: Vec<u64> = self.map.range(start..end).map(|(&k, _)| k).collect();
        for k in inside {
            let (k_len, k_val) = self.map.remove(&k).expect("key just listed");
            let k_end = k + k_len;
            if k_end > end {
                self.map
                    .insert(end, (k_end - end, k_val.slice(end - k, k_end - end, k_len)));
            }
        }
    }

    /// Cover `[off, off + len)` with the map's ranges and the holes between.
    pub fn lookup(&self, off: u64, len: u64) -> Vec<Covered<V>> {
        let end = off + len;
        let mut out = Vec::new();
        let mut at = off;
        let first = self
            .map
            .range(..=off)
            .next_back()
            .filter(|(&k, (k_len, _))| k + k_len > off)
            .map(|(&k, _)| k)
            .unwrap_or(off);
        for (&k, (k_len, v)) in self.map.range(first..end) {
            let s = k.max(at);
            let e = (k + k_len).min(end);
            if s > at {
                out.push(Covered {
                    off: at,
                    len: s - at,
                    value: None,
                });
            }
            if e > s {
                out.push(Covered {
                    off: s,
                    len: e - s,
                    value: Some(v.slice(s - k, e - s, *k_len)),
                });
                at = e;
            }
        }
        if at < end {
            out.push(Covered {
                off: at,
                len: end - at,
                value: None,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A value that remembers which write it came from and where inside it.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct W {
        id: u32,
        skip: u64,
    }

    position_piece!(W { id, skip });

    proptest! {
        /// Every byte reads back the id of the last write that covered it.
        #[test]
        fn last_writer_wins(ops in prop::collection::vec((0u64..200, 1u64..60, any::<bool>()), 1..60)) {
            let mut map = ExtentMap::new();
            let mut model: Vec<Option<(u32, u64)>> = vec![None; 400];
            for (i, &(off, len, trunc)) in ops.iter().enumerate() {
                if trunc && i % 5 == 0 {
                    map.truncate(off);
                    for b in model.iter_mut().skip(off as usize) { *b = None; }
                } else {
                    map.insert(off, len, W { id: i as u32, skip: 0 });
                    for b in 0..len { model[(off + b) as usize] = Some((i as u32, b)); }
                }
            }
            let mut seen = vec![None; 400];
            for c in map.lookup(0, 400) {
                for b in 0..c.len {
                    seen[(c.off + b) as usize] = c.value.as_ref().map(|v| (v.id, v.skip + b));
                }
            }
            prop_assert_eq!(&seen, &model);
            // Ranges are disjoint, sorted and non-empty.
            let mut prev_end = 0;
            for (off, len, _) in map.iter() {
                prop_assert!(len > 0 && off >= prev_end);
                prev_end = off + len;
            }
        }
    }

    proptest! {
        /// Writes whose values always glue (the writer's appends): every
        /// covered byte still maps to itself, whatever the order, and
        /// neighbouring ranges are merged.
        #[test]
        fn gluing_writes(ops in prop::collection::vec((0u64..200, 1u64..60, 0u8..4), 1..80)) {
            let mut map = ExtentMap::new();
            let mut model = vec![false; 400];
            let mut end = 0u64;
            for (i, &(off, len, kind)) in ops.iter().enumerate() {
                // Half the writes append exactly where the map ends.
                let off = if kind < 2 { end.min(300) } else { off };
                if kind == 3 && i % 3 == 0 {
                    map.truncate(off);
                    for b in model.iter_mut().skip(off as usize) { *b = false; }
                } else {
                    map.insert(off, len, W { id: 0, skip: off });
                    for b in off..off + len { model[b as usize] = true; }
                }
                end = map.end();
            }
            let mut prev_end = None;
            for (off, len, v) in map.iter() {
                prop_assert_eq!(v.skip, off);
                prop_assert!(prev_end != Some(off), "touching ranges left unmerged at {}", off);
                for b in off..off + len { prop_assert!(model[b as usize]); }
                prev_end = Some(off + len);
            }
            let covered: u64 = map.iter().map(|(_, l, _)| l).sum();
            prop_assert_eq!(covered as usize, model.iter().filter(|&&b| b).count());
        }
    }

    #[test]
    fn contiguous_appends_stay_one_range() {
        let mut map = ExtentMap::new();
        for i in 0..10 {
            map.insert(
                i * 10,
                10,
                W {
                    id: 1,
                    skip: i * 10,
                },
            );
        }
        assert_eq!(map.len(), 1);
        assert_eq!(map.end(), 100);
    }
}
