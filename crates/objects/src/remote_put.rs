//! The remote side of publishing a logged put (docs/objects.md "Logged
//! mode"): the remote store (a directory layout or S3) holds a chunked put
//! of the logged put's id, into which each node copies its shares (each
//! writer's claims, under the writer's own id); the committing node's
//! publisher commits it once every claim of the commit record is there.
//!
//! A copy is resumable: a writer's `w` mark on the remote says its share
//! is whole there (and durable: the node deletes its local copy after).
//! Before it, a claim of the writer whose chunk checks against the logged
//! claim's CRC-32C is kept; any other claim of the share's chunks (a bad
//! copy, or a copier of an older binary, which drew a random writer) is
//! removed with its chunk and written again.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::ErrorKind;

use paralog_backend::RemoteUrl;

use crate::error::{io_err, Error, Result};
use crate::parts::{chunk_file_id, claim_name, PartClaim};
use crate::put::{CommitRun, Committed};
use crate::read::ArrayVersion;
use crate::record::{self, ArrayMeta};
use crate::s3store::S3Store;
use crate::staging::{
    decode_claim, new_id, remove_chunk_by_id, sync_dir, write_file, write_synced, Claim,
};
use crate::store::Store;
use crate::{id_hex, VersionId};

/// A logged put's remote store.
pub(crate) enum Remote {
    Layout(Store),
    S3(S3Store),
}

/// Reads a share's chunk from the node-local store, checked against its
/// claim: the chunk's `C` bytes.
pub(crate) type ReadChunk<'a> = dyn Fn(u64, &Claim) -> Result<Vec<u8>> + 'a;

/// Reads a part of a chunk from the node-local store, each run checked
/// against its claim: the part's bytes in its box's row-major order.
pub(crate) type ReadPart<'a> = dyn Fn(&PartClaim) -> Result<Vec<u8>> + 'a;

/// One writer's share to copy: its whole chunks (index, logged claim)
/// and its parts of chunks put together on the remote, with how to read
/// each from the node-local store.
pub(crate) struct WriterShare<'a> {
    pub(crate) writer: [u8; 16],
    pub(crate) claims: &'a [(u64, Claim)],
    pub(crate) parts: &'a [PartClaim],
    pub(crate) read: &'a ReadChunk<'a>,
    pub(crate) read_part: &'a ReadPart<'a>,
}

/// What a remote put holds: its claims by chunk index, the writers that
/// finished, and the part claims (not put together: some may be on their
/// way from other nodes).
pub(crate) struct Held {
    pub(crate) claims: Vec<Option<Claim>>,
    pub(crate) finished: BTreeSet<[u8; 16]>,
    pub(crate) parts: Vec<PartClaim>,
}

impl Remote {
    pub(crate) fn open(url: &str) -> Result<Remote> {
        let parsed: RemoteUrl = url.parse().map_err(|e| Error::Url {
            url: url.to_owned(),
            why: format!("{e}"),
        })?;
        match &parsed {
            RemoteUrl::S3(u) => S3Store::open(u).map(Remote::S3),
            _ => Store::open(&parsed).map(Remote::Layout),
        }
    }

    /// The version the put `id` published on the remote, if it did. The
    /// records are searched only if a commit got as far as its array
    /// record, named by the put's id on both (a `stat` on a directory
    /// layout, a HEAD on S3).
    pub(crate) fn published(&self, name: &str, id: &VersionId) -> Result<Option<u64>> {
        match self {
            Remote::Layout(s) => s.published_by_commit(name, id),
            Remote::S3(s) => s.published_by_commit(name, id),
        }
    }

    /// Commit the remote put; on a directory layout its views are left to
    /// [`Remote::make_views`] (the publisher makes them while it copies
    /// the next put), on S3 they are made here. The remote put's staging
    /// stays, and keeps the version from retention, until
    /// [`Remote::finish_commit`]: a publisher killed before it retired its
    /// node-local put retries, and must find the version by its id.
    /// `unpublished`: the caller found no version of the put just before
    /// (and copied it since): no retry check.
    pub(crate) fn commit(
        &self,
        name: &str,
        id: &VersionId,
        unpublished: bool,
    ) -> Result<(Committed, Option<ArrayVersion>)> {
        let run = CommitRun {
            cleanup: false,
            unpublished,
        };
        match self {
            Remote::Layout(s) => s.commit_views_later(name, id, run),
            Remote::S3(s) => s.commit_with(name, id, run).map(|c| (c, None)),
        }
    }

    /// Publish a logged put whose writers are all on this node straight
    /// from its claims (every chunk, in chunk order), on a directory
    /// layout; `None` on S3 (the caller copies into a remote put). No
    /// remote put's staging is made: no `begin` and `name`, no claim and
    /// mark per writer read back by the commit and then removed (about a
    /// third of a publish's round trips on sshfs, docs/objects.md "A
    /// logged publish on sshfs"). Each chunk file keeps its node-local
    /// name (its UUID), so a copy killed and retried writes the same files
    /// again and leaves none behind. An empty `staging/<id>/`, made first,
    /// keeps the version from retention until [`Remote::finish_commit`]
    /// (a retry must find it by its id). The chunk files' bytes and names
    /// are durable before the array record, as a commit's are.
    /// `before_commit`: returns once the puts before it are finished.
    pub(crate) fn publish_whole(
        &self,
        (name, id, meta): (&str, &VersionId, &ArrayMeta),
        claims: &[Claim],
        read: &ReadChunk<'_>,
        before_commit: &dyn Fn(),
    ) -> Result<Option<(Committed, Option<ArrayVersion>)>> {
        let Remote::Layout(s) = self else {
            return Ok(None);
        };
        // The name comes from a node-local record: checked before it
        // names anything in the store.
        crate::store::check_name(name)?;
        let pin = s.staging_dir(id);
        std::fs::create_dir_all(&pin).map_err(io_err(&pin, "create"))?;
        let cb = meta.chunk_len();
        let mut dirs = BTreeSet::new();
        let mut copied = Vec::with_capacity(claims.len());
        for (i, c) in claims.iter().enumerate() {
            let i = i as u64;
            // Checked against its claim by `read`: the same block CRC.
            let (block, _) = crate::stored::stored_block(&read(i, c)?);
            let mut w = s.os.writer_with_id(c.chunk)?;
            let p = w.add(i * cb, &block)?;
            w.finish_file()?;
            dirs.insert(p.dir);
            copied.push(Claim { dir: p.dir, ..*c });
            if i == 0 {
                crate::failpoint("objects.publish_mid_copy");
            }
        }
        self.sync_chunk_dirs(&dirs)?;
        before_commit();
        let run = CommitRun {
            cleanup: false,
            unpublished: true,
        };
        s.publish_claims(name, id, meta.clone(), &copied, run)
            .map(Some)
    }

    /// The end of [`Remote::commit`], once the node-local put is retired:
    /// the remote put's staging removed and the retention it held back
    /// applied. Never an error (what is left, `obj gc` removes).
    pub(crate) fn finish_commit(&self, name: &str, id: &VersionId) {
        match self {
            Remote::Layout(s) => s.finish_commit(name, id),
            Remote::S3(s) => s.finish_commit(name, id),
        }
    }

    /// Make the views of a version [`Remote::commit`] left: never an
    /// error (a failure is in the version's mark, as after any commit).
    pub(crate) fn make_views(&self, av: &ArrayVersion, h5: &crate::h5serve::ViewServer) {
        if let Remote::Layout(s) = self {
            let _ = crate::views::make(s, av, Some(h5));
        }
    }

    /// Make the remote put `id` of `name` if no node made it yet (not
    /// durable: for [`Remote::copy_share`]s with `durable` false), once
    /// before this node's writers' shares are copied into it: whether it
    /// was made now, empty.
    pub(crate) fn open_put(&self, name: &str, id: &VersionId, meta: &ArrayMeta) -> Result<bool> {
        match self {
            Remote::Layout(s) => ensure_put(s, name, meta, id, false),
            Remote::S3(s) => s.ensure_put(name, meta, id),
        }
    }

    /// Copy one writer's share (its logged claims and parts) into the
    /// remote put `id`, made if no node made it yet (`opened`:
    /// [`Remote::open_put`] made or found it, and whether it was made
    /// then); whole on return, the writer's mark last. `durable`: and
    /// durable (a share's node deletes its copy after). Else only the
    /// chunk files' bytes are; their storage directories, returned, are
    /// for the caller to sync once before its commit (the committing node
    /// keeps its own copy until the publish).
    pub(crate) fn copy_share(
        &self,
        (name, id, meta): (&str, &VersionId, &ArrayMeta),
        share: &WriterShare<'_>,
        durable: bool,
        opened: Option<bool>,
    ) -> Result<BTreeSet<u32>> {
        match self {
            Remote::Layout(s) => copy_share(s, (name, id, meta), share, (durable, opened)),
            Remote::S3(s) => s
                .copy_share((name, id, meta), share, opened)
                .map(|()| BTreeSet::new()),
        }
    }

    /// Make the storage directories `dirs` durable: the names of chunk
    /// files [`Remote::copy_share`] copied, not durable.
    pub(crate) fn sync_chunk_dirs(&self, dirs: &BTreeSet<u32>) -> Result<()> {
        if let Remote::Layout(s) = self {
            if s.os.durable() {
                for d in dirs {
                    s.os.sync_chunk_dir(*d)?;
                }
            }
        }
        Ok(())
    }

    /// Whether every claim of the commit record (`claims`, in chunk order)
    /// is in the remote put, by its writer (its mark there) and with its
    /// CRC-32C, and every part (`parts`: of the chunks put together
    /// there) by its writer, with its box and run CRCs: `None` if so, else
    /// what is missing yet and the writers of the chunks and parts missing
    /// (other nodes' shares not copied yet: the publisher waits).
    pub(crate) fn missing(
        &self,
        (name, id, meta): (&str, &VersionId, &ArrayMeta),
        claims: &[Claim],
        parts: &[PartClaim],
    ) -> Result<Option<(String, BTreeSet<[u8; 16]>)>> {
        let found = match self {
            Remote::Layout(s) => remote_claims(s, name, id, meta)?,
            Remote::S3(s) => s.remote_claims(name, id, meta)?,
        };
        let Some(held) = found else {
            let mut writers: BTreeSet<_> = claims.iter().map(|c| c.writer).collect();
            writers.extend(parts.iter().map(|p| p.writer));
            return Ok(Some(("no share copied yet".into(), writers)));
        };
        let mut writers = BTreeSet::new();
        let mut expected: BTreeMap<u64, Vec<&PartClaim>> = BTreeMap::new();
        for p in parts {
            expected.entry(p.chunk).or_default().push(p);
        }
        let there: HashSet<_> = held.parts.iter().map(part_key).collect();
        let absent: Vec<u64> = (0..claims.len() as u64)
            .filter(|&i| {
                let want = &claims[i as usize];
                if let Some(of_chunk) = expected.get(&i) {
                    let lacking: Vec<[u8; 16]> = of_chunk
                        .iter()
                        .filter(|p| {
                            !held.finished.contains(&p.writer) || !there.contains(&part_key(p))
                        })
                        .map(|p| p.writer)
                        .collect();
                    writers.extend(&lacking);
                    return !lacking.is_empty();
                }
                let there = held.claims[i as usize].is_some_and(|c| {
                    c.writer == want.writer
                        && c.block_crc == want.block_crc
                        && held.finished.contains(&c.writer)
                });
                if !there {
                    writers.insert(want.writer);
                }
                !there
            })
            .collect();
        Ok((!absent.is_empty()).then(|| {
            let what = format!(
                "{} of {} chunks not yet copied by their nodes (first: {:?})",
                absent.len(),
                claims.len(),
                meta.coords(absent[0])
            );
            (what, writers)
        }))
    }
}

/// What makes two claims of one part the same (where each store placed
/// its file aside).
type PartKey<'a> = (u64, [u8; 16], &'a [u64], &'a [u64], &'a [u32]);

fn part_key(p: &PartClaim) -> PartKey<'_> {
    (p.chunk, p.writer, &p.start, &p.count, &p.run_crcs)
}

/// What the remote put holds; `None` if no node made it yet. Its array
/// must be the logged put's (an equal record): anything else is refused,
/// naming the put.
pub(crate) type Found = Option<Held>;

pub(crate) fn same_meta(
    name: &str,
    id: &VersionId,
    there: &ArrayMeta,
    meta: &ArrayMeta,
) -> Result<()> {
    if there != meta {
        return Err(Error::Put {
            name: name.to_owned(),
            id: id_hex(id),
            why: "the remote put's array record is not the logged one's; not published".into(),
        });
    }
    Ok(())
}

fn remote_claims(s: &Store, name: &str, id: &VersionId, meta: &ArrayMeta) -> Result<Found> {
    if !s.staging_dir(id).join("begin").is_file() {
        return Ok(None);
    }
    let (there, claims, finished, parts) = s.staged_claims(name, id, false)?;
    same_meta(name, id, &there, meta)?;
    Ok(Some(Held {
        claims,
        finished,
        parts: parts.into_claims(),
    }))
}

/// The remote put `id` of `name`, made (`durable`: its `begin` and `name`
/// durable) if no node made it yet; two nodes making it at once both end
/// up joining the one that was renamed into place first. Whether it was
/// made here, now (empty: no claim, no mark, nothing a killed copier left).
fn ensure_put(
    s: &Store,
    name: &str,
    meta: &ArrayMeta,
    id: &VersionId,
    durable: bool,
) -> Result<bool> {
    // The name comes from a node-local record: checked before it names
    // anything in the store.
    crate::store::check_name(name)?;
    let dir = s.staging_dir(id);
    if !dir.join("begin").is_file() {
        let staging = s.root().join("staging");
        std::fs::create_dir_all(&staging).map_err(io_err(&staging, "create staging directory"))?;
        let tmp = staging.join(format!(".begin.{}.{}", id_hex(id), id_hex(&new_id())));
        std::fs::create_dir(&tmp).map_err(io_err(&tmp, "create"))?;
        let write = if durable { write_synced } else { write_file };
        write(&tmp.join("begin"), &record::encode(id, meta))?;
        write(&tmp.join("name"), name.as_bytes())?;
        if durable {
            sync_dir(&tmp)?;
        }
        if let Err(e) = std::fs::rename(&tmp, &dir) {
            let _ = std::fs::remove_dir_all(&tmp);
            if !dir.join("begin").is_file() {
                return Err(io_err(&dir, "open the remote put")(e));
            }
        } else {
            if durable {
                sync_dir(&staging)?;
            }
            // Made here, of `meta`: nothing to read back.
            return Ok(true);
        }
    }
    let (there, _) = s.staged(name, id, false)?;
    same_meta(name, id, &there, meta)?;
    Ok(false)
}

/// The storage directories of the claims of `chunks` in the remote put's
/// directory `dir` (a claim that does not read names none: the commit
/// refuses it).
fn claim_dirs(dir: &std::path::Path, chunks: impl Iterator<Item = u64>) -> BTreeSet<u32> {
    chunks
        .filter_map(|i| {
            let cp = dir.join(format!("c{i:020}"));
            let b = std::fs::read(&cp).ok()?;
            decode_claim(&b, &cp).ok().map(|(_, rc)| rc.dir)
        })
        .collect()
}

fn copy_share(
    s: &Store,
    (name, id, meta): (&str, &VersionId, &ArrayMeta),
    share: &WriterShare<'_>,
    (durable, opened): (bool, Option<bool>),
) -> Result<BTreeSet<u32>> {
    let (writer, claims, read) = (share.writer, share.claims, share.read);
    let durable = durable && s.os.durable();
    // The storage directories of this share's parts' files on the remote
    // (computed: every copier of a part of chunk `i` writes the same file).
    let part_dirs = share
        .parts
        .iter()
        .map(|p| s.os.dir_of(&chunk_file_id(id, p.chunk)));
    // A put made just now holds nothing of this writer: no mark, no
    // claim, nothing a killed copier left (not looked for).
    let fresh = match opened {
        Some(fresh) => fresh,
        None => ensure_put(s, name, meta, id, durable)?,
    };
    let dir = s.staging_dir(id);
    let mark = dir.join(format!("w{}", id_hex(&writer)));
    if !fresh && mark.exists() {
        let mut dirs = claim_dirs(&dir, claims.iter().map(|(i, _)| *i));
        dirs.extend(part_dirs);
        return Ok(dirs);
    }
    // What a copier of this share killed before left: the chunk file it
    // was writing, named by the claim's temporary name (by an intent, if
    // an older binary was copying).
    let me = id_hex(&writer);
    let left = if fresh {
        Vec::new()
    } else {
        std::fs::read_dir(&dir)
            .and_then(|d| d.collect::<std::io::Result<Vec<_>>>())
            .map_err(io_err(&dir, "list the remote put"))?
    };
    for e in left {
        let f = e.file_name().to_string_lossy().into_owned();
        if f.starts_with(&format!(".intent.{me}.")) {
            if let Ok(b) = std::fs::read(e.path()) {
                if let Ok(chunk) = <[u8; 16]>::try_from(b.as_slice()) {
                    remove_chunk_by_id(s, &chunk);
                }
            }
            let _ = std::fs::remove_file(e.path());
        } else if f.starts_with(&format!(".claim.{me}.")) {
            // It names the chunk file its copier was writing (a claim
            // placed too is checked below, and written again if its
            // chunk is gone).
            if let Ok(b) = std::fs::read(e.path()) {
                if let Ok((_, c)) = decode_claim(&b, &e.path()) {
                    let _ = std::fs::remove_file(s.os.chunk_path(c.dir, &c.chunk));
                }
            }
            let _ = std::fs::remove_file(e.path());
        }
    }
    let cb = meta.chunk_len();
    // The put's array was checked by `ensure_put` just now.
    let mut put = s.join_writer(name, id, writer, Some(meta))?;
    // The storage directories of the claims kept and written (known, not
    // read back).
    let mut dirs = BTreeSet::new();
    for (k, (i, c)) in claims.iter().enumerate() {
        let cp = dir.join(format!("c{i:020}"));
        let found = if fresh {
            Err(ErrorKind::NotFound.into())
        } else {
            std::fs::read(&cp)
        };
        match found {
            Ok(b) => {
                let there = decode_claim(&b, &cp).ok().map(|(_, rc)| rc);
                let good = there.is_some_and(|rc| {
                    rc.writer == writer
                        && rc.block_crc == c.block_crc
                        && std::fs::read(s.os.chunk_path(rc.dir, &rc.chunk)).is_ok_and(|f| {
                            crate::stored::check_stored(&f, cb, rc.block_crc).is_ok()
                        })
                });
                if good {
                    dirs.extend(there.map(|rc| rc.dir));
                    continue;
                }
                if let Some(rc) = there {
                    let _ = std::fs::remove_file(s.os.chunk_path(rc.dir, &rc.chunk));
                }
                std::fs::remove_file(&cp).map_err(io_err(&cp, "remove a stale claim"))?;
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&cp, "read claim")(e)),
        }
        let data = read(*i, c)?;
        put.write_chunk(&meta.coords(*i), &data)?;
        if k == 0 {
            crate::failpoint("objects.publish_mid_copy");
        }
    }
    // The parts, all written again if the copy was killed before the mark
    // (the same bytes at the same offsets, the same claims: a part's
    // number on the remote is its place in the share, as its writer's).
    for (k, p) in share.parts.iter().enumerate() {
        let data = (share.read_part)(p)?;
        put.write_chunk_part(p.chunk, &p.start, &p.count, &data)?;
        if k == 0 && claims.is_empty() {
            crate::failpoint("objects.publish_mid_copy");
        }
    }
    dirs.extend(put.written().iter().map(|(_, c)| c.dir));
    dirs.extend(part_dirs);
    if !durable {
        write_file(&mark, b"")?;
        return Ok(dirs);
    }
    // Durable before the mark: the node deletes its own copy once the
    // mark is there. Each chunk file's bytes were synced at its write;
    // here their names (storage directories) and the claims.
    for d in &dirs {
        s.os.sync_chunk_dir(*d)?;
    }
    let placed = claims.iter().map(|(i, _)| format!("c{i:020}"));
    let parts = (0u64..)
        .zip(share.parts)
        .map(|(n, p)| claim_name(p.chunk, &writer, n));
    for f in placed.chain(parts) {
        let p = dir.join(f);
        std::fs::File::open(&p)
            .and_then(|f| f.sync_all())
            .map_err(io_err(&p, "fsync claim"))?;
    }
    write_synced(&mark, b"")?;
    sync_dir(&dir)?;
    Ok(dirs)
}
