//! The set record, format version 1 (docs/aggregate.md, "Set record,
//! version 1"): what a checkpoint set holds (its members, their sizes,
//! modes and extents), where each extent's bytes are (container, offset)
//! and the CRC-32C of every block of them. Little-endian, a fixed header
//! with a CRC of its own (lengths are checked before the body is looked
//! at), the body, and a CRC-32C of the whole record at its end.
//!
//! The decoder refuses, naming the file and the offset of the field, any
//! record whose magic, version, kind, lengths, order or checksums do not
//! match, and any member path that could leave its set directory.

use std::path::Path;

use crate::error::{AggError, Result};

/// The set record's file name in the set directory.
pub const RECORD_NAME: &str = "set.plr";
/// Container files end so; their names are `c<k:04>-v<version:06>-<attempt:016x>.plc`.
pub const CONTAINER_SUFFIX: &str = ".plc";
pub const MAGIC: &[u8; 8] = b"PLGSETRC";
pub const VERSION: u16 = 1;
pub const KIND_SET: u16 = 1;
pub const HEADER_LEN: usize = 96;
/// The block size the writer uses: one CRC-32C per MiB of an extent.
pub const DEFAULT_BLOCK: u32 = 1 << 20;
pub const MIN_BLOCK: u32 = 4096;
pub const MAX_BLOCK: u32 = 1 << 30;
const FLAG_COMPLETE: u32 = 1;
const CONTAINER_FIXED: usize = 10;
const MEMBER_FIXED: usize = 24;
const EXTENT_FIXED: usize = 32;

/// A checkpoint set as published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetRecord {
    /// The set directory, relative to the remote root (`ckpt/step-000100`).
    pub set: Vec<u8>,
    /// 1 for the first publish of the set, one more for each later one.
    pub version: u64,
    /// Every member the writers made is in it (see docs/aggregate.md,
    /// "When a set is complete"); `false`: published on request with
    /// members missing.
    pub complete: bool,
    /// Extents carry one CRC-32C per `block_size` bytes (the last block of
    /// an extent may be shorter).
    pub block_size: u32,
    /// Members start at multiples of this in their container.
    pub align: u64,
    /// Which log the set was drained from (the job's origin; zero: none).
    pub origin: [u8; 16],
    /// The job that wrote it (for people).
    pub job: Vec<u8>,
    pub containers: Vec<Container>,
    /// Sorted by path, each path once.
    pub members: Vec<Member>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    /// File name in the set directory (one component).
    pub name: Vec<u8>,
    /// Its length: every extent lies inside it.
    pub size: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Path relative to the set directory (`rank-00005.dat`).
    pub path: Vec<u8>,
    pub size: u64,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Sorted by offset, disjoint, inside `size`; bytes no extent covers
    /// read as zeros.
    pub extents: Vec<Extent>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extent {
    /// Offset in the member.
    pub offset: u64,
    pub len: u64,
    /// Index into the record's containers.
    pub container: u32,
    /// Where the extent's first byte is in the container.
    pub container_offset: u64,
    /// CRC-32C of each `block_size` bytes of the extent, in order.
    pub crcs: Vec<u32>,
}

impl Extent {
    pub fn blocks(len: u64, block_size: u32) -> u64 {
        len.div_ceil(block_size as u64)
    }
}

impl SetRecord {
    pub fn member(&self, path: &[u8]) -> Option<&Member> {
        self.members
            .binary_search_by(|m| m.path.as_slice().cmp(path))
            .ok()
            .map(|i| &self.members[i])
    }

    /// Bytes of all members (their sizes, holes included).
    pub fn bytes(&self) -> u64 {
        self.members.iter().map(|m| m.size).sum()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&self.set);
        body.extend_from_slice(&self.job);
        for c in &self.containers {
            body.extend_from_slice(&c.size.to_le_bytes());
            body.extend_from_slice(&(c.name.len() as u16).to_le_bytes());
            body.extend_from_slice(&c.name);
        }
        for m in &self.members {
            body.extend_from_slice(&m.size.to_le_bytes());
            body.extend_from_slice(&m.mode.to_le_bytes());
            body.extend_from_slice(&(m.path.len() as u16).to_le_bytes());
            body.extend_from_slice(&[0, 0]);
            body.extend_from_slice(&(m.extents.len() as u32).to_le_bytes());
            body.extend_from_slice(&[0; 4]);
            body.extend_from_slice(&m.path);
            for e in &m.extents {
                body.extend_from_slice(&e.offset.to_le_bytes());
                body.extend_from_slice(&e.len.to_le_bytes());
                body.extend_from_slice(&e.container.to_le_bytes());
                body.extend_from_slice(&[0; 4]);
                body.extend_from_slice(&e.container_offset.to_le_bytes());
                for c in &e.crcs {
                    body.extend_from_slice(&c.to_le_bytes());
                }
            }
        }
        let total = HEADER_LEN + body.len() + 4;
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&KIND_SET.to_le_bytes());
        out.extend_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        out.extend_from_slice(&(total as u64).to_le_bytes());
        out.extend_from_slice(&self.version.to_le_bytes());
        let flags = if self.complete { FLAG_COMPLETE } else { 0 };
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&self.block_size.to_le_bytes());
        out.extend_from_slice(&self.align.to_le_bytes());
        out.extend_from_slice(&self.origin);
        out.extend_from_slice(&(self.containers.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.members.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.set.len() as u16).to_le_bytes());
        out.extend_from_slice(&(self.job.len() as u16).to_le_bytes());
        out.resize(HEADER_LEN - 4, 0);
        let hcrc = paralog_checksum::crc32c(&out);
        out.extend_from_slice(&hcrc.to_le_bytes());
        out.extend_from_slice(&body);
        let crc = paralog_checksum::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(out.len(), total);
        out
    }

    /// Decode and check a record read from `path` (named in errors).
    pub fn decode(buf: &[u8], path: &Path) -> Result<SetRecord> {
        let bad = |offset: usize, what: String| AggError::corrupt(path, offset as u64, what);
        if buf.len() < HEADER_LEN {
            return Err(bad(
                buf.len(),
                format!(
                    "set record truncated: {} bytes, shorter than its {HEADER_LEN}-byte header",
                    buf.len()
                ),
            ));
        }
        if &buf[0..8] != MAGIC {
            return Err(bad(0, "not a paralog set record (bad magic)".into()));
        }
        let version = u16_at(buf, 8);
        if version != VERSION {
            return Err(bad(
                8,
                format!(
                    "set record format version {version} is not supported (this build reads version {VERSION})"
                ),
            ));
        }
        if u16_at(buf, 10) != KIND_SET {
            return Err(bad(
                10,
                format!("record kind {} is not a set record (1)", u16_at(buf, 10)),
            ));
        }
        let hcrc = u32_at(buf, HEADER_LEN - 4);
        let want = paralog_checksum::crc32c(&buf[..HEADER_LEN - 4]);
        if hcrc != want {
            return Err(bad(
                HEADER_LEN - 4,
                format!("header checksum mismatch (stored {hcrc:#010x}, computed {want:#010x})"),
            ));
        }
        if u32_at(buf, 12) as usize != HEADER_LEN {
            return Err(bad(
                12,
                format!("header length {} is not {HEADER_LEN}", u32_at(buf, 12)),
            ));
        }
        let total = u64_at(buf, 16);
        if total != buf.len() as u64 {
            return Err(bad(
                16,
                format!(
                    "record length {total} but the file holds {} bytes (truncated or extended)",
                    buf.len()
                ),
            ));
        }
        let crc = u32_at(buf, buf.len() - 4);
        let want = paralog_checksum::crc32c(&buf[..buf.len() - 4]);
        if crc != want {
            return Err(bad(
                buf.len() - 4,
                format!("record checksum mismatch (stored {crc:#010x}, computed {want:#010x})"),
            ));
        }
        let version = u64_at(buf, 24);
        if version == 0 {
            return Err(bad(24, "set version 0 (versions start at 1)".into()));
        }
        let flags = u32_at(buf, 32);
        if flags & !FLAG_COMPLETE != 0 {
            return Err(bad(32, format!("unknown flags {flags:#x}")));
        }
        let block_size = u32_at(buf, 36);
        if !block_size.is_power_of_two() || !(MIN_BLOCK..=MAX_BLOCK).contains(&block_size) {
            return Err(bad(
                36,
                format!(
                    "block size {block_size} is not a power of two in {MIN_BLOCK}..={MAX_BLOCK}"
                ),
            ));
        }
        let align = u64_at(buf, 40);
        if !align.is_power_of_two() || align > 1 << 30 {
            return Err(bad(
                40,
                format!("alignment {align} is not a power of two up to 1 GiB"),
            ));
        }
        let mut origin = [0u8; 16];
        origin.copy_from_slice(&buf[48..64]);
        let n_containers = u32_at(buf, 64) as usize;
        let n_members = u32_at(buf, 68) as usize;
        let set_len = u16_at(buf, 72) as usize;
        let job_len = u16_at(buf, 74) as usize;
        if let Some(i) = buf[76..HEADER_LEN - 4].iter().position(|&b| b != 0) {
            return Err(bad(76 + i, "reserved header bytes are not zero".into()));
        }

        let end = buf.len() - 4;
        let mut c = Cursor {
            buf,
            pos: HEADER_LEN,
            end,
            path,
        };
        let set_at = c.pos;
        let set = c.bytes(set_len, "set name")?.to_vec();
        check_rel(&set).map_err(|what| bad(set_at, format!("set name: {what}")))?;
        let job = c.bytes(job_len, "job name")?.to_vec();
        let mut containers = Vec::with_capacity(n_containers.min(end / CONTAINER_FIXED));
        for k in 0..n_containers {
            let at = c.pos;
            c.need(CONTAINER_FIXED, "container entry")?;
            let size = c.u64();
            let name_len = c.u16() as usize;
            let name = c.bytes(name_len, "container name")?.to_vec();
            if !is_container_name(&name) {
                return Err(bad(
                    at + CONTAINER_FIXED,
                    format!(
                        "container {k}: name {:?} is not a container file name (c<k>-v<version>-<attempt>{CONTAINER_SUFFIX})",
                        String::from_utf8_lossy(&name)
                    ),
                ));
            }
            if containers.iter().any(|x: &Container| x.name == name) {
                return Err(bad(at, format!("container {k}: name listed twice")));
            }
            containers.push(Container { name, size });
        }
        let mut members: Vec<Member> = Vec::with_capacity(n_members.min(end / MEMBER_FIXED));
        for i in 0..n_members {
            let at = c.pos;
            c.need(MEMBER_FIXED, "member entry")?;
            let size = c.u64();
            let mode = c.u32();
            let path_len = c.u16() as usize;
            let pad = c.u16();
            let n_ext = c.u32() as usize;
            let pad2 = c.u32();
            if pad != 0 || pad2 != 0 {
                return Err(bad(at, format!("member {i}: reserved bytes are not zero")));
            }
            if size > i64::MAX as u64 {
                return Err(bad(at, format!("member {i}: size {size} past 2^63-1")));
            }
            if mode & !0o7777 != 0 {
                return Err(bad(
                    at + 8,
                    format!("member {i}: mode {mode:#o} has bits beyond 0o7777"),
                ));
            }
            let path_at = c.pos;
            let mpath = c.bytes(path_len, "member path")?.to_vec();
            check_member_path(&mpath)
                .map_err(|what| bad(path_at, format!("member {i}: {what}")))?;
            if let Some(prev) = members.last() {
                if prev.path >= mpath {
                    return Err(bad(
                        path_at,
                        format!("member {i}: paths are not sorted and unique"),
                    ));
                }
                if mpath.starts_with(&prev.path) && mpath.get(prev.path.len()) == Some(&b'/') {
                    return Err(bad(
                        path_at,
                        format!(
                            "member {i}: {} is both a file and a directory",
                            String::from_utf8_lossy(&prev.path)
                        ),
                    ));
                }
            }
            let mut extents: Vec<Extent> = Vec::with_capacity(n_ext.min(end / EXTENT_FIXED));
            for j in 0..n_ext {
                let eat = c.pos;
                c.need(EXTENT_FIXED, "extent")?;
                let offset = c.u64();
                let len = c.u64();
                let container = c.u32();
                let pad = c.u32();
                let container_offset = c.u64();
                let what = |s: String| bad(eat, format!("member {i} extent {j}: {s}"));
                if pad != 0 {
                    return Err(what("reserved bytes are not zero".into()));
                }
                if len == 0 {
                    return Err(what("empty extent".into()));
                }
                if offset.checked_add(len).is_none_or(|e| e > size) {
                    return Err(what(format!(
                        "{offset}+{len} lies past the member's size {size}"
                    )));
                }
                if let Some(p) = extents.last() {
                    if p.offset + p.len > offset {
                        return Err(what("extents are not sorted and disjoint".into()));
                    }
                }
                let Some(cont) = containers.get(container as usize) else {
                    return Err(what(format!("container {container} of {n_containers}")));
                };
                if container_offset
                    .checked_add(len)
                    .is_none_or(|e| e > cont.size)
                {
                    return Err(what(format!(
                        "bytes {container_offset}+{len} lie past container {container}'s size {}",
                        cont.size
                    )));
                }
                let n_crc = Extent::blocks(len, block_size) as usize;
                c.need(4 * n_crc, "block checksums")?;
                let crcs = (0..n_crc).map(|_| c.u32()).collect();
                extents.push(Extent {
                    offset,
                    len,
                    container,
                    container_offset,
                    crcs,
                });
            }
            members.push(Member {
                path: mpath,
                size,
                mode,
                extents,
            });
        }
        if c.pos != end {
            return Err(bad(
                c.pos,
                format!("{} bytes past the last member", end - c.pos),
            ));
        }
        Ok(SetRecord {
            set,
            version,
            complete: flags & FLAG_COMPLETE != 0,
            block_size,
            align,
            origin,
            job,
            containers,
            members,
        })
    }
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    end: usize,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    fn need(&self, n: usize, what: &str) -> Result<()> {
        if self.end - self.pos < n {
            return Err(AggError::corrupt(
                self.path,
                self.pos as u64,
                format!(
                    "{what} runs past the end of the record ({n} bytes, {} left)",
                    self.end - self.pos
                ),
            ));
        }
        Ok(())
    }
    fn bytes(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        self.need(n, what)?;
        let b = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(b)
    }
    fn u16(&mut self) -> u16 {
        let v = u16_at(self.buf, self.pos);
        self.pos += 2;
        v
    }
    fn u32(&mut self) -> u32 {
        let v = u32_at(self.buf, self.pos);
        self.pos += 4;
        v
    }
    fn u64(&mut self) -> u64 {
        let v = u64_at(self.buf, self.pos);
        self.pos += 8;
        v
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// A relative path that stays below its root: not empty, not absolute, no
/// empty, `.` or `..` component, no NUL (the log's own rule for the paths
/// it records).
pub fn check_rel(p: &[u8]) -> std::result::Result<(), String> {
    paralog_log::layout::validate_rel(p).map_err(|e| e.to_string())
}

/// A member path: a safe relative path whose first component is not one
/// of the set's own files (the record, a container, a temporary record).
pub fn check_member_path(p: &[u8]) -> std::result::Result<(), String> {
    check_rel(p)?;
    let first = p.split(|&b| b == b'/').next().unwrap_or_default();
    if is_reserved_name(first) {
        return Err(format!(
            "{} is a name the set's own files use",
            String::from_utf8_lossy(p)
        ));
    }
    Ok(())
}

/// Names in a set directory that belong to the set itself.
pub fn is_reserved_name(name: &[u8]) -> bool {
    name == RECORD_NAME.as_bytes() || is_container_name(name) || name.starts_with(b".set.plr.")
}

/// `c<k:04>-v<version:06>-<attempt:016x>.plc`, as `container_name` makes.
pub fn is_container_name(name: &[u8]) -> bool {
    let Some(stem) = name.strip_suffix(CONTAINER_SUFFIX.as_bytes()) else {
        return false;
    };
    let parts: Vec<&[u8]> = stem.split(|&b| b == b'-').collect();
    let digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    matches!(parts.as_slice(), [c, v, a]
        if c.first() == Some(&b'c') && digits(&c[1..])
            && v.first() == Some(&b'v') && digits(&v[1..])
            && a.len() == 16 && a.iter().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()))
}

/// The file name of container `k` of version `version`, attempt `attempt`.
pub fn container_name(k: u32, version: u64, attempt: u64) -> Vec<u8> {
    format!("c{k:04}-v{version:06}-{attempt:016x}{CONTAINER_SUFFIX}").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_names_parse_back() {
        let n = container_name(3, 12, 0xdead_beef);
        assert_eq!(n, b"c0003-v000012-00000000deadbeef.plc");
        assert!(is_container_name(&n));
        for no in [
            &b"c0003-v000012.plc"[..],
            b"x0003-v1-00000000deadbeef.plc",
            b"c1-v1-00000000DEADBEEF.plc",
            b"set.plr",
        ] {
            assert!(!is_container_name(no), "{}", String::from_utf8_lossy(no));
        }
    }

    #[test]
    fn member_paths_stay_in_their_set() {
        // The escapes are the log's validate_rel (its own tests); here what
        // a set adds: its own files' names are never members.
        assert!(check_member_path(b"../x").is_err());
        let own = [
            &b"set.plr"[..],
            b"c0000-v000001-0000000000000001.plc/x",
            b".set.plr.1.2.tmp",
        ];
        assert!(own.iter().all(|p| check_member_path(p).is_err()));
        let fine = [
            &b"rank-00001.dat"[..],
            b"node0/rank-1.dat",
            b"set.plr.bak",
            b"x/set.plr",
        ];
        assert!(fine.iter().all(|p| check_member_path(p).is_ok()));
    }
}
