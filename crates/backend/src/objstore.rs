//! The versioned object layout (`objstore:///root?dirs=N&keep=K`) on any
//! POSIX file system: every committed epoch of a file becomes a complete,
//! immutable version, published atomically. Format: docs/objstore.md.
//!
//! - Chunks: immutable objects named by a random UUID, placed by a hash of
//!   the UUID in one of N storage directories (`data/<k>/<uuid>`). A chunk is
//!   a sequence of blocks; each block has a CRC-32C recorded in the version
//!   records that use it.
//! - Versions: `meta/<name>/v<0000000001>`, one record per version listing
//!   the pieces of the file (file range → block of a chunk), its size and
//!   the epoch it came from; written to a temporary name, fsynced, renamed,
//!   directory fsynced. A reader takes the highest version present and sees
//!   it whole, or the previous one: never a partial version.
//! - Chunked PUT: any number of writers add chunks ([`ObjStore::writer`]);
//!   one [`ObjStore::publish`] makes them a version.
//! - Retention: the last K versions are kept; chunks no kept version uses
//!   are deleted after a publish.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::url::ObjStoreUrl;
use crate::{
    Backend, BackendError, ChunkSink, ChunkedBackend, EpochId, EpochShape, EpochSink, ErrorKind,
    RemoteOp,
};

const MAGIC: &[u8; 8] = b"PLGOBJVR";
/// Version 1: no origin; version 2: the header grows by the 16-byte origin.
const FORMAT_V1: u16 = 1;
const FORMAT_V2: u16 = 2;
const KIND_VERSION: u16 = 1;
const HEADER_V1: usize = 64;
const HEADER_V2: usize = 80;
const PIECE_LEN: usize = 64;
const FLAG_DELETED: u32 = 1;
/// How old an unreferenced chunk must be before `recover --gc` removes it:
/// a younger one may belong to a put that has not published yet.
pub const ORPHAN_GRACE: std::time::Duration = std::time::Duration::from_secs(3600);

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

#[derive(Debug, thiserror::Error)]
pub enum ObjError {
    #[error("{path}: {op}: {error}")]
    Io {
        path: PathBuf,
        op: &'static str,
        error: io::Error,
    },
    #[error("{path}: damaged at byte {offset}: {what}")]
    Damaged {
        path: PathBuf,
        offset: u64,
        what: String,
    },
    #[error("{what}")]
    NotFound { what: String },
    #[error("{0}")]
    Invalid(String),
}

fn io_err<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(io::Error) -> ObjError + 'a {
    move |error| ObjError::Io {
        path: path.to_path_buf(),
        op,
        error,
    }
}

impl From<ObjError> for BackendError {
    fn from(e: ObjError) -> BackendError {
        let kind = match &e {
            ObjError::Io { .. } => ErrorKind::Retryable,
            _ => ErrorKind::Permanent,
        };
        BackendError {
            kind,
            target: "objstore".into(),
            op: "object layout",
            message: e.to_string(),
        }
    }
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
    fn decode(b: &[u8]) -> Piece {
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

/// `objstore:///root?dirs=N&keep=K`.
#[derive(Debug, Clone)]
pub struct ObjStore {
    root: PathBuf,
    dirs: u32,
    keep: u64,
    /// `sync=0`: no fsync anywhere (see [`ObjStoreUrl::sync`]).
    sync: bool,
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

fn hex(id: &[u8; 16]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

fn sync_dir(dir: &Path) -> Result<(), ObjError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir, "fsync directory"))
}

fn version_name(n: u64) -> String {
    format!("v{n:010}")
}

impl ObjStore {
    /// The store a parsed `objstore://` URL names (nothing is touched:
    /// `check` says whether its root exists).
    pub fn new(url: &ObjStoreUrl) -> ObjStore {
        ObjStore {
            root: url.root.clone(),
            dirs: url.dirs,
            keep: url.keep,
            sync: url.sync,
        }
    }

    /// Whether what this store publishes is made durable (`sync=1`, the
    /// default) or left to the page cache (`sync=0`).
    pub fn durable(&self) -> bool {
        self.sync
    }

    /// Make a directory's names durable, unless the store is `sync=0`.
    pub fn sync_dir(&self, dir: &Path) -> Result<(), ObjError> {
        if self.sync {
            sync_dir(dir)
        } else {
            Ok(())
        }
    }

    /// Split `objstore:///root/NAME` (parsed as if NAME were part of the
    /// root) into the store whose `meta/NAME` exists and the object's name.
    pub fn locate(url: &ObjStoreUrl) -> Result<(ObjStore, Vec<u8>), ObjError> {
        let full = url.root.as_path();
        for root in full.ancestors().skip(1) {
            if root.join("meta").is_dir() {
                let name = full.strip_prefix(root).expect("an ancestor");
                if name.as_os_str().is_empty() || !root.join("meta").join(name).is_dir() {
                    break;
                }
                let store = ObjStore::new(&url.at(root));
                return Ok((store, name.as_os_str().as_bytes().to_vec()));
            }
        }
        Err(ObjError::NotFound {
            what: format!("objstore://{}: no object store holds an object of this name (no meta/NAME under any parent directory)", full.display()),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn check_root(&self) -> Result<(), ObjError> {
        if self.root.is_dir() {
            Ok(())
        } else {
            Err(ObjError::Io {
                path: self.root.clone(),
                op: "open object store",
                error: io::Error::new(
                    io::ErrorKind::NotFound,
                    "the object store directory does not exist (not mounted?)",
                ),
            })
        }
    }

    /// The metadata directory of `name`: an object's versions, or the
    /// names below a directory of names.
    pub fn meta_dir(&self, name: &[u8]) -> PathBuf {
        self.root.join("meta").join(OsStr::from_bytes(name))
    }

    /// Whether `dir` ("" for the root) is a directory of names: its
    /// metadata directory exists, it is not itself an object (no
    /// version), and some object below it is not deleted. Names are paths,
    /// so a directory is what objects' names pass through (a program's
    /// `ckpt/` and its set directories), and it is gone once every object
    /// below it is (`rm -r`; their versions stay, as history).
    pub fn is_directory(&self, dir: &[u8]) -> bool {
        self.names_directory(dir) && (dir.is_empty() || self.holds_objects(dir))
    }

    /// Whether `dir` is a directory of names, or was one until every
    /// object below it was deleted (its metadata directory is there, and
    /// it is not an object).
    pub fn names_directory(&self, dir: &[u8]) -> bool {
        self.meta_dir(dir).is_dir() && self.versions(dir).is_ok_and(|v| v.is_empty())
    }

    /// Whether some object below the directory of names `dir` is not
    /// deleted (one whose record cannot be read counts: reading it
    /// reports why). It stops at the first.
    fn holds_objects(&self, dir: &[u8]) -> bool {
        let Ok(entries) = std::fs::read_dir(self.meta_dir(dir)) else {
            return false;
        };
        entries.flatten().any(|e| {
            let name = [dir, b"/", e.file_name().as_bytes()].concat();
            e.file_type().is_ok_and(|t| t.is_dir())
                && match self.version(&name, None) {
                    Ok(Some(v)) => !v.deleted,
                    Err(_) => true,
                    Ok(None) => self.holds_objects(&name),
                }
        })
    }

    /// The names directly below the directory of names `dir` ("" for the
    /// root), each with whether it is an object (else a directory of
    /// further names). An object whose latest version deletes it is not
    /// listed, nor a directory of names only such objects are below; one
    /// whose record cannot be read is (reading it reports why).
    pub fn list_dir(&self, dir: &[u8]) -> Vec<(Vec<u8>, bool)> {
        let Ok(entries) = std::fs::read_dir(self.meta_dir(dir)) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for e in entries.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let leaf = e.file_name();
            let mut name = dir.to_vec();
            if !name.is_empty() {
                name.push(b'/');
            }
            name.extend_from_slice(leaf.as_bytes());
            match self.version(&name, None) {
                Ok(Some(v)) if v.deleted => continue,
                Ok(Some(_)) | Err(_) => out.push((leaf.as_bytes().to_vec(), true)),
                Ok(None) if self.holds_objects(&name) => {
                    out.push((leaf.as_bytes().to_vec(), false))
                }
                Ok(None) => continue,
            }
        }
        out
    }

    /// Where a chunk lives. The directory index is recorded in every piece,
    /// so a reader needs no setting, and changing `dirs` later only places
    /// new chunks differently.
    pub fn chunk_path(&self, dir: u32, id: &[u8; 16]) -> PathBuf {
        self.root.join("data").join(dir.to_string()).join(hex(id))
    }

    /// The storage directory `data/<dir>/` of the chunks placed in it.
    pub fn chunk_dir(&self, dir: u32) -> PathBuf {
        self.root.join("data").join(dir.to_string())
    }

    /// Make the names of the chunks written in storage directory `dir`
    /// durable (after their [`ChunkWriter::finish_file`]).
    pub fn sync_chunk_dir(&self, dir: u32) -> Result<(), ObjError> {
        self.sync_dir(&self.chunk_dir(dir))
    }

    /// How many versions of a name are kept (`u64::MAX`: every one).
    pub fn keep(&self) -> u64 {
        self.keep
    }

    /// The record of version `n` of `name`.
    pub fn version_path(&self, name: &[u8], n: u64) -> PathBuf {
        self.meta_dir(name).join(version_name(n))
    }

    /// The published version numbers of `name`, ascending.
    pub fn versions(&self, name: &[u8]) -> Result<Vec<u64>, ObjError> {
        let dir = self.meta_dir(name);
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err(&dir, "list versions")(e)),
        };
        let mut out = Vec::new();
        for e in entries {
            let e = e.map_err(io_err(&dir, "list versions"))?;
            let n = e.file_name();
            let n = n.to_string_lossy();
            if let Some(num) = n
                .strip_prefix('v')
                .filter(|d| d.len() == 10)
                .and_then(|d| d.parse().ok())
            {
                out.push(num);
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    /// A version of `name` (default: the latest), its record checked.
    pub fn version(&self, name: &[u8], number: Option<u64>) -> Result<Option<Version>, ObjError> {
        let n = match number {
            Some(n) => n,
            None => match self.versions(name)?.last() {
                Some(&n) => n,
                None => return Ok(None),
            },
        };
        let path = self.version_path(name, n);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound && number.is_none() => {
                // Removed by retention between the listing and the read: a
                // newer version exists; take it.
                return self.version(name, None);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(ObjError::NotFound {
                    what: format!(
                        "{}: no version {n} of {} (kept: {:?})",
                        self.root.display(),
                        String::from_utf8_lossy(name),
                        self.versions(name)?
                    ),
                })
            }
            Err(e) => return Err(io_err(&path, "read version")(e)),
        };
        let v = Version::decode(&bytes, &path)?;
        if v.number != n || v.name != name {
            return Err(ObjError::Damaged {
                path,
                offset: 16,
                what: format!(
                    "record is version {} of {:?}",
                    v.number,
                    String::from_utf8_lossy(&v.name)
                ),
            });
        }
        Ok(Some(v))
    }

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
        self.check_root()?;
        let id = *uuid::Uuid::new_v4().as_bytes();
        let dir = (fnv(&id) % self.dirs as u64) as u32;
        let path = self.chunk_path(dir, &id);
        let parent = path.parent().expect("chunk paths have a directory");
        std::fs::create_dir_all(parent).map_err(io_err(parent, "create storage directory"))?;
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
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
        })
    }

    /// Publish a new version of `name` as the next number. The record is
    /// hard-linked into place, which fails if the number is taken, so two
    /// publishers at once never replace each other: the one that lost the
    /// number takes the next one (both versions are kept; the later
    /// publish is the latest). Returns the number.
    pub fn publish(&self, name: &[u8], mut v: Version) -> Result<u64, ObjError> {
        let dir = self.meta_dir(name);
        std::fs::create_dir_all(&dir).map_err(io_err(&dir, "create metadata directory"))?;
        v.name = name.to_vec();
        let tmp = dir.join(format!(
            ".publish.{}.{}",
            std::process::id(),
            hex(&uuid::Uuid::new_v4().into_bytes())
        ));
        let result = (|| {
            for _ in 0..1000 {
                v.number = self.versions(name)?.last().copied().unwrap_or(0) + 1;
                let mut f = OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o644)
                    .open(&tmp)
                    .map_err(io_err(&tmp, "create version record"))?;
                f.write_all(&v.encode())
                    .map_err(io_err(&tmp, "write version record"))?;
                if self.sync {
                    f.sync_all().map_err(io_err(&tmp, "fsync version record"))?;
                }
                let path = dir.join(version_name(v.number));
                match std::fs::hard_link(&tmp, &path) {
                    Ok(()) => return Ok(v.number),
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(io_err(&path, "publish version")(e)),
                }
            }
            Err(ObjError::Invalid(format!(
                "{}: no free version number after 1000 tries",
                String::from_utf8_lossy(name)
            )))
        })();
        let _ = std::fs::remove_file(&tmp);
        let n = result?;
        self.sync_dir(&dir)?;
        self.retain(name)?;
        Ok(n)
    }

    /// Remove chunks that no version of any object references and that are
    /// older than `grace` (younger ones may belong to a put in progress),
    /// and temporary records left by crashed publishers as old: the
    /// orphans of a crash before a publish. A version record that does not
    /// decode stops the collection before anything is removed (a chunk it
    /// uses could look unreferenced). Returns how many files were removed.
    pub fn collect_orphans(&self, grace: std::time::Duration) -> Result<usize, ObjError> {
        self.check_root()?;
        let old = |p: &Path| {
            std::fs::symlink_metadata(p)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > grace))
        };
        let mut used = BTreeSet::new();
        let mut stale_temps = Vec::new();
        let mut stack = vec![self.root.join("meta")];
        while let Some(dir) = stack.pop() {
            let entries = match std::fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err(&dir, "list metadata")(e)),
            };
            for e in entries {
                let e = e.map_err(io_err(&dir, "list metadata"))?;
                let path = e.path();
                let name = e.file_name();
                let name = name.to_string_lossy();
                if e.file_type()
                    .map_err(io_err(&path, "stat metadata"))?
                    .is_dir()
                {
                    stack.push(path);
                } else if name.starts_with(".publish.") {
                    if old(&path) {
                        stale_temps.push(path);
                    }
                } else if name
                    .strip_prefix('v')
                    .is_some_and(|d| d.len() == 10 && d.bytes().all(|b| b.is_ascii_digit()))
                {
                    let bytes =
                        std::fs::read(&path).map_err(io_err(&path, "read version record"))?;
                    let v = Version::decode(&bytes, &path)?;
                    used.extend(v.pieces.iter().map(|p| (p.dir, hex(&p.chunk))));
                }
            }
        }
        let mut removed = 0;
        let data = self.root.join("data");
        let dirs = match std::fs::read_dir(&data) {
            Ok(d) => d
                .collect::<Result<Vec<_>, _>>()
                .map_err(io_err(&data, "list chunks"))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io_err(&data, "list chunks")(e)),
        };
        for d in dirs {
            let Some(k) = d.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let dir = d.path();
            for c in std::fs::read_dir(&dir).map_err(io_err(&dir, "list chunks"))? {
                let c = c.map_err(io_err(&dir, "list chunks"))?;
                let id = c.file_name().to_string_lossy().into_owned();
                if id.len() == 32 && !used.contains(&(k, id)) && old(&c.path()) {
                    std::fs::remove_file(c.path())
                        .map_err(io_err(&c.path(), "remove orphan chunk"))?;
                    removed += 1;
                }
            }
        }
        for t in stale_temps {
            std::fs::remove_file(&t).map_err(io_err(&t, "remove stale temporary record"))?;
            removed += 1;
        }
        Ok(removed)
    }

    /// Keep the last K versions of `name`: delete older records, then the
    /// chunks they used that no kept version uses (a chunk belongs to one
    /// object: it is written for one epoch of one file).
    fn retain(&self, name: &[u8]) -> Result<(), ObjError> {
        let all = self.versions(name)?;
        if all.len() as u64 <= self.keep {
            return Ok(());
        }
        let (old, kept) = all.split_at(all.len() - self.keep as usize);
        let mut used = BTreeSet::new();
        for &n in kept {
            if let Some(v) = self.version(name, Some(n))? {
                used.extend(v.pieces.iter().map(|p| (p.dir, p.chunk)));
            }
        }
        let mut dropped = BTreeSet::new();
        for &n in old {
            if let Ok(Some(v)) = self.version(name, Some(n)) {
                dropped.extend(v.pieces.iter().map(|p| (p.dir, p.chunk)));
            }
            let p = self.meta_dir(name).join(version_name(n));
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(&p, "remove old version")(e)),
            }
        }
        for (dir, id) in dropped.difference(&used) {
            let p = self.chunk_path(*dir, id);
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(&p, "remove unused chunk")(e)),
            }
        }
        Ok(())
    }
}

/// One writer's chunk of a chunked PUT: append blocks, then `finish`.
pub struct ChunkWriter {
    id: [u8; 16],
    dir: u32,
    path: PathBuf,
    file: File,
    len: u64,
    /// The store's `sync`: `finish` fsyncs only when set.
    sync: bool,
}

impl ChunkWriter {
    pub fn id(&self) -> [u8; 16] {
        self.id
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

    /// Make the chunk durable (file and its directory).
    pub fn finish(self) -> Result<(), ObjError> {
        if !self.sync {
            return Ok(());
        }
        self.file
            .sync_all()
            .map_err(io_err(&self.path, "fsync chunk"))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The store of `objstore://{spec}`.
    fn store(spec: &str) -> ObjStore {
        match format!("objstore://{spec}").parse() {
            Ok(crate::url::RemoteUrl::ObjStore(u)) => ObjStore::new(&u),
            other => panic!("{spec}: {other:?}"),
        }
    }

    /// One version of `name` in `s`: `data` written at `off` over the
    /// last version, committed.
    fn put_version(s: &ObjStore, name: &[u8], off: u64, data: &[u8]) {
        let mut sink = s.begin(name, &shape()).unwrap();
        sink.apply(RemoteOp::Write { off, data }).unwrap();
        sink.commit().unwrap();
    }

    /// One version of `name` in `s` drained as `sh` that is `data` alone
    /// (cut to 0 first), committed.
    fn replace_version(s: &ObjStore, name: &[u8], sh: &EpochShape, data: &[u8]) {
        let mut sink = s.begin(name, sh).unwrap();
        sink.apply(RemoteOp::SetSize(0)).unwrap();
        sink.apply(RemoteOp::Write { off: 0, data }).unwrap();
        sink.commit().unwrap();
    }

    fn shape() -> EpochShape {
        EpochShape {
            epoch: EpochId::default(),
            origin: [0; 16],
            deleted: false,
            size: crate::SizeState::default(),
            fresh: false,
            replace: false,
            mode: None,
            times: None,
        }
    }

    fn get(s: &ObjStore, name: &[u8], n: Option<u64>) -> Vec<u8> {
        let v = s.version(name, n).unwrap().unwrap();
        let mut out = Vec::new();
        s.read_version(&v, &mut out).unwrap();
        out
    }

    #[test]
    fn directories_of_names_list_objects_and_directories() {
        let d = tempfile::tempdir().unwrap();
        let s = store(&d.path().display().to_string());
        put_version(&s, b"ckpt/step-1/set.plr", 0, b"r");
        put_version(&s, b"ckpt/note.txt", 0, b"n");
        put_version(&s, b"ckpt/gone", 0, b"g");
        let mut sink = s.begin(b"ckpt/gone", &shape()).unwrap();
        sink.apply(RemoteOp::Delete).unwrap();
        sink.commit().unwrap();
        assert!(s.is_directory(b""));
        assert!(s.is_directory(b"ckpt"));
        assert!(s.is_directory(b"ckpt/step-1"));
        assert!(!s.is_directory(b"ckpt/note.txt"));
        assert!(!s.is_directory(b"nothing"));
        let mut names = s.list_dir(b"ckpt");
        names.sort();
        // The deleted object is not listed.
        assert_eq!(
            names,
            vec![(b"note.txt".to_vec(), true), (b"step-1".to_vec(), false)]
        );
        assert_eq!(s.list_dir(b""), vec![(b"ckpt".to_vec(), false)]);
        assert_eq!(
            s.list_dir(b"ckpt/step-1"),
            vec![(b"set.plr".to_vec(), true)]
        );
        assert!(s.list_dir(b"nothing").is_empty());
    }

    #[test]
    fn a_directory_of_names_whose_objects_are_all_deleted_is_gone() {
        let d = tempfile::tempdir().unwrap();
        let s = store(&d.path().display().to_string());
        put_version(&s, b"plain/b/c/x.txt", 0, b"x");
        put_version(&s, b"plain/a/y.txt", 0, b"y");
        let mut sink = s.begin(b"plain/b/c/x.txt", &shape()).unwrap();
        sink.apply(RemoteOp::Delete).unwrap();
        sink.commit().unwrap();
        // Its versions stay (history), the directories above it go.
        assert!(s.names_directory(b"plain/b/c") && s.names_directory(b"plain/b"));
        assert!(!s.is_directory(b"plain/b/c") && !s.is_directory(b"plain/b"));
        assert!(s.is_directory(b"plain") && s.is_directory(b"plain/a"));
        assert_eq!(s.list_dir(b"plain"), vec![(b"a".to_vec(), false)]);
        assert!(s.list_dir(b"plain/b").is_empty());
    }

    #[test]
    fn pieces_stored_by_several_writers_make_one_version() {
        let d = tempfile::tempdir().unwrap();
        let s = store(&format!("{}?dirs=3", d.path().display()));
        put_version(&s, b"f", 0, &[1; 100]);
        // Two servers store disjoint bytes of the next version (one past
        // the old end), the publisher cuts at 50 and places both.
        let mut a = s.chunk_writer().unwrap();
        a.write(10, &[2; 10]).unwrap();
        a.write(120, &[3; 5]).unwrap();
        let mut b = s.chunk_writer().unwrap();
        b.write(30, &[4; 10]).unwrap();
        let mut placed = a.finish().unwrap();
        placed.extend(b.finish().unwrap());
        assert_eq!(placed.len(), 3 * PIECE_LEN);
        let mut v2 = s.begin(b"f", &shape()).unwrap();
        v2.apply(RemoteOp::SetSize(50)).unwrap();
        v2.place(&placed).unwrap();
        v2.apply(RemoteOp::Preallocate(130)).unwrap();
        v2.commit().unwrap();
        let mut want = vec![0u8; 130];
        want[..50].fill(1);
        want[10..20].fill(2);
        want[30..40].fill(4);
        want[120..125].fill(3);
        assert_eq!(get(&s, b"f", None), want);
        // Not whole pieces: refused, nothing published.
        let mut v3 = s.begin(b"f", &shape()).unwrap();
        assert!(v3.place(&placed[..PIECE_LEN + 1]).is_err());
        // Other backends take no placed pieces.
        let p = crate::posix::PosixBackend::new(d.path()).unwrap();
        assert!(p.begin(b"g", &shape()).unwrap().place(&placed).is_err());
    }

    #[test]
    fn versions_overlay_cut_and_keep_last_k() {
        let d = tempfile::tempdir().unwrap();
        let s = store(&format!("{}?dirs=3&keep=2", d.path().display()));
        let mut want = Vec::new();
        for e in 1..=4u8 {
            let mut sink = s.begin(b"a/f", &shape()).unwrap();
            let off = e as u64 * 10;
            sink.apply(RemoteOp::Write {
                off,
                data: &[e; 30],
            })
            .unwrap();
            if want.len() < off as usize + 30 {
                want.resize(off as usize + 30, 0);
            }
            want[off as usize..off as usize + 30].fill(e);
            if e == 3 {
                sink.apply(RemoteOp::SetSize(35)).unwrap();
                want.truncate(35);
            }
            sink.commit().unwrap();
            assert_eq!(get(&s, b"a/f", None), want, "version {e}");
            let v = s.version(b"a/f", None).unwrap().unwrap();
            for (off, len) in [(0, want.len()), (5, 17), (12, 40), (33, 30)] {
                let mut buf = vec![9u8; len];
                s.read_range(&v, off as u64, &mut buf).unwrap();
                let mut exp = want.get(off..).unwrap_or(&[]).to_vec();
                exp.resize(len, 0);
                exp.truncate(len);
                assert_eq!(buf, exp, "range {off}+{len} of version {e}");
            }
        }
        assert_eq!(s.versions(b"a/f").unwrap(), vec![3, 4]);
        assert!(s.version(b"a/f", Some(1)).is_err(), "version 1 is gone");
        // Every chunk left is used by a kept version.
        let mut used = BTreeSet::new();
        for n in [3, 4] {
            used.extend(
                s.version(b"a/f", Some(n))
                    .unwrap()
                    .unwrap()
                    .pieces
                    .iter()
                    .map(|p| (p.dir, p.chunk)),
            );
        }
        let on_disk: usize = (0..3)
            .map(|k| {
                std::fs::read_dir(d.path().join("data").join(k.to_string()))
                    .map_or(0, |r| r.count())
            })
            .sum();
        assert_eq!(on_disk, used.len());
    }

    #[test]
    fn a_damaged_block_or_record_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let s = store(d.path().to_str().unwrap());
        put_version(&s, b"f", 0, b"hello world");
        let v = s.version(b"f", None).unwrap().unwrap();
        let chunk = s.chunk_path(v.pieces[0].dir, &v.pieces[0].chunk);
        let mut b = std::fs::read(&chunk).unwrap();
        b[3] ^= 1;
        std::fs::write(&chunk, b).unwrap();
        let err = s.read_version(&v, &mut Vec::new()).unwrap_err().to_string();
        assert!(
            err.contains("checksum") && err.contains(&hex(&v.pieces[0].chunk)),
            "{err}"
        );
        let rec = d.path().join("meta/f/v0000000001");
        let mut b = std::fs::read(&rec).unwrap();
        b[70] ^= 1;
        std::fs::write(&rec, b).unwrap();
        assert!(s
            .version(b"f", None)
            .unwrap_err()
            .to_string()
            .contains("checksum mismatch"));
    }

    #[test]
    fn chunked_put_by_many_writers_one_publish() {
        let d = tempfile::tempdir().unwrap();
        let s = store(d.path().to_str().unwrap());
        let pieces: Vec<Piece> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..4u8)
                .map(|w| {
                    let s = &s;
                    sc.spawn(move || {
                        let mut cw = s.writer().unwrap();
                        let p = cw.add(w as u64 * 100, &[w + 1; 100]).unwrap();
                        cw.finish().unwrap();
                        p
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut map = PieceMap::default();
        for p in pieces {
            map.insert(p);
        }
        let v = Version {
            number: 0,
            size: 400,
            deleted: false,
            epoch: EpochId::default(),
            origin: [0; 16],
            name: Vec::new(),
            pieces: map.pieces(),
        };
        assert_eq!(s.publish(b"x", v.clone()).unwrap(), 1);
        let want: Vec<u8> = (0..4u8).flat_map(|w| [w + 1; 100]).collect();
        assert_eq!(get(&s, b"x", None), want);
        assert_eq!(
            s.publish(b"x", v).unwrap(),
            2,
            "a second publish is the next version"
        );
    }

    /// Chunks no version references, older than the grace, go; referenced
    /// ones and young ones stay; a damaged record stops the collection.
    #[test]
    fn orphans_are_collected() {
        let d = tempfile::tempdir().unwrap();
        let s = store(d.path().to_str().unwrap());
        put_version(&s, b"a/kept", 0, &[1; 100]);
        let mut orphan = s.writer().unwrap();
        orphan.add(0, &[2; 100]).unwrap();
        let orphan_path = orphan.path.clone();
        orphan.finish().unwrap();
        let young = s.writer().unwrap();
        let young_path = young.path.clone();
        young.finish().unwrap();
        let past = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
        std::fs::File::options()
            .write(true)
            .open(&orphan_path)
            .unwrap()
            .set_modified(past)
            .unwrap();
        let used = s.version(b"a/kept", None).unwrap().unwrap().pieces[0];
        let used_path = s.chunk_path(used.dir, &used.chunk);
        std::fs::File::options()
            .write(true)
            .open(&used_path)
            .unwrap()
            .set_modified(past)
            .unwrap();
        assert_eq!(s.collect_orphans(ORPHAN_GRACE).unwrap(), 1);
        assert!(!orphan_path.exists() && young_path.exists() && used_path.exists());
        assert_eq!(get(&s, b"a/kept", None), vec![1; 100]);
        std::fs::write(s.meta_dir(b"a/kept").join(version_name(1)), b"damaged").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&young_path)
            .unwrap()
            .set_modified(past)
            .unwrap();
        assert!(s.collect_orphans(ORPHAN_GRACE).is_err());
        assert!(
            young_path.exists(),
            "nothing is removed past a damaged record"
        );
    }

    /// Publishers of one object at the same moment (threads of several
    /// stores over one root, as processes would be): every publish succeeds
    /// as a distinct version that reads back its own bytes, none is lost.
    #[test]
    fn concurrent_publishers_never_lose_a_version() {
        let d = tempfile::tempdir().unwrap();
        let spec = format!("{}?dirs=2&keep=100000", d.path().display());
        for round in 0..100u32 {
            let got: Vec<(u64, u8)> = std::thread::scope(|sc| {
                let hs: Vec<_> = (0..4u8)
                    .map(|w| {
                        let spec = &spec;
                        sc.spawn(move || {
                            let s = store(spec);
                            let tag = (round as u8).wrapping_mul(4).wrapping_add(w);
                            replace_version(&s, b"obj", &shape(), &[tag; 1000]);
                            let n = s.versions(b"obj").unwrap();
                            (*n.last().unwrap(), tag)
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert_eq!(got.len(), 4);
        }
        let s = store(&spec);
        let all = s.versions(b"obj").unwrap();
        assert_eq!(all.len(), 400, "every publish is a version of its own");
        let mut tags = std::collections::BTreeSet::new();
        for n in all {
            let bytes = get(&s, b"obj", Some(n));
            assert_eq!(bytes.len(), 1000);
            assert!(
                bytes.iter().all(|&b| b == bytes[0]),
                "version {n} mixes writers"
            );
            tags.insert(bytes[0]);
        }
        assert_eq!(tags.len(), 256, "every writer's bytes are in some version");
    }

    /// An epoch of the same number from another run (another origin) is
    /// published; the same origin's is recognised as already published.
    #[test]
    fn already_published_means_the_same_origin() {
        let d = tempfile::tempdir().unwrap();
        let s = store(d.path().to_str().unwrap());
        let put = |origin: [u8; 16], byte: u8| {
            let sh = EpochShape {
                epoch: EpochId::new(1, 1),
                origin,
                ..shape()
            };
            replace_version(&s, b"out.dat", &sh, &[byte; 10]);
        };
        put([1; 16], b'a');
        put([1; 16], b'a');
        assert_eq!(
            s.versions(b"out.dat").unwrap(),
            vec![1],
            "a re-drain adds no copy"
        );
        put([2; 16], b'b');
        assert_eq!(s.versions(b"out.dat").unwrap(), vec![1, 2]);
        assert_eq!(
            get(&s, b"out.dat", None),
            vec![b'b'; 10],
            "the second run's bytes are the latest"
        );
    }

    #[test]
    fn settings_come_from_the_url() {
        let s = store("/a?dirs=8&keep=5");
        assert_eq!((s.dirs, s.keep), (8, 5));
    }
}
