//! The on-disk records of the log, versions 1 and 2 (specified in
//! docs/format.md).
//!
//! All integers are little-endian. Every record starts with an 8-byte magic,
//! a format version and a record kind, and is protected by a CRC-32C, so a
//! file from another tool, another version or a torn write is refused with an
//! error that names the offset, never decoded into wrong extents.
//!
//! Format 2 changed where the manifest lives: at the local commit it is
//! appended to the epoch's data log with a commit trailer after it (one
//! fdatasync per commit, `format/commit.rs`), instead of a file of its own.
//! The data log header and the manifest say version 2; the commit mark,
//! path and progress records did not change and keep version 1. Readers
//! read both formats.
//!
//! The manifest and its operations are in `format/manifest.rs`, the commit
//! trailer in `format/commit.rs` (both re-exported here); the fixed-size
//! records and the checks they share are below.

use std::path::Path;

use crate::error::{LogError, Result};
use crate::id::EpochId;

mod commit;
mod manifest;
pub use commit::{
    decode_committed_manifest, decode_data_log, CommitTrailer, COMMIT_MAGIC, KIND_COMMIT,
    TRAILER_LEN,
};
pub use manifest::{path_hash, Extent, FileIdent, Manifest, Op, RenameRef, Times};

/// The format this build writes (data log header, manifest, commit trailer).
pub const FORMAT_VERSION: u16 = 2;
/// The first format: manifests in files of their own. Still read; the
/// records format 2 did not change (commit mark, path, progress) keep it.
pub const FORMAT_V1: u16 = 1;
/// A commit record's manifest that holds a namespace operation (rename):
/// the layout of version 2, with operation tags 6 and 7 (docs/format.md,
/// "Namespace operations"). Written only by an epoch that holds one, so a
/// log without renames stays readable by a build that knows version 2.
pub const MANIFEST_V3: u16 = 3;
/// A commit record's manifest that holds a file's times (operation tag 9,
/// `utimensat` and its family): the layout of version 3. Written only by an
/// epoch that holds one (docs/format.md, "File times").
pub const MANIFEST_V4: u16 = 4;
/// What readers of data logs accept.
pub(crate) const DATA_VERSIONS: &[u16] = &[FORMAT_V1, FORMAT_VERSION];
/// What readers of manifests accept.
pub(crate) const MANIFEST_VERSIONS: &[u16] = &[FORMAT_V1, FORMAT_VERSION, MANIFEST_V3, MANIFEST_V4];
const V1_ONLY: &[u16] = &[FORMAT_V1];

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
    /// The versions read.
    versions: &'static [u16],
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
    versions: DATA_VERSIONS,
    len: DATA_HEADER_LEN as u32,
    whole: false,
    name: "data log",
};

const MARK_RECORD: EpochRecord = EpochRecord {
    magic: MARK_MAGIC,
    versions: V1_ONLY,
    len: MARK_LEN as u32,
    whole: true,
    name: "commit mark",
};

impl<const KIND: u16> EpochHeader<KIND> {
    /// The 48 bytes of the header, as format `version` writes them.
    fn encode_as(&self, rec: &EpochRecord, version: u16) -> Vec<u8> {
        let mut out = Vec::with_capacity(rec.len as usize);
        push_preamble(&mut out, rec.magic, version, KIND);
        out.extend_from_slice(&rec.len.to_le_bytes());
        out.extend_from_slice(&self.rank.to_le_bytes());
        out.extend_from_slice(&self.comm_size.to_le_bytes());
        out.extend_from_slice(&self.gen.to_le_bytes());
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.extend_from_slice(&[0u8; 4]);
        debug_assert_eq!(out.len() + 4, EPOCH_HEADER_LEN);
        sealed(out)
    }

    /// Check the preamble, that the header is whole (and, for a record that
    /// is only the header, that nothing follows it), and the checksum; then
    /// read the fields and the version. The rest is the record's own to
    /// check.
    fn decode_as(bytes: &[u8], path: &Path, rec: &EpochRecord) -> Result<(Self, u16)> {
        let version = check_preamble(bytes, path, rec.magic, KIND, rec.name, rec.versions)?;
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
        // Covered by the checksum, so only a wrong writer gets here; the
        // format says what they hold, and a record that says otherwise is
        // not one we wrote.
        let len = le_u32(bytes, 12);
        if len != rec.len {
            return Err(LogError::Corrupt {
                path: path.to_path_buf(),
                offset: 12,
                what: format!("{} length {len}, expected {}", rec.name, rec.len),
            });
        }
        if let Some(i) = bytes[40..44].iter().position(|&b| b != 0) {
            return Err(LogError::Corrupt {
                path: path.to_path_buf(),
                offset: 40 + i as u64,
                what: format!("{} reserved bytes 40..44 are not zero", rec.name),
            });
        }
        let header = EpochHeader {
            rank: le_u32(bytes, 16),
            comm_size: le_u32(bytes, 20),
            gen: le_u64(bytes, 24),
            epoch: le_u64(bytes, 32),
        };
        Ok((header, version))
    }
}

impl<const KIND: u16> EpochHeader<KIND> {
    /// The open and epoch the record belongs to.
    pub fn id(&self) -> EpochId {
        EpochId::new(self.gen, self.epoch)
    }
}

impl DataHeader {
    /// The full `DATA_HEADER_LEN`-byte block, zero padded, of the format
    /// this build writes.
    pub fn encode(&self) -> Vec<u8> {
        self.encode_version(FORMAT_VERSION)
    }

    /// The header as format `version` (1 or 2) wrote it: the version field
    /// is the only difference (it says where the manifest is).
    pub fn encode_version(&self, version: u16) -> Vec<u8> {
        let mut out = self.encode_as(&DATA_RECORD, version);
        out.resize(DATA_HEADER_LEN as usize, 0);
        out
    }

    /// Decode the first bytes of a data log: at least `DATA_HEADER_USED`;
    /// the padding is checked as far as it is given. Either format.
    pub fn decode(bytes: &[u8], path: &Path) -> Result<DataHeader> {
        Self::decode_version(bytes, path).map(|(h, _)| h)
    }

    /// [`Self::decode`], and the header's format version: 1, the manifest
    /// is the file `e<N>.manifest`; 2, it is in the data log's commit
    /// record.
    pub fn decode_version(bytes: &[u8], path: &Path) -> Result<(DataHeader, u16)> {
        let (header, version) = Self::decode_as(bytes, path, &DATA_RECORD)?;
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
        Ok((header, version))
    }
}

impl CommitMark {
    /// A commit mark (unchanged by format 2: version 1).
    pub fn encode(&self) -> Vec<u8> {
        self.encode_as(&MARK_RECORD, FORMAT_V1)
    }

    pub fn decode(bytes: &[u8], path: &Path) -> Result<CommitMark> {
        Self::decode_as(bytes, path, &MARK_RECORD).map(|(m, _)| m)
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
        push_preamble(&mut out, PATH_MAGIC, FORMAT_V1, KIND_PATH);
        out.extend_from_slice(&(self.path.len() as u16).to_le_bytes());
        out.extend_from_slice(&(self.rel.len() as u16).to_le_bytes());
        out.extend_from_slice(&self.path);
        out.extend_from_slice(&self.rel);
        sealed(out)
    }

    pub fn decode(bytes: &[u8], path: &Path) -> Result<PathRecord> {
        check_preamble(bytes, path, PATH_MAGIC, KIND_PATH, "path record", V1_ONLY)?;
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
    /// The last epoch drained.
    pub fn id(&self) -> EpochId {
        EpochId::new(self.gen, self.epoch)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(PROGRESS_LEN);
        push_preamble(&mut out, PROGRESS_MAGIC, FORMAT_V1, KIND_PROGRESS);
        out.extend_from_slice(&(PROGRESS_LEN as u32).to_le_bytes());
        out.extend_from_slice(&[0u8; 8]);
        out.extend_from_slice(&self.gen.to_le_bytes());
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.extend_from_slice(&[0u8; 4]);
        debug_assert_eq!(out.len() + 4, PROGRESS_LEN);
        sealed(out)
    }

    pub fn decode(bytes: &[u8], path: &Path) -> Result<ProgressRecord> {
        check_preamble(
            bytes,
            path,
            PROGRESS_MAGIC,
            KIND_PROGRESS,
            "progress record",
            V1_ONLY,
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

/// Start a record: magic, version and kind (what `check_preamble` reads).
fn push_preamble(out: &mut Vec<u8>, magic: &[u8; 8], version: u16, kind: u16) {
    out.extend_from_slice(magic);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&kind.to_le_bytes());
}

/// End a record with the CRC-32C of all of it (what `check_crc` checks).
fn sealed(mut out: Vec<u8>) -> Vec<u8> {
    let crc = paralog_checksum::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Check magic, version (one of `versions`) and kind; returns the version.
fn check_preamble(
    bytes: &[u8],
    path: &Path,
    magic: &[u8; 8],
    kind: u16,
    name: &str,
    versions: &[u16],
) -> Result<u16> {
    if bytes.len() < 12 || &bytes[..8] != magic {
        return Err(LogError::Corrupt {
            path: path.to_path_buf(),
            offset: 0,
            what: format!("not a paralog {name} (bad magic)"),
        });
    }
    let version = le_u16(bytes, 8);
    if !versions.contains(&version) {
        return Err(LogError::UnsupportedVersion {
            path: path.to_path_buf(),
            found: version,
            supported: match versions {
                [1] => "version 1",
                [1, 2] => "versions 1 and 2",
                [1, 2, 3] => "versions 1, 2 and 3",
                _ => "other versions",
            },
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
    Ok(version)
}

fn check_crc(bytes: &[u8], crc_at: usize, path: &Path) -> Result<()> {
    let stored = le_u32(bytes, crc_at);
    let computed = paralog_checksum::crc32c(&bytes[..crc_at]);
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
