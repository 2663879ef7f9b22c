//! The manifest (`kind` 1): the committed record of one rank's epoch of one
//! file, with its operations (docs/format.md, "Manifest").

use std::path::Path;

use super::{
    check_preamble, le_u16, le_u32, le_u64, push_preamble, sealed, DATA_HEADER_LEN, FORMAT_V1,
    FORMAT_VERSION, KIND_MANIFEST, MANIFEST_HEADER_LEN, MANIFEST_MAGIC, MANIFEST_V3, MANIFEST_V4,
    MANIFEST_VERSIONS, OP_LEN,
};
use crate::error::{LogError, Result};
use crate::id::EpochId;

const OP_EXTENT: u8 = 1;
const OP_SET_SIZE: u8 = 2;
const OP_PREALLOCATE: u8 = 3;
const OP_DELETE: u8 = 4;
const OP_PHASE: u8 = 5;
const OP_RENAME_FROM: u8 = 6;
const OP_RENAMED_TO: u8 = 7;
const OP_MODE: u8 = 8;
const OP_TIMES: u8 = 9;
/// Which of a times operation's two times it sets (its third field).
const TIMES_ATIME: u64 = 1;
const TIMES_MTIME: u64 = 2;

/// A file's access and modification times as the program set them
/// (`utimensat`, `futimens`, `utimes`, `utime`), in nanoseconds since the
/// Unix epoch; `None`: left as it was (`UTIME_OMIT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Times {
    pub atime: Option<i64>,
    pub mtime: Option<i64>,
}

impl Times {
    /// `later` set on top of `self`: what `later` leaves alone stays.
    pub fn then(self, later: Times) -> Times {
        Times {
            atime: later.atime.or(self.atime),
            mtime: later.mtime.or(self.mtime),
        }
    }

    /// `top` set on top of `base`, either of them possibly unknown.
    pub fn layered(base: Option<Times>, top: Option<Times>) -> Option<Times> {
        match (base, top) {
            (Some(b), Some(t)) => Some(b.then(t)),
            (b, t) => t.or(b),
        }
    }
}

/// The other file of a rename, as an operation names it: the FNV-1a 64
/// hash of its path relative to the prefix (its file directory is
/// `f-<hash16>`, docs/format.md "Layout"), the CRC-32C of that path (a
/// reader checks the directory's path record against it, so a collision or
/// a wrong directory is refused, not followed), and an epoch of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenameRef {
    pub hash: u64,
    pub path_crc: u32,
    pub at: EpochId,
}

impl RenameRef {
    pub fn new(rel: &[u8], at: EpochId) -> RenameRef {
        RenameRef {
            hash: path_hash(rel),
            path_crc: paralog_checksum::crc32c(rel),
            at,
        }
    }

    /// Whether `rel` is the path this reference names.
    pub fn names(&self, rel: &[u8]) -> bool {
        path_hash(rel) == self.hash && paralog_checksum::crc32c(rel) == self.path_crc
    }

    /// The referenced file's directory in a job's directory.
    pub fn file_dir_name(&self) -> String {
        format!("f-{:016x}", self.hash)
    }
}

pub use crate::layout::path_hash;

/// Which open of which file, by which job: the identity shared by every rank.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FileIdent {
    /// Job name (see `layout::validate_component`).
    pub job: String,
    /// The path as the program opened it (absolute, normalized).
    pub path: Vec<u8>,
    /// The path relative to the prefix: where the file lands under the remote.
    pub rel: Vec<u8>,
    /// Which open of this path within the job (1, 2, ...): all ranks agree on it.
    pub gen: u64,
}

/// One entry of a manifest, in the order the rank performed them.
///
/// Extents are the rank's final bytes of one *phase*: the writes between two
/// synchronizing points of the program, already resolved last-writer-wins.
/// Phases are numbered alike on every rank, so that ranks can be merged:
/// phase p of every rank, then the size operation that ends phase p, then
/// phase p+1 (see docs/format.md, "Merging ranks"). A size operation ends
/// its phase; a phase operation says which phase the next extents are in
/// when it is not the one the size operations imply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Extent(Extent),
    /// `ftruncate`/`MPI_File_set_size`: the file becomes exactly this long.
    SetSize(u64),
    /// `MPI_File_preallocate`, `fallocate`: the file becomes at least this
    /// long.
    Preallocate(u64),
    /// `unlink`/`MPI_File_delete`: the file no longer exists (a later open
    /// of the path starts from nothing).
    Delete,
    /// The following extents and size operation belong to this phase (a
    /// later one than the previous operations imply).
    Phase(u64),
    /// `rename(source, this)`: the file becomes the source's logical
    /// content at the source's epoch `at` (epoch 0:0: the source's drained
    /// file alone), replacing what it held. No byte is copied on the node;
    /// the drain reads them from the source's records. Manifest version 3.
    RenameFrom(RenameRef),
    /// `rename(this, target)`: the file no longer exists under this name;
    /// its content went to the target at the target's epoch `at` (the one
    /// holding the matching `RenameFrom`). The drain applies it only once
    /// the target's rename is durably remote. Manifest version 3.
    RenamedTo(RenameRef),
    /// The permission bits the program created the file with (its `mode`
    /// less its umask): the drain creates the remote file with them, never
    /// wider. Ends no phase; manifest version 3.
    Mode(u32),
    /// The program set the file's times after its last change in the
    /// epoch (a later write or size operation in the epoch drops them: the
    /// file is then as new as its drain). Ends no phase; manifest version 4.
    Times(Times),
}

impl Op {
    /// Operations that end a phase (everything but extents and phases).
    pub fn ends_phase(&self) -> bool {
        !matches!(
            self,
            Op::Extent(_) | Op::Phase(_) | Op::Mode(_) | Op::Times(_)
        )
    }

    /// Operations only version 3 holds.
    fn namespace(&self) -> bool {
        matches!(self, Op::RenameFrom(_) | Op::RenamedTo(_) | Op::Mode(_))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub file_off: u64,
    pub len: u64,
    /// Absolute byte position of the extent's data in the epoch's data log.
    pub log_pos: u64,
    /// CRC-32C of the extent's bytes.
    pub crc: u32,
}

impl Extent {
    pub fn file_end(&self) -> u64 {
        self.file_off + self.len
    }

    /// Refuse the extent's bytes (in the data log at `path`) if their
    /// checksum, `found`, is not the manifest's.
    pub fn check_crc(&self, path: &Path, found: u32) -> Result<()> {
        if found != self.crc {
            return Err(LogError::Checksum {
                path: path.to_path_buf(),
                offset: self.log_pos,
                len: self.len,
                expected: self.crc,
                found,
            });
        }
        Ok(())
    }
}

/// The committed record of one rank's epoch of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub ident: FileIdent,
    pub rank: u32,
    pub comm_size: u32,
    pub epoch: u64,
    /// Format 1: length of the data log this manifest relies on (header
    /// included); 0 when the rank wrote no data in this epoch and no data
    /// log exists. Format 2: where the data ends in the data log and the
    /// commit record begins (at least the header's length).
    pub data_len: u64,
    pub ops: Vec<Op>,
}

impl Manifest {
    /// The open and epoch the manifest records.
    pub fn id(&self) -> EpochId {
        EpochId::new(self.ident.gen, self.epoch)
    }

    /// Refuse a manifest found at `path`, the place of `rank`'s epoch `id`,
    /// that says it is another (a record moved or restored to the wrong
    /// place).
    pub fn check_place(&self, id: EpochId, rank: u32, path: &Path) -> Result<()> {
        if self.rank != rank || self.id() != id {
            return Err(LogError::Inconsistent {
                path: path.to_path_buf(),
                what: format!(
                    "manifest says rank {} generation {} epoch {}, its place says rank {rank} generation {} epoch {}",
                    self.rank, self.ident.gen, self.epoch, id.gen, id.epoch
                ),
            });
        }
        Ok(())
    }

    pub fn extents(&self) -> impl Iterator<Item = &Extent> {
        self.ops.iter().filter_map(|op| match op {
            Op::Extent(e) => Some(e),
            _ => None,
        })
    }

    /// The manifest as this build writes it (format 2: inside a data log's
    /// commit record; version 3 when it holds a namespace operation, which
    /// a version-2 reader would not understand; version 4 when it holds
    /// times).
    pub fn encode(&self) -> Vec<u8> {
        if self.ops.iter().any(|op| matches!(op, Op::Times(_))) {
            self.encode_version(MANIFEST_V4)
        } else if self.ops.iter().any(Op::namespace) {
            self.encode_version(MANIFEST_V3)
        } else {
            self.encode_version(FORMAT_VERSION)
        }
    }

    /// The manifest as format `version` wrote it (1: a file of its own; 2:
    /// the commit record's manifest). The layout is the same.
    pub fn encode_version(&self, version: u16) -> Vec<u8> {
        let ident = &self.ident;
        let body = MANIFEST_HEADER_LEN + ident.job.len() + ident.path.len() + ident.rel.len();
        let mut out = Vec::with_capacity(body + self.ops.len() * OP_LEN + 4);
        push_preamble(&mut out, MANIFEST_MAGIC, version, KIND_MANIFEST);
        out.extend_from_slice(&(MANIFEST_HEADER_LEN as u32).to_le_bytes());
        out.extend_from_slice(&self.rank.to_le_bytes());
        out.extend_from_slice(&self.comm_size.to_le_bytes());
        out.extend_from_slice(&ident.gen.to_le_bytes());
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.extend_from_slice(&self.data_len.to_le_bytes());
        out.extend_from_slice(&(self.ops.len() as u32).to_le_bytes());
        out.extend_from_slice(&(ident.job.len() as u16).to_le_bytes());
        out.extend_from_slice(&(ident.path.len() as u16).to_le_bytes());
        out.extend_from_slice(&(ident.rel.len() as u16).to_le_bytes());
        out.extend_from_slice(&[0u8; 6]);
        debug_assert_eq!(out.len(), MANIFEST_HEADER_LEN);
        out.extend_from_slice(ident.job.as_bytes());
        out.extend_from_slice(&ident.path);
        out.extend_from_slice(&ident.rel);
        for op in &self.ops {
            let (tag, crc, a, b, c) = match *op {
                Op::Extent(e) => (OP_EXTENT, e.crc, e.file_off, e.len, e.log_pos),
                Op::SetSize(n) => (OP_SET_SIZE, 0, n, 0, 0),
                Op::Preallocate(n) => (OP_PREALLOCATE, 0, n, 0, 0),
                Op::Delete => (OP_DELETE, 0, 0, 0, 0),
                Op::Phase(p) => (OP_PHASE, 0, p, 0, 0),
                Op::RenameFrom(r) => (OP_RENAME_FROM, r.path_crc, r.at.gen, r.at.epoch, r.hash),
                Op::RenamedTo(r) => (OP_RENAMED_TO, r.path_crc, r.at.gen, r.at.epoch, r.hash),
                Op::Mode(m) => (OP_MODE, 0, u64::from(m), 0, 0),
                Op::Times(t) => {
                    let set =
                        t.atime.map_or(0, |_| TIMES_ATIME) | t.mtime.map_or(0, |_| TIMES_MTIME);
                    (
                        OP_TIMES,
                        0,
                        t.atime.unwrap_or(0) as u64,
                        t.mtime.unwrap_or(0) as u64,
                        set,
                    )
                }
            };
            out.push(tag);
            out.extend_from_slice(&[0u8; 3]);
            out.extend_from_slice(&crc.to_le_bytes());
            out.extend_from_slice(&a.to_le_bytes());
            out.extend_from_slice(&b.to_le_bytes());
            out.extend_from_slice(&c.to_le_bytes());
        }
        sealed(out)
    }

    /// Decode and fully validate a manifest of either format. `path` is
    /// only used in errors. Never panics, whatever the bytes (fuzzed by
    /// `tests/fuzz_manifest.rs`).
    pub fn decode(bytes: &[u8], path: &Path) -> Result<Manifest> {
        Self::decode_version(bytes, path).map(|(m, _)| m)
    }

    /// [`Self::decode`], and the manifest's format version.
    pub fn decode_version(bytes: &[u8], path: &Path) -> Result<(Manifest, u16)> {
        let corrupt = |offset: usize, what: String| LogError::Corrupt {
            path: path.to_path_buf(),
            offset: offset as u64,
            what,
        };
        let version = check_preamble(
            bytes,
            path,
            MANIFEST_MAGIC,
            KIND_MANIFEST,
            "manifest",
            MANIFEST_VERSIONS,
        )?;
        if bytes.len() < MANIFEST_HEADER_LEN + 4 {
            return Err(corrupt(
                bytes.len(),
                format!(
                    "manifest is {} bytes, shorter than its {}-byte header",
                    bytes.len(),
                    MANIFEST_HEADER_LEN + 4
                ),
            ));
        }
        // Checksum before interpreting any length, so a torn or flipped
        // manifest is reported as such rather than as a nonsense field.
        super::check_crc(bytes, bytes.len() - 4, path)?;
        let header_len = le_u32(bytes, 12) as usize;
        if header_len != MANIFEST_HEADER_LEN {
            return Err(corrupt(
                12,
                format!("header length {header_len}, expected {MANIFEST_HEADER_LEN}"),
            ));
        }
        let rank = le_u32(bytes, 16);
        let comm_size = le_u32(bytes, 20);
        let gen = le_u64(bytes, 24);
        let epoch = le_u64(bytes, 32);
        let data_len = le_u64(bytes, 40);
        let n_ops = le_u32(bytes, 48) as usize;
        let job_len = le_u16(bytes, 52) as usize;
        let path_len = le_u16(bytes, 54) as usize;
        let rel_len = le_u16(bytes, 56) as usize;
        if bytes[58..64].iter().any(|&b| b != 0) {
            return Err(corrupt(58, "reserved header bytes are not zero".into()));
        }
        if comm_size == 0 || rank >= comm_size {
            return Err(corrupt(
                16,
                format!("rank {rank} is not below communicator size {comm_size}"),
            ));
        }
        if gen == 0 {
            return Err(corrupt(
                24,
                "open generation 0 (generations start at 1)".into(),
            ));
        }
        if epoch == 0 {
            return Err(corrupt(32, "epoch 0 (epochs start at 1)".into()));
        }
        // Format 2 always has a data log: the commit record is in it.
        if (data_len != 0 || version != FORMAT_V1) && data_len < DATA_HEADER_LEN {
            return Err(corrupt(
                40,
                format!("data log length {data_len} is shorter than the data header"),
            ));
        }
        let strings = job_len + path_len + rel_len;
        let expected_len = n_ops
            .checked_mul(OP_LEN)
            .and_then(|ops| ops.checked_add(MANIFEST_HEADER_LEN + strings + 4));
        if expected_len != Some(bytes.len()) {
            return Err(corrupt(
                48,
                format!(
                    "{n_ops} operations and {strings} bytes of names do not fit a {}-byte manifest",
                    bytes.len()
                ),
            ));
        }
        let mut at = MANIFEST_HEADER_LEN;
        let job = std::str::from_utf8(&bytes[at..at + job_len])
            .map_err(|_| corrupt(at, "job name is not UTF-8".into()))?
            .to_owned();
        crate::layout::validate_component("job name", &job)
            .map_err(|e| corrupt(at, e.to_string()))?;
        at += job_len;
        let app_path = bytes[at..at + path_len].to_vec();
        if !app_path.starts_with(b"/") {
            return Err(corrupt(at, "application path is not absolute".into()));
        }
        at += path_len;
        let rel = bytes[at..at + rel_len].to_vec();
        crate::layout::validate_rel(&rel).map_err(|e| corrupt(at, e.to_string()))?;
        at += rel_len;

        let mut ops = Vec::with_capacity(n_ops);
        // Within one phase the extents are the resolved map: sorted, disjoint.
        let mut phase_end: Option<u64> = None;
        // The phase the operations so far imply.
        let mut phase = 0u64;
        for i in 0..n_ops {
            let o = at + i * OP_LEN;
            let tag = bytes[o];
            if bytes[o + 1..o + 4].iter().any(|&b| b != 0) {
                return Err(corrupt(
                    o + 1,
                    format!("operation {i}: reserved bytes are not zero"),
                ));
            }
            let crc = le_u32(bytes, o + 4);
            let a = le_u64(bytes, o + 8);
            let b = le_u64(bytes, o + 16);
            let c = le_u64(bytes, o + 24);
            let op = match tag {
                OP_EXTENT => {
                    let e = Extent {
                        file_off: a,
                        len: b,
                        log_pos: c,
                        crc,
                    };
                    if e.len == 0 {
                        return Err(corrupt(o, format!("operation {i}: empty extent")));
                    }
                    if e.file_off
                        .checked_add(e.len)
                        .is_none_or(|end| end > i64::MAX as u64)
                    {
                        return Err(corrupt(
                            o,
                            format!("operation {i}: extent end overflows a file offset"),
                        ));
                    }
                    let log_end = e.log_pos.checked_add(e.len);
                    if e.log_pos < DATA_HEADER_LEN || log_end.is_none_or(|end| end > data_len) {
                        return Err(corrupt(
                            o,
                            format!(
                                "operation {i}: extent at log position {} length {} lies outside the data log (length {data_len})",
                                e.log_pos, e.len
                            ),
                        ));
                    }
                    if let Some(prev_end) = phase_end {
                        if e.file_off < prev_end {
                            return Err(corrupt(
                                o,
                                format!("operation {i}: extent at file offset {} overlaps or precedes the previous one", e.file_off),
                            ));
                        }
                    }
                    phase_end = Some(e.file_end());
                    Op::Extent(e)
                }
                OP_SET_SIZE | OP_PREALLOCATE | OP_DELETE => {
                    if crc != 0 || b != 0 || c != 0 || (tag == OP_DELETE && a != 0) {
                        return Err(corrupt(
                            o,
                            format!("operation {i}: size operation has nonzero unused fields"),
                        ));
                    }
                    if a > i64::MAX as u64 {
                        return Err(corrupt(
                            o,
                            format!("operation {i}: size {a} overflows a file offset"),
                        ));
                    }
                    phase_end = None;
                    phase += 1;
                    match tag {
                        OP_SET_SIZE => Op::SetSize(a),
                        OP_PREALLOCATE => Op::Preallocate(a),
                        _ => Op::Delete,
                    }
                }
                OP_PHASE => {
                    if crc != 0 || b != 0 || c != 0 {
                        return Err(corrupt(
                            o,
                            format!("operation {i}: phase operation has nonzero unused fields"),
                        ));
                    }
                    if a <= phase || a > u64::from(u32::MAX) {
                        return Err(corrupt(
                            o,
                            format!("operation {i}: phase {a} does not follow phase {phase}"),
                        ));
                    }
                    phase = a;
                    phase_end = None;
                    Op::Phase(a)
                }
                OP_RENAME_FROM | OP_RENAMED_TO if version >= MANIFEST_V3 => {
                    // 0:0 names the source's drained file alone; the
                    // target's rename epoch always exists.
                    let none = a == 0 && b == 0 && tag == OP_RENAME_FROM;
                    if !none && (a == 0 || b == 0) {
                        return Err(corrupt(
                            o,
                            format!("operation {i}: rename names epoch {a}:{b}"),
                        ));
                    }
                    phase_end = None;
                    phase += 1;
                    let r = RenameRef {
                        hash: c,
                        path_crc: crc,
                        at: EpochId::new(a, b),
                    };
                    if tag == OP_RENAME_FROM {
                        Op::RenameFrom(r)
                    } else {
                        Op::RenamedTo(r)
                    }
                }
                OP_MODE if version >= MANIFEST_V3 => {
                    if crc != 0 || b != 0 || c != 0 || a > 0o7777 {
                        return Err(corrupt(
                            o,
                            format!("operation {i}: creation mode {a:o} or unused fields"),
                        ));
                    }
                    Op::Mode(a as u32)
                }
                OP_TIMES if version >= MANIFEST_V4 => {
                    let unset = |bit: u64, v: u64| c & bit == 0 && v != 0;
                    if crc != 0
                        || c == 0
                        || c > TIMES_ATIME | TIMES_MTIME
                        || unset(TIMES_ATIME, a)
                        || unset(TIMES_MTIME, b)
                    {
                        return Err(corrupt(
                            o,
                            format!("operation {i}: times operation sets {c:#x} with fields {a:#x} {b:#x}"),
                        ));
                    }
                    let time = |bit: u64, v: u64| (c & bit != 0).then_some(v as i64);
                    Op::Times(Times {
                        atime: time(TIMES_ATIME, a),
                        mtime: time(TIMES_MTIME, b),
                    })
                }
                other => {
                    return Err(corrupt(
                        o,
                        format!("operation {i}: unknown operation tag {other} in a version-{version} manifest"),
                    ))
                }
            };
            ops.push(op);
        }
        let m = Manifest {
            ident: FileIdent {
                job,
                path: app_path,
                rel,
                gen,
            },
            rank,
            comm_size,
            epoch,
            data_len,
            ops,
        };
        Ok((m, version))
    }
}
