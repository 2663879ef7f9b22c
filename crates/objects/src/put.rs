//! PUT: whole arrays by one process, and chunked PUTs by many.
//!
//! A chunked PUT lives in `ROOT/staging/<id>/` until its commit:
//! - `begin`: the array record (id, type, shape, grid, attributes) and
//!   `name`, made under a temporary name and renamed into place, so a
//!   writer that finds the directory finds them whole;
//! - `c<chunk>`: one claim per chunk written, hard-linked into place
//!   (which fails if the name exists: two writers of one chunk are refused
//!   at the second write, not discovered at the commit);
//! - `w<writer>`: a writer's "finished" mark, written after its chunks and
//!   claims are durable; the commit refuses a claim whose writer has none.
//!
//! Each chunk is one object-layout chunk file (a random UUID, placed by
//! hash over the storage directories) holding the chunk's bytes followed
//! by their CRC-32C: exactly the Zarr `bytes` + `crc32c` encoding, so the
//! Zarr view links the file as it is. The commit writes the array record
//! as one more piece and publishes through the object layout's publish,
//! whose hard link cannot replace another version: two commits of one name
//! are two versions, the later the latest.

use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::path::PathBuf;

use paralog_backend::objstore::{Piece, Version};

use crate::error::{io_err, Error, Result};
use crate::grid::{for_each_chunk, Element};
use crate::input::{check_whole, chunk_index, same_array};
use crate::read::ArrayVersion;
use crate::record::{self, ArrayMeta, Attrs};
use crate::staging::{
    decode_claim, encode_claim, new_id, read_file, remove_staged_chunks, write_file, Claim,
};
use crate::store::{check_name, Store};
use crate::{id_hex, parse_id, VersionId};

/// The writers of a put that finished (their `w` marks).
pub(crate) type Writers = BTreeSet<[u8; 16]>;

/// How a commit runs: a direct commit's way, or the logged puts'
/// publisher's (crate::remote_put).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CommitRun {
    /// Remove the put's staging at the end. The publisher leaves it (it
    /// keeps the version from retention) for `finish_commit`, once its
    /// node-local put is retired: until then a retry may come.
    pub cleanup: bool,
    /// The caller found no version of this put just before (the publisher,
    /// before it copied the put): no retry check (2-3 requests or round
    /// trips on the remote).
    pub unpublished: bool,
}

impl CommitRun {
    pub(crate) const DIRECT: Self = Self {
        cleanup: true,
        unpublished: false,
    };
}

/// What a commit published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Committed {
    pub number: u64,
    pub id: VersionId,
}

/// One writer's handle on a chunked PUT (`begin` or `join`).
#[derive(Debug)]
pub struct Put<'a> {
    pub(crate) store: &'a Store,
    pub(crate) name: String,
    pub(crate) id: VersionId,
    pub(crate) meta: ArrayMeta,
    pub(crate) writer: [u8; 16],
    pub(crate) dir: PathBuf,
    /// The storage directories this writer put chunk files in: `finish`
    /// fsyncs each once (their names), not once per chunk.
    pub(crate) chunk_dirs: BTreeSet<u32>,
    /// This writer's claims (chunk index, claim): a logged put's share on
    /// another node is made of them (crate::share).
    written: Vec<(u64, Claim)>,
    /// This writer's part claims (crate::part_write), in the order
    /// written: a claim's place in it is its number. A logged put's share
    /// on another node carries them to the commit (crate::share).
    pub(crate) parts: Vec<crate::parts::PartClaim>,
}

impl Store {
    /// Start a chunked PUT of `name`: a new version id, to be shared with
    /// the other writers (they [`Store::join`] it).
    pub fn begin(&self, name: &str, meta: &ArrayMeta) -> Result<Put<'_>> {
        self.begin_id(name, meta, new_id())
    }

    /// [`Store::begin`] with a given id (a logged put published to the
    /// remote under its own id, so that "already published" is decidable).
    pub(crate) fn begin_id(&self, name: &str, meta: &ArrayMeta, id: VersionId) -> Result<Put<'_>> {
        check_name(name)?;
        meta.check(name)?;
        let staging = self.root().join("staging");
        std::fs::create_dir_all(&staging).map_err(io_err(&staging, "create staging directory"))?;
        // Nothing here is synced: a put becomes durable at its commit (a
        // direct one by its writers' `finish` and the publish, a logged
        // one by its local commit, which syncs these files). A crash of the
        // node before loses only a put that was not committed.
        let tmp = staging.join(format!(".begin.{}", id_hex(&id)));
        std::fs::create_dir(&tmp).map_err(io_err(&tmp, "create"))?;
        write_file(&tmp.join("begin"), &record::encode(&id, meta))?;
        write_file(&tmp.join("name"), name.as_bytes())?;
        let dir = self.staging_dir(&id);
        std::fs::rename(&tmp, &dir).map_err(io_err(&dir, "open the put"))?;
        // The begun put is this process's: not read back.
        Ok(Put {
            store: self,
            name: name.to_owned(),
            id,
            meta: meta.clone(),
            writer: new_id(),
            dir,
            chunk_dirs: BTreeSet::new(),
            written: Vec::new(),
            parts: Vec::new(),
        })
    }

    /// Join the chunked PUT `id` of `name` as one more writer.
    pub fn join(&self, name: &str, id: &VersionId) -> Result<Put<'_>> {
        self.join_writer(name, id, new_id(), None)
    }

    /// [`Store::join`] as the writer `writer` (a logged put's share copied
    /// to its remote keeps its writer's id, so that a copy resumed after a
    /// crash knows its own claims); `known`: the put's array, which the
    /// caller has just checked (not read again).
    pub(crate) fn join_writer(
        &self,
        name: &str,
        id: &VersionId,
        writer: [u8; 16],
        known: Option<&ArrayMeta>,
    ) -> Result<Put<'_>> {
        let (meta, dir) = match known {
            Some(m) => (m.clone(), self.staging_dir(id)),
            None => self.staged(name, id, false)?,
        };
        Ok(Put {
            store: self,
            name: name.to_owned(),
            id: *id,
            meta,
            writer,
            dir,
            chunk_dirs: BTreeSet::new(),
            written: Vec::new(),
            parts: Vec::new(),
        })
    }

    /// [`Store::join`], refusing a writer whose idea of the array (type,
    /// shape, grid) differs from the put's.
    pub fn join_as(&self, name: &str, id: &VersionId, meta: &ArrayMeta) -> Result<Put<'_>> {
        let put = self.join(name, id)?;
        same_array(name, id, &put.meta, meta)?;
        Ok(put)
    }

    /// The staged put's array and directory, checked against `name`;
    /// `sync`: its `begin` and `name` made durable too (a logged commit).
    pub(crate) fn staged(
        &self,
        name: &str,
        id: &VersionId,
        sync: bool,
    ) -> Result<(ArrayMeta, PathBuf)> {
        check_name(name)?;
        let dir = self.staging_dir(id);
        let not_open = || Error::Put {
            name: name.to_owned(),
            id: id_hex(id),
            why: "no such put in progress (never begun, committed or aborted)".into(),
        };
        let begin = dir.join("begin");
        let bytes = match read_file(&begin, sync) {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::NotFound => return Err(not_open()),
            Err(e) => return Err(io_err(&begin, "read")(e)),
        };
        let name_file = dir.join("name");
        let staged_name = read_file(&name_file, sync).map_err(io_err(&name_file, "read"))?;
        if staged_name != name.as_bytes() {
            return Err(Error::Put {
                name: name.to_owned(),
                id: id_hex(id),
                why: format!("the put is of {:?}", String::from_utf8_lossy(&staged_name)),
            });
        }
        let (rid, meta) = record::decode(&bytes, &begin)?;
        if &rid != id {
            return Err(Error::Damaged {
                path: begin,
                offset: 16,
                what: "the record's id is not its directory's".into(),
            });
        }
        Ok((meta, dir))
    }

    /// Publish the chunked PUT `id` of `name` as its next version, once
    /// every writer has finished: refused, and nothing published, if a
    /// chunk is missing or its writer did not finish. A commit retried
    /// after it published returns the same version.
    pub fn commit(&self, name: &str, id: &VersionId) -> Result<Committed> {
        let (committed, views) = self.commit_views_later(name, id, CommitRun::DIRECT)?;
        if let Some(av) = views {
            self.views_after_commit(av);
        }
        Ok(committed)
    }

    /// [`Store::commit`], leaving the views to the caller: the version
    /// whose views are to be made (`None`: dropped by retention since).
    /// The logged puts' publisher makes them while it copies the next put.
    pub(crate) fn commit_views_later(
        &self,
        name: &str,
        id: &VersionId,
        run: CommitRun,
    ) -> Result<(Committed, Option<ArrayVersion>)> {
        // Whether an earlier commit of this put may have published: its
        // directory is gone, or it got as far as its array record (or, an
        // older binary's, its `publishing` mark). Only then are the
        // versions' records searched for the id (one read per version
        // kept: a plain directory keeps them all).
        let staging = self.staging_dir(id);
        let maybe = !run.unpublished
            && (!staging.join("begin").is_file() || self.commit_may_have_published(id));
        if let Some(number) = maybe
            .then(|| self.published(name, id))
            .transpose()?
            .flatten()
        {
            if run.cleanup {
                self.finish_commit(name, id);
            }
            // The views a crash after the publish left out (or made).
            let av = match self.array(name, Some(number)) {
                Ok(av) => Some(av),
                Err(Error::NotFound { .. }) => None, // dropped by retention since
                Err(e) => return Err(e),
            };
            return Ok((Committed { number, id: *id }, av));
        }
        let (meta, claims) = self.complete(name, id, false)?;
        self.publish_claims(name, id, meta, &claims, run)
    }

    /// The rest of a commit, from the put's checked claims (one a chunk,
    /// in chunk order, their chunk files durable): the array record, then
    /// the version published. Shared by [`Store::commit_views_later`] and
    /// the logged puts' publisher's copy without staging
    /// (crate::remote_put).
    pub(crate) fn publish_claims(
        &self,
        name: &str,
        id: &VersionId,
        meta: ArrayMeta,
        claims: &[Claim],
        run: CommitRun,
    ) -> Result<(Committed, Option<ArrayVersion>)> {
        let (n, cb) = (meta.n_chunks(), meta.chunk_len());
        // What the version needs durable before its record is linked: its
        // chunk files with their names (each writer's `finish`) and the
        // array record, whose chunk file is named by the put's id: found
        // by that id alone, it is also the mark that this commit may have
        // published, so that a commit retried after a crash of the node
        // finds the version by its id instead of publishing it twice, and
        // the abort (or gc) that drops a put whose commit was killed
        // before its publish removes it. Its directory's fsync makes both
        // durable at once. The claims and marks are read from the page
        // cache and need no fsync of their own.
        let head = record::encode(id, &meta);
        let mut w = self.os.writer_with_id_in(*id, Store::ARRAY_RECORD_DIR)?;
        let hp = w.add(n * cb, &head)?;
        w.finish_file()?;
        self.os.sync_chunk_dir(hp.dir)?;
        let mut pieces: Vec<Piece> = claims
            .iter()
            .enumerate()
            .map(|(i, c)| crate::stored::chunk_piece(i as u64, cb, c, c.dir))
            .collect();
        pieces.push(hp);
        let mut v = Version {
            number: 0,
            size: n * cb + head.len() as u64,
            deleted: false,
            epoch: Default::default(),
            origin: *id,
            name: Vec::new(),
            pieces,
        };
        crate::failpoint("objects.before_commit");
        let number = match self.publish_version(name, v.clone()) {
            Ok(n) => n,
            // The publish's retention step can fail after the link (another
            // publisher's retention removed a record it was reading): the
            // version is published all the same, and found by its id.
            Err(e) => self.published(name, id)?.ok_or(e)?,
        };
        crate::failpoint("objects.after_commit");
        // Published: the staging directory is only bookkeeping now (a crash
        // here leaves it, and a retried commit finds the version by its id:
        // retention keeps it while the directory is there).
        if run.cleanup {
            self.finish_commit(name, id);
        }
        // The views, from what this commit knows (nothing read back),
        // after the version is durable; never failing the commit.
        (v.number, v.name) = (number, name.as_bytes().to_vec());
        let av = ArrayVersion {
            name: name.to_owned(),
            number,
            id: *id,
            meta,
            record: v,
        };
        Ok((Committed { number, id: *id }, Some(av)))
    }

    /// The checks of a commit: the put's array and each chunk's claim,
    /// every chunk claimed by a writer that finished. Publishes nothing.
    /// `sync`: every file read is made durable too, on the descriptor it
    /// was read from (a logged commit: its put must outlive the node).
    pub(crate) fn complete(
        &self,
        name: &str,
        id: &VersionId,
        sync: bool,
    ) -> Result<(ArrayMeta, Vec<Claim>)> {
        let (meta, claims, finished) = self.claims(name, id, sync)?;
        let claims = crate::staging::complete_claims(claims, &finished, &meta).map_err(|why| {
            Error::Put {
                name: name.to_owned(),
                id: id_hex(id),
                why,
            }
        })?;
        Ok((meta, claims))
    }

    /// The put's array, the claims found (by chunk index) and the writers
    /// that finished, each claim checked to be where it says; the chunks
    /// written in parts put together ([`Store::compose_parts`]).
    pub(crate) fn claims(
        &self,
        name: &str,
        id: &VersionId,
        sync: bool,
    ) -> Result<(ArrayMeta, Vec<Option<Claim>>, Writers)> {
        let (meta, mut claims, finished, parts) = self.staged_claims(name, id, sync)?;
        self.compose_parts(name, id, &meta, &mut claims, &finished, parts)?;
        Ok((meta, claims, finished))
    }

    /// [`Store::claims`] with the part claims as found, not put together:
    /// a logged put's local commit, whose other parts may be on other
    /// nodes, and its publisher's look at the remote put before every
    /// node's parts are there.
    pub(crate) fn staged_claims(
        &self,
        name: &str,
        id: &VersionId,
        sync: bool,
    ) -> Result<(ArrayMeta, Vec<Option<Claim>>, Writers, crate::parts::Found)> {
        let (meta, dir) = self.staged(name, id, sync)?;
        let n = meta.n_chunks();
        let mut claims: Vec<Option<Claim>> = (0..n).map(|_| None).collect();
        let mut finished = BTreeSet::new();
        let mut claim_files = Vec::new();
        let mut parts = crate::parts::Found::default();
        for e in std::fs::read_dir(&dir).map_err(io_err(&dir, "list the put"))? {
            let e = e.map_err(io_err(&dir, "list the put"))?;
            let f = e.file_name().to_string_lossy().into_owned();
            if let Some(w) = f.strip_prefix('w').and_then(parse_id) {
                finished.insert(w);
            } else if f.starts_with('c') {
                claim_files.push(e.path());
            } else if crate::parts::claim_chunk(&f).is_some() {
                let path = e.path();
                let bytes = read_file(&path, sync).map_err(io_err(&path, "read part claim"))?;
                parts.add(path, &f, &bytes, n)?;
            }
        }
        for path in claim_files {
            let bytes = read_file(&path, sync).map_err(io_err(&path, "read claim"))?;
            let (i, c) = decode_claim(&bytes, &path)?;
            if i >= n || path.file_name() != Some(format!("c{i:020}").as_ref()) {
                return Err(Error::Damaged {
                    path,
                    offset: 8,
                    what: format!("claims chunk {i} of {n}"),
                });
            }
            claims[i as usize] = Some(c);
        }
        Ok((meta, claims, finished, parts))
    }

    /// Give up a chunked PUT: its chunks and staging directory are removed.
    pub fn abort(&self, name: &str, id: &VersionId) -> Result<()> {
        let (_, dir) = self.staged(name, id, false)?;
        if let Some(n) = self.published(name, id)? {
            // A crash after the publish left the directory: the version
            // uses these chunks.
            return Err(Error::Put {
                name: name.to_owned(),
                id: id_hex(id),
                why: format!("already published as version {n}: nothing to abort"),
            });
        }
        remove_staged_chunks(self, &dir);
        std::fs::remove_dir_all(&dir).map_err(io_err(&dir, "remove the put"))
    }

    /// PUT a whole array (row-major little-endian bytes) by one process.
    pub fn put(&self, name: &str, meta: &ArrayMeta, data: &[u8]) -> Result<Committed> {
        check_whole(name, meta, data)?;
        let mut put = self.begin(name, meta)?;
        if let Err(e) = put.write_whole(data) {
            let _ = self.abort(name, &put.id);
            return Err(e);
        }
        put.commit()
    }

    /// [`Store::put`] from typed values.
    pub fn put_as<T: Element>(
        &self,
        name: &str,
        shape: &[u64],
        chunks: &[u64],
        attrs: Attrs,
        values: &[T],
    ) -> Result<Committed> {
        let mut bytes = Vec::new();
        T::write_le(values, &mut bytes);
        self.put(
            name,
            &ArrayMeta::new(T::DTYPE, shape, chunks).with_attrs(attrs),
            &bytes,
        )
    }
}

impl Put<'_> {
    pub fn id(&self) -> VersionId {
        self.id
    }

    pub fn meta(&self) -> &ArrayMeta {
        &self.meta
    }

    pub(crate) fn writer(&self) -> [u8; 16] {
        self.writer
    }

    pub(crate) fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// This writer's claims so far, in the order written.
    pub(crate) fn written(&self) -> &[(u64, Claim)] {
        &self.written
    }

    /// This writer's part claims so far, in the order written.
    pub(crate) fn written_parts(&self) -> &[crate::parts::PartClaim] {
        &self.parts
    }

    /// Write one whole chunk (`chunk_len` bytes, row-major little-endian;
    /// an edge chunk with its padding) at grid coordinates `coords`; durable
    /// on return. Refused: a chunk outside the grid, a buffer of another
    /// size, a chunk another writer of this put already wrote.
    pub fn write_chunk(&mut self, coords: &[u64], data: &[u8]) -> Result<()> {
        let i = chunk_index(&self.meta, &self.name, coords, data)?;
        let (block, crc) = crate::stored::stored_block(data);
        let mut w = self.store.os.writer()?;
        // The claim (and so the version) records the CRC-32C of the chunk's
        // bytes, not the block's (the residue, the same for every chunk):
        // it names which bytes this chunk is.
        let claim = Claim {
            chunk: w.id(),
            dir: w.dir(),
            block_crc: crc,
            writer: self.writer,
        };
        // The claim under its temporary name before any byte goes into the
        // chunk file: it names the file, so that abort and gc find it if
        // this writer dies before the claim is placed (the only window left
        // is between the file's creation and this line: an empty orphan,
        // which `recover --gc` collects). Not synced: a direct commit reads
        // claims from the page cache, and a logged commit records them.
        let tmp = self
            .dir
            .join(format!(".claim.{}.{i}", id_hex(&self.writer)));
        if let Err(e) = std::fs::write(&tmp, encode_claim(i, &claim)) {
            let _ = std::fs::remove_file(w.path());
            return Err(if e.kind() == ErrorKind::NotFound {
                Error::Put {
                    name: self.name.clone(),
                    id: id_hex(&self.id),
                    why: "no such put in progress (committed or aborted)".into(),
                }
            } else {
                io_err(&tmp, "write")(e)
            });
        }
        crate::failpoint("objects.claim_staged");
        let p = w.add(i * self.meta.chunk_len(), &block)?;
        // The bytes now (the file is open); its name at `finish`, once for
        // every chunk this writer put in that storage directory.
        w.finish_file()?;
        self.chunk_dirs.insert(p.dir);
        crate::failpoint("objects.mid_chunk");
        let to = self.dir.join(format!("c{i:020}"));
        let placed = std::fs::hard_link(&tmp, &to).map_err(io_err(&to, "claim chunk"));
        if placed.is_err() {
            let _ = std::fs::remove_file(self.store.os.chunk_path(p.dir, &p.chunk));
        }
        // Placed (or its chunk removed): the temporary name goes.
        let _ = std::fs::remove_file(&tmp);
        if placed.is_ok() {
            self.written.push((i, claim));
        }
        if let Err(e) = placed {
            return Err(match e {
                Error::Io { ref error, .. } if error.kind() == ErrorKind::AlreadyExists => {
                    Error::Overlap {
                        name: self.name.clone(),
                        id: id_hex(&self.id),
                        chunk: coords.to_vec(),
                    }
                }
                Error::Io { ref error, .. } if error.kind() == ErrorKind::NotFound => Error::Put {
                    name: self.name.clone(),
                    id: id_hex(&self.id),
                    why: "the put was committed or aborted while this writer wrote".into(),
                },
                e => e,
            });
        }
        Ok(())
    }

    /// Write every chunk of the whole array `data` (row-major bytes; edge
    /// chunks padded with zeros), as one writer.
    pub(crate) fn write_whole(&mut self, data: &[u8]) -> Result<()> {
        let meta = self.meta.clone();
        for_each_chunk(&meta, data, |c, chunk| self.write_chunk(c, chunk))
    }

    /// [`Put::write_chunk`] from typed values.
    pub fn write_chunk_as<T: Element>(&mut self, coords: &[u64], values: &[T]) -> Result<()> {
        if T::DTYPE != self.meta.dtype {
            return Err(Error::Invalid {
                name: self.name.clone(),
                why: format!(
                    "the put holds {}, not {}",
                    self.meta.dtype.name(),
                    T::DTYPE.name()
                ),
            });
        }
        let mut bytes = Vec::new();
        T::write_le(values, &mut bytes);
        self.write_chunk(coords, &bytes)
    }

    /// This writer is done: the names of its chunk files made durable
    /// (their bytes were at each write), then its mark. A mark that
    /// outlives a crash of the node therefore means durable chunks; the
    /// claims are checked by the commit (a lost or torn one is refused).
    pub fn finish(self) -> Result<()> {
        for d in &self.chunk_dirs {
            self.store.os.sync_chunk_dir(*d)?;
        }
        write_file(&self.dir.join(format!("w{}", id_hex(&self.writer))), b"")
    }

    /// Finish this writer and commit (the one-writer case, or the last one).
    pub fn commit(self) -> Result<Committed> {
        let (store, name, id) = (self.store, self.name.clone(), self.id);
        self.finish()?;
        store.commit(&name, &id)
    }
}
