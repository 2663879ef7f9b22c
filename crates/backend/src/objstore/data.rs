//! Chunks: where they live, reading their blocks checked, writing new ones.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::*;

impl ObjStore {
    /// The whole block a piece comes from, checked against its CRC.
    fn read_block(&self, p: &Piece, block: &mut Vec<u8>) -> Result<(), ObjError> {
        let path = self.chunk_path(p.dir, &p.chunk);
        let f = File::open(&path).map_err(io_err(&path, "open chunk"))?;
        block.resize(p.block_len as usize, 0);
        f.read_exact_at(block, p.block_off)
            .map_err(io_err(&path, "read chunk"))?;
        if paralog_checksum::crc32c(block) != p.block_crc {
            return Err(ObjError::Damaged {
                path,
                offset: p.block_off,
                what: format!("block of {} bytes fails its checksum", p.block_len),
            });
        }
        Ok(())
    }

    /// Read a whole version into `out` (holes as zeros), every block checked.
    pub fn read_version(&self, v: &Version, out: &mut dyn Write) -> Result<u64, ObjError> {
        let mut pos = 0u64;
        let mut block = Vec::new();
        let mut cached: Option<([u8; 16], u64)> = None;
        let zeros = vec![0u8; 1 << 16];
        let fill = |out: &mut dyn Write, mut n: u64| -> Result<(), ObjError> {
            while n > 0 {
                let k = n.min(zeros.len() as u64) as usize;
                out.write_all(&zeros[..k])
                    .map_err(io_err(Path::new("output"), "write"))?;
                n -= k as u64;
            }
            Ok(())
        };
        for p in &v.pieces {
            fill(out, p.file_off - pos)?;
            if cached != Some((p.chunk, p.block_off)) {
                self.read_block(p, &mut block)?;
                cached = Some((p.chunk, p.block_off));
            }
            out.write_all(&block[p.skip as usize..(p.skip + p.len) as usize])
                .map_err(io_err(Path::new("output"), "write"))?;
            pos = p.file_off + p.len;
        }
        fill(out, v.size - pos)?;
        Ok(v.size)
    }

    /// Bytes `[off, off + buf.len())` of a version (zeros in holes and past
    /// its end), every block used checked against its checksum.
    pub fn read_range(&self, v: &Version, off: u64, buf: &mut [u8]) -> Result<(), ObjError> {
        buf.fill(0);
        let end = off + buf.len() as u64;
        // The first piece that may overlap: the last one starting before `off`.
        let first = v.pieces.partition_point(|p| p.file_off + p.len <= off);
        let mut block = Vec::new();
        for p in v.pieces[first..].iter().take_while(|p| p.file_off < end) {
            let lo = p.file_off.max(off);
            let hi = (p.file_off + p.len).min(end);
            self.read_block(p, &mut block)?;
            let from = (p.skip + lo - p.file_off) as usize;
            buf[(lo - off) as usize..(hi - off) as usize]
                .copy_from_slice(&block[from..from + (hi - lo) as usize]);
        }
        Ok(())
    }

    /// A new chunk for one writer of a chunked PUT.
    pub fn writer(&self) -> Result<ChunkWriter, ObjError> {
        self.chunk_writer(*uuid::Uuid::new_v4().as_bytes(), true)
    }

    /// The storage directory a chunk named `id` is placed in.
    pub fn dir_of(&self, id: &[u8; 16]) -> u32 {
        (fnv(id) % self.dirs as u64) as u32
    }

    /// A chunk whose UUID the caller chose (unique to it, e.g. a put's own
    /// id), so that its existence can be looked up by that id alone; made
    /// anew, truncated, when it exists (a retried writer of it).
    pub fn writer_with_id(&self, id: [u8; 16]) -> Result<ChunkWriter, ObjError> {
        self.chunk_writer(id, false)
    }

    /// A chunk that several writers fill, each at its own offsets (the
    /// parts of one array chunk), in storage directory `dir` (the first
    /// writer's placement, which its claim records: a writer that opened
    /// the store with another `dirs` must not place it elsewhere): opened,
    /// or made when missing, never truncated, so that no writer undoes
    /// another's bytes.
    pub fn shared_writer(&self, id: [u8; 16], dir: u32) -> Result<ChunkWriter, ObjError> {
        self.open_chunk(id, dir, Open::Shared)
    }

    /// [`ObjStore::writer_with_id`] in storage directory `dir` instead of
    /// the id's hash over `dirs` (a chunk that must be found by its id
    /// through a handle with another `dirs`).
    pub fn writer_with_id_in(&self, id: [u8; 16], dir: u32) -> Result<ChunkWriter, ObjError> {
        self.open_chunk(id, dir, Open::Anew)
    }

    fn chunk_writer(&self, id: [u8; 16], new: bool) -> Result<ChunkWriter, ObjError> {
        let how = if new { Open::New } else { Open::Anew };
        self.open_chunk(id, self.dir_of(&id), how)
    }

    fn open_chunk(&self, id: [u8; 16], dir: u32, how: Open) -> Result<ChunkWriter, ObjError> {
        self.check_root()?;
        let path = self.chunk_path(dir, &id);
        let parent = path.parent().expect("chunk paths have a directory");
        std::fs::create_dir_all(parent).map_err(io_err(parent, "create storage directory"))?;
        let file = OpenOptions::new()
            .write(true)
            .create_new(how == Open::New)
            .create(how != Open::New)
            .truncate(how == Open::Anew)
            .mode(0o644)
            .open(&path)
            .map_err(io_err(&path, "create chunk"))?;
        Ok(ChunkWriter {
            id,
            dir,
            path,
            file,
            len: 0,
            sync: self.sync,
            names_journaled: self.sync && self.names_journaled(),
        })
    }
}

/// How a chunk file is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    /// Made here; refused if it exists.
    New,
    /// Made, or truncated when it exists (a retried writer of it).
    Anew,
    /// Made, or opened as it is (one of several writers of it).
    Shared,
}

/// One writer's chunk of a chunked PUT: append blocks, then `finish`.
pub struct ChunkWriter {
    id: [u8; 16],
    dir: u32,
    pub(super) path: PathBuf,
    file: File,
    len: u64,
    /// The store's `sync`: `finish` fsyncs only when set.
    sync: bool,
    /// [`ObjStore::names_journaled`]: `finish` fsyncs the file only.
    names_journaled: bool,
}

impl ChunkWriter {
    pub fn id(&self) -> [u8; 16] {
        self.id
    }

    /// The storage directory the chunk is in (known before a byte is added).
    pub fn dir(&self) -> u32 {
        self.dir
    }

    /// The chunk's file (a writer that gives up removes it).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one block holding the bytes of `file_off..`; returns its piece.
    pub fn add(&mut self, file_off: u64, data: &[u8]) -> Result<Piece, ObjError> {
        self.file
            .write_all_at(data, self.len)
            .map_err(io_err(&self.path, "write chunk"))?;
        let p = Piece {
            file_off,
            len: data.len() as u64,
            chunk: self.id,
            dir: self.dir,
            block_off: self.len,
            block_len: data.len() as u64,
            block_crc: paralog_checksum::crc32c(data),
            skip: 0,
        };
        self.len += data.len() as u64;
        Ok(p)
    }

    /// Write `data` at `off` of a shared chunk ([`ObjStore::shared_writer`]):
    /// bytes only, no piece (what they are is the caller's record).
    pub fn write_at(&mut self, off: u64, data: &[u8]) -> Result<(), ObjError> {
        self.file
            .write_all_at(data, off)
            .map_err(io_err(&self.path, "write chunk"))?;
        self.len = self.len.max(off + data.len() as u64);
        Ok(())
    }

    /// Make the chunk's bytes durable, not its name: the caller fsyncs
    /// the chunk's directory ([`ObjStore::chunk_dir`]) once for all the
    /// chunks it wrote there (an array put: once per writer, not per chunk).
    pub fn finish_file(self) -> Result<(), ObjError> {
        if !self.sync {
            return Ok(());
        }
        self.file
            .sync_all()
            .map_err(io_err(&self.path, "fsync chunk"))
    }

    /// Make the chunk durable (file and its name).
    pub fn finish(self) -> Result<(), ObjError> {
        if !self.sync {
            return Ok(());
        }
        self.file
            .sync_all()
            .map_err(io_err(&self.path, "fsync chunk"))?;
        if self.names_journaled {
            return Ok(());
        }
        sync_dir(self.path.parent().expect("chunk paths have a directory"))
    }
}

/// Last-writer-wins overlay of pieces by file range.
#[derive(Debug, Default, Clone)]
pub struct PieceMap {
    map: BTreeMap<u64, Piece>,
}

impl PieceMap {
    pub fn from_pieces(pieces: &[Piece]) -> PieceMap {
        PieceMap {
            map: pieces.iter().map(|p| (p.file_off, *p)).collect(),
        }
    }

    /// Remove everything in `[start, end)`, trimming pieces that cross it.
    pub fn clear(&mut self, start: u64, end: u64) {
        let crossing: Vec<u64> = self
            .map
            .range(..end)
            .rev()
            .take_while(|(_, p)| p.file_off + p.len > start)
            .map(|(&k, _)| k)
            .collect();
        for k in crossing {
            let p = self.map.remove(&k).expect("listed");
            if p.file_off < start {
                let mut left = p;
                left.len = start - p.file_off;
                self.map.insert(left.file_off, left);
            }
            let p_end = p.file_off + p.len;
            if p_end > end {
                let mut right = p;
                right.skip += end - p.file_off;
                right.len = p_end - end;
                right.file_off = end;
                self.map.insert(end, right);
            }
        }
    }

    pub fn insert(&mut self, p: Piece) {
        self.clear(p.file_off, p.file_off + p.len);
        self.map.insert(p.file_off, p);
    }

    pub fn pieces(&self) -> Vec<Piece> {
        self.map.values().copied().collect()
    }
}
