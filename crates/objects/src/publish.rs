//! The publisher of logged puts (docs/objects.md "Logged mode"): the node
//! server's rounds, `paralog recover` and `paralog obj publish` run
//! [`publish_committed`] on a node-local root. Each round copies this
//! node's shares of puts committed on other nodes to their remotes
//! (crate::share), then publishes the puts committed here, in the order
//! of their commits: their own claims copied (crate::remote_put), and,
//! once every claim the commit record names is in the remote put, the
//! remote commit. Exactly once: the remote version's origin is the put's
//! id, so a publisher that died after the remote publish finds the
//! version and only cleans up.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use crate::error::{io_err, Error, Result};
use crate::h5serve::ViewServer;
use crate::logged::local_store;
use crate::logged_record::{Away, Mark};
use crate::parts::{chunk_file_id, PartClaim};
use crate::pending::{Node, Pending, Round, Why};
use crate::put::Committed;
use crate::read::ArrayVersion;
use crate::record::ArrayMeta;
use crate::remote_put::{ReadChunk, ReadPart, Remote, WriterShare};
use crate::staging::{remove_staged_chunks, Claim};
use crate::store::Store;
use crate::{id_hex, parse_id, share, VersionId};

/// A logged put published on its remote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub name: String,
    pub remote: String,
    pub committed: Committed,
}

/// Publish every committed logged put under the node-local directory
/// `local` to its remote, in the order of their local commits (the times
/// in their `logged` marks), so versions are numbered as they were
/// committed; puts not committed are left (their writers may still be
/// writing; `paralog obj gc` removes abandoned ones). A put whose shares on
/// other nodes are not all copied yet waits, and so do the later puts of
/// its name (their numbers follow the commits). One publisher at a time
/// per node (the node server, or `recover` when it is not running).
/// Returns what was published, and the first error after trying every put
/// ([`publish_round`] says what waits, and why).
pub fn publish_committed(local: &Path) -> Result<Vec<Published>> {
    let round = publish_round(local)?;
    match round.pending.into_iter().find_map(|p| match p.why {
        Why::Failed(e) => Some(e),
        _ => None,
    }) {
        Some(e) => Err(e),
        None => Ok(round.published),
    }
}

/// [`publish_committed`]'s round, with what it left and why: each put
/// committed here and not published (waiting for other nodes' shares,
/// behind an earlier put of its name, or failed), and each share of this
/// node whose copy failed. An error: the node-local store itself could
/// not be read. The HDF5 views by a co-process of this round only
/// ([`publish_round_with`] keeps one across rounds).
pub fn publish_round(local: &Path) -> Result<Round> {
    publish_round_with(local, &ViewServer::new())
}

/// [`publish_round`], its HDF5 views made by `h5`'s co-process: the node
/// server's publisher keeps one for all its rounds.
pub fn publish_round_with(local: &Path, h5: &ViewServer) -> Result<Round> {
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
    let mut round = Round::default();
    let failed = |id: VersionId, share: bool, e: Error| Pending {
        name: name_of(&store, &id).unwrap_or_default(),
        id,
        share,
        why: Why::Failed(e),
    };
    // Committed puts with their marks, in the order of their commits (a
    // damaged mark is reported, after trying every other put); shares of
    // puts committed elsewhere copied first.
    let mut marks = Vec::new();
    for id in ids {
        if store.staging_dir(&id).join(share::MARK).exists() {
            if let Err(e) = copy_shares(&store, &id) {
                round.pending.push(failed(id, true, e));
            }
            continue;
        }
        match read_mark(&store, &id) {
            Ok(Some((t, mark))) => marks.push((t, id, mark)),
            Ok(None) => {}
            Err(e) => round.pending.push(failed(id, false, e)),
        }
    }
    marks.sort_by_key(|(t, id, _)| (*t, *id));
    if marks.is_empty() {
        return Ok(round);
    }
    // Each put's views and local cleanup on a second thread, in commit
    // order, while this one copies the next put: on a network file system
    // the views were a large part of each version's publish (docs/objects.md
    // "What a version costs"). The next put's remote commit waits until
    // they are done, so versions are published one after the other as
    // before (a version's views and cleanup come before the next version),
    // and the round ends when both threads are.
    let (store, handed) = (&store, &Handed::default());
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::channel::<Finish>();
        let finisher = scope.spawn(move || {
            rx.into_iter()
                .map(|f| {
                    let (id, name) = (f.id, f.published.name.clone());
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        finish(store, f, h5)
                    }))
                    .unwrap_or_else(|_| {
                        Err(Error::Put {
                            name: name.clone(),
                            id: id_hex(&id),
                            why: "its views and clean-up failed (a bug: a panic)".into(),
                        })
                    });
                    handed.done();
                    r.map_err(|e| (id, name, e))
                })
                .collect::<Vec<_>>()
        });
        publish_marks(store, marks, (&tx, handed), &mut round);
        drop(tx);
        let finished = finisher
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        for r in finished {
            match r {
                Ok(p) => round.published.push(p),
                Err((id, name, e)) => round.pending.push(Pending {
                    name,
                    id,
                    share: false,
                    why: Why::Failed(e),
                }),
            }
        }
    });
    Ok(round)
}

/// How many published puts went to the round's second thread, and how
/// many it finished.
#[derive(Default)]
struct Handed {
    count: std::sync::Mutex<(u64, u64)>,
    changed: std::sync::Condvar,
}

impl Handed {
    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, u64)> {
        self.count.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn sent(&self) {
        self.lock().0 += 1;
    }

    fn done(&self) {
        self.lock().1 += 1;
        self.changed.notify_all();
    }

    /// Return once every put sent is finished.
    fn wait_idle(&self) {
        let g = self.lock();
        drop(
            self.changed
                .wait_while(g, |(sent, done)| done < sent)
                .unwrap_or_else(|p| p.into_inner()),
        );
    }
}

/// A put published on its remote, whose views and local cleanup are left
/// to the round's second thread.
struct Finish {
    id: VersionId,
    remote: Remote,
    views: Option<ArrayVersion>,
    published: Published,
}

/// The views of a published put, then its local copy retired, then the
/// remote put's staging (which, kept until now, kept the version from
/// retention in case this publisher died and a retry had to find it).
fn finish(local: &Store, f: Finish, h5: &ViewServer) -> Result<Published> {
    if let Some(av) = &f.views {
        f.remote.make_views(av, h5);
    }
    crate::failpoint("objects.publish_after_remote");
    retire(local, &f.id)?;
    f.remote.finish_commit(&f.published.name, &f.id);
    Ok(f.published)
}

/// Publish the committed puts `marks` (in commit order), each one
/// published handed to `done`; what waits or fails goes to `round`.
fn publish_marks(
    store: &Store,
    marks: Vec<(u64, VersionId, Mark)>,
    (done, handed): (&std::sync::mpsc::Sender<Finish>, &Handed),
    round: &mut Round,
) {
    // The first waiting put of each name: the later ones follow it.
    let mut waiting: HashMap<String, VersionId> = HashMap::new();
    for (_, id, mark) in marks {
        let name = match &mark {
            Mark::Record(c) => Some(c.name.clone()),
            _ => name_of(store, &id),
        };
        if let Some(first) = name.as_ref().and_then(|n| waiting.get(n)) {
            round.pending.push(Pending {
                name: name.clone().unwrap_or_default(),
                id,
                share: false,
                why: Why::Behind(*first),
            });
            continue;
        }
        match publish_one(store, &id, mark, &|| handed.wait_idle()) {
            Ok(Ok(f)) => {
                // The finisher lives until `done` is dropped.
                handed.sent();
                let _ = done.send(f);
            }
            Ok(Err(why)) => {
                if let Some(n) = &name {
                    waiting.insert(n.clone(), id);
                }
                round.pending.push(Pending {
                    name: name.unwrap_or_default(),
                    id,
                    share: false,
                    why,
                });
            }
            Err(e) => round.pending.push(Pending {
                name: name_of(store, &id).unwrap_or_default(),
                id,
                share: false,
                why: Why::Failed(e),
            }),
        }
    }
}

/// The object name a put's (or share's) directory holds, if it reads.
fn name_of(local: &Store, id: &VersionId) -> Option<String> {
    std::fs::read(local.staging_dir(id).join("name"))
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
}

/// The away writers of `writers`, by the node each ran on.
fn nodes_of(away: &[Away], writers: &BTreeSet<[u8; 16]>) -> Vec<Node> {
    let mut nodes: Vec<Node> = Vec::new();
    for a in away.iter().filter(|a| writers.contains(&a.writer)) {
        match nodes
            .iter_mut()
            .find(|n| !a.node.is_empty() && n.name == a.node && n.local == a.local)
        {
            Some(n) => n.writers.push(a.writer),
            None => nodes.push(Node {
                name: a.node.clone(),
                local: a.local.clone(),
                writers: vec![a.writer],
            }),
        }
    }
    nodes
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

/// Retire a put's (or a share's) staging directory: renamed out of the
/// way first, then removed with its chunk files. A publisher killed while
/// removing the directory file by file left claims without the `logged`
/// mark and name beside them (the random-time kill test found one), which
/// no later round would look at; a tombstone is removed by the next round.
fn retire(local: &Store, id: &VersionId) -> Result<()> {
    let dir = local.staging_dir(id);
    let tomb = tombstone(local, id);
    std::fs::rename(&dir, &tomb).map_err(io_err(&dir, "retire the published put"))?;
    crate::failpoint("objects.publish_mid_cleanup");
    remove_tombstone(local, &tomb)
}

fn read_text(path: PathBuf) -> Result<String> {
    let b = std::fs::read(&path).map_err(io_err(&path, "read"))?;
    String::from_utf8(b).map_err(|_| Error::Damaged {
        path,
        offset: 0,
        what: "not UTF-8".into(),
    })
}

/// A logged chunk's bytes, checked against its claim as a reader checks a
/// chunk against its piece: a damaged chunk, or another in its place, is
/// refused and nothing published.
fn read_logged(
    local: &Store,
    name: &str,
    id: &VersionId,
    meta: &ArrayMeta,
    i: u64,
    c: &Claim,
) -> Result<Vec<u8>> {
    let cb = meta.chunk_len();
    let path = local.os.chunk_path(c.dir, &c.chunk);
    let mut block = std::fs::read(&path).map_err(io_err(&path, "read logged chunk"))?;
    if let Err(why) = crate::stored::check_stored(&block, cb, c.block_crc) {
        return Err(Error::Put {
            name: name.to_owned(),
            id: id_hex(id),
            why: format!(
                "logged chunk {:?}: {}: {why}: fails its claim; not published",
                meta.coords(i),
                path.display()
            ),
        });
    }
    block.truncate(cb as usize);
    Ok(block)
}

/// A logged part's bytes (its box, row-major) read from the chunk file
/// its node's writers of that chunk share, each run checked against its
/// claim: a damaged part is refused and nothing published.
fn read_logged_part(
    local: &Store,
    name: &str,
    id: &VersionId,
    meta: &ArrayMeta,
    p: &PartClaim,
) -> Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let path = local.os.chunk_path(p.dir, &chunk_file_id(id, p.chunk));
    let file = std::fs::File::open(&path).map_err(io_err(&path, "read logged part"))?;
    let (run, offsets) = crate::parts::runs(&meta.chunks, &p.start, &p.count, meta.dtype.size());
    let mut data = vec![0u8; run as usize * offsets.len()];
    for ((r, off), crc) in offsets.iter().enumerate().zip(&p.run_crcs) {
        let buf = &mut data[r * run as usize..(r + 1) * run as usize];
        file.read_exact_at(buf, *off)
            .map_err(io_err(&path, "read logged part"))?;
        if paralog_checksum::crc32c(buf) != *crc {
            return Err(Error::Put {
                name: name.to_owned(),
                id: id_hex(id),
                why: format!(
                    "logged part of chunk {:?} by writer {}: {}: run {r} at offset {off} fails its claim; not published",
                    meta.coords(p.chunk),
                    id_hex(&p.writer),
                    path.display()
                ),
            });
        }
    }
    Ok(data)
}

/// Publish the put `id` committed here (its views and local cleanup
/// left to [`finish`]; `before_commit`: returns once the puts before it
/// are finished); `Err(why)`: it waits for shares other nodes have not
/// copied yet.
fn publish_one(
    local: &Store,
    id: &VersionId,
    mark: Mark,
    before_commit: &dyn Fn(),
) -> Result<std::result::Result<Finish, Why>> {
    let dir = local.staging_dir(id);
    let (name, remote_url, put) = match mark {
        Mark::Record(c) => (c.name, c.remote, Some((c.meta, c.claims, c.away, c.parts))),
        // Version 1: the put's own files, synced by its commit.
        _ => (
            read_text(dir.join("name"))?,
            read_text(dir.join("remote"))?,
            None,
        ),
    };
    let remote = Remote::open(&remote_url)?;
    let (committed, views) = match remote.published(&name, id)? {
        // Published before the publisher died: the remote commit again,
        // which finds the version by its id and makes the views a
        // publisher killed right after the publish did not make (the crash
        // test at a random time found version 2 without its Zarr view);
        // then the local cleanup.
        Some(_) => {
            before_commit();
            remote.commit(&name, id, false)?
        }
        None => {
            let (meta, claims, away, parts) = match put {
                Some(p) => p,
                None => {
                    let (m, c) = local.complete(&name, id, false)?;
                    (m, c, Vec::new(), Vec::new())
                }
            };
            let read = |i: u64, c: &Claim| read_logged(local, &name, id, &meta, i, c);
            let read_part = |p: &PartClaim| read_logged_part(local, &name, id, &meta, p);
            let put = (name.as_str(), id, &meta);
            // Every writer on this node, to a directory layout: no remote
            // staging needed (crate::remote_put::Remote::publish_whole).
            let whole = match away.is_empty() {
                true => remote.publish_whole(put, &claims, &read, before_commit)?,
                false => None,
            };
            match whole {
                Some(done) => done,
                None => {
                    let logged = (&claims[..], &away[..], &parts[..]);
                    match publish_staged(&remote, put, logged, (&read, &read_part), before_commit)?
                    {
                        Ok(done) => done,
                        Err(why) => return Ok(Err(why)),
                    }
                }
            }
        }
    };
    Ok(Ok(Finish {
        id: *id,
        remote,
        views,
        published: Published {
            name,
            remote: remote_url,
            committed,
        },
    }))
}

/// Publish the put `id` through the remote's staging: this node's
/// writers' shares (their whole chunks, and their parts of the chunks put
/// together on the remote) copied into the remote put, then, once other
/// nodes' shares (`away`) are there too, the remote commit; `Err(why)`:
/// it waits for those shares.
fn publish_staged(
    remote: &Remote,
    (name, id, meta): (&str, &VersionId, &ArrayMeta),
    (claims, away, parts): (&[Claim], &[Away], &[PartClaim]),
    (read, read_part): (&ReadChunk<'_>, &ReadPart<'_>),
    before_commit: &dyn Fn(),
) -> Result<std::result::Result<(Committed, Option<ArrayVersion>), Why>> {
    let away_writers: BTreeSet<[u8; 16]> = away.iter().map(|a| a.writer).collect();
    let is_away = |w: &[u8; 16]| away_writers.contains(w);
    // This node's claims and parts, one share per writer. A chunk written
    // in parts on several nodes has a claim of the file its parts make on
    // the remote: its parts are copied, not it.
    let of_parts: BTreeSet<u64> = parts.iter().map(|p| p.chunk).collect();
    let mut mine = Mine::new();
    for (i, c) in claims.iter().enumerate() {
        let i = i as u64;
        if !is_away(&c.writer) && !of_parts.contains(&i) {
            mine.entry(c.writer).or_default().0.push((i, *c));
        }
    }
    for p in parts.iter().filter(|p| !is_away(&p.writer)) {
        mine.entry(p.writer).or_default().1.push(p.clone());
    }
    // Not durable copies (this node keeps its own until the
    // publish): the chunk files' names synced once, before the
    // commit, which makes the rest of the version durable.
    let dirs = copy_writers(remote, (name, id, meta), &mine, (read, read_part))?;
    // Other nodes' shares: in the remote put yet? (With none, every
    // claim was copied just now; the commit checks them all.)
    if !away.is_empty() {
        if let Some((missing, writers)) = remote.missing((name, id, meta), claims, parts)? {
            return Ok(Err(Why::Shares {
                missing,
                nodes: nodes_of(away, &writers),
            }));
        }
    }
    remote.sync_chunk_dirs(&dirs)?;
    before_commit();
    remote.commit(name, id, true).map(Ok)
}

/// This node's writers' shares to copy: each writer's whole chunks and
/// parts.
type Mine = BTreeMap<[u8; 16], (Vec<(u64, Claim)>, Vec<PartClaim>)>;

/// Copy this node's writers' shares (`mine`) into the remote put, made
/// once first (and, made now, not searched for what a killed copier
/// left). One writer after the other: several at once were measured no
/// faster on the limited remote, whose link time dominates a version of
/// a few MB (docs/objects.md "A logged publish on sshfs"). The storage
/// directories written, for the caller to sync.
fn copy_writers(
    remote: &Remote,
    put: (&str, &VersionId, &ArrayMeta),
    mine: &Mine,
    (read, read_part): (&ReadChunk<'_>, &ReadPart<'_>),
) -> Result<BTreeSet<u32>> {
    let opened = Some(remote.open_put(put.0, put.1, put.2)?);
    let mut dirs = BTreeSet::new();
    for (w, (claims, parts)) in mine {
        let share = WriterShare {
            writer: *w,
            claims,
            parts,
            read,
            read_part,
        };
        dirs.extend(remote.copy_share(put, &share, false, opened)?);
    }
    Ok(dirs)
}

/// Copy this node's shares of the put `id` (committed on another node) to
/// its remote, each removed here once whole there; the share's directory
/// goes once it holds nothing more and the version is published. A torn
/// share record (its writer killed in its `finish`: the put was never
/// committed) is left for `paralog obj gc`.
fn copy_shares(local: &Store, id: &VersionId) -> Result<()> {
    let dir = local.staging_dir(id);
    let mut named = None;
    let mut pending = false;
    for e in std::fs::read_dir(&dir).map_err(io_err(&dir, "list the share"))? {
        let e = e.map_err(io_err(&dir, "list the share"))?;
        let f = e.file_name().to_string_lossy().into_owned();
        if f.starts_with('c') || f.starts_with(".claim.") || f.starts_with(".intent.") {
            pending = true;
        }
        let Some(writer) = share::writer_of(&f) else {
            continue;
        };
        let path = e.path();
        let b = std::fs::read(&path).map_err(io_err(&path, "read"))?;
        let Some((sid, s)) = share::decode(&b, &path)? else {
            pending = true;
            continue;
        };
        if &sid != id || s.writer != writer {
            return Err(Error::Damaged {
                path,
                offset: 16,
                what: "a share record of another put or writer".into(),
            });
        }
        let remote = Remote::open(&s.remote)?;
        // Published: the share was copied (the publisher commits only when
        // every claim is in the remote put); copying again would make the
        // remote put anew.
        if remote.published(&s.name, id)?.is_none() {
            let read = |i: u64, c: &Claim| read_logged(local, &s.name, id, &s.meta, i, c);
            let read_part = |p: &PartClaim| read_logged_part(local, &s.name, id, &s.meta, p);
            let share = WriterShare {
                writer: s.writer,
                claims: &s.claims,
                parts: &s.parts,
                read: &read,
                read_part: &read_part,
            };
            remote.copy_share((&s.name, id, &s.meta), &share, true, None)?;
        }
        // Whole and durable on the remote: this node's copy goes, the
        // record last (a crash before it copies again, which finds the
        // writer's mark there and only cleans up).
        for (i, c) in &s.claims {
            let _ = std::fs::remove_file(local.os.chunk_path(c.dir, &c.chunk));
            let _ = std::fs::remove_file(dir.join(format!("c{i:020}")));
        }
        let _ = std::fs::remove_file(dir.join(format!("w{}", id_hex(&writer))));
        std::fs::remove_file(&path).map_err(io_err(&path, "remove the copied share"))?;
        named = Some((s.name, remote));
    }
    if pending {
        return Ok(());
    }
    // Nothing left to copy: the directory goes once the version is
    // published (until then a writer of this node may still join it).
    let name = match &named {
        Some((n, _)) => n.clone(),
        None => read_text(dir.join("name"))?,
    };
    let remote = match named {
        Some((_, r)) => r,
        None => Remote::open(&read_text(dir.join("remote"))?)?,
    };
    if remote.published(&name, id)?.is_some() {
        retire(local, id)?;
    }
    Ok(())
}
