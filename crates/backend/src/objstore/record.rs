//! The version record: its pieces, encoding and decoding (docs/objstore.md).

use std::path::Path;

use super::*;
use crate::EpochId;

const MAGIC: &[u8; 8] = b"PLGOBJVR";
/// Version 1: no origin; version 2: the header grows by the 16-byte origin.
const FORMAT_V1: u16 = 1;
const FORMAT_V2: u16 = 2;
const KIND_VERSION: u16 = 1;
const HEADER_V1: usize = 64;
const HEADER_V2: usize = 80;
pub(super) const PIECE_LEN: usize = 64;
const FLAG_DELETED: u32 = 1;

/// One file range of a version: bytes `[skip, skip + len)` of a block of a
/// chunk. The block's CRC covers the whole block, so a reader reads and
/// checks the whole block even when it needs part of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub file_off: u64,
    pub len: u64,
    pub chunk: [u8; 16],
    /// Which storage directory holds the chunk (`data/<dir>/`).
    pub dir: u32,
    pub block_off: u64,
    pub block_len: u64,
    pub block_crc: u32,
    pub skip: u64,
}

/// A published version of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    pub number: u64,
    pub size: u64,
    pub deleted: bool,
    /// The epoch (open, epoch) it was drained from; 0:0 if none.
    pub epoch: EpochId,
    /// Which log the epoch came from (crate::EpochShape::origin); zero if
    /// unknown (version 1 records, puts outside a drain).
    pub origin: [u8; 16],
    pub name: Vec<u8>,
    /// Sorted by `file_off`, not overlapping; what they do not cover reads
    /// as zeros.
    pub pieces: Vec<Piece>,
}

impl Piece {
    /// The piece's 64 bytes, as in a version record (docs/objstore.md).
    pub fn encode_into(&self, b: &mut Vec<u8>) {
        b.extend_from_slice(&self.file_off.to_le_bytes());
        b.extend_from_slice(&self.len.to_le_bytes());
        b.extend_from_slice(&self.chunk);
        b.extend_from_slice(&self.block_off.to_le_bytes());
        b.extend_from_slice(&self.block_len.to_le_bytes());
        b.extend_from_slice(&self.block_crc.to_le_bytes());
        b.extend_from_slice(&self.dir.to_le_bytes());
        b.extend_from_slice(&self.skip.to_le_bytes());
    }

    /// From exactly [`PIECE_LEN`] bytes (unchecked: the caller validates).
    pub(super) fn decode(b: &[u8]) -> Piece {
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        Piece {
            file_off: u64_at(0),
            len: u64_at(8),
            chunk: b[16..32].try_into().expect("16 bytes"),
            block_off: u64_at(32),
            block_len: u64_at(40),
            block_crc: u32_at(48),
            dir: u32_at(52),
            skip: u64_at(56),
        }
    }
}

impl Version {
    /// Version 1 when the origin is unknown (so a version 1 record encodes
    /// back to its own bytes), else version 2.
    pub fn encode(&self) -> Vec<u8> {
        let (format, header) = if self.origin == [0; 16] {
            (FORMAT_V1, HEADER_V1)
        } else {
            (FORMAT_V2, HEADER_V2)
        };
        let mut b =
            Vec::with_capacity(header + self.name.len() + self.pieces.len() * PIECE_LEN + 4);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&format.to_le_bytes());
        b.extend_from_slice(&KIND_VERSION.to_le_bytes());
        b.extend_from_slice(&(header as u32).to_le_bytes());
        b.extend_from_slice(&self.number.to_le_bytes());
        b.extend_from_slice(&self.size.to_le_bytes());
        b.extend_from_slice(&self.epoch.gen.to_le_bytes());
        b.extend_from_slice(&self.epoch.epoch.to_le_bytes());
        b.extend_from_slice(&(self.pieces.len() as u32).to_le_bytes());
        b.extend_from_slice(&(if self.deleted { FLAG_DELETED } else { 0 }).to_le_bytes());
        b.extend_from_slice(&(self.name.len() as u16).to_le_bytes());
        b.resize(HEADER_V1, 0);
        if format == FORMAT_V2 {
            b.extend_from_slice(&self.origin);
        }
        b.extend_from_slice(&self.name);
        for p in &self.pieces {
            p.encode_into(&mut b);
        }
        let crc = paralog_checksum::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8], path: &Path) -> Result<Version, ObjError> {
        let bad = |offset: usize, what: String| ObjError::Damaged {
            path: path.to_path_buf(),
            offset: offset as u64,
            what,
        };
        let u16_at = |o: usize| u16::from_le_bytes(b[o..o + 2].try_into().expect("2 bytes"));
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        if b.len() < HEADER_V1 + 4 {
            return Err(bad(
                b.len(),
                format!("record of {} bytes is too short", b.len()),
            ));
        }
        let end = b.len() - 4;
        if paralog_checksum::crc32c(&b[..end]) != u32_at(end) {
            return Err(bad(end, "checksum mismatch".into()));
        }
        if &b[..8] != MAGIC {
            return Err(bad(0, "not a version record (bad magic)".into()));
        }
        let header = match (u16_at(8), u16_at(10)) {
            (FORMAT_V1, KIND_VERSION) => HEADER_V1,
            (FORMAT_V2, KIND_VERSION) => HEADER_V2,
            (f, k) => return Err(bad(8, format!("format {f} kind {k} is not understood"))),
        };
        if u32_at(12) as usize != header || b.len() < header + 4 {
            return Err(bad(12, "bad header length".into()));
        }
        if b[58..HEADER_V1].iter().any(|&x| x != 0) {
            return Err(bad(58, "reserved header bytes are not zero".into()));
        }
        let origin: [u8; 16] = if header == HEADER_V2 {
            b[HEADER_V1..HEADER_V2].try_into().expect("16 bytes")
        } else {
            [0; 16]
        };
        let n = u32_at(48) as usize;
        let flags = u32_at(52);
        let name_len = u16_at(56) as usize;
        if flags & !FLAG_DELETED != 0 {
            return Err(bad(52, format!("unknown flags {flags:#x}")));
        }
        if header + name_len + n * PIECE_LEN != end {
            return Err(bad(48, "lengths do not add up".into()));
        }
        let name = b[header..header + name_len].to_vec();
        let mut pieces = Vec::with_capacity(n);
        let mut prev_end = 0;
        for i in 0..n {
            let o = header + name_len + i * PIECE_LEN;
            let p = Piece::decode(&b[o..o + PIECE_LEN]);
            if p.len == 0
                || p.file_off < prev_end
                || p.skip.checked_add(p.len).is_none_or(|e| e > p.block_len)
            {
                return Err(bad(
                    o,
                    format!("piece {i} is out of order or out of its block"),
                ));
            }
            prev_end = p.file_off + p.len;
            pieces.push(p);
        }
        let size = u64_at(24);
        if prev_end > size {
            return Err(bad(24, "pieces reach past the size".into()));
        }
        Ok(Version {
            number: u64_at(16),
            size,
            deleted: flags & FLAG_DELETED != 0,
            epoch: EpochId::new(u64_at(32), u64_at(40)),
            origin,
            name,
            pieces,
        })
    }
}
