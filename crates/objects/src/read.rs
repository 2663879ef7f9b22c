//! Reading a version: the array record found and checked, then whole
//! chunks read and verified (the object layout checks each chunk's block
//! CRC-32C, which the version records: the chunk's bytes', or in older
//! versions the whole stored object's) before any of their bytes is used.

use paralog_backend::objstore::{ObjError, Version};

use crate::error::{Error, Result};
use crate::grid::{copy_box, for_each_index, Element};
use crate::record::{self, ArrayMeta, MAGIC};
use crate::store::{check_name, Store};
use crate::VersionId;

/// One published version of an array: what it is and where its chunks are.
#[derive(Debug, Clone)]
pub struct ArrayVersion {
    pub name: String,
    pub number: u64,
    pub id: VersionId,
    pub meta: ArrayMeta,
    pub(crate) record: Version,
}

impl Store {
    /// A version of `name` (default: the latest), its records checked:
    /// the object-layout record, the array record, and that the pieces are
    /// exactly the chunk grid (one whole chunk each, every chunk present).
    pub fn array(&self, name: &str, version: Option<u64>) -> Result<ArrayVersion> {
        check_name(name)?;
        let not_found = |why: String| Error::NotFound {
            name: name.to_owned(),
            why,
        };
        let v = match self.os.version(name.as_bytes(), version) {
            Ok(Some(v)) => v,
            Ok(None) => return Err(not_found("no version published".into())),
            Err(ObjError::NotFound { what }) => return Err(not_found(what)),
            Err(e) => return Err(e.into()),
        };
        if v.deleted {
            return Err(not_found(format!("deleted (version {})", v.number)));
        }
        let Some(last) = v.pieces.last() else {
            return Err(not_found(format!(
                "version {} is not an array (no pieces)",
                v.number
            )));
        };
        let mut head = vec![0u8; last.len as usize];
        self.os.read_range(&v, last.file_off, &mut head)?;
        let at = self
            .root()
            .join("meta")
            .join(name)
            .join(format!("v{:010}", v.number));
        if !head.starts_with(MAGIC) {
            return Err(not_found(format!(
                "version {} is not an array (a file drained by the server?)",
                v.number
            )));
        }
        checked_array(name, v, &head, at)
    }
}

/// A version record and its array record (`head`, the last piece's bytes,
/// read from `at`) checked against each other: the pieces are exactly the
/// chunk grid, one whole chunk each, every chunk present. Shared by the
/// object layout and S3 (crate::s3store).
pub(crate) fn checked_array(
    name: &str,
    v: Version,
    head: &[u8],
    at: std::path::PathBuf,
) -> Result<ArrayVersion> {
    {
        let (id, meta) = record::decode(head, &at)?;
        let damaged = |what: String| Error::Damaged {
            path: at.clone(),
            offset: 0,
            what,
        };
        let Some(last) = v.pieces.last() else {
            return Err(damaged(
                "a version with no pieces has no array record".into(),
            ));
        };
        if id != v.origin {
            return Err(damaged("the array record's id is not the version's".into()));
        }
        let (n, cb) = (meta.n_chunks(), meta.chunk_len());
        if v.pieces.len() as u64 != n + 1 || last.file_off != n * cb || v.size != n * cb + last.len
        {
            return Err(damaged(format!(
                "{} pieces for {n} chunks: not a complete array version",
                v.pieces.len()
            )));
        }
        for (i, p) in v.pieces[..n as usize].iter().enumerate() {
            let i = i as u64;
            // block_len: the chunk's bytes (the record names the chunk by
            // their CRC-32C), or the whole stored object (older versions).
            let block_len_ok = p.block_len == cb || p.block_len == cb + 4;
            if p.file_off != i * cb
                || p.len != cb
                || p.skip != 0
                || p.block_off != 0
                || !block_len_ok
            {
                return Err(damaged(format!(
                    "piece {i} is not chunk {:?} of the grid",
                    meta.coords(i)
                )));
            }
        }
        Ok(ArrayVersion {
            name: name.to_owned(),
            number: v.number,
            id,
            meta,
            record: v,
        })
    }
}

impl ArrayVersion {
    /// One whole chunk (edge chunks include their padding), verified.
    pub fn read_chunk(&self, store: &Store, linear: u64) -> Result<Vec<u8>> {
        self.stored_chunk(store, linear)
            .map_err(|why| Error::Chunk {
                name: self.name.clone(),
                version: self.number,
                chunk: self.meta.coords(linear),
                why,
            })
    }

    /// Chunk `linear`'s bytes, its whole file (bytes and trailer) read and
    /// checked against the version's record (crate::stored::check_stored:
    /// the same check as S3's, so that a file with a damaged or missing
    /// trailer, which the Zarr view's readers refuse, is refused here too);
    /// the error names the file and says why.
    fn stored_chunk(&self, store: &Store, linear: u64) -> std::result::Result<Vec<u8>, String> {
        let p = &self.record.pieces[linear as usize];
        let path = store.os.chunk_path(p.dir, &p.chunk);
        let cb = self.meta.chunk_len();
        let mut obj = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        crate::stored::check_stored(&obj, cb, p.block_crc)
            .map_err(|why| format!("{why}: file {}", path.display()))?;
        obj.truncate(cb as usize);
        Ok(obj)
    }

    /// The hyperslab of `count` elements at `start`, row-major
    /// little-endian bytes; every chunk it touches is read whole and verified.
    pub fn read(&self, store: &Store, start: &[u64], count: &[u64]) -> Result<Vec<u8>> {
        self.read_with(start, count, |i| self.read_chunk(store, i))
    }

    /// [`ArrayVersion::read`] with whole verified chunks (by linear index)
    /// from `chunk`: the object layout's or S3's.
    pub(crate) fn read_with(
        &self,
        start: &[u64],
        count: &[u64],
        mut chunk_at: impl FnMut(u64) -> Result<Vec<u8>>,
    ) -> Result<Vec<u8>> {
        let m = &self.meta;
        let d = m.ndim();
        let outside = start.len() != d
            || count.len() != d
            || (0..d).any(|i| {
                start[i]
                    .checked_add(count[i])
                    .is_none_or(|e| e > m.shape[i])
            });
        if outside {
            return Err(Error::Invalid {
                name: self.name.clone(),
                why: format!(
                    "version {}: hyperslab start {start:?} count {count:?} is outside the shape {:?}",
                    self.number, m.shape
                ),
            });
        }
        let isz = m.dtype.size();
        let mut out = vec![0u8; count.iter().product::<u64>() as usize * isz];
        let lo: Vec<u64> = (0..d).map(|i| start[i] / m.chunks[i]).collect();
        let hi: Vec<u64> = (0..d)
            .map(|i| (start[i] + count[i]).div_ceil(m.chunks[i]))
            .collect();
        let mut err = None;
        for_each_index(&lo, &hi, |c| {
            if err.is_some() {
                return;
            }
            let chunk = match chunk_at(m.linear(c).expect("in the grid")) {
                Ok(b) => b,
                Err(e) => return err = Some(e),
            };
            let origin: Vec<u64> = (0..d).map(|i| c[i] * m.chunks[i]).collect();
            let a: Vec<u64> = (0..d).map(|i| start[i].max(origin[i])).collect();
            let b: Vec<u64> = (0..d)
                .map(|i| (start[i] + count[i]).min(origin[i] + m.chunks[i]))
                .collect();
            let in_chunk: Vec<u64> = (0..d).map(|i| a[i] - origin[i]).collect();
            let in_out: Vec<u64> = (0..d).map(|i| a[i] - start[i]).collect();
            let n: Vec<u64> = (0..d).map(|i| b[i] - a[i]).collect();
            copy_box(
                isz, &chunk, &m.chunks, &in_chunk, &mut out, count, &in_out, &n,
            );
        });
        match err {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// The whole array.
    pub fn read_all(&self, store: &Store) -> Result<Vec<u8>> {
        self.read(store, &vec![0; self.meta.ndim()], &self.meta.shape.clone())
    }

    /// A hyperslab as typed values; the type must be the array's.
    pub fn read_as<T: Element>(
        &self,
        store: &Store,
        start: &[u64],
        count: &[u64],
    ) -> Result<Vec<T>> {
        if T::DTYPE != self.meta.dtype {
            return Err(Error::Invalid {
                name: self.name.clone(),
                why: format!(
                    "version {} holds {}, not {}",
                    self.number,
                    self.meta.dtype.name(),
                    T::DTYPE.name()
                ),
            });
        }
        Ok(T::read_le(&self.read(store, start, count)?))
    }

    /// Read every chunk's file whole and check it: its bytes against the
    /// CRC-32C the version records (which names the chunk; older versions
    /// record the whole file's, which does not), its length, and its
    /// trailing CRC-32C, which the Zarr view's readers check.
    pub fn verify_chunks(&self, store: &Store) -> Result<()> {
        for i in 0..self.meta.n_chunks() {
            self.read_chunk(store, i)?;
        }
        Ok(())
    }

    /// The object-layout pieces of the chunks (for the Zarr view).
    pub(crate) fn chunk_pieces(&self) -> &[paralog_backend::objstore::Piece] {
        &self.record.pieces[..self.record.pieces.len() - 1]
    }
}
