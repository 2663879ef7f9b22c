//! Publishing a version atomically, retention and orphan collection.

use std::collections::BTreeSet;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::*;

impl ObjStore {
    /// Publish a new version of `name` as the next number. The record is
    /// hard-linked into place, which fails if the number is taken, so two
    /// publishers at once never replace each other: the one that lost the
    /// number takes the next one (both versions are kept; the later
    /// publish is the latest). Returns the number. The number is chosen
    /// under the name's lock ([`ObjStore::lock_numbers`]).
    pub fn publish(&self, name: &[u8], v: Version) -> Result<u64, ObjError> {
        self.publish_pinned(name, v, &|_| false)
    }

    /// [`ObjStore::publish`] whose retention keeps, beyond the last K, the
    /// older versions `pinned` says are still needed as they are (an array
    /// put whose commit has not finished: a retry must find its version by
    /// its id, docs/objects.md "Crashes").
    pub fn publish_pinned(
        &self,
        name: &[u8],
        mut v: Version,
        pinned: &dyn Fn(&Version) -> bool,
    ) -> Result<u64, ObjError> {
        let dir = self.meta_dir(name);
        std::fs::create_dir_all(&dir).map_err(io_err(&dir, "create metadata directory"))?;
        v.name = name.to_vec();
        let tmp = dir.join(format!(
            ".publish.{}.{}",
            std::process::id(),
            hex(&uuid::Uuid::new_v4().into_bytes())
        ));
        let numbers = self.lock_numbers(&dir)?;
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
        self.retain(name, &numbers, pinned)?;
        Ok(n)
    }

    /// Apply retention to `name` now, under its lock (what a publish does
    /// after its link), if it keeps more than K versions: for a version
    /// `pinned` kept at a publish and released since. One listing when
    /// there is nothing to drop.
    pub fn retain_now(
        &self,
        name: &[u8],
        pinned: &dyn Fn(&Version) -> bool,
    ) -> Result<(), ObjError> {
        if self.keep == u64::MAX || self.versions(name)?.len() as u64 <= self.keep {
            return Ok(());
        }
        let numbers = self.lock_numbers(&self.meta_dir(name))?;
        self.retain(name, &numbers, pinned)
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
    /// object: it is written for one epoch of one file). An older version
    /// `pinned` says is still needed stays, with its chunks, until a later
    /// retention finds it released.
    /// `_numbers`: the name's lock, held by the caller (the publish).
    fn retain(
        &self,
        name: &[u8],
        _numbers: &NumberLock,
        pinned: &dyn Fn(&Version) -> bool,
    ) -> Result<(), ObjError> {
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
                if pinned(&v) {
                    used.extend(v.pieces.iter().map(|p| (p.dir, p.chunk)));
                    continue;
                }
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

    /// The exclusive lock on the version numbers of the name whose
    /// metadata directory is `dir` (its file `.lock`: no name component
    /// starts with '.'), held by a publish from the listing that picks its
    /// number to the link that takes it, and on through retention (its listing
    /// to its last removal). Why: a directory listing is not a snapshot. A
    /// publisher listing while another one linked the new latest and its
    /// retention removed the old latest could see neither, and take a
    /// number that retention had freed long before (version 1 again after
    /// 39, dropped at once as the oldest: a lost version), and retention
    /// reading a kept record that a second retention had just removed
    /// failed the publish. A file system without `flock` (some NFS or
    /// Lustre mounts) gets no lock: there, publishers of one name racing
    /// with retention keep that hazard (docs/objstore.md, "Publishing a
    /// version").
    fn lock_numbers(&self, dir: &Path) -> Result<NumberLock, ObjError> {
        let path = dir.join(NUMBERS_LOCK);
        // Opened without O_CREAT when it exists (every publish but a
        // name's first): a creation is a journal entry.
        let file = match OpenOptions::new().read(true).write(true).open(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o644)
                .open(&path),
            other => other,
        }
        .map_err(io_err(&path, "open the version numbers' lock"))?;
        loop {
            // SAFETY: flock on a descriptor this function owns.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(NumberLock(Some(file)));
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ENOLCK | libc::EOPNOTSUPP | libc::ENOSYS) => {
                    return Ok(NumberLock(None))
                }
                _ => return Err(io_err(&path, "lock the version numbers")(e)),
            }
        }
    }
}

/// Held while it lives; closing the file releases the lock.
struct NumberLock(#[allow(dead_code)] Option<std::fs::File>);
