//! The flat namespace: metadata directories, listing, and reading version records.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use paralog_log::CommitSync;

use super::*;

impl ObjStore {
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
    /// durable, after their [`ChunkWriter::finish_file`] in this process
    /// (a no-op where [`ObjStore::names_journaled`]: that fsync of each
    /// chunk made its name durable too).
    pub fn sync_chunk_dir(&self, dir: u32) -> Result<(), ObjError> {
        if self.names_journaled() {
            return Ok(());
        }
        self.sync_dir(&self.chunk_dir(dir))
    }

    /// Whether the store's file system journals its metadata in order
    /// (ext4, xfs; tmpfs, which keeps nothing over a crash anyway):
    /// docs/format.md "What one fdatasync covers". There the fsync of a
    /// chunk file commits the journal transaction that created its name
    /// and the directories above it, and a storage directory's own fsync
    /// after it is skipped: two fewer per version on one rank (docs/
    /// objects.md "What a version costs"). Callers fsync each chunk file
    /// after its name was made and never rename or link one into a storage
    /// directory afterwards. Asked of the kernel once per root and process.
    pub(super) fn names_journaled(&self) -> bool {
        CommitSync::for_root(&self.root) == CommitSync::Journal
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

    /// The newest version number of `name`. A listing is not a snapshot:
    /// one that ran while a publisher linked the newest record and its
    /// retention removed the one before can hold neither, so an empty
    /// listing is taken again (twice) before "no version" is answered.
    fn latest_number(&self, name: &[u8]) -> Result<Option<u64>, ObjError> {
        for _ in 0..2 {
            if let Some(&n) = self.versions(name)?.last() {
                return Ok(Some(n));
            }
        }
        Ok(self.versions(name)?.last().copied())
    }

    /// A version of `name` (default: the latest), its record checked.
    pub fn version(&self, name: &[u8], number: Option<u64>) -> Result<Option<Version>, ObjError> {
        let n = match number {
            Some(n) => n,
            None => match self.latest_number(name)? {
                Some(n) => n,
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
}
