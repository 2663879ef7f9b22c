//! The object layout as a drain's backend.

use std::path::{Path, PathBuf};

use super::record::PIECE_LEN;
use super::*;
use crate::{
    Backend, BackendError, ChunkSink, ChunkedBackend, EpochId, EpochShape, EpochSink, ErrorKind,
    RemoteOp,
};

impl Backend for ObjStore {
    fn begin(
        &self,
        rel: &[u8],
        shape: &EpochShape,
    ) -> Result<Box<dyn EpochSink + Send + '_>, BackendError> {
        self.check_root()?;
        let base = self.version(rel, None)?;
        // Already published by this very log (a drain that crashed before
        // its progress record): applying the epoch again would only add a
        // copy. Another run's version of the same epoch number is not
        // this one (its origin differs).
        let done = base.as_ref().is_some_and(|v| {
            v.epoch == shape.epoch
                && shape.epoch != EpochId::default()
                && v.origin == shape.origin
                && shape.origin != [0; 16]
        });
        let base_len = base.as_ref().filter(|v| !v.deleted).map_or(0, |v| v.size);
        let mut map = PieceMap::default();
        if let Some(v) = base.as_ref().filter(|v| !v.deleted) {
            map = PieceMap::from_pieces(&v.pieces);
        }
        Ok(Box::new(ObjSink {
            store: self,
            name: rel.to_vec(),
            size: base_len,
            map,
            writer: None,
            deleted: false,
            epoch: shape.epoch,
            origin: shape.origin,
            done,
        }))
    }

    fn collect_garbage(&self) -> Result<usize, BackendError> {
        Ok(self.collect_orphans(ORPHAN_GRACE)?)
    }

    fn check(&self) -> Result<(), BackendError> {
        self.check_root().map_err(|e| BackendError {
            kind: ErrorKind::Permanent,
            ..e.into()
        })
    }

    fn read_back(&self, rel: &[u8]) -> Result<Option<Box<dyn crate::ReadBack + '_>>, BackendError> {
        Ok(match self.version(rel, None)? {
            Some(v) if !v.deleted => Some(Box::new(ObjBack(self, v))),
            _ => None,
        })
    }

    fn describe(&self, rel: &[u8]) -> String {
        format!(
            "objstore://{}/{}",
            self.root.display(),
            String::from_utf8_lossy(rel)
        )
    }

    fn local_path(&self, _rel: &[u8]) -> Option<PathBuf> {
        None
    }

    fn root_dir(&self) -> Option<&Path> {
        Some(&self.root)
    }

    fn chunked(&self) -> Option<&dyn ChunkedBackend> {
        Some(self)
    }

    fn objstore(&self) -> Option<&ObjStore> {
        Some(self)
    }
}

/// The newest version of an object, read back (block checksums verified).
struct ObjBack<'a>(&'a ObjStore, Version);

impl crate::ReadBack for ObjBack<'_> {
    fn size(&self) -> u64 {
        self.1.size
    }

    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        Ok(self.0.read_range(&self.1, off, buf)?)
    }
}

impl ChunkedBackend for ObjStore {
    fn chunk_writer(&self) -> Result<Box<dyn ChunkSink + '_>, BackendError> {
        self.check_root()?;
        Ok(Box::new(ObjChunks {
            store: self,
            writer: None,
            pieces: Vec::new(),
        }))
    }
}

/// One server's share of a version: its bytes in a chunk of its own.
struct ObjChunks<'a> {
    store: &'a ObjStore,
    writer: Option<ChunkWriter>,
    pieces: Vec<Piece>,
}

impl ChunkSink for ObjChunks<'_> {
    fn write(&mut self, off: u64, data: &[u8]) -> Result<(), BackendError> {
        if data.is_empty() {
            return Ok(());
        }
        let w = match &mut self.writer {
            Some(w) => w,
            None => self.writer.insert(self.store.writer()?),
        };
        self.pieces.push(w.add(off, data)?);
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<Vec<u8>, BackendError> {
        if let Some(w) = self.writer {
            w.finish()?;
        }
        let mut out = Vec::with_capacity(self.pieces.len() * PIECE_LEN);
        for p in &self.pieces {
            p.encode_into(&mut out);
        }
        Ok(out)
    }
}

struct ObjSink<'a> {
    store: &'a ObjStore,
    name: Vec<u8>,
    size: u64,
    map: PieceMap,
    writer: Option<ChunkWriter>,
    deleted: bool,
    epoch: EpochId,
    origin: [u8; 16],
    done: bool,
}

impl EpochSink for ObjSink<'_> {
    fn apply(&mut self, op: RemoteOp<'_>) -> Result<(), BackendError> {
        if self.done {
            return Ok(());
        }
        match op {
            RemoteOp::Write { off, data } => {
                if data.is_empty() {
                    return Ok(());
                }
                if self.writer.is_none() {
                    self.writer = Some(self.store.writer()?);
                }
                let p = self.writer.as_mut().expect("just made").add(off, data)?;
                self.map.insert(p);
                self.size = self.size.max(off + data.len() as u64);
                self.deleted = false;
            }
            RemoteOp::SetSize(n) => {
                self.map.clear(n, u64::MAX);
                self.size = n;
                self.deleted = false;
            }
            RemoteOp::Preallocate(n) => {
                self.size = self.size.max(n);
                self.deleted = false;
            }
            RemoteOp::Delete => {
                self.map = PieceMap::default();
                self.size = 0;
                self.deleted = true;
            }
        }
        Ok(())
    }

    fn place(&mut self, pieces: &[u8]) -> Result<(), BackendError> {
        if self.done {
            return Ok(());
        }
        if !pieces.len().is_multiple_of(PIECE_LEN) {
            return Err(ObjError::Invalid(format!(
                "{} bytes of placed pieces are not whole pieces of {PIECE_LEN}",
                pieces.len()
            ))
            .into());
        }
        for b in pieces.chunks(PIECE_LEN) {
            let p = Piece::decode(b);
            if p.len == 0 || p.skip.checked_add(p.len).is_none_or(|e| e > p.block_len) {
                return Err(ObjError::Invalid(format!(
                    "a placed piece at offset {} is out of its block",
                    p.file_off
                ))
                .into());
            }
            self.map.insert(p);
            self.size = self.size.max(p.file_off + p.len);
            self.deleted = false;
        }
        Ok(())
    }

    fn commit(self: Box<Self>) -> Result<(), BackendError> {
        if self.done {
            return Ok(());
        }
        if let Some(w) = self.writer {
            w.finish()?;
        }
        let v = Version {
            number: 0,
            size: self.size,
            deleted: self.deleted,
            epoch: self.epoch,
            origin: self.origin,
            name: Vec::new(),
            pieces: self.map.pieces(),
        };
        self.store.publish(&self.name, v)?;
        Ok(())
    }
}
