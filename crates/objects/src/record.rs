//! The array record (docs/objects-format.md): what an array version is —
//! its id, element type, shape, chunk grid and attributes — encoded with a
//! magic, a format version and a CRC-32C, and placed as the last piece of
//! the object-layout version whose other pieces are the chunks.

use std::path::Path;

use crate::error::{Error, Result};
use crate::grid::DType;
use crate::VersionId;

/// User attributes: string keys, JSON values.
pub type Attrs = serde_json::Map<String, serde_json::Value>;

pub const MAGIC: &[u8; 8] = b"PLGARRAY";
pub const FORMAT: u16 = 1;
/// The fixed part, before the shape.
const FIXED: usize = 56;
pub const MAX_NDIM: usize = 32;
/// The largest chunk (bytes): a chunk is read and checked whole.
pub const MAX_CHUNK: u64 = 1 << 30;

/// What an array is, apart from its values.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayMeta {
    pub dtype: DType,
    pub shape: Vec<u64>,
    /// The regular chunk grid's chunk shape (edge chunks are stored whole,
    /// their part outside the array as zeros, as in Zarr).
    pub chunks: Vec<u64>,
    pub attrs: Attrs,
}

impl ArrayMeta {
    pub fn new(dtype: DType, shape: &[u64], chunks: &[u64]) -> ArrayMeta {
        ArrayMeta {
            dtype,
            shape: shape.to_vec(),
            chunks: chunks.to_vec(),
            attrs: Attrs::new(),
        }
    }

    pub fn with_attrs(mut self, attrs: Attrs) -> ArrayMeta {
        self.attrs = attrs;
        self
    }

    /// Refuse what cannot be stored: no dimensions or too many, a chunk
    /// shape that does not match, an empty or too large chunk, sizes that
    /// overflow.
    pub fn check(&self, name: &str) -> Result<()> {
        let bad = |why: String| {
            Err(Error::Invalid {
                name: name.to_owned(),
                why,
            })
        };
        let d = self.shape.len();
        if d == 0 || d > MAX_NDIM {
            return bad(format!("{d} dimensions (1 to {MAX_NDIM})"));
        }
        if self.chunks.len() != d {
            return bad(format!(
                "chunk shape {:?} has {} dimensions, the shape {:?} has {d}",
                self.chunks,
                self.chunks.len(),
                self.shape
            ));
        }
        if self.chunks.contains(&0) {
            return bad(format!("chunk shape {:?} has an empty side", self.chunks));
        }
        let chunk = self
            .chunks
            .iter()
            .try_fold(self.dtype.size() as u64, |a, &c| a.checked_mul(c));
        if chunk.is_none_or(|c| c > MAX_CHUNK) {
            return bad(format!(
                "a chunk of {:?} {} is larger than {MAX_CHUNK} bytes",
                self.chunks,
                self.dtype.name()
            ));
        }
        let total = self
            .grid()
            .iter()
            .try_fold(chunk.expect("checked"), |a, &g| a.checked_mul(g));
        if total.is_none_or(|t| t > i64::MAX as u64) {
            return bad(format!("shape {:?} is too large", self.shape));
        }
        Ok(())
    }

    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// Chunks per dimension.
    pub fn grid(&self) -> Vec<u64> {
        self.shape
            .iter()
            .zip(&self.chunks)
            .map(|(s, c)| s.div_ceil(*c))
            .collect()
    }

    pub fn n_chunks(&self) -> u64 {
        self.grid().iter().product()
    }

    /// Bytes of one stored chunk (without its checksum).
    pub fn chunk_len(&self) -> u64 {
        self.chunks.iter().product::<u64>() * self.dtype.size() as u64
    }

    /// Bytes of the whole array.
    pub fn array_len(&self) -> u64 {
        self.shape.iter().product::<u64>() * self.dtype.size() as u64
    }

    /// The row-major index of a chunk, if it lies in the grid.
    pub fn linear(&self, coords: &[u64]) -> Option<u64> {
        let grid = self.grid();
        if coords.len() != grid.len() || coords.iter().zip(&grid).any(|(c, g)| c >= g) {
            return None;
        }
        Some(coords.iter().zip(&grid).fold(0, |a, (c, g)| a * g + c))
    }

    /// The extent of the chunk at grid coordinates `coords` that lies
    /// inside the array, per dimension: the chunk shape, cut at the array's
    /// edge (the rest of an edge chunk is its zero padding).
    pub fn inside(&self, coords: &[u64]) -> Vec<u64> {
        (0..self.ndim())
            .map(|d| self.chunks[d].min(self.shape[d] - coords[d] * self.chunks[d]))
            .collect()
    }

    pub fn coords(&self, mut linear: u64) -> Vec<u64> {
        let grid = self.grid();
        let mut c = vec![0; grid.len()];
        for i in (0..grid.len()).rev() {
            c[i] = linear % grid[i];
            linear /= grid[i];
        }
        c
    }
}

/// The record's bytes (docs/objects-format.md).
pub fn encode(id: &VersionId, meta: &ArrayMeta) -> Vec<u8> {
    let attrs = serde_json::to_vec(&meta.attrs).expect("a JSON map serializes");
    let d = meta.ndim();
    let mut b = Vec::with_capacity(FIXED + 16 * d + attrs.len() + 4);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&FORMAT.to_le_bytes());
    b.push(meta.dtype.code());
    b.push(d as u8);
    b.extend_from_slice(&0u32.to_le_bytes()); // flags
    b.extend_from_slice(id);
    b.extend_from_slice(&meta.chunk_len().to_le_bytes());
    b.extend_from_slice(&meta.n_chunks().to_le_bytes());
    b.extend_from_slice(&(attrs.len() as u32).to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes()); // reserved
    for v in meta.shape.iter().chain(&meta.chunks) {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.extend_from_slice(&attrs);
    let crc = paralog_checksum::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// Decode and check a record: magic, format, checksum, lengths, the type,
/// the grid against the recorded chunk size and count, attributes a JSON
/// object. `path` names where it came from in errors.
pub fn decode(b: &[u8], path: &Path) -> Result<(VersionId, ArrayMeta)> {
    let bad = |offset: usize, what: String| Error::Damaged {
        path: path.to_path_buf(),
        offset: offset as u64,
        what,
    };
    let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
    let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
    if b.len() < FIXED + 4 {
        return Err(bad(
            b.len(),
            format!("array record of {} bytes is too short", b.len()),
        ));
    }
    if &b[..8] != MAGIC {
        return Err(bad(0, "not an array record (bad magic)".into()));
    }
    let end = b.len() - 4;
    if paralog_checksum::crc32c(&b[..end]) != u32_at(end) {
        return Err(bad(end, "array record checksum mismatch".into()));
    }
    let format = u16::from_le_bytes([b[8], b[9]]);
    if format != FORMAT {
        return Err(bad(
            8,
            format!("array record format {format} is not understood"),
        ));
    }
    let dtype =
        DType::from_code(b[10]).ok_or_else(|| bad(10, format!("unknown type code {}", b[10])))?;
    let d = b[11] as usize;
    if d == 0 || d > MAX_NDIM {
        return Err(bad(11, format!("{d} dimensions")));
    }
    if u32_at(12) != 0 || u32_at(52) != 0 {
        return Err(bad(12, "unknown flags or reserved bytes set".into()));
    }
    let id: VersionId = b[16..32].try_into().expect("16 bytes");
    let alen = u32_at(48) as usize;
    if FIXED + 16 * d + alen != end {
        return Err(bad(48, "lengths do not add up".into()));
    }
    let dims = |at: usize| (0..d).map(|i| u64_at(at + 8 * i)).collect::<Vec<_>>();
    let (shape, chunks) = (dims(FIXED), dims(FIXED + 8 * d));
    let attrs: Attrs = serde_json::from_slice(&b[FIXED + 16 * d..end]).map_err(|e| {
        bad(
            FIXED + 16 * d,
            format!("attributes are not a JSON object: {e}"),
        )
    })?;
    let meta = ArrayMeta {
        dtype,
        shape,
        chunks,
        attrs,
    };
    meta.check("array record")
        .map_err(|e| bad(FIXED, e.to_string()))?;
    if meta.chunk_len() != u64_at(32) || meta.n_chunks() != u64_at(40) {
        return Err(bad(
            32,
            "chunk size or count does not match the grid".into(),
        ));
    }
    Ok((id, meta))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> ArrayMeta {
        let mut a = Attrs::new();
        a.insert("units".into(), "K".into());
        ArrayMeta::new(DType::F32, &[10, 7], &[4, 3]).with_attrs(a)
    }

    #[test]
    fn round_trip_and_grid() {
        let m = meta();
        assert_eq!(m.grid(), [3, 3]);
        assert_eq!(m.chunk_len(), 48);
        assert_eq!(m.linear(&[2, 1]), Some(7));
        assert_eq!(m.coords(7), [2, 1]);
        assert_eq!(m.linear(&[3, 0]), None);
        let b = encode(&[7; 16], &m);
        assert_eq!(decode(&b, Path::new("x")).unwrap(), ([7; 16], m));
    }

    #[test]
    fn every_flipped_byte_is_refused() {
        let b = encode(&[1; 16], &meta());
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x10;
            assert!(decode(&c, Path::new("x")).is_err(), "byte {i}");
        }
        assert!(decode(&b[..b.len() - 1], Path::new("x")).is_err());
    }

    #[test]
    fn bad_meta_is_refused() {
        for m in [
            ArrayMeta::new(DType::I8, &[], &[]),
            ArrayMeta::new(DType::I8, &[4], &[0]),
            ArrayMeta::new(DType::I8, &[4, 4], &[2]),
            ArrayMeta::new(DType::F64, &[1 << 20, 1 << 20], &[1 << 15, 1 << 15]),
        ] {
            assert!(m.check("a").is_err(), "{m:?}");
        }
    }
}
