//! Element types, and the arithmetic of shapes, chunk grids and boxes
//! (row-major, C order, as numpy and Zarr's default).

/// The element type of an array; values are stored little-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F32,
    F64,
}

/// (type, code in the array record, name: numpy's and Zarr v3's `data_type`).
const TABLE: [(DType, u8, &str); 10] = [
    (DType::I8, 1, "int8"),
    (DType::I16, 2, "int16"),
    (DType::I32, 3, "int32"),
    (DType::I64, 4, "int64"),
    (DType::U8, 5, "uint8"),
    (DType::U16, 6, "uint16"),
    (DType::U32, 7, "uint32"),
    (DType::U64, 8, "uint64"),
    (DType::F32, 9, "float32"),
    (DType::F64, 10, "float64"),
];

impl DType {
    pub const ALL: [DType; 10] = [
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::F32,
        DType::F64,
    ];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::I8 | DType::U8 => 1,
            DType::I16 | DType::U16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 => 8,
        }
    }

    pub fn name(self) -> &'static str {
        TABLE.iter().find(|t| t.0 == self).expect("every type").2
    }

    pub fn from_name(s: &str) -> Option<DType> {
        TABLE.iter().find(|t| t.2 == s).map(|t| t.0)
    }

    pub fn code(self) -> u8 {
        TABLE.iter().find(|t| t.0 == self).expect("every type").1
    }

    pub fn from_code(c: u8) -> Option<DType> {
        TABLE.iter().find(|t| t.1 == c).map(|t| t.0)
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64)
    }
}

/// A Rust element type with its [`DType`]: the typed API converts to and
/// from little-endian bytes through it.
pub trait Element: Copy + PartialEq + std::fmt::Debug + Send + Sync + 'static {
    const DTYPE: DType;
    fn write_le(values: &[Self], out: &mut Vec<u8>);
    /// `bytes.len()` is a multiple of the size (checked by the caller).
    fn read_le(bytes: &[u8]) -> Vec<Self>;
}

macro_rules! element {
    ($t:ty, $d:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            fn write_le(values: &[Self], out: &mut Vec<u8>) {
                out.reserve(values.len() * std::mem::size_of::<$t>());
                for v in values {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
            fn read_le(bytes: &[u8]) -> Vec<Self> {
                bytes
                    .chunks_exact(std::mem::size_of::<$t>())
                    .map(|b| <$t>::from_le_bytes(b.try_into().expect("element size")))
                    .collect()
            }
        }
    };
}
element!(i8, DType::I8);
element!(i16, DType::I16);
element!(i32, DType::I32);
element!(i64, DType::I64);
element!(u8, DType::U8);
element!(u16, DType::U16);
element!(u32, DType::U32);
element!(u64, DType::U64);
element!(f32, DType::F32);
element!(f64, DType::F64);

/// Cut the whole array `data` (row-major bytes of `meta`'s shape) into its
/// chunks, edge chunks padded with zeros, and hand each to `put` with its
/// coordinates, in grid order; the first error stops it.
pub(crate) fn for_each_chunk<E>(
    meta: &crate::record::ArrayMeta,
    data: &[u8],
    mut put: impl FnMut(&[u64], &[u8]) -> Result<(), E>,
) -> Result<(), E> {
    let d = meta.ndim();
    let isz = meta.dtype.size();
    let mut chunk = vec![0u8; meta.chunk_len() as usize];
    let mut err = None;
    for_each_index(&vec![0; d], &meta.grid(), |c| {
        if err.is_some() {
            return;
        }
        let origin: Vec<u64> = (0..d).map(|i| c[i] * meta.chunks[i]).collect();
        let n = meta.inside(c);
        // Edge chunks: the part outside the array stays zero.
        chunk.fill(0);
        copy_box(
            isz,
            data,
            &meta.shape,
            &origin,
            &mut chunk,
            &meta.chunks,
            &vec![0; d],
            &n,
        );
        if let Err(e) = put(c, &chunk) {
            err = Some(e);
        }
    });
    err.map_or(Ok(()), Err)
}

/// Calls `f` with every index tuple of the box `[lo, hi)`, last dimension
/// fastest. Nothing when the box is empty.
pub(crate) fn for_each_index(lo: &[u64], hi: &[u64], mut f: impl FnMut(&[u64])) {
    if lo.iter().zip(hi).any(|(l, h)| l >= h) {
        return;
    }
    let mut idx = lo.to_vec();
    loop {
        f(&idx);
        let mut k = idx.len();
        loop {
            if k == 0 {
                return;
            }
            k -= 1;
            idx[k] += 1;
            if idx[k] < hi[k] {
                break;
            }
            idx[k] = lo[k];
        }
    }
}

/// Row-major strides in elements.
fn strides(shape: &[u64]) -> Vec<u64> {
    let mut s = vec![1u64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Copy the box of `count` elements at `src_start` in a row-major array of
/// `src_shape` to `dst_start` in one of `dst_shape`: one `copy_from_slice`
/// per run of the last dimension, the contiguous unit of both.
#[allow(clippy::too_many_arguments)]
pub(crate) fn copy_box(
    isz: usize,
    src: &[u8],
    src_shape: &[u64],
    src_start: &[u64],
    dst: &mut [u8],
    dst_shape: &[u64],
    dst_start: &[u64],
    count: &[u64],
) {
    let d = count.len();
    if d == 0 || count.contains(&0) {
        return;
    }
    let (ss, ds) = (strides(src_shape), strides(dst_shape));
    let run = count[d - 1] as usize * isz;
    let zero = vec![0u64; d - 1];
    for_each_index(&zero, &count[..d - 1], |idx| {
        let (mut so, mut dof) = (src_start[d - 1], dst_start[d - 1]);
        for i in 0..d - 1 {
            so += (src_start[i] + idx[i]) * ss[i];
            dof += (dst_start[i] + idx[i]) * ds[i];
        }
        let (so, dof) = (so as usize * isz, dof as usize * isz);
        dst[dof..dof + run].copy_from_slice(&src[so..so + run]);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_codes_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
            assert_eq!(DType::from_code(d.code()), Some(d));
        }
        assert_eq!(DType::from_name("int128"), None);
        assert_eq!(DType::from_code(0), None);
    }

    #[test]
    fn copy_box_moves_the_right_elements() {
        // A 3x4 array of bytes 0..12; the 2x2 box at (1,1) is 5,6,9,10.
        let src: Vec<u8> = (0..12).collect();
        let mut dst = vec![0u8; 4];
        copy_box(
            1,
            &src,
            &[3, 4],
            &[1, 1],
            &mut dst,
            &[2, 2],
            &[0, 0],
            &[2, 2],
        );
        assert_eq!(dst, [5, 6, 9, 10]);
        let mut seen = Vec::new();
        for_each_index(&[0, 1], &[2, 3], |i| seen.push(i.to_vec()));
        assert_eq!(seen, [[0, 1], [0, 2], [1, 1], [1, 2]]);
    }
}
