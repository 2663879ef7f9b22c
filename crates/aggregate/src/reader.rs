//! Reading checkpoint sets: the record (verified whole), the members it
//! lists, and any byte range of a member with the CRC-32C of every block
//! it touches checked before a byte of it is used. A mismatch or a short
//! container is an error naming the container file and the offset: the
//! reading program gets EIO, never wrong bytes.
//!
//! Plain file I/O only: the capture library links this module (and
//! `format`), never the writer.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use paralog_backend::objstore::{ObjStore, Version};

use crate::error::{AggError, Result};
use crate::format::{Member, SetRecord, RECORD_NAME};
use crate::objset;
use crate::store::ContainerSource;
use crate::stored::{decode_for_set, StoredAs};

/// The record of the set in `set_dir`; `None` when there is none.
pub fn read_record(set_dir: &Path) -> Result<Option<SetRecord>> {
    let path = set_dir.join(RECORD_NAME);
    match std::fs::read(&path) {
        Ok(bytes) => decode_for_set(&bytes, &path, StoredAs::Dir(set_dir)).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(AggError::io(&path, "read set record")(e)),
    }
}

/// An open set: its record and its containers (opened at first use).
pub struct SetReader {
    dir: PathBuf,
    record: SetRecord,
    files: Vec<OnceLock<File>>,
    /// On the object layout: the store and each container's version.
    obj: Option<(ObjStore, Vec<OnceLock<Version>>)>,
    /// On a store reached through a client (S3): ranged reads.
    source: Option<Arc<dyn ContainerSource>>,
}

impl std::fmt::Debug for SetReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SetReader")
            .field("dir", &self.dir)
            .field("version", &self.record.version)
            .finish_non_exhaustive()
    }
}

/// The last block read and verified, so that small sequential reads do not
/// read and check a whole block each.
#[derive(Default)]
pub struct BlockCache {
    key: Option<(u32, u64)>,
    data: Vec<u8>,
}

impl SetReader {
    /// Open the set in `set_dir`; `None` when it has no record.
    pub fn open(set_dir: &Path) -> Result<Option<SetReader>> {
        Ok(read_record(set_dir)?.map(|record| SetReader::from_record(set_dir, record)))
    }

    pub fn from_record(set_dir: &Path, record: SetRecord) -> SetReader {
        let files = record.containers.iter().map(|_| OnceLock::new()).collect();
        SetReader {
            dir: set_dir.to_path_buf(),
            record,
            files,
            obj: None,
            source: None,
        }
    }

    /// The set whose record is `record` on a store read through
    /// `source` (S3); `dir()` is then the store's name of the set
    /// directory (for messages).
    pub fn from_source(source: Arc<dyn ContainerSource>, record: SetRecord) -> SetReader {
        SetReader {
            dir: source.display(&record.set, b""),
            files: Vec::new(),
            obj: None,
            source: Some(source),
            record,
        }
    }

    /// Open the set `set` of an object layout; `None` when it has no
    /// record. `dir()` is then `objstore://ROOT/SET` (for messages).
    pub fn open_obj(store: &ObjStore, set: &[u8]) -> Result<Option<SetReader>> {
        Ok(objset::read_record(store, set)?.map(|(r, _)| SetReader::from_obj(store, r)))
    }

    pub fn from_obj(store: &ObjStore, record: SetRecord) -> SetReader {
        let dir = objset::display_path(store, &record.set);
        let versions = record.containers.iter().map(|_| OnceLock::new()).collect();
        SetReader {
            dir,
            files: Vec::new(),
            obj: Some((store.clone(), versions)),
            source: None,
            record,
        }
    }

    /// The latest version of container `k` of a set on the object layout.
    fn obj_container<'s>(
        &self,
        store: &ObjStore,
        slots: &'s [OnceLock<Version>],
        k: u32,
    ) -> Result<&'s Version> {
        let slot = &slots[k as usize];
        if let Some(v) = slot.get() {
            return Ok(v);
        }
        let name = objset::object_name(&self.record.set, &self.record.containers[k as usize].name);
        let v = objset::latest(store, &name)?.ok_or_else(|| AggError::Io {
            path: self.container_path(k),
            op: "open container",
            error: std::io::Error::new(std::io::ErrorKind::NotFound, "no such object"),
        })?;
        Ok(slot.get_or_init(|| v))
    }

    /// Bytes `at..` of container `k`, exactly `buf.len()` of them (a
    /// container shorter than that is damage naming its real end).
    fn read_container(
        &self,
        k: u32,
        at: u64,
        buf: &mut [u8],
        what: &dyn Fn() -> String,
    ) -> Result<()> {
        let path = self.container_path(k);
        let len = buf.len() as u64;
        let short = |real: u64| {
            AggError::corrupt(
                &path,
                real,
                format!(
                    "container ends at {real}, but {} needs bytes {at}..{}",
                    what(),
                    at + len
                ),
            )
        };
        if let Some(src) = &self.source {
            let name = &self.record.containers[k as usize].name;
            let n = src.read_at(&self.record.set, name, at, buf)?;
            if n < buf.len() {
                return Err(short(at + n as u64));
            }
            return Ok(());
        }
        if let Some((store, slots)) = &self.obj {
            let v = self.obj_container(store, slots, k)?;
            if at + len > v.size {
                return Err(short(v.size));
            }
            return store.read_range(v, at, buf).map_err(objset::obj_err(&path));
        }
        let f = self.file(k)?;
        f.read_exact_at(buf, at).map_err(|err| {
            if err.kind() == std::io::ErrorKind::UnexpectedEof {
                short(f.metadata().map(|md| md.len()).unwrap_or(0))
            } else {
                AggError::io(&path, "read container")(err)
            }
        })
    }

    pub fn record(&self) -> &SetRecord {
        &self.record
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn member(&self, path: &[u8]) -> Option<&Member> {
        self.record.member(path)
    }

    pub fn container_path(&self, k: u32) -> PathBuf {
        self.dir
            .join(OsStr::from_bytes(&self.record.containers[k as usize].name))
    }

    fn file(&self, k: u32) -> Result<&File> {
        let slot = &self.files[k as usize];
        if let Some(f) = slot.get() {
            return Ok(f);
        }
        let p = self.container_path(k);
        let f = File::open(&p).map_err(AggError::io(&p, "open container"))?;
        Ok(slot.get_or_init(|| f))
    }

    /// Fill `buf` with the member's bytes at `off` (zeros in holes and past
    /// its end), every block used verified.
    pub fn read_at(
        &self,
        m: &Member,
        off: u64,
        buf: &mut [u8],
        cache: &mut BlockCache,
    ) -> Result<()> {
        buf.fill(0);
        let end = off.saturating_add(buf.len() as u64).min(m.size);
        if off >= end {
            return Ok(());
        }
        let bs = self.record.block_size as u64;
        let first = m.extents.partition_point(|e| e.offset + e.len <= off);
        for e in &m.extents[first..] {
            if e.offset >= end {
                break;
            }
            let from = off.max(e.offset) - e.offset;
            let to = end.min(e.offset + e.len) - e.offset;
            let mut b = from / bs;
            while b * bs < to {
                let blk_off = b * bs;
                let blk_len = bs.min(e.len - blk_off);
                let data = self.block(m, e, b, blk_len, cache)?;
                let lo = from.max(blk_off);
                let hi = to.min(blk_off + blk_len);
                let dst = (e.offset + lo - off) as usize;
                buf[dst..dst + (hi - lo) as usize]
                    .copy_from_slice(&data[(lo - blk_off) as usize..(hi - blk_off) as usize]);
                b += 1;
            }
        }
        Ok(())
    }

    /// Block `b` of extent `e`, read whole and checked (or from the cache).
    fn block<'c>(
        &self,
        m: &Member,
        e: &crate::format::Extent,
        b: u64,
        len: u64,
        cache: &'c mut BlockCache,
    ) -> Result<&'c [u8]> {
        let at = e.container_offset + b * self.record.block_size as u64;
        let key = (e.container, at);
        if cache.key != Some(key) || cache.data.len() != len as usize {
            cache.key = None;
            cache.data.resize(len as usize, 0);
            let path = self.container_path(e.container);
            self.read_container(e.container, at, &mut cache.data, &|| {
                format!("block {b} of member {}", String::from_utf8_lossy(&m.path))
            })?;
            let crc = paralog_checksum::crc32c(&cache.data);
            let want = e.crcs[b as usize];
            if crc != want {
                return Err(AggError::corrupt(
                    &path,
                    at,
                    format!(
                        "block {b} of member {} ({len} bytes) fails its checksum (record {want:#010x}, data {crc:#010x})",
                        String::from_utf8_lossy(&m.path)
                    ),
                ));
            }
            cache.key = Some(key);
        }
        Ok(&cache.data)
    }

    /// Read every block of a member (for `extract` and tests).
    pub fn verify_member(&self, m: &Member) -> Result<()> {
        let mut cache = BlockCache::default();
        let bs = self.record.block_size as u64;
        for e in &m.extents {
            for b in 0..e.len.div_ceil(bs) {
                self.block(m, e, b, bs.min(e.len - b * bs), &mut cache)?;
            }
        }
        Ok(())
    }
}

/// One member of an open set, with its own block cache.
pub struct MemberReader {
    set: Arc<SetReader>,
    idx: usize,
    cache: BlockCache,
}

impl MemberReader {
    pub fn new(set: Arc<SetReader>, path: &[u8]) -> Option<MemberReader> {
        let idx = set
            .record
            .members
            .binary_search_by(|m| m.path.as_slice().cmp(path))
            .ok()?;
        Some(MemberReader {
            set,
            idx,
            cache: BlockCache::default(),
        })
    }

    pub fn member(&self) -> &Member {
        &self.set.record.members[self.idx]
    }

    pub fn set(&self) -> &Arc<SetReader> {
        &self.set
    }

    pub fn size(&self) -> u64 {
        self.member().size
    }

    pub fn read_at(&mut self, off: u64, buf: &mut [u8]) -> Result<()> {
        let m = &self.set.record.members[self.idx];
        self.set.read_at(m, off, buf, &mut self.cache)
    }
}

/// The bytes of some ranges of a member, one after the other, as a `Read`
/// (a new version of a set copying a member of the old one).
pub struct ExtentsReader {
    /// The member, or the path the set does not hold.
    inner: std::result::Result<MemberReader, PathBuf>,
    ranges: std::collections::VecDeque<(u64, u64)>,
}

impl ExtentsReader {
    pub fn new(set: Arc<SetReader>, path: &[u8], ranges: Vec<(u64, u64)>) -> ExtentsReader {
        let missing = set.dir().join(OsStr::from_bytes(path));
        ExtentsReader {
            inner: MemberReader::new(set, path).ok_or(missing),
            ranges: ranges.into(),
        }
    }
}

impl Read for ExtentsReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let inner = match &mut self.inner {
            Ok(r) => r,
            Err(p) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("{} is not in its set", p.display()),
                ))
            }
        };
        while let Some(&(off, len)) = self.ranges.front() {
            if len == 0 {
                self.ranges.pop_front();
                continue;
            }
            let n = (len as usize).min(buf.len());
            inner
                .read_at(off, &mut buf[..n])
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            self.ranges[0] = (off + n as u64, len - n as u64);
            return Ok(n);
        }
        Ok(0)
    }
}

/// The set a path under a POSIX remote root belongs to: the nearest
/// ancestor directory of `rel` (relative to `root`) holding a set record.
/// Returns the set directory's and the member's relative paths.
pub fn find_set(root: &Path, rel: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut cut = rel.len();
    while let Some(i) = rel[..cut].iter().rposition(|&b| b == b'/') {
        let dir = &rel[..i];
        if root
            .join(OsStr::from_bytes(dir))
            .join(RECORD_NAME)
            .symlink_metadata()
            .is_ok_and(|m| m.is_file())
        {
            return Some((dir.to_vec(), rel[i + 1..].to_vec()));
        }
        cut = i;
    }
    None
}

/// Every set under a POSIX remote root, by set directory (relative), with
/// its record or why it cannot be read. Set directories are not searched
/// further (sets do not nest).
pub fn list_sets(root: &Path) -> Result<Vec<(PathBuf, Result<SetRecord>)>> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        if dir.join(RECORD_NAME).is_file() {
            out.push((
                rel.clone(),
                read_record(&dir).map(|r| r.expect("the record is there")),
            ));
            continue;
        }
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if rel.as_os_str().is_empty() => {
                return Err(AggError::io(&dir, "list the remote")(e))
            }
            Err(_) => continue,
        };
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(rel.join(e.file_name()));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Open sets shared by the readers of one process (capture): a set is
/// decoded once, and again only when its record changed (a new version).
#[derive(Default)]
pub struct SetCache {
    sets: Mutex<BTreeMap<PathBuf, (Stamp, Arc<SetReader>)>>,
}

type Stamp = (u64, u64, u64, i64, i64);

impl std::fmt::Debug for SetCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.sets.lock().map(|s| s.len()).unwrap_or(0);
        f.debug_struct("SetCache").field("sets", &n).finish()
    }
}

impl SetCache {
    pub const fn new() -> SetCache {
        SetCache {
            sets: Mutex::new(BTreeMap::new()),
        }
    }

    /// The set in `set_dir` as its record is now; `None`: no record.
    pub fn get(&self, set_dir: &Path) -> Result<Option<Arc<SetReader>>> {
        let path = set_dir.join(RECORD_NAME);
        let md = match std::fs::metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(AggError::io(&path, "stat set record")(e)),
        };
        let stamp = (md.dev(), md.ino(), md.len(), md.mtime_nsec(), md.ctime());
        let mut sets = self.sets.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((s, r)) = sets.get(set_dir) {
            if *s == stamp {
                return Ok(Some(r.clone()));
            }
        }
        let Some(reader) = SetReader::open(set_dir)? else {
            sets.remove(set_dir);
            return Ok(None);
        };
        let reader = Arc::new(reader);
        sets.insert(set_dir.to_path_buf(), (stamp, reader.clone()));
        Ok(Some(reader))
    }

    /// The set `set` of an object layout as its record is now (its latest
    /// version number in the layout tells a new one); `None`: no record.
    pub fn get_obj(&self, store: &ObjStore, set: &[u8]) -> Result<Option<Arc<SetReader>>> {
        let name = objset::object_name(set, RECORD_NAME.as_bytes());
        let key = objset::display_path(store, set);
        let latest = store
            .versions(&name)
            .map_err(objset::obj_err(&key))?
            .last()
            .copied();
        let Some(n) = latest else {
            return Ok(None);
        };
        let stamp = (u64::MAX, 0, n, 0, 0);
        let mut sets = self.sets.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((s, r)) = sets.get(&key) {
            if *s == stamp {
                return Ok(Some(r.clone()));
            }
        }
        let Some((record, number)) = objset::read_record(store, set)? else {
            sets.remove(&key);
            return Ok(None);
        };
        let reader = Arc::new(SetReader::from_obj(store, record));
        sets.insert(key, ((u64::MAX, 0, number, 0, 0), reader.clone()));
        Ok(Some(reader))
    }
}
