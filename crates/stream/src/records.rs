//! The drain's records (docs/streams-format.md): the cut log's cut
//! (kind 7), the remote's high watermark (kind 8) and a reader group's
//! offsets (kind 9). Re-exported by `format`.

use std::path::Path;

use crate::error::{corrupt, Result};
use crate::format::{
    check_record, common, put_u64s, seal, u32_at, u64_at, u64s, KIND_CUT, KIND_GROUP,
    KIND_WATERMARK, MAGIC_CUT, MAGIC_GROUP, MAGIC_WATERMARK, MAX_PARTITIONS,
};

/// One partition's share of a cut: events `first..first+count` go to the
/// remote segment starting at offset `seg_first`, as one batch of `len`
/// bytes written at byte `pos` (`len` 0: none this round).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PartCut {
    pub first: u64,
    pub count: u64,
    pub seg_first: u64,
    pub pos: u64,
    pub len: u64,
}

/// Bytes `from..to` of a producer's segment (whole batches) are in a cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub producer: u64,
    pub from: u64,
    pub to: u64,
}

/// A drain round's cut: which committed batches are in, and where each
/// partition's events go. Recorded durably before it is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    pub round: u64,
    pub ranges: Vec<Range>,
    pub parts: Vec<PartCut>,
}

impl Cut {
    pub fn encode(&self) -> Vec<u8> {
        let len = 32 + 24 * self.ranges.len() + 40 * self.parts.len() + 4;
        let mut b = Vec::with_capacity(len);
        common(&mut b, MAGIC_CUT, KIND_CUT, len);
        b.extend_from_slice(&self.round.to_le_bytes());
        b.extend_from_slice(&(self.ranges.len() as u32).to_le_bytes());
        b.extend_from_slice(&(self.parts.len() as u32).to_le_bytes());
        for r in &self.ranges {
            put_u64s(&mut b, &[r.producer, r.from, r.to]);
        }
        for p in &self.parts {
            put_u64s(&mut b, &[p.first, p.count, p.seg_first, p.pos, p.len]);
        }
        seal(&mut b, 0);
        b
    }

    pub fn decode(b: &[u8], path: &Path, offset: u64) -> Result<Cut> {
        check_record(b, MAGIC_CUT, &[KIND_CUT], path, offset)?;
        let n = u32_at(b, 24) as usize;
        let np = u32_at(b, 28) as usize;
        if b.len() != 32 + 24 * n + 40 * np + 4 || np == 0 || np > MAX_PARTITIONS as usize {
            return Err(corrupt(
                path,
                offset,
                "cut record's counts disagree with its length",
            ));
        }
        let ranges = (0..n)
            .map(|i| {
                let [producer, from, to] = u64s(b, 32 + 24 * i);
                Range { producer, from, to }
            })
            .collect();
        let parts = (0..np)
            .map(|i| {
                let [first, count, seg_first, pos, len] = u64s(b, 32 + 24 * n + 40 * i);
                PartCut {
                    first,
                    count,
                    seg_first,
                    pos,
                    len,
                }
            })
            .collect();
        Ok(Cut {
            round: u64_at(b, 16),
            ranges,
            parts,
        })
    }
}

/// A partition's published state: offsets below `next` are readable; the
/// last segment starts at offset `seg_first` and its valid bytes end at
/// `seg_end` (0: no segment yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PartMark {
    pub next: u64,
    pub seg_first: u64,
    pub seg_end: u64,
}

/// The high watermark of a remote stream after round `round`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watermark {
    pub round: u64,
    pub parts: Vec<PartMark>,
}

impl Watermark {
    /// A reader group's lag in events: per partition, the events below
    /// this watermark past its committed offset, summed (an offset past
    /// the watermark counts 0).
    pub fn lag(&self, offsets: &[u64]) -> u64 {
        offsets
            .iter()
            .zip(&self.parts)
            .map(|(o, m)| m.next.saturating_sub(*o))
            .sum()
    }

    pub fn encode(&self) -> Vec<u8> {
        let len = 32 + 24 * self.parts.len() + 4;
        let mut b = Vec::with_capacity(len);
        common(&mut b, MAGIC_WATERMARK, KIND_WATERMARK, len);
        b.extend_from_slice(&self.round.to_le_bytes());
        b.extend_from_slice(&(self.parts.len() as u32).to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        for p in &self.parts {
            put_u64s(&mut b, &[p.next, p.seg_first, p.seg_end]);
        }
        seal(&mut b, 0);
        b
    }

    pub fn decode(b: &[u8], path: &Path) -> Result<Watermark> {
        check_record(b, MAGIC_WATERMARK, &[KIND_WATERMARK], path, 0)?;
        let n = partition_count(b, path, 24, 24, "watermark")?;
        let parts = (0..n)
            .map(|i| {
                let [next, seg_first, seg_end] = u64s(b, 32 + 24 * i);
                PartMark {
                    next,
                    seg_first,
                    seg_end,
                }
            })
            .collect();
        Ok(Watermark {
            round: u64_at(b, 16),
            parts,
        })
    }
}

/// The partition count of a record that holds it at `at` (a u32, then a
/// zero u32), then `entry` bytes per partition and its CRC: refused unless
/// the record is exactly that long, with at least one partition.
fn partition_count(b: &[u8], path: &Path, at: usize, entry: usize, what: &str) -> Result<usize> {
    let n = u32_at(b, at) as usize;
    if b.len() != at + 8 + entry * n + 4 || n == 0 || u32_at(b, at + 4) != 0 {
        return Err(corrupt(
            path,
            at as u64,
            format!("{what}'s partition count disagrees with its length"),
        ));
    }
    Ok(n)
}

/// A reader group's committed offsets: the next offset to deliver per partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOffsets {
    pub offsets: Vec<u64>,
}

impl GroupOffsets {
    pub fn encode(&self) -> Vec<u8> {
        let len = 24 + 8 * self.offsets.len() + 4;
        let mut b = Vec::with_capacity(len);
        common(&mut b, MAGIC_GROUP, KIND_GROUP, len);
        b.extend_from_slice(&(self.offsets.len() as u32).to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        for o in &self.offsets {
            b.extend_from_slice(&o.to_le_bytes());
        }
        seal(&mut b, 0);
        b
    }

    pub fn decode(b: &[u8], path: &Path) -> Result<GroupOffsets> {
        check_record(b, MAGIC_GROUP, &[KIND_GROUP], path, 0)?;
        let n = partition_count(b, path, 16, 8, "group record")?;
        Ok(GroupOffsets {
            offsets: (0..n).map(|i| u64_at(b, 24 + 8 * i)).collect(),
        })
    }
}
