//! The on-disk records of the log, version 1 (specified in docs/format.md).
//!
//! All integers are little-endian. Every record starts with an 8-byte magic,
//! a format version and a record kind, and is protected by a CRC-32C, so a
//! file from another tool, another version or a torn write is refused with an
//! error that names the offset, never decoded into wrong extents.

use std::path::Path;

use crate::error::{LogError, Result};

pub const FORMAT_VERSION: u16 = 1;

pub const MANIFEST_MAGIC: &[u8; 8] = b"PLGMNFST";
pub const DATA_MAGIC: &[u8; 8] = b"PLGDATA\0";
pub const MARK_MAGIC: &[u8; 8] = b"PLGCMMIT";
pub const PATH_MAGIC: &[u8; 8] = b"PLGPATH\0";
pub const PROGRESS_MAGIC: &[u8; 8] = b"PLGPROGR";

pub const KIND_MANIFEST: u16 = 1;
pub const KIND_DATA: u16 = 2;
pub const KIND_MARK: u16 = 3;
pub const KIND_PATH: u16 = 4;
pub const KIND_PROGRESS: u16 = 5;
pub const PROGRESS_LEN: usize = 48;

/// Fixed part of a manifest, before the variable-length strings.
pub const MANIFEST_HEADER_LEN: usize = 64;
/// Every operation record has the same size, so the decoder can check the
/// record count against the file length before reading any record.
pub const OP_LEN: usize = 32;
/// Data starts one page into the data log so that page-aligned application
/// writes stay page-aligned in the log (cheap copies during the drain).
pub const DATA_HEADER_LEN: u64 = 4096;
/// Bytes of the data header that carry meaning (the rest is zero padding):
/// the [`EpochHeader`] it shares with the commit mark.
pub const DATA_HEADER_USED: usize = EPOCH_HEADER_LEN;
pub const MARK_LEN: usize = EPOCH_HEADER_LEN;

/// Longest path (in bytes) a manifest may carry; Linux's PATH_MAX.
pub const MAX_PATH_LEN: usize = 4096;

const OP_EXTENT: u8 = 1;
const OP_SET_SIZE: u8 = 2;
const OP_PREALLOCATE: u8 = 3;
const OP_DELETE: u8 = 4;
const OP_PHASE: u8 = 5;

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
}

/// The committed record of one rank's epoch of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub ident: FileIdent,
    pub rank: u32,
    pub comm_size: u32,
    pub epoch: u64,
    /// Length of the data log this manifest relies on (header included); 0
    /// when the rank wrote no data in this epoch and no data log exists.
    pub data_len: u64,
    pub ops: Vec<Op>,
}

impl Manifest {
    pub fn extents(&self) -> impl Iterator<Item = &Extent> {
        self.ops.iter().filter_map(|op| match op {
            Op::Extent(e) => Some(e),
            _ => None,
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        let ident = &self.ident;
        let body = MANIFEST_HEADER_LEN + ident.job.len() + ident.path.len() + ident.rel.len();
        let mut out = Vec::with_capacity(body + self.ops.len() * OP_LEN + 4);
        out.extend_from_slice(MANIFEST_MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&KIND_MANIFEST.to_le_bytes());
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
            };
            out.push(tag);
            out.extend_from_slice(&[0u8; 3]);
            out.extend_from_slice(&crc.to_le_bytes());
            out.extend_from_slice(&a.to_le_bytes());
            out.extend_from_slice(&b.to_le_bytes());
            out.extend_from_slice(&c.to_le_bytes());
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decode and fully validate a manifest. `path` is only used in errors.
    /// Never panics, whatever the bytes (fuzzed by `tests/fuzz_manifest.rs`).
    pub fn decode(bytes: &[u8], path: &Path) -> Result<Manifest> {
        let corrupt = |offset: usize, what: String| LogError::Corrupt {
            path: path.to_path_buf(),
            offset: offset as u64,
            what,
        };
        check_preamble(bytes, path, MANIFEST_MAGIC, KIND_MANIFEST, "manifest")?;
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
        let body_end = bytes.len() - 4;
        let stored = le_u32(bytes, body_end);
        let computed = crc32c::crc32c(&bytes[..body_end]);
        if stored != computed {
            return Err(LogError::Checksum {
                path: path.to_path_buf(),
                offset: body_end as u64,
                len: body_end as u64,
                expected: stored,
                found: computed,
            });
        }
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
        if data_len != 0 && data_len < DATA_HEADER_LEN {
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
                other => {
                    return Err(corrupt(
                        o,
                        format!("operation {i}: unknown operation tag {other}"),
                    ))
                }
            };
            ops.push(op);
        }
        Ok(Manifest {
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
        })
    }
}

/// The header shared by the data log and the commit mark: which rank of
/// which open and epoch the file belongs to, so that a data log or a mark
/// that was moved or mixed up is refused. Its 48 bytes are magic, version,
/// kind, record length, rank (16), communicator size (20), generation (24),
/// epoch (32), 4 zero bytes, and a CRC-32C of bytes 0..44 at 44. The two
/// records differ only in magic, kind and length, and the data header is
/// padded with zeros to `DATA_HEADER_LEN`. `KIND` is the record kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochHeader<const KIND: u16> {
    pub rank: u32,
    pub comm_size: u32,
    pub gen: u64,
    pub epoch: u64,
}

/// The first bytes of an epoch's data log.
pub type DataHeader = EpochHeader<KIND_DATA>;

/// The commit mark a rank writes after the agreement said every rank
/// committed. Its *existence* is the record (it is written without fsync: a
/// lost mark is re-derived from the manifests); the content is for people and
/// for catching a mark copied to the wrong place.
pub type CommitMark = EpochHeader<KIND_MARK>;

const EPOCH_HEADER_LEN: usize = 48;

/// What else tells the records that share [`EpochHeader`] apart.
struct EpochRecord {
    magic: &'static [u8; 8],
    /// The record length stored at 12.
    len: u32,
    /// The record is exactly the header (a commit mark), not the start of a
    /// longer file (a data log).
    whole: bool,
    /// What errors call it.
    name: &'static str,
}

const DATA_RECORD: EpochRecord = EpochRecord {
    magic: DATA_MAGIC,
    len: DATA_HEADER_LEN as u32,
    whole: false,
    name: "data log",
};

const MARK_RECORD: EpochRecord = EpochRecord {
    magic: MARK_MAGIC,
    len: MARK_LEN as u32,
    whole: true,
    name: "commit mark",
};

impl<const KIND: u16> EpochHeader<KIND> {
    /// The 48 bytes of the header.
    fn encode_as(&self, rec: &EpochRecord) -> Vec<u8> {
        let mut out = Vec::with_capacity(rec.len as usize);
        out.extend_from_slice(rec.magic);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&KIND.to_le_bytes());
        out.extend_from_slice(&rec.len.to_le_bytes());
        out.extend_from_slice(&self.rank.to_le_bytes());
        out.extend_from_slice(&self.comm_size.to_le_bytes());
        out.extend_from_slice(&self.gen.to_le_bytes());
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.extend_from_slice(&[0u8; 4]);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(out.len(), EPOCH_HEADER_LEN);
        out
    }

    /// Check the preamble, that the header is whole (and, for a record that
    /// is only the header, that nothing follows it), and the checksum; then
    /// read the fields. The rest is the record's own to check.
    fn decode_as(bytes: &[u8], path: &Path, rec: &EpochRecord) -> Result<Self> {
        check_preamble(bytes, path, rec.magic, KIND, rec.name)?;
        let n = bytes.len();
        if n < EPOCH_HEADER_LEN || (rec.whole && n != EPOCH_HEADER_LEN) {
            return Err(LogError::Corrupt {
                path: path.to_path_buf(),
                offset: n.min(EPOCH_HEADER_LEN) as u64,
                what: if rec.whole {
                    format!("{} is {n} bytes, expected {EPOCH_HEADER_LEN}", rec.name)
                } else {
                    format!("{} header is truncated", rec.name)
                },
            });
        }
        check_crc(bytes, EPOCH_HEADER_LEN - 4, path)?;
        Ok(EpochHeader {
            rank: le_u32(bytes, 16),
            comm_size: le_u32(bytes, 20),
            gen: le_u64(bytes, 24),
            epoch: le_u64(bytes, 32),
        })
    }
}

impl DataHeader {
    /// The full `DATA_HEADER_LEN`-byte block, zero padded.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.encode_as(&DATA_RECORD);
        out.resize(DATA_HEADER_LEN as usize, 0);
        out
    }

    /// Decode the first bytes of a data log: at least `DATA_HEADER_USED`;
    /// the padding is checked as far as it is given.
    pub fn decode(bytes: &[u8], path: &Path) -> Result<DataHeader> {
        let header = Self::decode_as(bytes, path, &DATA_RECORD)?;
        let pad_end = bytes.len().min(DATA_HEADER_LEN as usize);
        if let Some(i) = bytes[DATA_HEADER_USED..pad_end]
            .iter()
            .position(|&b| b != 0)
        {
            return Err(LogError::Corrupt {
                path: path.to_path_buf(),
                offset: (DATA_HEADER_USED + i) as u64,
                what: "data header padding is not zero".into(),
            });
        }
        let header_len = le_u32(bytes, 12) as u64;
        if header_len != DATA_HEADER_LEN {
            return Err(LogError::Corrupt {
                path: path.to_path_buf(),
                offset: 12,
                what: format!("data header length {header_len}, expected {DATA_HEADER_LEN}"),
            });
        }
        Ok(header)
    }
}

impl CommitMark {
    pub fn encode(&self) -> Vec<u8> {
        self.encode_as(&MARK_RECORD)
    }

    pub fn decode(bytes: &[u8], path: &Path) -> Result<CommitMark> {
        Self::decode_as(bytes, path, &MARK_RECORD)
    }
}

/// The record in each file directory that names the file it stands for, so
/// that a directory whose epochs were all drained still says what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathRecord {
    pub path: Vec<u8>,
    pub rel: Vec<u8>,
}

impl PathRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.path.len() + self.rel.len() + 4);
        out.extend_from_slice(PATH_MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&KIND_PATH.to_le_bytes());
        out.extend_from_slice(&(self.path.len() as u16).to_le_bytes());
        out.extend_from_slice(&(self.rel.len() as u16).to_le_bytes());
        out.extend_from_slice(&self.path);
        out.extend_from_slice(&self.rel);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8], path: &Path) -> Result<PathRecord> {
        check_preamble(bytes, path, PATH_MAGIC, KIND_PATH, "path record")?;
        let corrupt = |offset: usize, what: &str| LogError::Corrupt {
            path: path.to_path_buf(),
            offset: offset as u64,
            what: what.into(),
        };
        if bytes.len() < 20 {
            return Err(corrupt(bytes.len(), "path record is truncated"));
        }
        let path_len = le_u16(bytes, 12) as usize;
        let rel_len = le_u16(bytes, 14) as usize;
        if bytes.len() != 16 + path_len + rel_len + 4 {
            return Err(corrupt(12, "path record lengths do not match its size"));
        }
        check_crc(bytes, bytes.len() - 4, path)?;
        let app_path = bytes[16..16 + path_len].to_vec();
        let rel = bytes[16 + path_len..16 + path_len + rel_len].to_vec();
        crate::layout::validate_rel(&rel).map_err(|e| corrupt(16 + path_len, &e.to_string()))?;
        Ok(PathRecord {
            path: app_path,
            rel,
        })
    }
}

/// The server's durable record of how far a file has been drained: every
/// committed epoch up to and including (gen, epoch) is durably in the
/// remote. Written (write, fsync, rename, fsync directory) after the remote
/// is durable and before any local data of those epochs is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ProgressRecord {
    pub gen: u64,
    pub epoch: u64,
}

impl ProgressRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(PROGRESS_LEN);
        out.extend_from_slice(PROGRESS_MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&KIND_PROGRESS.to_le_bytes());
        out.extend_from_slice(&(PROGRESS_LEN as u32).to_le_bytes());
        out.extend_from_slice(&[0u8; 8]);
        out.extend_from_slice(&self.gen.to_le_bytes());
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.extend_from_slice(&[0u8; 4]);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(out.len(), PROGRESS_LEN);
        out
    }

    pub fn decode(bytes: &[u8], path: &Path) -> Result<ProgressRecord> {
        check_preamble(
            bytes,
            path,
            PROGRESS_MAGIC,
            KIND_PROGRESS,
            "progress record",
        )?;
        if bytes.len() != PROGRESS_LEN {
            return Err(LogError::Corrupt {
                path: path.to_path_buf(),
                offset: bytes.len().min(PROGRESS_LEN) as u64,
                what: format!(
                    "progress record is {} bytes, expected {PROGRESS_LEN}",
                    bytes.len()
                ),
            });
        }
        check_crc(bytes, PROGRESS_LEN - 4, path)?;
        if bytes[16..24].iter().chain(&bytes[40..44]).any(|&b| b != 0) {
            return Err(LogError::Corrupt {
                path: path.to_path_buf(),
                offset: 16,
                what: "reserved bytes of the progress record are not zero".into(),
            });
        }
        Ok(ProgressRecord {
            gen: le_u64(bytes, 24),
            epoch: le_u64(bytes, 32),
        })
    }
}

fn check_preamble(bytes: &[u8], path: &Path, magic: &[u8; 8], kind: u16, name: &str) -> Result<()> {
    if bytes.len() < 12 || &bytes[..8] != magic {
        return Err(LogError::Corrupt {
            path: path.to_path_buf(),
            offset: 0,
            what: format!("not a paralog {name} (bad magic)"),
        });
    }
    let version = le_u16(bytes, 8);
    if version != FORMAT_VERSION {
        return Err(LogError::UnsupportedVersion {
            path: path.to_path_buf(),
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let found_kind = le_u16(bytes, 10);
    if found_kind != kind {
        return Err(LogError::Corrupt {
            path: path.to_path_buf(),
            offset: 10,
            what: format!("record kind {found_kind}, expected {kind} ({name})"),
        });
    }
    Ok(())
}

fn check_crc(bytes: &[u8], crc_at: usize, path: &Path) -> Result<()> {
    let stored = le_u32(bytes, crc_at);
    let computed = crc32c::crc32c(&bytes[..crc_at]);
    if stored != computed {
        return Err(LogError::Checksum {
            path: path.to_path_buf(),
            offset: crc_at as u64,
            len: crc_at as u64,
            expected: stored,
            found: computed,
        });
    }
    Ok(())
}

fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
