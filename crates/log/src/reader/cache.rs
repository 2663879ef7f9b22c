//! What a scan of a node-local root read, kept for the next scan: directory
//! listings, data-log probes (header and commit record) and small records
//! (path, progress, format-1 manifest files), each keyed by its path and
//! the identity `stat` gives it (device, inode, size, modification and
//! change times). A later scan `stat`s each entry and reads again only
//! what is new or changed, so a scan of a root that holds many pending
//! epochs costs a `stat` per directory and per file instead of an open and
//! reads of each (docs/cluster.md, "What a round costs").
//!
//! Why an identity is enough: every write to a file or directory sets its
//! modification time to the kernel's clock, so a change made after a read
//! shows as another time. The clock is coarse (a few milliseconds on
//! Linux, a second on some file systems), so a change made in the same
//! tick as the one read would keep the time: like git's "racily clean"
//! entries, what was modified less than [`RACY`] before it was read is
//! not kept, and is read again next time. Entries not met by a scan are
//! dropped at its end ([`ScanCache::sweep`]): deleted files leave the
//! cache. The cache lives in memory only: a restarted server reads
//! everything once.
//!
//! A disabled cache ([`ScanCache::off`], what [`super::Inventory::scan`]
//! uses) makes no `stat` and keeps nothing: the scan is the uncached one.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::Metadata;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::record::{probe_data_log, Probe};
use crate::error::{IoContext, Result};

/// Entries modified less than this before they were read are read again
/// next time (a file system's timestamps may be this coarse).
const RACY: Duration = Duration::from_secs(1);

/// (name, path, is_dir) of each entry of a directory, sorted by name
/// (shared with the cache: a listing is not copied on a hit).
pub(crate) type Listing = Arc<Vec<(String, PathBuf, bool)>>;

/// What `stat` says of a file: it changes whenever the file does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ident {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Ident {
    fn of(m: &Metadata) -> Ident {
        Ident {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }

    /// Whether a read made at `now` may be kept: the last change is at
    /// least [`RACY`] older (a later change then shows as another time).
    fn settled(&self, now: SystemTime) -> bool {
        let at = |(s, ns): (i64, i64)| {
            u64::try_from(s)
                .ok()
                .map(|s| UNIX_EPOCH + Duration::new(s, ns.clamp(0, 999_999_999) as u32))
        };
        let newest = at(self.mtime).max(at(self.ctime));
        newest.is_some_and(|t| t + RACY <= now)
    }
}

#[derive(Debug)]
enum Kept {
    Listing(Listing),
    /// A data log's length and probe (only the outcomes that are not
    /// errors: a torn or unreadable log is probed again each time).
    Probe(u64, Probe),
    Bytes(Vec<u8>),
}

#[derive(Debug)]
struct Entry {
    ident: Ident,
    kept: Kept,
    /// The last scan that met it.
    seen: u64,
}

/// See the module's documentation.
#[derive(Debug, Default)]
pub struct ScanCache {
    on: bool,
    scan: u64,
    /// By path, as bytes (a `Path` hashes and compares component by
    /// component, several times slower).
    entries: HashMap<OsString, Entry>,
    /// Reads done and reads spared since the cache was made (for the
    /// benchmark and the tests).
    pub reads: u64,
    pub hits: u64,
}

impl ScanCache {
    /// A cache that keeps what it reads.
    pub fn new() -> ScanCache {
        ScanCache {
            on: true,
            ..ScanCache::default()
        }
    }

    /// No cache: every read is made, nothing is kept.
    pub fn off() -> ScanCache {
        ScanCache::default()
    }

    /// A new scan begins: what it does not meet is dropped by [`Self::sweep`].
    pub fn begin(&mut self) {
        self.scan += 1;
    }

    /// Drop what the scan since [`Self::begin`] did not meet (deleted, or
    /// no longer looked at).
    pub fn sweep(&mut self) {
        let scan = self.scan;
        self.entries.retain(|_, e| e.seen == scan);
    }

    /// How many entries are kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The kept entry of `path` if it is still what `meta` says, marked as
    /// met by this scan.
    fn hit(&mut self, path: &Path, meta: &Metadata) -> Option<&Kept> {
        let scan = self.scan;
        let ident = Ident::of(meta);
        match self.entries.get_mut(path.as_os_str()) {
            Some(e) if e.ident == ident => {
                e.seen = scan;
                self.hits += 1;
                Some(&e.kept)
            }
            _ => {
                self.reads += 1;
                None
            }
        }
    }

    /// Keep what was read of `path` as `meta` said before the read, unless
    /// it changed too recently to tell a later change from it.
    fn keep(&mut self, path: &Path, meta: &Metadata, kept: Kept) {
        let ident = Ident::of(meta);
        if ident.settled(SystemTime::now()) {
            let seen = self.scan;
            self.entries
                .insert(path.as_os_str().to_owned(), Entry { ident, kept, seen });
        } else {
            self.entries.remove(path.as_os_str());
        }
    }

    /// `stat` of `path`, `None` if it does not exist.
    fn stat(path: &Path) -> io::Result<Option<Metadata>> {
        match std::fs::metadata(path) {
            Ok(m) => Ok(Some(m)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The entries of `dir`, sorted by name; a missing directory is empty
    /// (it may have been cleaned up while we looked).
    pub(crate) fn list(&mut self, dir: &Path) -> Result<Listing> {
        if !self.on {
            return list_dir(dir).map(Arc::new);
        }
        let Some(meta) = Self::stat(dir).ctx("stat", dir)? else {
            return Ok(Listing::default());
        };
        if let Some(Kept::Listing(l)) = self.hit(dir, &meta) {
            return Ok(l.clone());
        }
        let l = Arc::new(list_dir(dir)?);
        self.keep(dir, &meta, Kept::Listing(l.clone()));
        Ok(l)
    }

    /// [`probe_data_log`] of `path`, or what it said last time.
    pub(crate) fn probe(&mut self, path: &Path) -> Result<Option<(u64, Probe)>> {
        if !self.on {
            return probe_data_log(path);
        }
        if let Some(p) = self.probed_in_this_scan(path.as_os_str()) {
            return Ok(Some(p));
        }
        let Some(meta) = Self::stat(path).ctx("stat", path)? else {
            return Ok(None);
        };
        if let Some(Kept::Probe(len, p)) = self.hit(path, &meta) {
            if let Some(p) = p.try_clone() {
                return Ok(Some((*len, p)));
            }
        }
        let got = probe_data_log(path)?;
        if let Some((len, p)) = &got {
            if let Some(p) = p.try_clone() {
                self.keep(path, &meta, Kept::Probe(*len, p));
            }
        }
        Ok(got)
    }

    /// What this scan already found in the data log `path` (the server's
    /// summary looks a manifest up again by name after the listing): as if
    /// the second look had been made at the first one's moment, which
    /// spares a `stat`. Only a kept probe: one that found no commit record
    /// is made again (the rank may have committed since).
    fn probed_in_this_scan(&mut self, path: &OsStr) -> Option<(u64, Probe)> {
        match self.entries.get(path) {
            Some(Entry {
                kept: Kept::Probe(len, p),
                seen,
                ..
            }) if *seen == self.scan => {
                let p = p.try_clone()?;
                self.hits += 1;
                Some((*len, p))
            }
            _ => None,
        }
    }

    /// The bytes of a small file (a record), or what they were last time.
    pub(crate) fn read(&mut self, path: &Path) -> io::Result<Vec<u8>> {
        if !self.on {
            return std::fs::read(path);
        }
        let Some(meta) = Self::stat(path)? else {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        };
        if let Some(Kept::Bytes(b)) = self.hit(path, &meta) {
            return Ok(b.clone());
        }
        let b = std::fs::read(path)?;
        self.keep(path, &meta, Kept::Bytes(b.clone()));
        Ok(b)
    }
}

/// (name, path, is_dir) of each entry, sorted by name; a missing directory
/// is empty (it may have been cleaned up while we looked).
fn list_dir(dir: &Path) -> Result<Vec<(String, PathBuf, bool)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).ctx("list", dir),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.ctx("list", dir)?;
        let ft = entry.file_type().ctx("stat", &entry.path())?;
        let name = entry.file_name().to_string_lossy().into_owned();
        out.push((name, entry.path(), ft.is_dir()));
    }
    out.sort();
    Ok(out)
}
