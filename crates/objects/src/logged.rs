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
//! died while copying resumes the copy (crate::remote_put).
//!
//! Across nodes (crate::share): ranks on another node than the put's
//! committing one log their chunks in their own node's store, in a share
//! of the put (same id), each writer's claims committed there as one
//! record at its `finish`; the commit gathers them (MPI) and names them
//! in its record as away; each node's server copies its shares to the
//! remote's staging, and the committing node's publisher commits there
//! once every claim is present (crate::publish).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use paralog_backend::RemoteUrl;

use crate::error::{io_err, Error, Result};
use crate::logged_record::{Away, Commit};
use crate::parts::{chunk_file_id, compose, refusal, PartClaim};
use crate::put::Put;
use crate::record::ArrayMeta;
use crate::remote_put::Remote;
use crate::share::{self, Share};
use crate::staging::{new_id, sync_dir, write_file, write_synced, Claim};
use crate::store::Store;
use crate::{id_hex, VersionId};

pub use crate::publish::{publish_committed, publish_round, publish_round_with, Published};

/// A store whose puts are logged on this node and published to `remote`
/// later (by [`publish_committed`]: the node server, or `paralog obj
/// publish`).
#[derive(Debug, Clone)]
pub struct LoggedStore {
    local: Store,
    remote_url: String,
    /// Where this process runs (its node's name and node-local directory):
    /// a share's record says it, so that a put waiting for the share names
    /// the node whose server has not copied it.
    node: String,
    local_dir: String,
}

/// The node-local store's directory under the node-local root: a runtime
/// entry of the root (the `.paralog-` prefix, crates/log `layout`), so the
/// log's drain never takes it for a job.
pub const LOCAL_DIR: &str = ".paralog-objects";

/// The node-local store under `local` (created 0700).
pub(crate) fn local_store(local: &Path) -> Result<Store> {
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
    /// Puts to the store `remote_url` (which must exist: a directory
    /// layout or `s3://`), logged under the node-local directory `local`.
    pub fn open(remote_url: &str, local: &Path) -> Result<LoggedStore> {
        let url: RemoteUrl = remote_url.parse().map_err(|e| Error::Url {
            url: remote_url.to_owned(),
            why: format!("{e}"),
        })?;
        if matches!(&url, RemoteUrl::ObjStore(o) if !o.sync) {
            // The publisher deletes the logged chunks once published.
            return Err(Error::Url {
                url: remote_url.to_owned(),
                why: "sync=0 is for direct puts only: a logged put's node-local copy is deleted once published, so its store must be durable (remove sync=0)".into(),
            });
        }
        // Opened once to refuse a store that is not there now, not at
        // the publish.
        Remote::open(remote_url)?;
        // A node name that cannot be found is no reason to refuse a put:
        // it only makes a waiting put's message less precise.
        let node = paralog_settings::node_name(std::env::var("PARALOG_NODE").ok().as_deref())
            .unwrap_or_else(|_| "?".into());
        Ok(LoggedStore {
            local: local_store(local)?,
            remote_url: remote_url.to_owned(),
            node,
            local_dir: std::path::absolute(local)
                .unwrap_or_else(|_| local.to_path_buf())
                .display()
                .to_string(),
        })
    }

    /// The same store as seen from the node `node` (tests that stand for
    /// several nodes in one process; a program's node is PARALOG_NODE,
    /// else the host name).
    pub fn on_node(mut self, node: &str) -> LoggedStore {
        self.node = node.to_owned();
        self
    }

    /// The remote store's URL (reads go there: a logged put is visible
    /// once published).
    pub fn remote_url(&self) -> &str {
        &self.remote_url
    }

    /// Begin a logged put; its id goes to the other writers, who
    /// [`LoggedStore::join_as`] it on this node (or
    /// [`LoggedStore::join_share`] on any node).
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
        crate::input::check_whole(name, meta, data)?;
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

    /// Join the put `id` begun on this node, with its array (a writer
    /// that does not know it: `paralog obj write --local`).
    pub fn join(&self, name: &str, id: &VersionId) -> Result<Put<'_>> {
        self.local.join(name, id)
    }

    /// Join the put `id` as a writer on any node (the MPI form): the put
    /// itself when it was begun on this node, else this node's share of
    /// it, made by the first of its writers here (`meta` must be the
    /// put's, attributes included: it is the share's record).
    pub fn join_share(&self, name: &str, id: &VersionId, meta: &ArrayMeta) -> Result<Put<'_>> {
        let dir = self.local.staging_dir(id);
        if !dir.join("begin").is_file() {
            crate::store::check_name(name)?;
            meta.check(name)?;
            let staging = self.local.root().join("staging");
            let tmp = staging.join(format!(".share.{}.{}", id_hex(id), id_hex(&new_id())));
            std::fs::create_dir_all(&tmp).map_err(io_err(&tmp, "create"))?;
            // Not synced: each writer's share record holds all of it.
            write_file(&tmp.join("begin"), &crate::record::encode(id, meta))?;
            write_file(&tmp.join("name"), name.as_bytes())?;
            write_file(&tmp.join("remote"), self.remote_url.as_bytes())?;
            write_file(&tmp.join(share::MARK), b"")?;
            // Another writer of this node renamed its share first: join it.
            if std::fs::rename(&tmp, &dir).is_err() {
                let _ = std::fs::remove_dir_all(&tmp);
            }
        }
        self.local.join_as(name, id, meta)
    }

    /// Finish a writer. In a share (another node than the committing
    /// one's), also commit its part here: its claims in one record,
    /// durable (file, the put's directory, `staging/`), returned for the
    /// commit ([`LoggedStore::commit_shares`]). `None`: a writer of the
    /// put itself, whose claims the commit reads on this node.
    pub fn finish(&self, put: Put<'_>) -> Result<Option<Vec<u8>>> {
        let dir = put.dir().to_path_buf();
        if !dir.join(share::MARK).exists() {
            put.finish()?;
            return Ok(None);
        }
        let mut claims = put.written().to_vec();
        claims.sort_by_key(|(i, _)| *i);
        let record = share::encode(
            &put.id(),
            &Share {
                writer: put.writer(),
                name: put_name(&dir)?,
                remote: self.remote_url.clone(),
                meta: put.meta().clone(),
                claims,
                node: self.node.clone(),
                local: self.local_dir.clone(),
                parts: put.written_parts().to_vec(),
            },
        );
        let writer = put.writer();
        put.finish()?;
        write_synced(&dir.join(share::file_name(&writer)), &record)?;
        sync_dir(&dir)?;
        sync_dir(&self.local.root().join("staging"))?;
        Ok(Some(record))
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
        self.commit_shares(name, id, &[])
    }

    /// [`LoggedStore::commit`] of a put whose writers on other nodes
    /// committed shares there: `shares` is their records one after the
    /// other (as [`LoggedStore::finish`] returned them). Each must be of
    /// this put (id, name, array, remote); a chunk claimed twice (here
    /// and in a share, or in two shares) is refused as an overlap. A chunk
    /// with a part written on another node is checked here (its parts
    /// disjoint and covering it, from their claims) and put together on
    /// the remote, where its writers' nodes copy their parts.
    pub fn commit_shares(&self, name: &str, id: &VersionId, shares: &[u8]) -> Result<()> {
        let (meta, mut claims, mut finished, mut here) =
            self.local.staged_claims(name, id, false)?;
        let perr = |why: String| Error::Put {
            name: name.to_owned(),
            id: id_hex(id),
            why,
        };
        let overlap = |i: u64| Error::Overlap {
            name: name.to_owned(),
            id: id_hex(id),
            chunk: meta.coords(i),
        };
        let mut away = BTreeMap::new();
        let mut away_parts: BTreeMap<u64, Vec<PartClaim>> = BTreeMap::new();
        let mut rest = shares;
        while !rest.is_empty() {
            let len = share::record_len(rest)
                .filter(|&l| l <= rest.len())
                .ok_or_else(|| perr("a rank's share record is cut short".into()))?;
            let at = Path::new("(a rank's share record)");
            let Some((sid, s)) = share::decode(&rest[..len], at)? else {
                return Err(perr("a rank's share record fails its checksum".into()));
            };
            rest = &rest[len..];
            if &sid != id || s.name != name || s.meta != meta || s.remote != self.remote_url {
                return Err(perr(format!(
                    "a share of writer {} is not of this put (its put {}, name {:?}, remote {:?}, or its array differs)",
                    id_hex(&s.writer),
                    id_hex(&sid),
                    s.name,
                    s.remote
                )));
            }
            // A writer that wrote nothing is finished and not away (the
            // record's away writers each claim something).
            if !s.claims.is_empty() || !s.parts.is_empty() {
                away.insert(
                    s.writer,
                    Away {
                        writer: s.writer,
                        node: s.node.clone(),
                        local: s.local.clone(),
                    },
                );
            }
            for (i, c) in s.claims {
                if claims[i as usize].is_some() {
                    return Err(overlap(i));
                }
                claims[i as usize] = Some(c);
            }
            for p in s.parts {
                away_parts.entry(p.chunk).or_default().push(p);
            }
            finished.insert(s.writer);
        }
        let mut remote_parts = Vec::new();
        for (i, theirs) in away_parts {
            let mine = here.take(i);
            if claims[i as usize].is_some() {
                return Err(overlap(i));
            }
            if let Some(p) = mine.iter().find(|p| !finished.contains(&p.claim.writer)) {
                // Refused below, as any chunk of a writer that did not
                // finish.
                claims[i as usize] = Some(Claim {
                    chunk: [0; 16],
                    dir: 0,
                    block_crc: 0,
                    writer: p.claim.writer,
                });
                continue;
            }
            let mut paths: Vec<PathBuf> = mine.iter().map(|p| p.at.clone()).collect();
            paths.extend(theirs.iter().map(|p| {
                PathBuf::from(format!(
                    "(the share record of writer {} on node {:?})",
                    id_hex(&p.writer),
                    away.get(&p.writer).map_or("?", |a: &Away| a.node.as_str())
                ))
            }));
            let dir = mine.first().map_or(0, |p| p.claim.dir);
            let mut all: Vec<PartClaim> = mine.into_iter().map(|p| p.claim).collect();
            all.extend(theirs);
            let crc =
                compose(&meta, i, &all).map_err(|r| refusal(name, id, &meta, i, r, &paths))?;
            claims[i as usize] = Some(Claim {
                chunk: chunk_file_id(id, i),
                dir,
                block_crc: crc,
                writer: all[0].writer,
            });
            remote_parts.extend(all);
        }
        // The chunks whose parts are all here, put together here.
        self.local
            .compose_parts(name, id, &meta, &mut claims, &finished, here)?;
        let claims = crate::staging::complete_claims(claims, &finished, &meta).map_err(perr)?;
        let commit = Commit {
            time_ns: 0,
            name: name.to_owned(),
            remote: self.remote_url.clone(),
            meta,
            claims,
            away: away.into_values().collect(),
            parts: remote_parts,
        };
        self.write_commit(id, commit)
    }

    fn write_commit(&self, id: &VersionId, mut commit: Commit) -> Result<()> {
        let dir = self.local.staging_dir(id);
        crate::failpoint("objects.before_commit");
        // The commit's time in nanoseconds (file times are as coarse as a
        // clock tick): the publisher numbers versions in this order.
        commit.time_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let record = crate::logged_record::encode(id, &commit);
        write_synced(&dir.join("logged"), &record)?;
        sync_dir(&dir)?;
        sync_dir(&self.local.root().join("staging"))?;
        crate::failpoint("objects.after_commit");
        Ok(())
    }

    /// After a refused commit (the MPI form, on every rank): this node's
    /// share of the put `id`, if it has one, removed (its records first,
    /// so its server stops copying it), best effort: a share the server
    /// already copied stays in the remote's staging until `paralog obj
    /// gc` there. Nothing happens on the committing node.
    pub fn discard_share(&self, name: &str, id: &VersionId) {
        let dir = self.local.staging_dir(id);
        if !dir.join(share::MARK).exists() {
            return;
        }
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                if share::writer_of(&e.file_name().to_string_lossy()).is_some() {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        // Another rank of this node may be removing it too.
        let _ = self.local.abort(name, id);
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

/// The object name a put's staging directory holds.
fn put_name(dir: &Path) -> Result<String> {
    let p = dir.join("name");
    let b = std::fs::read(&p).map_err(io_err(&p, "read"))?;
    String::from_utf8(b).map_err(|_| Error::Damaged {
        path: p,
        offset: 0,
        what: "not UTF-8".into(),
    })
}
