//! The member files of a job's checkpoint sets, as scanned: which set
//! each belongs to, its pending epochs, whether its writer finished it;
//! and the POSIX directory its set goes to.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use paralog_backend::{BackendError, ErrorKind, RemoteUrl};
use paralog_log::{layout, EpochId, FileInventory, LogError};

use crate::drain::DrainError;
use crate::remote::Remote;

use super::Sets;

/// A member file of a set, as scanned.
pub(crate) struct MemberFile {
    pub(crate) inv: FileInventory,
    pub(crate) rel: Vec<u8>,
    pub(crate) app_path: Vec<u8>,
    pub(crate) member: Vec<u8>,
    pub(crate) pending: Vec<EpochId>,
    pub(crate) finished: bool,
    /// Its newest pending epoch deletes it (`nodes::NodeMember::deleted`).
    pub(crate) deleted: bool,
    pub(crate) created: SystemTime,
}

pub(crate) fn corrupt(e: LogError) -> DrainError {
    match e {
        LogError::Io { ref error, .. } if error.kind() != std::io::ErrorKind::NotFound => {
            DrainError::Local(e)
        }
        _ => DrainError::Corrupt(e),
    }
}

/// A set of a job: (rule index, set directory).
pub(crate) type SetKey = (usize, Vec<u8>);

/// Scan the member files of the sets in `job_dir`, by set.
pub(crate) fn scan_job(
    sets: &Sets,
    remote: &Remote,
    job_dir: &Path,
) -> Result<BTreeMap<SetKey, Vec<MemberFile>>, DrainError> {
    let mut out: BTreeMap<SetKey, Vec<MemberFile>> = BTreeMap::new();
    let entries = match std::fs::read_dir(job_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(error) => {
            return Err(DrainError::Local(LogError::Io {
                path: job_dir.to_path_buf(),
                op: "list",
                error,
            }))
        }
    };
    for e in entries.flatten() {
        if !layout::is_file_dir_name(&e.file_name().to_string_lossy()) {
            continue;
        }
        let dir = e.path();
        if sets.claims(&dir, remote).is_none() {
            continue;
        }
        if let Some((key, f)) = scan_member(sets, remote, &dir)? {
            out.entry(key).or_default().push(f);
        }
    }
    Ok(out)
}

pub(crate) fn scan_member(
    sets: &Sets,
    remote: &Remote,
    dir: &Path,
) -> Result<Option<(SetKey, MemberFile)>, DrainError> {
    let inv = FileInventory::scan_dir(dir).map_err(DrainError::Local)?;
    let Some(rec) = inv.record.clone() else {
        return Ok(None);
    };
    let Some(m) = sets.member_match(&rec.path, &rec.rel, remote) else {
        return Ok(None);
    };
    let committed = inv.committed_epochs().map_err(corrupt)?;
    let pending = inv.pending_epochs().map_err(corrupt)?;
    let all = inv.epoch_ids();
    let done = inv.progress.map(|p| p.id());
    // Nothing being committed, and the last open ended.
    let uncommitted = all
        .iter()
        .any(|id| Some(*id) > done && !committed.contains(id));
    let last_open_ended = inv
        .gens
        .keys()
        .next_back()
        .is_none_or(|&g| inv.open_ended(g));
    // A one-process writer in the middle of an epoch (or killed in it)
    // stages it beside the generations; a file with nothing committed yet
    // is being written too.
    let staging = std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| paralog_log::single::is_staging_name(&e.file_name().to_string_lossy()))
    });
    let nothing_committed = inv.gens.is_empty();
    let finished = !uncommitted && last_open_ended && !staging && !nothing_committed;
    // Read (its manifests) only where it can matter: a set waits for an
    // unfinished member whatever its epochs do.
    let deleted =
        finished && !pending.is_empty() && inv.logical_file(None).is_ok_and(|lf| lf.deleted);
    let created = std::fs::metadata(dir.join(layout::PATH_FILE))
        .and_then(|m| m.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH);
    Ok(Some((
        (m.rule, m.set.clone()),
        MemberFile {
            inv,
            rel: rec.rel.clone(),
            app_path: rec.path.clone(),
            member: m.member,
            pending,
            finished,
            deleted,
            created,
        },
    )))
}

/// The POSIX directory sets go to: the remote's root, or the prefix the
/// program wrote under (its path `app_path` minus the relative path).
pub(crate) fn remote_root_of(
    remote: &Remote,
    app_path: &[u8],
    rel: &[u8],
) -> Result<PathBuf, DrainError> {
    match remote {
        Remote::Url(RemoteUrl::Posix(root), _) => Ok(root.clone()),
        Remote::Url(url, _) => Err(DrainError::Remote(BackendError {
            kind: ErrorKind::Permanent,
            target: url.to_string(),
            op: "write checkpoint set",
            message: format!("{url} is not a directory (sets there go through its own store)"),
        })),
        Remote::Prefix => {
            let path = Path::new(OsStr::from_bytes(app_path));
            let mut root = path.to_path_buf();
            for _ in Path::new(OsStr::from_bytes(rel)).components() {
                root.pop();
            }
            Ok(root)
        }
    }
}

/// Where the sets of one node's server go: a POSIX directory, or an
/// object layout (`objstore://`; one node only, docs/aggregate.md).
pub(crate) enum SetsRoot {
    Dir(PathBuf),
    Obj(paralog_backend::objstore::ObjStore),
    /// `s3://` (one node only): the client, opened once per URL.
    S3(paralog_s3::sets::S3Sets),
}

impl SetsRoot {
    /// The published version of `set` here, if any.
    pub(crate) fn open_set(
        &self,
        set: &[u8],
    ) -> Result<Option<paralog_aggregate::reader::SetReader>, paralog_aggregate::AggError> {
        use paralog_aggregate::reader::SetReader;
        match self {
            SetsRoot::Dir(r) => SetReader::open(&r.join(OsStr::from_bytes(set))),
            SetsRoot::Obj(store) => SetReader::open_obj(store, set),
            SetsRoot::S3(s3) => s3.open_set(set),
        }
    }
}

/// The S3 client of the sets under `url`, opened once per process (each
/// opening starts a runtime and loads the AWS configuration).
pub(crate) fn s3_sets(
    url: &paralog_backend::S3Url,
) -> Result<paralog_s3::sets::S3Sets, DrainError> {
    use std::collections::BTreeMap;
    use std::sync::Mutex;
    static OPEN: Mutex<BTreeMap<String, paralog_s3::sets::S3Sets>> = Mutex::new(BTreeMap::new());
    let key = url.to_string();
    let mut open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(s) = open.get(&key) {
        return Ok(s.clone());
    }
    let s = paralog_s3::sets::S3Sets::open(url).map_err(DrainError::Remote)?;
    open.insert(key, s.clone());
    Ok(s)
}

pub(crate) fn sets_root(remote: &Remote, f: &MemberFile) -> Result<SetsRoot, DrainError> {
    sets_root_of(remote, &f.app_path, &f.rel)
}

pub(crate) fn sets_root_of(
    remote: &Remote,
    app_path: &[u8],
    rel: &[u8],
) -> Result<SetsRoot, DrainError> {
    match remote {
        Remote::Url(RemoteUrl::ObjStore(u), _) => {
            Ok(SetsRoot::Obj(paralog_backend::objstore::ObjStore::new(u)))
        }
        Remote::Url(RemoteUrl::S3(u), _) => s3_sets(u).map(SetsRoot::S3),
        _ => remote_root_of(remote, app_path, rel).map(SetsRoot::Dir),
    }
}
