//! Where the server job's checkpoint sets go (docs/aggregate.md, "Many
//! nodes"): a POSIX directory, S3 or an object layout. The publish of
//! `across` is the same on all; this module is the one place that tells
//! them apart, and it calls the one-node code of each remote (the POSIX
//! publish's `collect_orphans`/`commit_record`/`remove_set`, the store's
//! `collect_orphans_store`/`commit_record_store`/`remove_set_store` and
//! S3's container upload, the object layout's
//! `collect_orphans_obj`/`commit_record_obj`/`remove_set_obj` and its
//! `ObjContainer`), so that a crash leaves the same things behind and the
//! same collection finds them. On S3 and the object layout a new version
//! lists the untouched containers of the previous one again (`Reused`,
//! the one-node rule).

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use paralog_aggregate::format::{self, Container, Member, SetRecord};
use paralog_aggregate::objcontainer::ObjContainer;
use paralog_aggregate::objpublish::{collect_orphans_obj, commit_record_obj};
use paralog_aggregate::objset;
use paralog_aggregate::publish::{
    collect_orphans, commit_record, containers_to_reuse, create_dirs, kept_members,
};
use paralog_aggregate::reader::SetReader;
use paralog_aggregate::remove::{remove_set, remove_set_obj};
use paralog_aggregate::store::{
    collect_orphans_store, commit_record_store, remove_set_store, ContainerSink, ContainerSource,
    SetStore,
};
use paralog_backend::objstore::ObjStore;
use paralog_backend::RemoteUrl;
use paralog_s3::sets::S3Sets;

use crate::remote::Remote;

use super::nodes::SetPlan;
use super::scan::{remote_root_of, s3_sets, SetsRoot};

/// The remote of a server job's sets.
pub(crate) enum JobRoot {
    /// A POSIX directory: the remote's, or the prefix the program wrote
    /// under (which only the record writer knows: it is shared).
    Dir(PathBuf),
    /// `s3://`: every server opens the client of the job's own URL.
    S3(S3Sets),
    /// `objstore://`: every server opens the layout of the job's URL (its
    /// root is a path every node reaches, as a POSIX remote's).
    Obj(ObjStore),
}

fn rel(e: impl std::fmt::Display) -> String {
    e.to_string()
}

impl JobRoot {
    /// The root of this job's sets: S3 from the remote's URL, else the
    /// directory `dir` the record writer shared.
    pub(crate) fn of(remote: &Remote, dir: PathBuf) -> Result<JobRoot, String> {
        match remote {
            Remote::Url(RemoteUrl::S3(u), _) => s3_sets(u).map(JobRoot::S3).map_err(rel),
            Remote::Url(RemoteUrl::ObjStore(u), _) => Ok(JobRoot::Obj(ObjStore::new(u))),
            _ => Ok(JobRoot::Dir(dir)),
        }
    }

    /// The directory the record writer shares (`dir` of `of`): a POSIX
    /// root, known from a member's path `app_path` (`member_rel` below the
    /// prefix); none for S3 and the object layout, which every server
    /// opens from the job's URL.
    pub(crate) fn shared_dir(
        remote: &Remote,
        app_path: &[u8],
        member_rel: &[u8],
    ) -> Result<PathBuf, String> {
        match remote {
            Remote::Url(RemoteUrl::S3(_) | RemoteUrl::ObjStore(_), _) => Ok(PathBuf::new()),
            _ => remote_root_of(remote, app_path, member_rel).map_err(rel),
        }
    }

    /// How messages name the set `set` (its directory, or its S3 prefix,
    /// or `objstore://ROOT/SET`).
    pub(crate) fn display(&self, set: &[u8]) -> PathBuf {
        match self {
            JobRoot::Dir(r) => r.join(OsStr::from_bytes(set)),
            JobRoot::S3(s3) => s3.display(set, b""),
            JobRoot::Obj(store) => objset::display_path(store, set),
        }
    }

    /// The record writer, before anything of a new attempt is written:
    /// the set's directory made, what a crashed attempt left collected
    /// (no writer of the set runs now: the servers agree before the
    /// transfer), and the published record read.
    pub(crate) fn prepare(&self, set: &[u8]) -> Result<Option<SetRecord>, String> {
        let dir = self.display(set);
        let removed = match self {
            JobRoot::Dir(root) => {
                create_dirs(root, &dir).map_err(rel)?;
                collect_orphans(&dir).map_err(rel)?
            }
            JobRoot::S3(s3) => collect_orphans_store(s3, set).map_err(rel)?,
            JobRoot::Obj(store) => {
                if !store.root().is_dir() {
                    return Err(format!(
                        "the object store directory {} does not exist",
                        store.root().display()
                    ));
                }
                collect_orphans_obj(store, set).map_err(rel)?
            }
        };
        if !removed.is_empty() {
            tracing::info!(set = %dir.display(), removed = removed.len(), "removed orphaned containers");
        }
        match self {
            JobRoot::Dir(_) => paralog_aggregate::reader::read_record(&dir).map_err(rel),
            JobRoot::S3(s3) => s3.read_record(set).map_err(rel),
            JobRoot::Obj(store) => objset::read_record(store, set)
                .map(|r| r.map(|(r, _)| r))
                .map_err(rel),
        }
    }

    /// The published version of the set, for the members' bases and the
    /// members a new version keeps.
    pub(crate) fn open_old(&self, set: &[u8]) -> Result<Option<Arc<SetReader>>, String> {
        let r = match self {
            JobRoot::Dir(_) => SetReader::open(&self.display(set)),
            JobRoot::S3(s3) => s3.open_set(set),
            JobRoot::Obj(store) => SetReader::open_obj(store, set),
        };
        r.map(|o| o.map(Arc::new)).map_err(rel)
    }

    /// The same root as the one-node drain names it (a member's base).
    pub(crate) fn sets_root(&self) -> SetsRoot {
        match self {
            JobRoot::Dir(r) => SetsRoot::Dir(r.clone()),
            JobRoot::S3(s3) => SetsRoot::S3(s3.clone()),
            JobRoot::Obj(store) => SetsRoot::Obj(store.clone()),
        }
    }

    /// A leader's new container `name` (never an existing one).
    pub(crate) fn create_container(&self, set: &[u8], name: &[u8]) -> Result<ContainerOut, String> {
        match self {
            JobRoot::Dir(_) => {
                let path = self.display(set).join(OsStr::from_bytes(name));
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o644)
                    .open(&path)
                    .map(|f| ContainerOut::File(f, Some(path.clone())))
                    .map_err(|e| format!("creating {}: {e}", path.display()))
            }
            JobRoot::S3(s3) => s3
                .create_container(set, name)
                .map(|sink| ContainerOut::Sink(Mutex::new(sink)))
                .map_err(rel),
            // One chunk, appended in offset order like an upload (its
            // blocks are the set's: the layout's CRCs match the record's).
            JobRoot::Obj(store) => ObjContainer::create(store, set, name, format::DEFAULT_BLOCK)
                .map(|c| ContainerOut::Sink(Mutex::new(Box::new(c))))
                .map_err(rel),
        }
    }

    /// The record writer's commit of `rec` (the one-node commit of the
    /// remote: a rename on POSIX, one PUT on S3), then the containers only
    /// `previous` used are removed. `committed` is called once the record
    /// is in place.
    pub(crate) fn commit(
        &self,
        rec: &SetRecord,
        previous: Option<&SetRecord>,
        attempt: u64,
        committed: &mut dyn FnMut(),
    ) -> Result<(), String> {
        let hook = &crate::failpoint::hit;
        match self {
            JobRoot::Dir(_) => commit_record(
                &self.display(&rec.set),
                rec,
                previous,
                attempt,
                hook,
                committed,
            ),
            JobRoot::S3(s3) => commit_record_store(s3, rec, previous, hook, committed),
            JobRoot::Obj(store) => commit_record_obj(store, rec, previous, hook, committed),
        }
        .map_err(rel)
    }

    /// The set removed (its program deleted every member): the record,
    /// then `previous`'s containers.
    pub(crate) fn remove(&self, previous: &SetRecord) -> Result<(), String> {
        match self {
            JobRoot::Dir(_) => remove_set(&self.display(&previous.set), previous),
            JobRoot::S3(s3) => remove_set_store(s3, previous),
            JobRoot::Obj(store) => remove_set_obj(store, previous),
        }
        .map_err(rel)
    }
}

/// The containers of the published version that a new version lists
/// again unchanged, with their members (on S3 and the object layout,
/// whose containers are immutable objects, as on one node:
/// docs/aggregate.md, "Sets on S3"). Every server derives the same from
/// the plan and the published record: the first group's leader does not
/// copy these members, the record writer adds them to the record.
#[derive(Debug, Default)]
pub(crate) struct Reused {
    /// Each kept container with its members (their extents' container
    /// index is set when they are added to the record).
    kept: Vec<(Container, Vec<Member>)>,
}

impl Reused {
    /// The reuse of `plan`'s new version over `old` (`k`: the plan's
    /// containers per set), by the one-node rule (`containers_to_reuse`):
    /// the groups with new epochs write containers; the members left to
    /// copy go into the first group's, which needs one of its own when
    /// that group has nothing new. A member is touched when a node has new
    /// epochs of it (or deleted it).
    pub(crate) fn of(root: &JobRoot, plan: &SetPlan, old: Option<&SetRecord>, k: usize) -> Reused {
        let (JobRoot::S3(_) | JobRoot::Obj(_), Some(old)) = (root, old) else {
            return Reused::default();
        };
        let touched: BTreeSet<&[u8]> = plan
            .members
            .iter()
            .filter(|(_, m)| m.pending)
            .map(|(_, m)| &m.member[..])
            .collect();
        let writing: BTreeSet<u32> = plan
            .members
            .iter()
            .filter(|(_, m)| m.pending)
            .filter_map(|(n, _)| plan.group_of(*n).map(|g| g.container))
            .collect();
        let reuse = containers_to_reuse(
            old,
            &|m| touched.contains(m),
            k,
            writing.len(),
            !writing.contains(&0),
        );
        Reused {
            kept: reuse
                .into_iter()
                .map(|c| (old.containers[c as usize].clone(), kept_members(old, c, c)))
                .collect(),
        }
    }

    /// Whether member `path` is in a container listed again (not copied).
    pub(crate) fn holds(&self, path: &[u8]) -> bool {
        self.kept
            .iter()
            .any(|(_, ms)| ms.iter().any(|m| m.path == path))
    }

    /// The kept containers after the groups' in `rec`, with their members
    /// (their extents renumbered after `rec`'s containers: the own-region
    /// mode writes a container per group holding new bytes, which may be
    /// fewer than the plan's groups).
    pub(crate) fn add_to(&self, rec: &mut SetRecord) {
        for (c, members) in &self.kept {
            let to = rec.containers.len() as u32;
            rec.containers.push(c.clone());
            rec.members.extend(members.iter().cloned().map(|mut m| {
                for e in &mut m.extents {
                    e.container = to;
                }
                m
            }));
        }
        rec.members.sort_by(|a, b| a.path.cmp(&b.path));
    }

    /// How many containers are listed again.
    pub(crate) fn len(&self) -> usize {
        self.kept.len()
    }
}

/// Leave out of `rec` the containers no extent is in (a leader's group had
/// nothing new and nothing to copy: `ContainerOut::finish` did not write
/// it), the others' indices moved down: a record never lists an empty
/// container (on S3 an empty object, elsewhere an empty file).
pub(crate) fn drop_empty_containers(rec: &mut SetRecord) {
    let used: BTreeSet<u32> = rec
        .members
        .iter()
        .flat_map(|m| m.extents.iter().map(|e| e.container))
        .collect();
    if used.len() == rec.containers.len() {
        return;
    }
    let mut to = vec![0u32; rec.containers.len()];
    let mut kept = Vec::new();
    for (i, c) in std::mem::take(&mut rec.containers).into_iter().enumerate() {
        if used.contains(&(i as u32)) {
            to[i] = kept.len() as u32;
            kept.push(c);
        }
    }
    rec.containers = kept;
    for e in rec.members.iter_mut().flat_map(|m| m.extents.iter_mut()) {
        e.container = to[e.container as usize];
    }
}

/// A leader's container being written by its writer threads.
pub(crate) enum ContainerOut {
    /// A file created new (its path; `None`: /dev/null, when the container
    /// could not be created and what the senders send is dropped): any
    /// writer thread writes its block at its offset.
    File(File, Option<PathBuf>),
    /// An upload (S3): bytes must arrive in increasing offsets, so a
    /// block's offset is taken and its bytes handed over under this lock
    /// (the upload sends parts in the background).
    Sink(Mutex<Box<dyn ContainerSink>>),
}

/// The lock a block's placement is taken under, when the container needs
/// its bytes in order.
pub(crate) type InOrder<'a> = Option<MutexGuard<'a, Box<dyn ContainerSink>>>;

impl ContainerOut {
    /// Receives and drops what the senders send (see `File`).
    pub(crate) fn null() -> std::io::Result<ContainerOut> {
        let f = std::fs::OpenOptions::new().write(true).open("/dev/null")?;
        Ok(ContainerOut::File(f, None))
    }

    /// Taken before a block's offset: held until its bytes are written.
    pub(crate) fn in_order(&self) -> InOrder<'_> {
        match self {
            ContainerOut::File(..) => None,
            ContainerOut::Sink(s) => Some(s.lock().unwrap_or_else(|p| p.into_inner())),
        }
    }

    /// Write `data` at `at` (with `in_order`'s guard, if it gave one).
    pub(crate) fn write_at(
        &self,
        guard: &mut InOrder<'_>,
        at: u64,
        data: &[u8],
    ) -> Result<(), String> {
        match (self, guard) {
            (ContainerOut::File(f, _), _) => f
                .write_all_at(data, at)
                .map_err(|e| format!("writing the container at {at}: {e}")),
            (ContainerOut::Sink(_), Some(sink)) => sink
                .write(at, data)
                .map_err(|e| format!("writing the container at {at}: {e}")),
            (ContainerOut::Sink(_), None) => Err("a container upload written out of order".into()),
        }
    }

    /// The container complete and durable, `end` bytes long (a file's
    /// fsync; an upload's completion). An empty one (its group had nothing
    /// new and nothing to copy) is not written at all: it is discarded,
    /// and the record leaves it out (`drop_empty_containers`).
    pub(crate) fn finish(&self, end: u64) -> Result<(), String> {
        if end == 0 {
            self.discard();
            return Ok(());
        }
        match self {
            ContainerOut::File(f, _) => f.set_len(end).and_then(|()| f.sync_all()).map_err(rel),
            ContainerOut::Sink(s) => s
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .finish(end)
                .map_err(rel),
        }
        .map_err(|e| format!("making the container durable: {e}"))
    }

    /// Nothing of this attempt's container left (no record lists it):
    /// the file removed, the upload aborted or the object deleted. A
    /// failure leaves an orphan for the next publish or `recover`.
    pub(crate) fn discard(&self) {
        match self {
            ContainerOut::File(_, Some(p)) => {
                let _ = std::fs::remove_file(p);
            }
            ContainerOut::File(_, None) => {}
            ContainerOut::Sink(s) => s.lock().unwrap_or_else(|p| p.into_inner()).abandon(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use paralog_aggregate::format::Extent;

    fn member(path: &str, container: Option<u32>) -> Member {
        Member {
            path: path.as_bytes().to_vec(),
            size: 10,
            mode: 0o644,
            extents: container
                .map(|c| Extent {
                    offset: 0,
                    len: 10,
                    container: c,
                    container_offset: 0,
                    crcs: vec![0],
                })
                .into_iter()
                .collect(),
        }
    }

    #[test]
    fn containers_that_hold_nothing_are_left_out_and_the_others_move_down() {
        let mut rec = SetRecord {
            set: b"ckpt/s".to_vec(),
            version: 1,
            complete: true,
            block_size: format::DEFAULT_BLOCK,
            align: 4096,
            origin: [0; 16],
            job: Vec::new(),
            containers: [0u64, 10, 0, 10]
                .iter()
                .enumerate()
                .map(|(k, &size)| Container {
                    name: format::container_name(k as u32, 1, 7),
                    size,
                })
                .collect(),
            members: vec![
                member("a", Some(1)),
                member("b", Some(3)),
                member("e", None),
            ],
        };
        drop_empty_containers(&mut rec);
        let names: Vec<_> = rec.containers.iter().map(|c| c.name.clone()).collect();
        assert_eq!(
            names,
            vec![
                format::container_name(1, 1, 7),
                format::container_name(3, 1, 7)
            ]
        );
        let at: Vec<Vec<u32>> = rec
            .members
            .iter()
            .map(|m| m.extents.iter().map(|e| e.container).collect())
            .collect();
        assert_eq!(at, vec![vec![0], vec![1], vec![]]);
    }
}
