//! A chunked put on S3 (crates/objects `s3store`, docs/objects.md "S3"):
//! begin, join, each writer's chunks and finished mark, the commit that
//! checks the staging objects and publishes, abort, and the whole put by
//! one process. The keys are `staging/<id>/begin`, `name`, `c<chunk>`
//! (claims, created with `If-None-Match: *`: a second writer of a chunk is
//! refused) and `w<writer>` (docs/objects-format.md); the array record's
//! object, `data/<id>`, is named by the put's id.

use paralog_backend::objstore::{Piece, Version};

use crate::error::{Error, Result};
use crate::grid::for_each_chunk;
use crate::input::chunk_index;
use crate::put::{CommitRun, Committed};
use crate::read::checked_array;
use crate::record::{self, ArrayMeta};
use crate::s3store::S3Store;
use crate::staging::{decode_claim, encode_claim, new_id, Claim};
use crate::store::check_name;
use crate::{id_hex, parse_id, VersionId};

/// The key of the array record's object a commit of the put `id` writes
/// (docs/objects-format.md "On S3"). Older binaries named it by a random
/// UUID, and their `staging/<id>/head.<uuid>` named that.
pub(crate) fn array_record_key(id: &VersionId) -> String {
    format!("data/{}", id_hex(id))
}

/// One writer of a chunked put on S3.
#[derive(Debug)]
pub struct S3Put<'a> {
    store: &'a S3Store,
    name: String,
    id: VersionId,
    meta: ArrayMeta,
    writer: [u8; 16],
    /// The next part claim's number (crate::s3parts).
    parts: u64,
}

impl S3Store {
    /// Start a chunked put of `name`; its id is shared with the writers.
    pub fn begin(&self, name: &str, meta: &ArrayMeta) -> Result<S3Put<'_>> {
        check_name(name)?;
        meta.check(name)?;
        let id = new_id();
        let dir = format!("staging/{}", id_hex(&id));
        self.put_obj(&format!("{dir}/name"), name.as_bytes().to_vec(), true)?;
        // `begin` last: a put is open once it exists.
        self.put_obj(&format!("{dir}/begin"), record::encode(&id, meta), true)?;
        self.join(name, &id)
    }

    /// Join the chunked put `id` of `name` as one more writer.
    pub fn join(&self, name: &str, id: &VersionId) -> Result<S3Put<'_>> {
        self.join_writer(name, id, new_id())
    }

    /// [`S3Store::join`] as the writer `writer` (a logged put's share,
    /// copied under its writer's own id: crate::remote_put).
    pub(crate) fn join_writer(
        &self,
        name: &str,
        id: &VersionId,
        writer: [u8; 16],
    ) -> Result<S3Put<'_>> {
        let meta = self.staged(name, id)?;
        Ok(self.writer_of(name, id, writer, meta))
    }

    /// The writer `writer` of the put `id`, whose array `meta` the caller
    /// read or checked (crate::s3share: a remote put made or checked once).
    pub(crate) fn writer_of(
        &self,
        name: &str,
        id: &VersionId,
        writer: [u8; 16],
        meta: ArrayMeta,
    ) -> S3Put<'_> {
        S3Put {
            store: self,
            name: name.to_owned(),
            id: *id,
            meta,
            writer,
            parts: 0,
        }
    }

    /// [`S3Store::join`], refusing a writer whose idea of the array (type,
    /// shape, grid) differs from the put's.
    pub fn join_as(&self, name: &str, id: &VersionId, meta: &ArrayMeta) -> Result<S3Put<'_>> {
        let put = self.join(name, id)?;
        crate::input::same_array(name, id, &put.meta, meta)?;
        Ok(put)
    }

    pub(crate) fn staged(&self, name: &str, id: &VersionId) -> Result<ArrayMeta> {
        let begin = self.get(&format!("staging/{}/begin", id_hex(id)))?;
        self.staged_from(name, id, begin)
    }

    /// [`S3Store::staged`] from the put's `begin` as the caller read it
    /// (`None`: not there).
    fn staged_from(&self, name: &str, id: &VersionId, begin: Option<Vec<u8>>) -> Result<ArrayMeta> {
        check_name(name)?;
        let dir = format!("staging/{}", id_hex(id));
        let perr = |why: String| Error::Put {
            name: name.to_owned(),
            id: id_hex(id),
            why,
        };
        let Some(b) = begin else {
            return Err(perr(
                "no such put in progress (never begun, committed or aborted)".into(),
            ));
        };
        let staged = self.get(&format!("{dir}/name"))?.unwrap_or_default();
        if staged != name.as_bytes() {
            return Err(perr(format!(
                "the put is of {:?}",
                String::from_utf8_lossy(&staged)
            )));
        }
        let at = self.shown(&format!("{dir}/begin"));
        let (rid, meta) = record::decode(&b, &at)?;
        if &rid != id {
            return Err(Error::Damaged {
                path: at,
                offset: 16,
                what: "the record's id is not its put's".into(),
            });
        }
        Ok(meta)
    }

    /// The version a put published, if it did (found by its id): every
    /// kept version record of the name read, one GET each.
    pub(crate) fn published(&self, name: &str, id: &VersionId) -> Result<Option<u64>> {
        Ok(self
            .versions(name)?
            .into_iter()
            .find(|v| &v.id == id && !v.deleted)
            .map(|v| v.number))
    }

    /// Whether a commit of the put `id` got as far as its publish: it
    /// wrote the array record's object named by the put's id (or, an
    /// older binary's, its `publishing` mark). The array record is part of
    /// the version, so it stays while the version does (retention removes
    /// both): without either, no version of this put exists. One HEAD,
    /// two when the object is not there.
    pub(crate) fn commit_may_have_published(&self, id: &VersionId) -> Result<bool> {
        Ok(self.exists(&array_record_key(id))?
            || self.exists(&format!("staging/{}/publishing", id_hex(id)))?)
    }

    /// [`S3Store::published`], searched only when a commit of the put may
    /// have published: the logged puts' publisher asks it before every
    /// publish, and the search reads every version the name keeps (all of
    /// them unless `keep=K`).
    pub(crate) fn published_by_commit(&self, name: &str, id: &VersionId) -> Result<Option<u64>> {
        if !self.commit_may_have_published(id)? {
            return Ok(None);
        }
        self.published(name, id)
    }

    /// Publish the chunked put `id` of `name` once every writer finished;
    /// nothing is published if a chunk is missing or its writer did not
    /// finish. A commit retried after it published returns that version.
    pub fn commit(&self, name: &str, id: &VersionId) -> Result<Committed> {
        self.commit_with(name, id, CommitRun::DIRECT)
    }

    /// [`S3Store::commit`], run as `run` says (the logged puts'
    /// publisher's way: staging left for [`S3Store::finish_commit`]).
    pub(crate) fn commit_with(
        &self,
        name: &str,
        id: &VersionId,
        run: CommitRun,
    ) -> Result<Committed> {
        let dir = format!("staging/{}", id_hex(id));
        // Whether an earlier commit of this put may have published: its
        // `begin` is gone, or it got as far as its array record (or, an
        // older binary's, its `publishing` mark): a commit killed after the
        // publish, before its cleanup, left `begin`, and without a mark the
        // retry published the put again as a second version. Only then are
        // the versions searched for the id.
        let begin = self.get(&format!("{dir}/begin"))?;
        let maybe = !run.unpublished && (begin.is_none() || self.commit_may_have_published(id)?);
        if maybe {
            if let Some(number) = self.published(name, id)? {
                // Killed after its publish: its view may not be made yet
                // (none if retention dropped the version since).
                match self.array(name, Some(number)) {
                    Ok(av) => self.view_after_commit(&av),
                    Err(Error::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
                if run.cleanup {
                    self.finish_commit(name, id);
                }
                return Ok(Committed { number, id: *id });
            }
        }
        let meta = self.staged_from(name, id, begin)?;
        let perr = |why: String| Error::Put {
            name: name.to_owned(),
            id: id_hex(id),
            why,
        };
        let (n, cb) = (meta.n_chunks(), meta.chunk_len());
        let keys = self
            .be
            .list_objects(&format!("{dir}/"))
            .map_err(|e| self.err(e))?;
        let mut finished = std::collections::BTreeSet::new();
        let mut claims: Vec<Option<Claim>> = (0..n).map(|_| None).collect();
        let mut parts = crate::parts::Found::default();
        for k in &keys {
            let f = &k[dir.len() + 1..];
            if let Some(w) = f.strip_prefix('w').and_then(parse_id) {
                finished.insert(w);
            } else if f.starts_with('c') {
                let at = self.shown(k);
                let b = self.get(k)?.unwrap_or_default();
                let (i, c) = decode_claim(&b, &at)?;
                if i >= n || f != format!("c{i:020}") {
                    return Err(Error::Damaged {
                        path: at,
                        offset: 8,
                        what: format!("claims chunk {i} of {n}"),
                    });
                }
                claims[i as usize] = Some(c);
            } else if crate::parts::claim_chunk(f).is_some() {
                let b = self.get(k)?.unwrap_or_default();
                parts.add(self.shown(k), f, &b, n)?;
            }
        }
        let put = (name, id, &meta);
        let planned = parts.plan(put, &mut claims, &finished)?;
        let claims = crate::staging::complete_claims(claims, &finished, &meta).map_err(perr)?;
        self.compose_parts(id, &meta, planned)?;
        // The array record's object is named by the put's id: written
        // before the publish, it is the mark that this commit may have
        // published (a retry, or the publisher's question, then searches
        // the versions for the id), a retry writes the same bytes to the
        // same key instead of leaving a second object, and abort and gc
        // find it by the id.
        let head = record::encode(id, &meta);
        self.put_obj(&array_record_key(id), head.clone(), false)?;
        let mut pieces: Vec<Piece> = claims
            .into_iter()
            .enumerate()
            .map(|(i, c)| crate::stored::chunk_piece(i as u64, cb, &c, 0))
            .collect();
        pieces.push(Piece {
            file_off: n * cb,
            len: head.len() as u64,
            chunk: *id,
            dir: 0,
            block_off: 0,
            block_len: head.len() as u64,
            block_crc: paralog_checksum::crc32c(&head),
            skip: 0,
        });
        let v = Version {
            number: 0,
            size: n * cb + head.len() as u64,
            deleted: false,
            epoch: Default::default(),
            origin: *id,
            name: Vec::new(),
            pieces,
        };
        crate::failpoint("objects.before_commit");
        let number = self.publish(name, v.clone())?;
        crate::failpoint("objects.after_commit");
        let mut rec = v;
        rec.number = number;
        rec.name = name.as_bytes().to_vec();
        let at = self.shown(&crate::s3store::version_key(name, number));
        self.view_after_commit(&checked_array(name, rec, &head, at)?);
        // Published: the staging objects are bookkeeping only now (left,
        // they keep the version from retention for a retried commit).
        if run.cleanup {
            self.finish_commit(name, id);
        }
        Ok(Committed { number, id: *id })
    }

    /// The end of a published put's commit: its staging objects removed,
    /// then the retention its publish (or a later one) held back while
    /// they were there. Never an error: the version is published; what is
    /// left, `obj gc` removes (and the next publish's retention drops).
    pub(crate) fn finish_commit(&self, name: &str, id: &VersionId) {
        let _ = self.remove_staging(&format!("staging/{}", id_hex(id)));
        let _ = self.retain(name);
    }

    /// Whether the put `id`'s commit has not finished: its `begin` is
    /// still there (removed first by [`S3Store::finish_commit`]).
    /// Retention keeps such a put's version past the last K, so that a
    /// retried commit finds it by its id (docs/objects.md "Crashes").
    pub(crate) fn commit_unfinished(&self, id: &VersionId) -> Result<bool> {
        self.exists(&format!("staging/{}/begin", id_hex(id)))
    }

    /// The Zarr view of a version just committed (docs/objects.md "S3"):
    /// never an error of the commit, whose version is published; the
    /// reason goes to standard error (this library runs inside
    /// application ranks, which have no other log), and `paralog obj view`
    /// makes it later. A version retention dropped meanwhile needs none.
    fn view_after_commit(&self, av: &crate::ArrayVersion) {
        match self.make_view(av) {
            Ok(_) | Err(Error::NotFound { .. }) => {}
            Err(e) => eprintln!(
                "paralog objects: {} version {}: the Zarr view was not made: {e}; `paralog obj view` makes it",
                av.name, av.number
            ),
        }
    }

    /// Remove a published put's staging objects: `begin` first (a retried
    /// commit then finds the version by its id), an older binary's
    /// `publishing` last (until then, the mark says so too), if listed.
    fn remove_staging(&self, dir: &str) -> Result<()> {
        let _ = self.be.delete_object(&format!("{dir}/begin"));
        let publishing = format!("{dir}/publishing");
        let mut marked = false;
        for k in self
            .be
            .list_objects(&format!("{dir}/"))
            .map_err(|e| self.err(e))?
        {
            if k == publishing {
                marked = true;
            } else {
                let _ = self.be.delete_object(&k);
            }
        }
        if marked {
            let _ = self.be.delete_object(&publishing);
        }
        Ok(())
    }

    /// Give up a chunked put: its chunk objects and staging objects removed.
    pub fn abort(&self, name: &str, id: &VersionId) -> Result<()> {
        self.staged(name, id)?;
        if let Some(n) = self.published_by_commit(name, id)? {
            return Err(Error::Put {
                name: name.to_owned(),
                id: id_hex(id),
                why: format!("already published as version {n}: nothing to abort"),
            });
        }
        let dir = format!("staging/{}", id_hex(id));
        let _ = self.be.delete_object(&format!("{dir}/begin"));
        // The array record of a commit that died before its publish.
        let _ = self.be.delete_object(&array_record_key(id));
        for k in self
            .be
            .list_objects(&format!("{dir}/"))
            .map_err(|e| self.err(e))?
        {
            let f = &k[dir.len() + 1..];
            if f.starts_with('c') {
                if let Some(b) = self.get(&k)? {
                    if let Ok((_, c)) = decode_claim(&b, &self.shown(&k)) {
                        let _ = self.be.delete_object(&format!("data/{}", id_hex(&c.chunk)));
                    }
                }
            } else if let Some(i) = crate::parts::claim_chunk(f) {
                // The chunk a commit that died before its publish put
                // together from its parts (the parts are staging objects).
                let chunk = crate::parts::chunk_file_id(id, i);
                let _ = self.be.delete_object(&format!("data/{}", id_hex(&chunk)));
            } else if let Some(head) = f.strip_prefix("head.").and_then(parse_id) {
                // An older binary's commit that died before its publish:
                // its array record, at a random key this names.
                let _ = self.be.delete_object(&format!("data/{}", id_hex(&head)));
            }
            let _ = self.be.delete_object(&k);
        }
        Ok(())
    }

    /// PUT a whole array (row-major little-endian bytes) by one process.
    pub fn put(&self, name: &str, meta: &ArrayMeta, data: &[u8]) -> Result<Committed> {
        crate::input::check_whole(name, meta, data)?;
        let mut put = self.begin(name, meta)?;
        let id = put.id;
        let written = put.write_whole(data).and_then(|()| put.finish());
        if let Err(e) = written {
            let _ = self.abort(name, &id);
            return Err(e);
        }
        self.commit(name, &id)
    }
}

impl S3Put<'_> {
    pub fn id(&self) -> VersionId {
        self.id
    }

    pub fn meta(&self) -> &ArrayMeta {
        &self.meta
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn writer(&self) -> [u8; 16] {
        self.writer
    }

    pub(crate) fn store(&self) -> &S3Store {
        self.store
    }

    /// The number of this writer's next part claim.
    pub(crate) fn next_part(&mut self) -> u64 {
        self.parts += 1;
        self.parts - 1
    }

    /// Write one whole chunk at grid coordinates `coords`: its object,
    /// then its claim (create-only: another writer's claim refuses it).
    pub fn write_chunk(&mut self, coords: &[u64], data: &[u8]) -> Result<()> {
        let i = chunk_index(&self.meta, &self.name, coords, data)?;
        let dir = format!("staging/{}", id_hex(&self.id));
        let (block, crc) = crate::stored::stored_block(data);
        let claim = Claim {
            chunk: new_id(),
            dir: 0,
            block_crc: crc,
            writer: self.writer,
        };
        let s = self.store;
        let data_key = format!("data/{}", id_hex(&claim.chunk));
        s.put_obj(&data_key, block, true)?;
        crate::failpoint("objects.mid_chunk");
        let key = format!("{dir}/c{i:020}");
        let mine = encode_claim(i, &claim);
        // A 412 can answer our own claim: the client retried a PUT whose
        // answer was lost after the server made it. The claim names a chunk
        // object of ours (a new UUID), so equal bytes are ours.
        let placed =
            s.put_obj(&key, mine.clone(), true)? || s.get(&key)?.as_deref() == Some(&mine[..]);
        if !placed {
            let _ = s.be.delete_object(&data_key);
            return Err(Error::Overlap {
                name: self.name.clone(),
                id: id_hex(&self.id),
                chunk: coords.to_vec(),
            });
        }
        Ok(())
    }

    /// This writer is done: its chunks may be committed.
    pub fn finish(&self) -> Result<()> {
        let dir = format!("staging/{}", id_hex(&self.id));
        self.store.put_obj(
            &format!("{dir}/w{}", id_hex(&self.writer)),
            Vec::new(),
            false,
        )?;
        Ok(())
    }

    /// Every chunk of the whole array `data`, edge chunks zero-padded.
    fn write_whole(&mut self, data: &[u8]) -> Result<()> {
        let meta = self.meta.clone();
        for_each_chunk(&meta, data, |c, chunk| self.write_chunk(c, chunk))
    }
}
