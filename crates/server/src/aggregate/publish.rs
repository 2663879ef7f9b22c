//! One publish of a checkpoint set: every member's new epochs over its
//! base (its member in the published version, or the plain file), written
//! into a new version of the set, then the members' progress records
//! and the deletion of their local records.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use paralog_aggregate::objpublish::collect_orphans_obj;
use paralog_aggregate::publish::{collect_orphans, containers_to_reuse, copy_member, SetWriter};
use paralog_aggregate::reader::{MemberReader, SetReader};
use paralog_aggregate::store::{collect_orphans_store, ContainerSource};
use paralog_aggregate::AggError;
use paralog_backend::{BackendError, ErrorKind};
use paralog_log::reader::SourceReader;
use paralog_log::{EpochId, LogError, LogicalFile};

use crate::drain::{lock_file_dir, DrainError, DrainLock, Drained};
use crate::remote::Remote;
use crate::step;

use super::renamed;
use super::scan::{corrupt, scan_member, sets_root, MemberFile, SetsRoot};
use super::Sets;

/// An error of the set's remote side, for the retry bookkeeping: damage of
/// a published set stops it (`Permanent`), the rest is retried.
pub(super) fn set_error(e: AggError) -> DrainError {
    let kind = match &e {
        AggError::Io { .. } => ErrorKind::Retryable,
        AggError::Corrupt { .. } | AggError::Invalid { .. } => ErrorKind::Permanent,
    };
    DrainError::Remote(BackendError {
        kind,
        target: match &e {
            AggError::Io { path, .. }
            | AggError::Corrupt { path, .. }
            | AggError::Invalid { path, .. } => path.display().to_string(),
        },
        op: "write checkpoint set",
        message: e.to_string(),
    })
}

pub(super) type Published = (u64, Vec<(PathBuf, Vec<EpochId>, u64)>);

/// What one publish is asked for.
pub(super) struct Publish<'a> {
    pub(super) job: &'a [u8],
    pub(super) set: &'a [u8],
    /// Every member finished (else `recover --incomplete`).
    pub(super) complete: bool,
    pub(super) keep_drained: bool,
}

pub(super) fn publish_set(
    sets: &Sets,
    remote: &Remote,
    p: &Publish<'_>,
    scanned: &[MemberFile],
    on_epoch: &mut dyn FnMut(&Path, Drained),
) -> Result<Published, DrainError> {
    let (job, set, keep_drained) = (p.job, p.set, p.keep_drained);
    // The drain locks of every member (a `recover` may run), then a fresh
    // look at each under its lock.
    let mut locks: Vec<DrainLock> = Vec::new();
    let mut files = Vec::new();
    for f in scanned {
        locks.push(lock_file_dir(&f.inv.dir)?);
        if let Some((_, fresh)) = scan_member(sets, remote, &f.inv.dir)? {
            if !fresh.finished && p.complete {
                return Err(DrainError::Busy(fresh.inv.display_name()));
            }
            files.push(fresh);
        }
    }
    let Some(first) = files.first() else {
        return Ok((0, Vec::new()));
    };
    let root = sets_root(remote, first)?;
    let set_dir = match &root {
        SetsRoot::Dir(r) => r.join(OsStr::from_bytes(set)),
        SetsRoot::Obj(store) => paralog_aggregate::objset::display_path(store, set),
        SetsRoot::S3(s3) => s3.display(set, b""),
    };
    // What a crashed publish of this set left (this server is its only
    // writer: one set at a time, under the members' drain locks).
    let collected = match &root {
        SetsRoot::Dir(_) => collect_orphans(&set_dir),
        SetsRoot::Obj(store) => collect_orphans_obj(store, set),
        SetsRoot::S3(s3) => collect_orphans_store(s3, set),
    };
    match collected {
        Ok(removed) if !removed.is_empty() => {
            tracing::info!(set = %set_dir.display(), removed = removed.len(), "removed orphaned containers")
        }
        Ok(_) => {}
        Err(e) => return Err(set_error(e)),
    }
    let w = match &root {
        SetsRoot::Dir(r) => SetWriter::new(r, set, sets.containers, sets.align),
        SetsRoot::Obj(store) => SetWriter::new_obj(store, set, sets.containers, sets.align),
        SetsRoot::S3(s3) => {
            SetWriter::new_store(Arc::new(s3.clone()), set, sets.containers, sets.align)
        }
    };
    let old = root.open_set(set).map_err(set_error)?.map(Arc::new);
    let hook = |p: &str| crate::failpoint::hit(p);
    let mut w = w
        .map_err(set_error)?
        .with_origin(job, first.inv.origin())
        .with_hook(hook);

    // The members with new epochs, largest first (to even the containers).
    let mut items = Vec::new();
    let mut handled = BTreeSet::new();
    let in_publish = renamed::Publishing::of(&files);
    for f in files.iter().filter(|f| !f.pending.is_empty()) {
        handled.insert(f.member.clone());
        renamed::may_leave(f, &in_publish)?;
        let at = renamed::Place {
            sets,
            remote,
            old: old.as_ref(),
            root: &root,
        };
        if let Some(src) = member_source(&at, f)? {
            items.push(src);
        }
    }
    items.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.member.cmp(&b.member)));
    // On S3 and the object layout a container of the published version
    // whose members are all kept is listed again as it is: nothing copied
    // (room is left for the new bytes, if any, and for the members copied).
    if let (Some(old), SetsRoot::S3(_) | SetsRoot::Obj(_)) = (&old, &root) {
        let new = usize::from(items.iter().any(|i| i.bytes > 0));
        let most = sets.containers as usize;
        for k in containers_to_reuse(old.record(), &|m| handled.contains(m), most, new, new == 0) {
            if let Some(kept) = w.keep_container(k).map_err(set_error)? {
                handled.extend(kept);
            }
        }
    }
    for mut src in items {
        let (member, size, mode, ranges) =
            (src.member.clone(), src.size, src.mode, src.ranges.clone());
        w.add_member_sparse(&member, size, mode, &ranges, &mut src)
            .map_err(|e| match src.read.local_error.take() {
                Some(l) => corrupt(l),
                None => set_error(e),
            })?;
    }
    // The members no new epoch touched stay as they were.
    if let Some(old) = &old {
        for m in old
            .record()
            .members
            .iter()
            .filter(|m| !handled.contains(&m.path))
        {
            copy_member(&mut w, old, m).map_err(set_error)?;
        }
    }
    crate::failpoint::hit("aggregate.before_publish");
    // The program deleted every member (`rm -r` of the set directory): the
    // set goes, so that its directory can go too.
    let version = if w.is_empty() {
        let version = old.as_ref().map_or(0, |o| o.record().version);
        w.remove().map_err(set_error)?;
        tracing::info!(set = %set_dir.display(), version, "checkpoint set removed: its program deleted every member");
        version
    } else {
        let record = w.publish(p.complete).map_err(set_error)?;
        tracing::info!(set = %set_dir.display(), version = record.version, members = record.members.len(), containers = record.containers.len(), complete = record.complete, "checkpoint set published");
        record.version
    };

    // The set is durable: the progress records, then the local records.
    let mut members = Vec::new();
    for f in files.iter().filter(|f| !f.pending.is_empty()) {
        let last = *f.pending.last().expect("pending");
        step::write_progress(&f.inv.dir, last).map_err(DrainError::Local)?;
        let bytes = f.pending.iter().map(|&id| f.inv.local_bytes(id)).sum();
        for (k, &id) in f.pending.iter().enumerate() {
            on_epoch(
                &f.inv.dir,
                Drained {
                    id,
                    bytes: if k + 1 == f.pending.len() { bytes } else { 0 },
                },
            );
        }
        members.push((f.inv.dir.clone(), f.pending.clone(), bytes));
    }
    crate::failpoint::hit("aggregate.after_progress");
    if !keep_drained {
        for f in files.iter().filter(|f| !f.pending.is_empty()) {
            for &id in &f.pending {
                step::delete_epoch(&f.inv, id).map_err(DrainError::Local)?;
            }
        }
    }
    drop(locks);
    Ok((version, members))
}

/// A member file's content as the set will hold it: its new epochs over
/// its base, every source extent verified; `Read` yields the bytes of
/// `ranges` one after the other.
pub(super) struct MemberSource {
    pub(super) member: Vec<u8>,
    pub(super) size: u64,
    pub(super) mode: u32,
    /// Where it has bytes (offset, length); the rest are holes.
    pub(super) ranges: Vec<(u64, u64)>,
    pub(super) bytes: u64,
    pub(super) read: LogicalRead,
}

impl Read for MemberSource {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.read.read(buf)
    }
}

/// The member file `f` as the set will hold it (`None`: the program
/// deleted it, or renamed it away; it leaves the set). Every extent of its
/// new epochs is verified first: a damaged one fails here, before a byte
/// moves. A member renamed into place (`mv rank-0.tmp rank-0.dat`, numpy's
/// and torch's way) starts from its source's content at the rename.
pub(super) fn member_source(
    at: &renamed::Place<'_>,
    f: &MemberFile,
) -> Result<Option<MemberSource>, DrainError> {
    let lf = f.inv.logical_file(None).map_err(corrupt)?;
    let mut reader = SourceReader::default();
    let used: BTreeSet<usize> = lf.pieces().map(|(_, _, p)| p.source).collect();
    for &s in &used {
        reader.verify(&lf.sources[s]).map_err(corrupt)?;
    }
    if lf.deleted {
        return Ok(None);
    }
    let base = match lf.from {
        Some((_, from)) => renamed::source(at, &f.inv.dir, from, 0)?,
        None => Base::open(at.old, at.root, Some(&f.member), &f.rel)?,
    };
    let size = lf.size.final_size(base.len());
    // The mode it was created with, else its base's (a rename keeps its
    // source's, as a plain file's drain does).
    let mode = lf.mode.unwrap_or_else(|| base.mode());
    let ranges = data_ranges(&lf, &base);
    let bytes: u64 = ranges.iter().map(|r| r.1).sum();
    Ok(Some(MemberSource {
        member: f.member.clone(),
        size,
        mode,
        ranges: ranges.clone(),
        bytes,
        read: LogicalRead {
            lf,
            reader,
            base,
            ranges: ranges.into_iter().collect(),
            local_error: None,
        },
    }))
}

/// A member's content before its new epochs: its member in the set's
/// published version, else the plain file at its path on the remote (a
/// run without aggregation left it), else nothing; or, renamed into
/// place, its source's content at the rename.
pub(super) enum Base {
    None,
    Member(MemberReader),
    File(std::fs::File, u64, u32),
    /// A plain object of the layout (no mode of its own).
    Object(
        paralog_backend::objstore::ObjStore,
        paralog_backend::objstore::Version,
    ),
    Renamed(Box<renamed::Source>),
}

impl Base {
    /// The file at `rel` before its new epochs: as `member` (its name in
    /// the set `old`) where `old` holds it, else as a plain file.
    pub(super) fn open(
        old: Option<&Arc<SetReader>>,
        root: &SetsRoot,
        member: Option<&[u8]>,
        rel: &[u8],
    ) -> Result<Base, DrainError> {
        if let Some(m) = old
            .zip(member)
            .and_then(|(o, m)| MemberReader::new(o.clone(), m))
        {
            return Ok(Base::Member(m));
        }
        let root = match root {
            SetsRoot::Dir(r) => r,
            // As for a plain file on S3 (docs/s3.md): a job's first
            // version of a file starts from nothing, not from an object
            // of an earlier job.
            SetsRoot::S3(_) => return Ok(Base::None),
            SetsRoot::Obj(store) => {
                return Ok(
                    match paralog_aggregate::objset::latest(store, rel).map_err(set_error)? {
                        Some(v) => Base::Object(store.clone(), v),
                        None => Base::None,
                    },
                );
            }
        };
        let p = root.join(OsStr::from_bytes(rel));
        match std::fs::File::open(&p) {
            Ok(file) => {
                let md = file
                    .metadata()
                    .map_err(|e| set_error(AggError::io(&p, "stat")(e)))?;
                if !md.is_file() {
                    return Ok(Base::None);
                }
                Ok(Base::File(file, md.len(), md.mode() & 0o7777))
            }
            Err(_) => Ok(Base::None),
        }
    }

    pub(super) fn len(&self) -> u64 {
        match self {
            Base::None => 0,
            Base::Member(m) => m.size(),
            Base::File(_, n, _) => *n,
            Base::Object(_, v) => v.size,
            Base::Renamed(s) => s.size,
        }
    }

    pub(super) fn mode(&self) -> u32 {
        match self {
            Base::None => 0o644,
            Base::Member(m) => m.member().mode,
            Base::File(_, _, mode) => *mode,
            Base::Object(..) => 0o644,
            Base::Renamed(s) => s.mode(),
        }
    }

    pub(super) fn read(&mut self, at: u64, dst: &mut [u8]) -> paralog_log::Result<()> {
        use std::os::unix::fs::FileExt;
        match self {
            Base::None => {
                dst.fill(0);
                Ok(())
            }
            Base::Renamed(s) => s.read(at, dst),
            Base::Member(m) => m.read_at(at, dst).map_err(|e| LogError::Corrupt {
                path: m.set().dir().to_path_buf(),
                offset: 0,
                what: format!(
                    "the published member {}: {e}",
                    String::from_utf8_lossy(&m.member().path)
                ),
            }),
            Base::File(f, _, _) => f.read_exact_at(dst, at).map_err(|error| LogError::Io {
                path: PathBuf::from("(remote base file)"),
                op: "read",
                error,
            }),
            Base::Object(store, v) => store.read_range(v, at, dst).map_err(|e| LogError::Corrupt {
                path: store.root().to_path_buf(),
                offset: at,
                what: format!("the object {}: {e}", String::from_utf8_lossy(&v.name)),
            }),
        }
    }
}

/// Where the member has bytes: the base's data that stays visible and the
/// new epochs' pieces, merged; the rest are holes.
fn data_ranges(lf: &LogicalFile, base: &Base) -> Vec<(u64, u64)> {
    let visible = lf.size.base_visible(base.len());
    let mut r: Vec<(u64, u64)> = Vec::new();
    match base {
        Base::None => {}
        Base::Member(m) => {
            for e in &m.member().extents {
                let end = (e.offset + e.len).min(visible);
                if e.offset < end {
                    r.push((e.offset, end));
                }
            }
        }
        Base::File(..) | Base::Object(..) | Base::Renamed(_) => {
            if visible > 0 {
                r.push((0, visible));
            }
        }
    }
    r.extend(lf.pieces().map(|(off, len, _)| (off, off + len)));
    r.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (s, e) in r {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    merged.into_iter().map(|(s, e)| (s, e - s)).collect()
}

/// The member's bytes in `ranges`, one after the other: the logical file's
/// own read (pieces over the base, every source verified).
pub(super) struct LogicalRead {
    lf: LogicalFile,
    reader: SourceReader,
    base: Base,
    ranges: std::collections::VecDeque<(u64, u64)>,
    /// Why a read failed, when the node-local log (not the remote) did.
    local_error: Option<LogError>,
}

impl Read for LogicalRead {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while let Some(&(off, len)) = self.ranges.front() {
            if len == 0 {
                self.ranges.pop_front();
                continue;
            }
            let n = (len as usize).min(buf.len());
            let base_len = self.base.len();
            let base = &mut self.base;
            if let Err(e) = self.lf.read_at(
                &mut self.reader,
                off,
                &mut buf[..n],
                base_len,
                &mut |at, dst| base.read(at, dst),
            ) {
                let msg = e.to_string();
                self.local_error = Some(e);
                return Err(std::io::Error::other(msg));
            }
            self.ranges[0] = (off + n as u64, len - n as u64);
            return Ok(n);
        }
        Ok(0)
    }
}
