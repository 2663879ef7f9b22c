//! The cut log's base record (kind 12, format version 2;
//! docs/streams-format.md): what the log's history up to a round gave,
//! so that the cut records up to that round can be dropped once they are
//! published and the local segments they name released. Re-exported by
//! `format`.

use std::path::Path;

use crate::error::{corrupt, Result};
use crate::format::{
    check_record, common, put_u64s, seal, u32_at, u64_at, u64s, KIND_BASE, MAGIC_BASE,
    MAX_PARTITIONS,
};
use crate::records::PartMark;

/// The fixed part of the record, before its rows.
const HEAD: usize = 32;

/// The state after round `round`: each partition's (next offset, last
/// segment, where its valid bytes end), as the watermark of that round
/// holds it, and per producer whose segment the node still holds, where
/// the last cut's range of its segment ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Base {
    pub round: u64,
    pub parts: Vec<PartMark>,
    /// By producer id, ascending.
    pub producers: Vec<(u64, u64)>,
}

impl Base {
    pub fn encode(&self) -> Vec<u8> {
        let len = HEAD + 24 * self.parts.len() + 16 * self.producers.len() + 4;
        let mut b = Vec::with_capacity(len);
        common(&mut b, MAGIC_BASE, KIND_BASE, len);
        b.extend_from_slice(&self.round.to_le_bytes());
        b.extend_from_slice(&(self.parts.len() as u32).to_le_bytes());
        b.extend_from_slice(&(self.producers.len() as u32).to_le_bytes());
        for p in &self.parts {
            put_u64s(&mut b, &[p.next, p.seg_first, p.seg_end]);
        }
        for (id, pos) in &self.producers {
            put_u64s(&mut b, &[*id, *pos]);
        }
        seal(&mut b, 0);
        b
    }

    /// Decode the record `b` (exactly its bytes), found at `offset` of `path`.
    pub fn decode(b: &[u8], path: &Path, offset: u64) -> Result<Base> {
        check_record(b, MAGIC_BASE, &[KIND_BASE], path, offset)?;
        let np = u32_at(b, 24) as usize;
        let nq = u32_at(b, 28) as usize;
        if b.len() as u64 != HEAD as u64 + 24 * np as u64 + 16 * nq as u64 + 4
            || np == 0
            || np > MAX_PARTITIONS as usize
        {
            return Err(corrupt(
                path,
                offset + 24,
                "base record's counts disagree with its length",
            ));
        }
        let round = u64_at(b, 16);
        if round == 0 {
            return Err(corrupt(path, offset + 16, "base record of round 0"));
        }
        let parts = (0..np)
            .map(|i| {
                let [next, seg_first, seg_end] = u64s(b, HEAD + 24 * i);
                PartMark {
                    next,
                    seg_first,
                    seg_end,
                }
            })
            .collect();
        let at = HEAD + 24 * np;
        let producers: Vec<(u64, u64)> = (0..nq)
            .map(|i| {
                let [id, pos] = u64s(b, at + 16 * i);
                (id, pos)
            })
            .collect();
        if let Some(i) = producers.windows(2).position(|w| w[0].0 >= w[1].0) {
            return Err(corrupt(
                path,
                offset + (at + 16 * (i + 1)) as u64,
                "base record's producers are not in ascending order",
            ));
        }
        Ok(Base {
            round,
            parts,
            producers,
        })
    }
}
