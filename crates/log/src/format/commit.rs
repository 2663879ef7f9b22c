//! The commit record of format 2 (docs/format.md, "Commit record"): at the
//! local commit a rank appends to its epoch's data log the epoch's
//! manifest and then a 32-byte trailer, and makes the data log durable with
//! one `fdatasync`. The trailer is the data log's last 32 bytes:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `PLGCTAIL` |
//! | 8 | 2 | format version (2) |
//! | 10 | 2 | kind (6) |
//! | 12 | 4 | length (32) |
//! | 16 | 8 | offset of the manifest in the data log |
//! | 24 | 4 | length of the manifest |
//! | 28 | 4 | CRC-32C of the data log's epoch header (bytes 0..48), the manifest, and bytes 0..28 of the trailer |
//!
//! A valid trailer proves the whole commit record (and the header the
//! manifest belongs to) is intact; a data log without one was not committed
//! (the commit did not finish: its program was never told it had).

use std::path::Path;

use super::{
    le_u16, le_u32, le_u64, push_preamble, DataHeader, Manifest, DATA_HEADER_LEN, DATA_HEADER_USED,
    FORMAT_VERSION, MANIFEST_HEADER_LEN,
};
use crate::error::{LogError, Result};

pub const COMMIT_MAGIC: &[u8; 8] = b"PLGCTAIL";
pub const KIND_COMMIT: u16 = 6;
pub const TRAILER_LEN: usize = 32;

/// Where the trailer says the manifest is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitTrailer {
    /// Offset of the manifest in the data log: where the data ends.
    pub manifest_off: u64,
    pub manifest_len: u32,
}

impl CommitTrailer {
    /// The commit record appended at `at` (where the data ends) to a data
    /// log whose first `DATA_HEADER_USED` bytes are `header`: the manifest,
    /// then the trailer.
    pub fn record(header: &[u8], manifest: &[u8], at: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(manifest.len() + TRAILER_LEN);
        out.extend_from_slice(manifest);
        push_preamble(&mut out, COMMIT_MAGIC, FORMAT_VERSION, KIND_COMMIT);
        out.extend_from_slice(&(TRAILER_LEN as u32).to_le_bytes());
        out.extend_from_slice(&at.to_le_bytes());
        out.extend_from_slice(&(manifest.len() as u32).to_le_bytes());
        let crc = checksum(header, manifest, &out[manifest.len()..]);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Read the trailer of a data log of `file_len` bytes (`trailer`: its
    /// last `TRAILER_LEN` bytes), checking its own fields: where it says
    /// the manifest is must fit between the header and the trailer. The
    /// checksum needs the manifest: [`Self::check`]. Errors name the offset
    /// in the data log.
    pub fn decode(trailer: &[u8], file_len: u64, path: &Path) -> Result<CommitTrailer> {
        let min_len = DATA_HEADER_LEN + (MANIFEST_HEADER_LEN + 4 + TRAILER_LEN) as u64;
        if file_len < min_len || trailer.len() != TRAILER_LEN {
            return Err(corrupt(
                path,
                file_len,
                format!("no commit record: the data log ends at {file_len}"),
            ));
        }
        let at = file_len - TRAILER_LEN as u64;
        if &trailer[..8] != COMMIT_MAGIC {
            return Err(corrupt(
                path,
                at,
                "no commit trailer at the end of the data log".into(),
            ));
        }
        let version = le_u16(trailer, 8);
        let kind = le_u16(trailer, 10);
        let len = le_u32(trailer, 12);
        if version != FORMAT_VERSION || kind != KIND_COMMIT || len != TRAILER_LEN as u32 {
            return Err(corrupt(
                path,
                at + 8,
                format!("commit trailer says version {version} kind {kind} length {len}, expected {FORMAT_VERSION}, {KIND_COMMIT}, {TRAILER_LEN}"),
            ));
        }
        let t = CommitTrailer {
            manifest_off: le_u64(trailer, 16),
            manifest_len: le_u32(trailer, 24),
        };
        let fits = t.manifest_off >= DATA_HEADER_LEN
            && t.manifest_len as usize >= MANIFEST_HEADER_LEN + 4
            && t.manifest_off.checked_add(u64::from(t.manifest_len)) == Some(at);
        if !fits {
            return Err(corrupt(
                path,
                at + 16,
                format!(
                    "commit trailer puts a {}-byte manifest at {}, which does not end where the trailer begins ({at})",
                    t.manifest_len, t.manifest_off
                ),
            ));
        }
        Ok(t)
    }

    /// Check the trailer's checksum over the data log's header (its first
    /// `DATA_HEADER_USED` bytes), the manifest and the trailer.
    pub fn check(&self, header: &[u8], manifest: &[u8], trailer: &[u8], path: &Path) -> Result<()> {
        let at = self.manifest_off + u64::from(self.manifest_len);
        let stored = le_u32(trailer, TRAILER_LEN - 4);
        let computed = checksum(header, manifest, &trailer[..TRAILER_LEN - 4]);
        if stored != computed {
            return Err(LogError::Checksum {
                path: path.to_path_buf(),
                offset: at + (TRAILER_LEN - 4) as u64,
                len: (DATA_HEADER_USED + manifest.len() + TRAILER_LEN - 4) as u64,
                expected: stored,
                found: computed,
            });
        }
        Ok(())
    }
}

fn checksum(header: &[u8], manifest: &[u8], trailer_head: &[u8]) -> u32 {
    let crc = paralog_checksum::crc32c(&header[..DATA_HEADER_USED]);
    let crc = paralog_checksum::crc32c_append(crc, manifest);
    paralog_checksum::crc32c_append(crc, trailer_head)
}

fn corrupt(path: &Path, offset: u64, what: String) -> LogError {
    LogError::Corrupt {
        path: path.to_path_buf(),
        offset,
        what,
    }
}

/// The manifest of a commit record whose trailer passed its checksum:
/// decoded (it must be a format-2 manifest), with errors naming offsets in
/// the data log, and checked against where it is: its data ends where the
/// commit record begins. A failure here is damage (or a writer that is not
/// ours), never a torn commit: the checksum held. (That it belongs to the
/// data log's rank, generation and epoch is checked by every read of its
/// extents, as for format 1.)
pub fn decode_committed_manifest(bytes: &[u8], manifest_off: u64, path: &Path) -> Result<Manifest> {
    let (m, version) = Manifest::decode_version(bytes, path).map_err(|e| shift(e, manifest_off))?;
    if version == super::FORMAT_V1 {
        return Err(corrupt(
            path,
            manifest_off + 8,
            format!("the manifest of a format-2 commit record says version {version} (2 to 4)"),
        ));
    }
    if m.data_len != manifest_off {
        return Err(corrupt(
            path,
            manifest_off + 40,
            format!(
                "manifest says the data ends at {}, its commit record begins at {manifest_off}",
                m.data_len
            ),
        ));
    }
    Ok(m)
}

/// An error about bytes read at `base` in a file, with its offset made
/// absolute.
fn shift(e: LogError, base: u64) -> LogError {
    match e {
        LogError::Corrupt { path, offset, what } => LogError::Corrupt {
            path,
            offset: offset + base,
            what,
        },
        LogError::Checksum {
            path,
            offset,
            len,
            expected,
            found,
        } => LogError::Checksum {
            path,
            offset: offset + base,
            len,
            expected,
            found,
        },
        other => other,
    }
}

/// A whole format-2 data log in memory (golden vectors, tests): its
/// header, and the manifest of its commit record after every check a
/// reader makes, the extents' checksums included.
pub fn decode_data_log(log: &[u8], path: &Path) -> Result<(DataHeader, Manifest)> {
    let (header, version) = DataHeader::decode_version(log, path)?;
    if version != FORMAT_VERSION {
        return Err(corrupt(
            path,
            8,
            format!("a format-{version} data log has no commit record"),
        ));
    }
    let file_len = log.len() as u64;
    let tail = &log[log.len().saturating_sub(TRAILER_LEN)..];
    let t = CommitTrailer::decode(tail, file_len, path)?;
    let m_bytes =
        &log[t.manifest_off as usize..(t.manifest_off + u64::from(t.manifest_len)) as usize];
    t.check(log, m_bytes, tail, path)?;
    let m = decode_committed_manifest(m_bytes, t.manifest_off, path)?;
    if (m.rank, m.comm_size, m.ident.gen, m.epoch)
        != (header.rank, header.comm_size, header.gen, header.epoch)
    {
        return Err(LogError::Inconsistent {
            path: path.to_path_buf(),
            what: format!(
                "manifest says rank {} of {} generation {} epoch {}, the header rank {} of {} generation {} epoch {}",
                m.rank, m.comm_size, m.ident.gen, m.epoch, header.rank, header.comm_size, header.gen, header.epoch
            ),
        });
    }
    for e in m.extents() {
        let bytes = &log[e.log_pos as usize..(e.log_pos + e.len) as usize];
        e.check_crc(path, paralog_checksum::crc32c(bytes))?;
    }
    Ok((header, m))
}
