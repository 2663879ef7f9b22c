//! The records of a stream (docs/streams-format.md), each with its encoder
//! and a strict decoder: magic, version, kind, lengths and CRC-32C are all
//! checked, and a failure names the file and the offset. Little-endian.

use std::path::Path;

use paralog_checksum::crc32c;

pub use crate::base::Base;
use crate::error::{corrupt, Result};
pub use crate::records::*;

/// The version of every record defined in version 1 (kinds 1 to 11: their
/// layouts are unchanged, and they are still written as version 1, so a
/// version-1 build reads what it can read).
pub const VERSION: u16 = 1;
/// The format's newest version: version 2 adds the base record (kind 12),
/// which is written as version 2 (a version-1 build refuses it).
pub const VERSION_2: u16 = 2;
/// Header records: a producer's segment, a remote partition segment, the
/// remote stream's description.
pub const MAGIC_HEADER: &[u8; 8] = b"PLSTREAM";
pub const MAGIC_BATCH: &[u8; 8] = b"PLSTBTCH";
pub const MAGIC_COMMIT: &[u8; 8] = b"PLSTCMIT";
pub const MAGIC_CUT: &[u8; 8] = b"PLSTCUT\0";
pub const MAGIC_WATERMARK: &[u8; 8] = b"PLSTWMRK";
pub const MAGIC_GROUP: &[u8; 8] = b"PLSTGRUP";
pub const MAGIC_OBJECT_INDEX: &[u8; 8] = b"PLSTOIDX";
pub const MAGIC_TRIM: &[u8; 8] = b"PLSTTRIM";
pub const MAGIC_BASE: &[u8; 8] = b"PLSTBASE";

pub const KIND_SEGMENT: u16 = 1;
pub const KIND_PART_SEGMENT: u16 = 2;
pub const KIND_STREAM: u16 = 3;
pub const KIND_LOCAL_BATCH: u16 = 4;
pub const KIND_REMOTE_BATCH: u16 = 5;
pub const KIND_COMMIT: u16 = 6;
pub const KIND_CUT: u16 = 7;
pub const KIND_WATERMARK: u16 = 8;
pub const KIND_GROUP: u16 = 9;
pub const KIND_OBJECT_INDEX: u16 = 10;
pub const KIND_TRIM: u16 = 11;
pub const KIND_BASE: u16 = 12;
/// A producer's segment that continues another of the same producer (a
/// roll): kind 1's layout, its creation time replaced by the id of the
/// segment it continues (format version 2).
pub const KIND_ROLLED_SEGMENT: u16 = 13;

/// The version a record of `kind` is written with and must carry.
pub fn version_of(kind: u16) -> u16 {
    if kind == KIND_BASE || kind == KIND_ROLLED_SEGMENT {
        VERSION_2
    } else {
        VERSION
    }
}

pub const BATCH_HEADER_LEN: usize = 56;
pub const COMMIT_LEN: usize = 32;
pub const FRAME_HEAD_LEN: usize = 40;
/// A frame's length field counts the bytes after itself.
const FRAME_FIXED: u32 = (FRAME_HEAD_LEN - 4) as u32;
pub const NO_KEY: u32 = u32::MAX;
/// The largest key + payload of one event (the decoder refuses more, so a
/// damaged length cannot make a reader allocate gigabytes).
pub const MAX_EVENT: u64 = 16 << 20;
/// The largest batch body (a producer flushes before it would pass this).
pub const MAX_BODY: u64 = 256 << 20;
pub const MAX_PARTITIONS: u32 = 65_536;
pub const MAX_NAME: usize = 200;
/// A batch's partition field in a producer's segment (all partitions).
pub const ANY_PARTITION: u32 = u32::MAX;

pub(crate) fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes(b[o..o + 2].try_into().unwrap())
}
pub(crate) fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
pub(crate) fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}
/// `N` consecutive u64 fields from byte `o` (a record's fixed rows).
pub(crate) fn u64s<const N: usize>(b: &[u8], o: usize) -> [u64; N] {
    std::array::from_fn(|i| u64_at(b, o + 8 * i))
}
/// Append u64 fields, little-endian (the inverse of [`u64s`]).
pub(crate) fn put_u64s(b: &mut Vec<u8>, vs: &[u64]) {
    for v in vs {
        b.extend_from_slice(&v.to_le_bytes());
    }
}

/// The first 16 bytes of every record.
pub(crate) fn common(out: &mut Vec<u8>, magic: &[u8; 8], kind: u16, len: usize) {
    out.extend_from_slice(magic);
    out.extend_from_slice(&version_of(kind).to_le_bytes());
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&(len as u32).to_le_bytes());
}

/// Append the CRC-32C of everything in `out` from `start`.
pub(crate) fn seal(out: &mut Vec<u8>, start: usize) {
    let crc = crc32c(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Check a whole record (`b` is exactly its bytes, CRC last): magic,
/// version, kind, length, checksum. `offset` is where it is in `path`.
pub(crate) fn check_record(
    b: &[u8],
    magic: &[u8; 8],
    kinds: &[u16],
    path: &Path,
    offset: u64,
) -> Result<u16> {
    if b.len() < 20 {
        return Err(corrupt(
            path,
            offset,
            format!("record of {} bytes is too short", b.len()),
        ));
    }
    if &b[..8] != magic {
        return Err(corrupt(
            path,
            offset,
            format!("bad magic (expected {:?})", String::from_utf8_lossy(magic)),
        ));
    }
    let v = u16_at(b, 8);
    if v != VERSION && v != VERSION_2 {
        return Err(corrupt(
            path,
            offset,
            format!("format version {v} is not supported (this build reads versions {VERSION} and {VERSION_2})"),
        ));
    }
    let kind = u16_at(b, 10);
    if !kinds.contains(&kind) {
        return Err(corrupt(
            path,
            offset,
            format!("record kind {kind} where {kinds:?} was expected"),
        ));
    }
    if v != version_of(kind) {
        return Err(corrupt(
            path,
            offset,
            format!(
                "record kind {kind} of format version {v} (it is version {})",
                version_of(kind)
            ),
        ));
    }
    if u32_at(b, 12) as usize != b.len() {
        return Err(corrupt(
            path,
            offset,
            format!("record length {} is not {}", u32_at(b, 12), b.len()),
        ));
    }
    let end = b.len() - 4;
    if crc32c(&b[..end]) != u32_at(b, end) {
        return Err(corrupt(path, offset, "checksum mismatch"));
    }
    Ok(kind)
}

/// A stream or stream-segment name: `[A-Za-z0-9._-]{1,200}`, not starting with '.'.
pub fn valid_name(what: &'static str, s: &str) -> Result<()> {
    let why = if s.is_empty() || s.len() > MAX_NAME {
        Some("must be 1 to 200 bytes")
    } else if s.starts_with('.') {
        Some("may not start with '.'")
    } else if !s
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c))
    {
        Some("may hold only letters, digits, '.', '_' and '-'")
    } else {
        None
    };
    match why {
        Some(why) => Err(crate::StreamError::InvalidName {
            what,
            value: s.to_owned(),
            why,
        }),
        None => Ok(()),
    }
}

/// The header of a producer's segment (kind 1: `id` the producer, `first`
/// its creation time in ns, `partition` its pid; kind 13, a rolled one:
/// `first` the id of the segment it continues), of a remote partition
/// segment (kind 2: `first` its first offset, `partition` its partition)
/// or of the remote stream (kind 3: the description).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub kind: u16,
    pub id: u64,
    pub first: u64,
    pub partition: u32,
    pub partitions: u32,
    pub name: String,
}

impl Header {
    pub fn encode(&self) -> Vec<u8> {
        let len = 52 + self.name.len();
        let mut b = Vec::with_capacity(len);
        common(&mut b, MAGIC_HEADER, self.kind, len);
        b.extend_from_slice(&self.id.to_le_bytes());
        b.extend_from_slice(&self.first.to_le_bytes());
        b.extend_from_slice(&self.partition.to_le_bytes());
        b.extend_from_slice(&self.partitions.to_le_bytes());
        b.extend_from_slice(&(self.name.len() as u16).to_le_bytes());
        b.extend_from_slice(&[0; 6]);
        b.extend_from_slice(self.name.as_bytes());
        seal(&mut b, 0);
        b
    }

    /// Decode the header at the start of `b` (which may hold more); its
    /// length in bytes is `52 + name.len()`. `KIND_SEGMENT` accepts a
    /// rolled segment's header too (`kind` tells which it is).
    pub fn decode(b: &[u8], kind: u16, path: &Path) -> Result<Header> {
        if b.len() < 52 {
            return Err(corrupt(path, 0, "header is cut short"));
        }
        let len = u32_at(b, 12) as usize;
        if !(52..=52 + MAX_NAME).contains(&len) || len > b.len() {
            return Err(corrupt(
                path,
                0,
                format!("header length {len} is out of range"),
            ));
        }
        let kinds: &[u16] = if kind == KIND_SEGMENT {
            &[KIND_SEGMENT, KIND_ROLLED_SEGMENT]
        } else {
            &[kind]
        };
        let kind = check_record(&b[..len], MAGIC_HEADER, kinds, path, 0)?;
        let name_len = u16_at(b, 40) as usize;
        if 52 + name_len != len || b[42..48] != [0; 6] {
            return Err(corrupt(
                path,
                40,
                "name length disagrees with the header length",
            ));
        }
        let name = String::from_utf8(b[48..48 + name_len].to_vec())
            .map_err(|_| corrupt(path, 48, "stream name is not UTF-8"))?;
        valid_name("stream name", &name).map_err(|e| corrupt(path, 48, e.to_string()))?;
        let h = Header {
            kind,
            id: u64_at(b, 16),
            first: u64_at(b, 24),
            partition: u32_at(b, 32),
            partitions: u32_at(b, 36),
            name,
        };
        if h.partitions == 0 || h.partitions > MAX_PARTITIONS {
            return Err(corrupt(
                path,
                36,
                format!("{} partitions is out of range", h.partitions),
            ));
        }
        if kind == KIND_PART_SEGMENT && h.partition >= h.partitions {
            return Err(corrupt(
                path,
                32,
                format!("partition {} of {}", h.partition, h.partitions),
            ));
        }
        Ok(h)
    }

    pub fn len(&self) -> u64 {
        52 + self.name.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        false
    }
}

/// One event as a frame holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub partition: u32,
    pub producer: u64,
    pub seq: u64,
    pub time_ns: i64,
    pub key: Option<Vec<u8>>,
    pub payload: Vec<u8>,
}

/// Append `ev`'s frame to `out`.
pub fn encode_frame(
    out: &mut Vec<u8>,
    partition: u32,
    producer: u64,
    seq: u64,
    time_ns: i64,
    key: Option<&[u8]>,
    payload: &[u8],
) {
    let klen = key.map_or(0, |k| k.len());
    out.extend_from_slice(&(FRAME_FIXED + (klen + payload.len()) as u32).to_le_bytes());
    out.extend_from_slice(&partition.to_le_bytes());
    out.extend_from_slice(&producer.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&time_ns.to_le_bytes());
    out.extend_from_slice(&key.map_or(NO_KEY, |k| k.len() as u32).to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    if let Some(k) = key {
        out.extend_from_slice(k);
    }
    out.extend_from_slice(payload);
}

/// Split a batch body into its `count` frames, checking every length
/// (the CRC already held: a failure here is a writer that is not ours).
/// `at` is the body's offset in `path`. Returns each frame's byte range.
pub fn split_frames(
    body: &[u8],
    count: u32,
    partitions: u32,
    path: &Path,
    at: u64,
) -> Result<Vec<std::ops::Range<usize>>> {
    let mut out = Vec::with_capacity(count as usize);
    let mut p = 0usize;
    while p < body.len() {
        let bad = |what: String| corrupt(path, at + p as u64, what);
        if body.len() - p < FRAME_HEAD_LEN {
            return Err(bad("event frame cut short".into()));
        }
        let flen = u32_at(body, p) as usize;
        let klen = u32_at(body, p + 32);
        let plen = u32_at(body, p + 36) as usize;
        let klen = if klen == NO_KEY { 0 } else { klen as usize };
        if flen != FRAME_FIXED as usize + klen + plen
            || (klen + plen) as u64 > MAX_EVENT
            || p + 4 + flen > body.len()
        {
            return Err(bad(format!(
                "event frame length {flen} does not match its key and payload"
            )));
        }
        if u32_at(body, p + 4) >= partitions {
            return Err(bad(format!(
                "event of partition {} in a stream of {partitions}",
                u32_at(body, p + 4)
            )));
        }
        out.push(p..p + 4 + flen);
        p += 4 + flen;
    }
    if out.len() != count as usize {
        return Err(corrupt(
            path,
            at,
            format!("batch holds {} events, its header says {count}", out.len()),
        ));
    }
    Ok(out)
}

/// Decode one frame split by [`split_frames`].
pub fn decode_frame(f: &[u8]) -> Event {
    let klen = u32_at(f, 32);
    let plen = u32_at(f, 36) as usize;
    let (key, rest) = if klen == NO_KEY {
        (None, &f[FRAME_HEAD_LEN..])
    } else {
        let k = klen as usize;
        (
            Some(f[FRAME_HEAD_LEN..FRAME_HEAD_LEN + k].to_vec()),
            &f[FRAME_HEAD_LEN + k..],
        )
    };
    Event {
        partition: u32_at(f, 4),
        producer: u64_at(f, 8),
        seq: u64_at(f, 16),
        time_ns: u64_at(f, 24) as i64,
        key,
        payload: rest[..plen].to_vec(),
    }
}

/// The fields of a batch header: `first` is the producer's first sequence
/// number (local) or the partition's first offset (remote).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub kind: u16,
    pub body: u64,
    pub count: u32,
    pub partition: u32,
    pub first: u64,
    pub round: u64,
}

impl BatchHeader {
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        common(out, MAGIC_BATCH, self.kind, BATCH_HEADER_LEN);
        out.extend_from_slice(&self.body.to_le_bytes());
        out.extend_from_slice(&self.count.to_le_bytes());
        out.extend_from_slice(&self.partition.to_le_bytes());
        out.extend_from_slice(&self.first.to_le_bytes());
        out.extend_from_slice(&self.round.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        seal(out, start);
    }

    pub fn decode(b: &[u8], kind: u16, path: &Path, offset: u64) -> Result<BatchHeader> {
        check_record(&b[..BATCH_HEADER_LEN], MAGIC_BATCH, &[kind], path, offset)?;
        let h = BatchHeader {
            kind,
            body: u64_at(b, 16),
            count: u32_at(b, 24),
            partition: u32_at(b, 28),
            first: u64_at(b, 32),
            round: u64_at(b, 40),
        };
        if h.body > MAX_BODY || u32_at(b, 48) != 0 || h.count == 0 {
            return Err(corrupt(
                path,
                offset,
                format!(
                    "batch header out of range ({} bytes, {} events)",
                    h.body, h.count
                ),
            ));
        }
        Ok(h)
    }
}

/// The commit record that ends a batch: it names where the batch header
/// is and checks the header, the body and itself with one CRC-32C.
pub fn encode_commit(out: &mut Vec<u8>, batch_start_in_buf: usize, batch_pos: u64, count: u32) {
    let mut t = Vec::with_capacity(COMMIT_LEN);
    common(&mut t, MAGIC_COMMIT, KIND_COMMIT, COMMIT_LEN);
    t.extend_from_slice(&batch_pos.to_le_bytes());
    t.extend_from_slice(&count.to_le_bytes());
    let crc = paralog_checksum::crc32c_append(crc32c(&out[batch_start_in_buf..]), &t);
    out.extend_from_slice(&t);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Check a commit record `t` (32 bytes) after `batch` (header ‖ body) that
/// starts at `pos`: `None` if it holds, else why not.
pub fn commit_fails(batch: &[u8], t: &[u8], pos: u64, count: u32) -> Option<String> {
    if &t[..8] != MAGIC_COMMIT
        || u16_at(t, 8) != VERSION
        || u16_at(t, 10) != KIND_COMMIT
        || u32_at(t, 12) != COMMIT_LEN as u32
    {
        return Some("no commit record ends the batch".into());
    }
    if u64_at(t, 16) != pos || u32_at(t, 24) != count {
        return Some(format!(
            "commit record names batch at {} of {} events",
            u64_at(t, 16),
            u32_at(t, 24)
        ));
    }
    let crc = paralog_checksum::crc32c_append(crc32c(batch), &t[..28]);
    (crc != u32_at(t, 28)).then(|| "batch checksum mismatch".into())
}

/// The length of the record starting at `b` (its bytes 12..16), if `b`
/// holds its first 16 bytes.
pub fn record_len(b: &[u8]) -> Option<usize> {
    (b.len() >= 16).then(|| u32_at(b, 12) as usize)
}
