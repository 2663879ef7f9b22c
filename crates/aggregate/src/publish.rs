//! Writing a checkpoint set into a POSIX remote directory:
//!
//! ```text
//! <remote>/<set dir>/set.plr                                  the set record (the commit point)
//! <remote>/<set dir>/c<k:04>-v<version:06>-<attempt:016x>.plc  K containers of the published version
//! ```
//!
//! `SetWriter` spreads members over K containers (each to the one with the
//! fewest bytes so far), then `publish` makes the containers durable and
//! writes the record atomically (temporary name, fsync, rename, directory
//! fsync): the rename is the commit. A newer version of a set replaces the
//! record the same way, and the containers only the old version used are
//! removed after. A crash before the rename leaves the previous version
//! whole and the new containers unreferenced: `collect_orphans` removes
//! them.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use paralog_backend::objstore::ObjStore;

use crate::container::ContainerFile;
use crate::dirs::write_file;
pub use crate::dirs::{create_dirs, sync_dir};
use crate::error::{AggError, Result};
use crate::format::{self, Container, Extent, Member, SetRecord};
use crate::objpublish::commit_record_obj;
use crate::objset;
use crate::store::SetStore;

mod keep;
pub use keep::{containers_to_reuse, kept_members, reusable_containers};

/// Where a crash can happen while a set is published, in order: the
/// server's crash tests stop the process at each (`PARALOG_FAILPOINT`).
pub const POINTS: &[&str] = &[
    "aggregate.mid_containers",
    "aggregate.before_record",
    "aggregate.after_record",
];

/// Members start at multiples of this in their container by default.
pub const DEFAULT_ALIGN: u64 = 1 << 20;

type Hook = Box<dyn Fn(&str) + Send>;

pub struct SetWriter {
    dir: PathBuf,
    set: Vec<u8>,
    k: u32,
    align: u64,
    block: u32,
    version: u64,
    attempt: u64,
    job: Vec<u8>,
    origin: [u8; 16],
    previous: Option<SetRecord>,
    containers: Vec<ContainerFile>,
    members: Vec<Member>,
    names: BTreeSet<Vec<u8>>,
    buf: Vec<u8>,
    hook: Option<Hook>,
    published: bool,
    /// On the object layout (`new_obj`): the store.
    obj: Option<ObjStore>,
    /// On a store reached through a client (`new_store`: S3).
    store: Option<Arc<dyn SetStore>>,
}

/// The set directory, K and the alignment a writer is asked for.
fn check_args(dir: &Path, set: &[u8], k: u32, align: u64) -> Result<()> {
    let invalid = |what: String| AggError::Invalid {
        path: dir.to_path_buf(),
        what,
    };
    format::check_rel(set).map_err(|w| invalid(format!("set directory: {w}")))?;
    if k == 0 {
        return Err(invalid("K (containers per set) must be at least 1".into()));
    }
    if !align.is_power_of_two() || align > 1 << 30 {
        return Err(invalid(format!(
            "alignment {align} is not a power of two up to 1 GiB"
        )));
    }
    Ok(())
}

impl SetWriter {
    /// A new version of the set `set` (a directory relative to
    /// `remote_dir`) in at most `k` containers, members at multiples of
    /// `align`. The set directory is created if missing; a damaged
    /// current record is refused (its containers could not be told from
    /// orphans).
    pub fn new(remote_dir: &Path, set: &[u8], k: u32, align: u64) -> Result<SetWriter> {
        let dir = remote_dir.join(OsStr::from_bytes(set));
        check_args(&dir, set, k, align)?;
        create_dirs(remote_dir, &dir)?;
        let previous = crate::reader::read_record(&dir)?;
        Ok(SetWriter::with(dir, set, k, align, previous, None))
    }

    /// The same on an object layout: containers are chunks published as
    /// objects `SET/NAME`, the record the object `SET/set.plr`, published
    /// through the layout's own publish (docs/aggregate.md).
    pub fn new_obj(store: &ObjStore, set: &[u8], k: u32, align: u64) -> Result<SetWriter> {
        let dir = objset::display_path(store, set);
        check_args(&dir, set, k, align)?;
        if !store.root().is_dir() {
            return Err(AggError::Invalid {
                what: format!(
                    "the object store directory {} does not exist",
                    store.root().display()
                ),
                path: dir,
            });
        }
        let previous = objset::read_record(store, set)?.map(|(r, _)| r);
        Ok(SetWriter::with(
            dir,
            set,
            k,
            align,
            previous,
            Some(store.clone()),
        ))
    }

    /// The same on a store reached through a client (S3): each container
    /// one object, the record the object `SET/set.plr`, whose write is the
    /// commit (`store::commit_record_store`).
    pub fn new_store(
        store: Arc<dyn SetStore>,
        set: &[u8],
        k: u32,
        align: u64,
    ) -> Result<SetWriter> {
        let dir = store.display(set, b"");
        check_args(&dir, set, k, align)?;
        let previous = store.read_record(set)?;
        let mut w = SetWriter::with(dir, set, k, align, previous, None);
        w.store = Some(store);
        Ok(w)
    }

    fn with(
        dir: PathBuf,
        set: &[u8],
        k: u32,
        align: u64,
        previous: Option<SetRecord>,
        obj: Option<ObjStore>,
    ) -> SetWriter {
        let version = previous.as_ref().map_or(1, |p| p.version + 1);
        SetWriter {
            dir,
            set: set.to_vec(),
            k,
            align,
            block: format::DEFAULT_BLOCK,
            version,
            attempt: random_u64(),
            job: Vec::new(),
            origin: [0; 16],
            previous,
            containers: Vec::new(),
            members: Vec::new(),
            names: BTreeSet::new(),
            buf: Vec::new(),
            hook: None,
            published: false,
            obj,
            store: None,
        }
    }

    /// Who wrote it: the job's name and its log's origin.
    pub fn with_origin(mut self, job: &[u8], origin: [u8; 16]) -> SetWriter {
        self.job = job.to_vec();
        self.origin = origin;
        self
    }

    /// One CRC-32C per `block` bytes (a power of two, 4 KiB to 1 GiB).
    pub fn with_block_size(mut self, block: u32) -> SetWriter {
        assert!(
            block.is_power_of_two() && (format::MIN_BLOCK..=format::MAX_BLOCK).contains(&block)
        );
        self.block = block;
        self
    }

    /// Called at each of `POINTS` (crash injection).
    pub fn with_hook(mut self, hook: impl Fn(&str) + Send + 'static) -> SetWriter {
        self.hook = Some(Box::new(hook));
        self
    }

    /// The version this writer publishes.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The set directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The version it replaces, if any.
    pub fn previous(&self) -> Option<&SetRecord> {
        self.previous.as_ref()
    }

    /// Whether no member was added (nor copied from the previous version).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Remove the set instead of publishing it with no member (its program
    /// deleted every one; `crate::remove`). Nothing to do when it was never
    /// published.
    pub fn remove(mut self) -> Result<()> {
        self.hit("aggregate.before_record");
        if let Some(prev) = self.previous.take() {
            match (&self.obj, &self.store) {
                (Some(store), _) => crate::remove::remove_set_obj(store, &prev)?,
                (None, Some(store)) => crate::store::remove_set_store(&**store, &prev)?,
                (None, None) => crate::remove::remove_set(&self.dir, &prev)?,
            }
        }
        Ok(())
    }

    fn hit(&self, point: &str) {
        if let Some(h) = &self.hook {
            h(point);
        }
    }

    /// Add a member whose `size` bytes `src` yields.
    pub fn add_member(
        &mut self,
        path: &[u8],
        size: u64,
        mode: u32,
        src: &mut dyn Read,
    ) -> Result<()> {
        let extents = if size > 0 {
            vec![(0, size)]
        } else {
            Vec::new()
        };
        self.add_member_sparse(path, size, mode, &extents, src)
    }

    /// Add a member of `size` bytes whose data is in `extents` (offset,
    /// length; sorted, disjoint, inside `size`), the rest holes that read
    /// as zeros; `src` yields the extents' bytes one after the other.
    pub fn add_member_sparse(
        &mut self,
        path: &[u8],
        size: u64,
        mode: u32,
        extents: &[(u64, u64)],
        src: &mut dyn Read,
    ) -> Result<()> {
        let invalid = |what: String| AggError::Invalid {
            path: self.dir.join(OsStr::from_bytes(path)),
            what,
        };
        format::check_member_path(path).map_err(|w| invalid(format!("member path: {w}")))?;
        if self.names.contains(path) {
            return Err(invalid("added twice to the set".into()));
        }
        if size > i64::MAX as u64 {
            return Err(invalid(format!("size {size} past 2^63-1")));
        }
        let mut end = 0;
        for &(off, len) in extents {
            if len == 0 || off < end || off.checked_add(len).is_none_or(|e| e > size) {
                return Err(invalid(format!(
                    "extent {off}+{len} is empty, out of order or past the size {size}"
                )));
            }
            end = off + len;
        }
        let bytes: u64 = extents.iter().map(|e| e.1).sum();
        let mut out = Vec::with_capacity(extents.len());
        if bytes > 0 {
            let k = self.pick_container()?;
            if self.buf.is_empty() {
                self.buf = vec![0u8; (self.block as usize).max(8 << 20)];
            }
            let c = &mut self.containers[k];
            let mut at = c.aligned_end(self.align);
            for &(offset, len) in extents {
                let crcs = c.write_extent(at, len, src, self.block, &mut self.buf)?;
                out.push(Extent {
                    offset,
                    len,
                    container: k as u32,
                    container_offset: at,
                    crcs,
                });
                at += len;
            }
            self.hit("aggregate.mid_containers");
        }
        self.names.insert(path.to_vec());
        self.members.push(Member {
            path: path.to_vec(),
            size,
            mode: mode & 0o7777,
            extents: out,
        });
        Ok(())
    }

    /// The container with the fewest bytes (a new one while fewer than K
    /// exist); never a kept one.
    fn pick_container(&mut self) -> Result<usize> {
        if self.containers.len() < self.k as usize {
            let k = self.containers.len() as u32;
            let name = format::container_name(k, self.version, self.attempt);
            let c = match (&self.obj, &self.store) {
                (Some(store), _) => ContainerFile::create_obj(store, &self.set, name)?,
                (None, Some(store)) => ContainerFile::create_store(&**store, &self.set, name)?,
                (None, None) => ContainerFile::create(&self.dir, name)?,
            };
            self.containers.push(c);
            return Ok(k as usize);
        }
        self.containers
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.is_kept())
            .min_by_key(|(i, c)| (c.end, *i))
            .map(|(i, _)| i)
            .ok_or_else(|| AggError::Invalid {
                path: self.dir.clone(),
                what: "every container is kept from the replaced version".into(),
            })
    }

    /// Make the set durable and visible: containers fsynced, their names
    /// made durable (directory fsync), then the record written atomically.
    /// `complete: false` marks a set published with members missing.
    pub fn publish(mut self, complete: bool) -> Result<SetRecord> {
        // 1. The bytes before the record that points at them.
        for c in &mut self.containers {
            c.sync()?;
        }
        if self.obj.is_none() && self.store.is_none() {
            sync_dir(&self.dir)?;
        }
        self.hit("aggregate.before_record");
        let mut members = std::mem::take(&mut self.members);
        members.sort_by(|a, b| a.path.cmp(&b.path));
        for w in members.windows(2) {
            if w[1].path.starts_with(&w[0].path) && w[1].path.get(w[0].path.len()) == Some(&b'/') {
                return Err(AggError::Invalid {
                    path: self.dir.join(OsStr::from_bytes(&w[0].path)),
                    what: format!(
                        "is a member and the directory of member {}",
                        String::from_utf8_lossy(&w[1].path)
                    ),
                });
            }
        }
        let record = SetRecord {
            set: self.set.clone(),
            version: self.version,
            complete,
            block_size: self.block,
            align: self.align,
            origin: self.origin,
            job: self.job.clone(),
            containers: self
                .containers
                .iter()
                .map(|c| Container {
                    name: c.name.clone(),
                    size: c.end,
                })
                .collect(),
            members,
        };
        // 2. The commit; from the rename on, the containers are the
        // record's: never removed on error.
        let hook = self.hook.take();
        let published = &mut self.published;
        if let Some(store) = &self.obj {
            commit_record_obj(
                store,
                &record,
                self.previous.as_ref(),
                &|p| {
                    if let Some(h) = &hook {
                        h(p)
                    }
                },
                &mut || *published = true,
            )?;
            return Ok(record);
        }
        if let Some(store) = &self.store {
            crate::store::commit_record_store(
                &**store,
                &record,
                self.previous.as_ref(),
                &|p| {
                    if let Some(h) = &hook {
                        h(p)
                    }
                },
                &mut || *published = true,
            )?;
            return Ok(record);
        }
        commit_record(
            &self.dir,
            &record,
            self.previous.as_ref(),
            self.attempt,
            &|p| {
                if let Some(h) = &hook {
                    h(p)
                }
            },
            &mut || *published = true,
        )?;
        Ok(record)
    }
}

/// Make `record` the set's published version in `dir` (its containers
/// already durable, their names too): written to a temporary name, fsynced,
/// renamed to `set.plr` (the commit), the directory fsynced; then the
/// containers only `previous` used are removed. `committed` is called right
/// after the rename; `hook` at `aggregate.after_record`. The one-node
/// writer and the server job's record writer (many nodes) both commit here.
pub fn commit_record(
    dir: &Path,
    record: &SetRecord,
    previous: Option<&SetRecord>,
    attempt: u64,
    hook: &dyn Fn(&str),
    committed: &mut dyn FnMut(),
) -> Result<()> {
    let tmp = dir.join(format!(
        ".{}.{}.{:016x}.tmp",
        format::RECORD_NAME,
        std::process::id(),
        attempt
    ));
    let path = dir.join(format::RECORD_NAME);
    write_file(&tmp, &record.encode())?;
    std::fs::rename(&tmp, &path).map_err(AggError::io(&path, "rename set record into place"))?;
    committed();
    // The rename is durable only with its directory.
    sync_dir(dir)?;
    hook("aggregate.after_record");
    // 3. What only the replaced version used.
    if let Some(prev) = previous {
        let keep: BTreeSet<&[u8]> = record.containers.iter().map(|c| &c.name[..]).collect();
        let mut removed = false;
        for c in prev
            .containers
            .iter()
            .filter(|c| !keep.contains(&c.name[..]))
        {
            let p = dir.join(OsStr::from_bytes(&c.name));
            match std::fs::remove_file(&p) {
                Ok(()) => removed = true,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(AggError::io(&p, "remove a replaced container")(e)),
            }
        }
        if removed {
            sync_dir(dir)?;
        }
    }
    Ok(())
}

/// The per-attempt number that names a publish's containers and temporary
/// record (random: two attempts never share a name).
pub fn new_attempt() -> u64 {
    random_u64()
}

impl Drop for SetWriter {
    /// A writer dropped before `publish` (an error) removes its containers;
    /// a crash leaves them to `collect_orphans`.
    fn drop(&mut self) {
        if !self.published {
            for c in &mut self.containers {
                c.remove();
            }
        }
    }
}

/// Remove what no published version uses from a set directory: containers
/// the record does not list, and temporary records of crashed publishers.
/// Only where no writer of this set is running (it would lose its
/// containers). A damaged record stops it before anything is removed.
/// Returns the paths removed.
pub fn collect_orphans(set_dir: &Path) -> Result<Vec<PathBuf>> {
    let record = crate::reader::read_record(set_dir)?;
    let live: BTreeSet<Vec<u8>> = record
        .iter()
        .flat_map(|r| r.containers.iter().map(|c| c.name.clone()))
        .collect();
    let mut removed = Vec::new();
    let entries = match std::fs::read_dir(set_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(removed),
        Err(e) => return Err(AggError::io(set_dir, "list set directory")(e)),
    };
    for e in entries {
        let e = e.map_err(AggError::io(set_dir, "list set directory"))?;
        let name = e.file_name();
        let n = name.as_bytes();
        let orphan = (format::is_container_name(n) && !live.contains(n))
            || (n.starts_with(b".set.plr.") && n.ends_with(b".tmp"));
        if orphan {
            let p = e.path();
            match std::fs::remove_file(&p) {
                Ok(()) => removed.push(p),
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => return Err(AggError::io(&p, "remove orphan")(err)),
            }
        }
    }
    if !removed.is_empty() {
        sync_dir(set_dir)?;
    }
    Ok(removed)
}

/// A per-attempt name part: containers of two attempts never share a name.
fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: a buffer and its length.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 8 {
        // No getrandom: the time and the process make it unique enough.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        return t ^ (std::process::id() as u64) << 32;
    }
    u64::from_le_bytes(b)
}

/// Copy a member of a published version into a writer (a new version of
/// its set that keeps it), every block verified on the way.
pub fn copy_member(
    w: &mut SetWriter,
    from: &Arc<crate::reader::SetReader>,
    m: &Member,
) -> Result<()> {
    let extents: Vec<(u64, u64)> = m.extents.iter().map(|e| (e.offset, e.len)).collect();
    let mut src = crate::reader::ExtentsReader::new(from.clone(), &m.path, extents.clone());
    w.add_member_sparse(&m.path, m.size, m.mode, &extents, &mut src)
}

impl std::fmt::Debug for SetWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SetWriter")
            .field("dir", &self.dir)
            .field("version", &self.version)
            .field("k", &self.k)
            .finish_non_exhaustive()
    }
}
