//! Logged puts (docs/objects.md, "Logged mode"): the chunks of a put go to
//! a node-local store at the local disk's speed, the commit is local (the
//! put is complete and marked `committed`, durable), and a publisher
//! copies committed puts to their remote store later and publishes them
//! there under the put's own id.
//!
//! The node-local store is the same layout as any plain directory store
//! (`LOCAL/.paralog-objects/`: `staging/<id>/` with claims and marks, `data/0/`
//! chunk files), so the writers' code and checks are the direct mode's.
//! A committed put's directory also holds `remote` (the remote store's
//! URL) and `logged`, the local commit: one self-checking record of
//! everything the publisher needs (`logged_record.rs`; not a name starting
//! with `c` or `w`, which are claims and writers' marks). Publishing is
//! exactly once: the
//! remote version's origin is the put's id, so a publisher that died after
//! the remote publish finds the version and only cleans up, and one that
//! died while copying aborts the remote put it left and copies again.

use std::path::{Path, PathBuf};

use paralog_backend::RemoteUrl;

use crate::error::{io_err, Error, Result};
use crate::logged_record::{Commit, Mark};
use crate::put::{Committed, Put};
use crate::record::ArrayMeta;
use crate::staging::{remove_staged_chunks, sync_dir, write_file, write_synced, Claim};
use crate::store::Store;
use crate::{id_hex, parse_id, VersionId};

/// A store whose puts are logged on this node and published to `remote`
/// later (by [`publish_committed`]: the node server, or `paralog obj
/// publish`).
#[derive(Debug, Clone)]
pub struct LoggedStore {
    local: Store,
    remote: Store,
    remote_url: String,
}

/// A logged put published on its remote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub name: String,
    pub remote: String,
    pub committed: Committed,
}

/// The node-local store's directory under the node-local root: a runtime
/// entry of the root (the `.paralog-` prefix, crates/log `layout`), so the
/// log's drain never takes it for a job.
pub const LOCAL_DIR: &str = ".paralog-objects";

/// The node-local store under `local` (created 0700).
fn local_store(local: &Path) -> Result<Store> {
    use std::os::unix::fs::DirBuilderExt;
    let root = local.join(LOCAL_DIR);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(&root)
        .map_err(io_err(&root, "create the node-local object log"))?;
    Store::init(&RemoteUrl::Posix(root))
}

impl LoggedStore {
    /// Puts to the store `remote_url` (which must exist), logged under the
    /// node-local directory `local`.
    pub fn open(remote_url: &str, local: &Path) -> Result<LoggedStore> {
        let url: RemoteUrl = remote_url.parse().map_err(|e| Error::Url {
            url: remote_url.to_owned(),
            why: format!("{e}"),
        })?;
        if matches!(url, RemoteUrl::S3(_)) {
            return Err(Error::Url {
                url: remote_url.to_owned(),
                why: "logged puts to s3:// are not supported yet (open the store directly)".into(),
            });
        }
        if matches!(&url, RemoteUrl::ObjStore(o) if !o.sync) {
            // The publisher deletes the logged chunks once published.
            return Err(Error::Url {
                url: remote_url.to_owned(),
                why: "sync=0 is for direct puts only: a logged put's node-local copy is deleted once published, so its store must be durable (remove sync=0)".into(),
            });
        }
        Ok(LoggedStore {
            local: local_store(local)?,
            remote: Store::open(&url)?,
            remote_url: remote_url.to_owned(),
        })
    }

    /// The remote store (reads go there: a logged put is visible once
    /// published).
    pub fn remote(&self) -> &Store {
        &self.remote
    }

    /// Begin a logged put; its id goes to the other writers, who
    /// [`LoggedStore::join_as`] it on this node.
    pub fn begin(&self, name: &str, meta: &ArrayMeta) -> Result<Put<'_>> {
        let put = self.local.begin(name, meta)?;
        let dir = self.local.staging_dir(&put.id());
        // Synced by the local commit, with the rest of the put.
        write_file(&dir.join("remote"), self.remote_url.as_bytes())?;
        Ok(put)
    }

    /// A whole array by one process, logged and committed on this node;
    /// returns the put's id (its version is numbered when published).
    pub fn put(&self, name: &str, meta: &ArrayMeta, data: &[u8]) -> Result<VersionId> {
        crate::put::check_whole(name, meta, data)?;
        let mut put = self.begin(name, meta)?;
        let id = put.id();
        if let Err(e) = put.write_whole(data) {
            let _ = self.local.abort(name, &id);
            return Err(e);
        }
        put.finish()?;
        self.commit(name, &id)?;
        Ok(id)
    }

    pub fn join_as(&self, name: &str, id: &VersionId, meta: &ArrayMeta) -> Result<Put<'_>> {
        self.local.join_as(name, id, meta)
    }

    /// The local commit: every chunk written by a writer that finished,
    /// then one record of the whole put, durable. The version is
    /// published (and numbered) by the publisher.
    ///
    /// What must outlive a crash of the node once the record is durable:
    /// the chunk files and their names (each writer's `finish`), the
    /// record (which holds the name, the remote, the array record and
    /// every claim, so the put's other files need not be durable), its
    /// name in the put's directory, and that directory's name in
    /// `staging/`: one fsync of a file and two of directories.
    pub fn commit(&self, name: &str, id: &VersionId) -> Result<()> {
        let (meta, claims) = self.local.complete(name, id, false)?;
        let dir = self.local.staging_dir(id);
        crate::failpoint("objects.before_commit");
        // The commit's time in nanoseconds (file times are as coarse as a
        // clock tick): the publisher numbers versions in this order.
        let time_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let record = crate::logged_record::encode(
            id,
            &Commit {
                time_ns,
                name: name.to_owned(),
                remote: self.remote_url.clone(),
                meta,
                claims,
            },
        );
        write_synced(&dir.join("logged"), &record)?;
        sync_dir(&dir)?;
        sync_dir(&self.local.root().join("staging"))?;
        crate::failpoint("objects.after_commit");
        Ok(())
    }

    pub fn abort(&self, name: &str, id: &VersionId) -> Result<()> {
        if self.local.staging_dir(id).join("logged").exists() {
            return Err(Error::Put {
                name: name.to_owned(),
                id: id_hex(id),
                why: "committed: it will be published, not aborted".into(),
            });
        }
        self.local.abort(name, id)
    }
}

/// Publish every committed logged put under the node-local directory
/// `local` to its remote, in the order of their local commits (the
/// times in their `logged` marks), so versions are numbered as they were committed; puts not committed are left
/// (their writers may still be writing; `paralog obj gc` removes abandoned
/// ones). One publisher at a time per node (the node server, or `recover`
/// when it is not running). Returns what was published, and the first
/// error after trying every put.
pub fn publish_committed(local: &Path) -> Result<Vec<Published>> {
    let store = local_store(local)?;
    let staging = store.root().join("staging");
    // What a publisher killed while removing a published put left.
    if let Ok(entries) = std::fs::read_dir(&staging) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(".published.") {
                remove_tombstone(&store, &e.path())?;
            }
        }
    }
    let ids: Vec<VersionId> = match std::fs::read_dir(&staging) {
        Ok(entries) => entries
            .flatten()
            .filter_map(|e| parse_id(&e.file_name().to_string_lossy()))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(io_err(&staging, "list logged puts")(e)),
    };
    let mut done = Vec::new();
    let mut first_err = None;
    // Committed puts with their marks, in the order of their commits (a
    // damaged mark is reported, after trying every other put).
    let mut marks = Vec::new();
    for id in ids {
        match read_mark(&store, &id) {
            Ok(Some((t, mark))) => marks.push((t, id, mark)),
            Ok(None) => {}
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    marks.sort_by_key(|(t, id, _)| (*t, *id));
    for (_, id, mark) in marks {
        match publish_one(&store, &id, mark) {
            Ok(p) => done.push(p),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(done),
    }
}

/// Where a published put's staging directory goes to be removed: in
/// `staging/`, under a name that is no put's id.
fn tombstone(local: &Store, id: &VersionId) -> PathBuf {
    local
        .root()
        .join("staging")
        .join(format!(".published.{}", id_hex(id)))
}

/// A put's `logged` mark with its commit time: `None` if the put is not
/// committed here (no mark, or a torn one).
fn read_mark(local: &Store, id: &VersionId) -> Result<Option<(u64, Mark)>> {
    let path = local.staging_dir(id).join("logged");
    let b = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(&path, "read")(e)),
    };
    Ok(match crate::logged_record::decode(&b, id, &path)? {
        Mark::Torn => None,
        Mark::Time(t) => Some((t, Mark::Time(t))),
        Mark::Record(c) => Some((c.time_ns, Mark::Record(c))),
    })
}

fn remove_tombstone(local: &Store, tomb: &Path) -> Result<()> {
    remove_staged_chunks(local, tomb);
    // The chunks a commit record names (its claims' files need not have
    // outlived a crash of the node).
    let id = tomb
        .file_name()
        .and_then(|f| f.to_str())
        .and_then(|f| f.strip_prefix(".published."))
        .and_then(parse_id);
    let path = tomb.join("logged");
    if let (Some(id), Ok(b)) = (id, std::fs::read(&path)) {
        if let Ok(Mark::Record(c)) = crate::logged_record::decode(&b, &id, &path) {
            for claim in &c.claims {
                let _ = std::fs::remove_file(local.os.chunk_path(claim.dir, &claim.chunk));
            }
        }
    }
    std::fs::remove_dir_all(tomb).map_err(io_err(tomb, "remove the published put"))
}

fn read_text(path: PathBuf) -> Result<String> {
    let b = std::fs::read(&path).map_err(io_err(&path, "read"))?;
    String::from_utf8(b).map_err(|_| Error::Damaged {
        path,
        offset: 0,
        what: "not UTF-8".into(),
    })
}

fn publish_one(local: &Store, id: &VersionId, mark: Mark) -> Result<Published> {
    let dir = local.staging_dir(id);
    let (name, remote_url, put) = match mark {
        Mark::Record(c) => (c.name, c.remote, Some((c.meta, c.claims))),
        // Version 1: the put's own files, synced by its commit.
        _ => (
            read_text(dir.join("name"))?,
            read_text(dir.join("remote"))?,
            None,
        ),
    };
    let url: RemoteUrl = remote_url.parse().map_err(|e| Error::Url {
        url: remote_url.clone(),
        why: format!("{e}"),
    })?;
    let remote = Store::open(&url)?;
    let committed = match remote.published(&name, id)? {
        // Published before the publisher died: the remote commit again,
        // which finds the version by its id and makes the views a
        // publisher killed right after the publish did not make (the crash
        // test at a random time found version 2 without its Zarr view);
        // then the local cleanup.
        Some(_) => remote.commit(&name, id)?,
        None => copy_and_commit(local, &remote, &name, id, put)?,
    };
    crate::failpoint("objects.publish_after_remote");
    // Renamed out of the way first: a publisher killed while removing the
    // directory file by file left claims without the `logged` mark and
    // name beside them (the random-time kill test found one), which no
    // later round would look at. A tombstone is removed by the next round.
    let tomb = tombstone(local, id);
    std::fs::rename(&dir, &tomb).map_err(io_err(&dir, "retire the published put"))?;
    crate::failpoint("objects.publish_mid_cleanup");
    remove_tombstone(local, &tomb)?;
    Ok(Published {
        name,
        remote: remote_url,
        committed,
    })
}

/// Copy the put's chunks to a remote put of the same id, each checked
/// against its claim's CRC-32C, and commit it there. A remote put left by
/// a publisher that died while copying (not published: checked before)
/// is aborted and made again: its writer never finished.
fn copy_and_commit(
    local: &Store,
    remote: &Store,
    name: &str,
    id: &VersionId,
    put: Option<(ArrayMeta, Vec<Claim>)>,
) -> Result<Committed> {
    let (meta, claims) = match put {
        Some(p) => p,
        None => local.complete(name, id, false)?,
    };
    if remote.staging_dir(id).join("begin").is_file() {
        remote.abort(name, id)?;
    }
    let half = remote
        .root()
        .join("staging")
        .join(format!(".begin.{}", id_hex(id)));
    let _ = std::fs::remove_dir_all(half);
    let mut put = remote.begin_id(name, &meta, *id)?;
    let cb = meta.chunk_len() as usize;
    for (i, c) in claims.iter().enumerate() {
        let coords = meta.coords(i as u64);
        let path = local.os.chunk_path(c.dir, &c.chunk);
        let block = std::fs::read(&path).map_err(io_err(&path, "read logged chunk"))?;
        if let Err(why) = crate::stored::check_stored(&block, cb as u64, c.block_crc) {
            return Err(Error::Put {
                name: name.to_owned(),
                id: id_hex(id),
                why: format!(
                    "logged chunk {coords:?}: {}: {why}: fails its claim; not published",
                    path.display()
                ),
            });
        }
        put.write_chunk(&coords, &block[..cb])?;
        if i == 0 {
            crate::failpoint("objects.publish_mid_copy");
        }
    }
    put.finish()?;
    remote.commit(name, id)
}
