//! Array objects on S3 (`s3://bucket/prefix`, docs/objects.md "S3"): the
//! same version record and array record as the object layout, with S3
//! objects in place of files:
//! - `meta/.store`: the mark `paralog obj init` puts, so that a URL of an
//!   object below finds its store (as `meta/` does on a directory);
//! - `data/<uuid>`: one chunk's bytes and their CRC-32C (the Zarr
//!   `bytes` + `crc32c` encoding), or a version's array record;
//! - `meta/<name>/v<n>`: version records, each created by a PUT with
//!   `If-None-Match: *`, which fails (412) if `v<n>` exists: two commits
//!   of one name never replace each other, the loser takes the next number;
//! - `staging/<id>/begin`, `name`, `c<chunk>` (claims, created with
//!   `If-None-Match: *` too: a second writer of a chunk is refused),
//!   `w<writer>` (finished marks): a chunked put until its commit.
//!
//! Every version is kept (no retention on S3 yet); a chunk is verified
//! against the version record's block CRC-32C before any byte is used.

use std::path::PathBuf;

use paralog_backend::objstore::{Piece, Version};
use paralog_backend::{BackendError, S3Url};
use paralog_s3::S3Backend;

use crate::error::{Error, Result};
use crate::grid::{copy_box, for_each_index};
use crate::put::{chunk_index, Committed};
use crate::read::{checked_array, ArrayVersion};
use crate::record::{self, ArrayMeta, MAGIC};
use crate::staging::{decode_claim, encode_claim, new_id, Claim};
use crate::store::{check_name, VersionInfo};
use crate::{id_hex, parse_id, VersionId};

const STORE_MARK: &str = "meta/.store";

/// An array store on S3.
#[derive(Debug)]
pub struct S3Store {
    be: S3Backend,
    url: S3Url,
}

/// One writer of a chunked put on S3.
#[derive(Debug)]
pub struct S3Put<'a> {
    store: &'a S3Store,
    name: String,
    id: VersionId,
    meta: ArrayMeta,
    writer: [u8; 16],
}

fn version_key(name: &str, n: u64) -> String {
    format!("meta/{name}/v{n:010}")
}

fn is_version_file(f: &str) -> Option<u64> {
    (f.len() == 11 && f.starts_with('v') && f[1..].bytes().all(|b| b.is_ascii_digit()))
        .then(|| f[1..].parse().ok())
        .flatten()
}

impl S3Store {
    /// The store at `url` (it must have been made by [`S3Store::init`]).
    pub fn open(url: &S3Url) -> Result<S3Store> {
        let s = S3Store::connect(url)?;
        if s.be.get_object(STORE_MARK).map_err(|e| s.err(e))?.is_none() {
            return Err(Error::Url {
                url: url.to_string(),
                why: "no object store here (`paralog obj init` makes one)".into(),
            });
        }
        Ok(s)
    }

    fn connect(url: &S3Url) -> Result<S3Store> {
        let be = S3Backend::open(url).map_err(|e| Error::Url {
            url: url.to_string(),
            why: e.to_string(),
        })?;
        Ok(S3Store {
            be,
            url: url.clone(),
        })
    }

    /// Make a store at `url` (idempotent).
    pub fn init(url: &S3Url) -> Result<S3Store> {
        let s = S3Store::connect(url)?;
        s.be.put_object(STORE_MARK, b"paralog array objects 1\n".to_vec(), false)
            .map_err(|e| s.err(e))?;
        Ok(s)
    }

    /// Split a URL naming an object (`s3://bucket/STORE/NAME`) into the
    /// store (the nearest prefix holding the mark) and the name; a URL of
    /// the store itself gives no name.
    pub fn locate(url: &S3Url) -> Result<(S3Store, Option<String>)> {
        let parts: Vec<&str> = url.prefix.split('/').filter(|p| !p.is_empty()).collect();
        for cut in (0..=parts.len()).rev() {
            let mut at = url.clone();
            at.prefix = parts[..cut].join("/");
            let s = S3Store::connect(&at)?;
            if s.be.get_object(STORE_MARK).map_err(|e| s.err(e))?.is_none() {
                continue;
            }
            if cut == parts.len() {
                return Ok((s, None));
            }
            let name = parts[cut..].join("/");
            check_name(&name)?;
            return Ok((s, Some(name)));
        }
        Err(Error::Url {
            url: url.to_string(),
            why: "no object store at or above this prefix (`paralog obj init s3://BUCKET/PREFIX` makes one)".into(),
        })
    }

    pub fn url(&self) -> String {
        self.url.to_string()
    }

    fn err(&self, e: BackendError) -> Error {
        Error::Url {
            url: self.url.to_string(),
            why: e.to_string(),
        }
    }

    /// Where a key is, for messages (`s3://bucket/prefix/key`).
    fn shown(&self, key: &str) -> PathBuf {
        PathBuf::from(format!(
            "s3://{}/{}",
            self.url.bucket,
            self.be.key(key.as_bytes())
        ))
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.be.get_object(key).map_err(|e| self.err(e))
    }

    fn put_obj(&self, key: &str, body: Vec<u8>, create_only: bool) -> Result<bool> {
        self.be
            .put_object(key, body, create_only)
            .map_err(|e| self.err(e))
    }

    /// The version numbers of `name` published, ascending.
    fn numbers(&self, name: &str) -> Result<Vec<u64>> {
        let dir = format!("meta/{name}/");
        let mut out: Vec<u64> = self
            .be
            .list_objects(&dir)
            .map_err(|e| self.err(e))?
            .iter()
            .filter_map(|k| is_version_file(&k[dir.len()..]))
            .collect();
        out.sort_unstable();
        Ok(out)
    }

    fn record(&self, name: &str, n: u64) -> Result<Option<Version>> {
        let key = version_key(name, n);
        match self.get(&key)? {
            Some(b) => Ok(Some(Version::decode(&b, &self.shown(&key))?)),
            None => Ok(None),
        }
    }

    /// Every version of `name`, ascending.
    pub fn versions(&self, name: &str) -> Result<Vec<VersionInfo>> {
        check_name(name)?;
        let mut out = Vec::new();
        for n in self.numbers(name)? {
            if let Some(v) = self.record(name, n)? {
                out.push(VersionInfo {
                    number: n,
                    id: v.origin,
                    deleted: v.deleted,
                });
            }
        }
        Ok(out)
    }

    /// A version of `name` (default: the latest), its records checked.
    pub fn array(&self, name: &str, version: Option<u64>) -> Result<ArrayVersion> {
        check_name(name)?;
        let not_found = |why: String| Error::NotFound {
            name: name.to_owned(),
            why,
        };
        let n = match version {
            Some(n) => n,
            None => *self
                .numbers(name)?
                .last()
                .ok_or_else(|| not_found("no version published".into()))?,
        };
        let v = self
            .record(name, n)?
            .ok_or_else(|| not_found(format!("no version {n}")))?;
        if v.deleted {
            return Err(not_found(format!("deleted (version {n})")));
        }
        let at = self.shown(&version_key(name, n));
        let Some(last) = v.pieces.last().copied() else {
            return Err(not_found(format!(
                "version {n} is not an array (no pieces)"
            )));
        };
        let head = self.block(&last).map_err(|why| Error::Damaged {
            path: at.clone(),
            offset: 0,
            what: format!("the array record: {why}"),
        })?;
        let head = head[last.skip as usize..(last.skip + last.len) as usize].to_vec();
        if !head.starts_with(MAGIC) {
            return Err(not_found(format!("version {n} is not an array")));
        }
        checked_array(name, v, &head, at)
    }

    /// A piece's whole block, its CRC-32C checked; the error says why not.
    fn block(&self, p: &Piece) -> std::result::Result<Vec<u8>, String> {
        let key = format!("data/{}", id_hex(&p.chunk));
        let shown = self.shown(&key).display().to_string();
        let b = match self.be.get_object(&key) {
            Ok(Some(b)) => b,
            Ok(None) => return Err(format!("object {shown} is missing")),
            Err(e) => return Err(e.to_string()),
        };
        let end = p.block_off + p.block_len;
        if (b.len() as u64) < end {
            return Err(format!(
                "object {shown} is truncated: {} bytes, the block ends at {end}",
                b.len()
            ));
        }
        let block = b[p.block_off as usize..end as usize].to_vec();
        let crc = paralog_checksum::crc32c(&block);
        if crc != p.block_crc {
            return Err(format!(
                "object {shown}: checksum mismatch (CRC-32C {crc:08x}, the version says {:08x})",
                p.block_crc
            ));
        }
        Ok(block)
    }

    /// One whole chunk (edge chunks with their padding), verified.
    pub fn read_chunk(&self, av: &ArrayVersion, linear: u64) -> Result<Vec<u8>> {
        let p = av.record.pieces[linear as usize];
        let mut b = self.block(&p).map_err(|why| Error::Chunk {
            name: av.name.clone(),
            version: av.number,
            chunk: av.meta.coords(linear),
            why,
        })?;
        b.truncate(p.len as usize);
        Ok(b)
    }

    /// The hyperslab `start`, `count` of a version, every chunk verified.
    pub fn read(&self, av: &ArrayVersion, start: &[u64], count: &[u64]) -> Result<Vec<u8>> {
        av.read_with(start, count, |i| self.read_chunk(av, i))
    }

    /// Read and check every chunk of a version.
    pub fn verify_chunks(&self, av: &ArrayVersion) -> Result<()> {
        for i in 0..av.meta.n_chunks() {
            self.read_chunk(av, i)?;
        }
        Ok(())
    }

    /// The names whose latest version is an array, sorted.
    pub fn list(&self) -> Result<Vec<String>> {
        let mut names = std::collections::BTreeSet::new();
        for k in self.be.list_objects("meta/").map_err(|e| self.err(e))? {
            if let Some((dir, f)) = k["meta/".len()..].rsplit_once('/') {
                if is_version_file(f).is_some() && check_name(dir).is_ok() {
                    names.insert(dir.to_owned());
                }
            }
        }
        let mut out = Vec::new();
        for name in names {
            match self.array(&name, None) {
                Ok(_) => out.push(name),
                Err(Error::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Publish `v` as the next version of `name`: a create-only PUT of
    /// `meta/<name>/v<n>`, the next number when `n` is taken.
    fn publish(&self, name: &str, mut v: Version) -> Result<u64> {
        v.name = name.as_bytes().to_vec();
        let first = self.numbers(name)?.last().copied().unwrap_or(0) + 1;
        for n in first..first + 10_000 {
            v.number = n;
            if self.put_obj(&version_key(name, n), v.encode(), true)? {
                return Ok(n);
            }
        }
        Err(Error::Invalid {
            name: name.to_owned(),
            why: "no free version number after 10000 tries".into(),
        })
    }

    /// Delete `name`: a deletion published as its next version.
    pub fn delete(&self, name: &str) -> Result<u64> {
        check_name(name)?;
        if self.numbers(name)?.is_empty() {
            return Err(Error::NotFound {
                name: name.to_owned(),
                why: "no such object".into(),
            });
        }
        let v = Version {
            number: 0,
            size: 0,
            deleted: true,
            epoch: Default::default(),
            origin: new_id(),
            name: Vec::new(),
            pieces: Vec::new(),
        };
        self.publish(name, v)
    }

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
        let meta = self.staged(name, id)?;
        Ok(S3Put {
            store: self,
            name: name.to_owned(),
            id: *id,
            meta,
            writer: new_id(),
        })
    }

    /// [`S3Store::join`], refusing a writer whose idea of the array (type,
    /// shape, grid) differs from the put's.
    pub fn join_as(&self, name: &str, id: &VersionId, meta: &ArrayMeta) -> Result<S3Put<'_>> {
        let put = self.join(name, id)?;
        let (a, b) = (&put.meta, meta);
        if (a.dtype, &a.shape, &a.chunks) != (b.dtype, &b.shape, &b.chunks) {
            return Err(Error::Put {
                name: name.to_owned(),
                id: id_hex(id),
                why: format!(
                    "this writer's array ({} {:?} in chunks of {:?}) is not the put's ({} {:?} in chunks of {:?})",
                    b.dtype.name(), b.shape, b.chunks, a.dtype.name(), a.shape, a.chunks
                ),
            });
        }
        Ok(put)
    }

    fn staged(&self, name: &str, id: &VersionId) -> Result<ArrayMeta> {
        check_name(name)?;
        let dir = format!("staging/{}", id_hex(id));
        let perr = |why: String| Error::Put {
            name: name.to_owned(),
            id: id_hex(id),
            why,
        };
        let Some(b) = self.get(&format!("{dir}/begin"))? else {
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

    /// The version a put published, if it did (found by its id).
    fn published(&self, name: &str, id: &VersionId) -> Result<Option<u64>> {
        Ok(self
            .versions(name)?
            .into_iter()
            .find(|v| &v.id == id && !v.deleted)
            .map(|v| v.number))
    }

    /// Publish the chunked put `id` of `name` once every writer finished;
    /// nothing is published if a chunk is missing or its writer did not
    /// finish. A commit retried after it published returns that version.
    pub fn commit(&self, name: &str, id: &VersionId) -> Result<Committed> {
        let dir = format!("staging/{}", id_hex(id));
        if self.get(&format!("{dir}/begin"))?.is_none() {
            if let Some(number) = self.published(name, id)? {
                return Ok(Committed { number, id: *id });
            }
        }
        let meta = self.staged(name, id)?;
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
            }
        }
        for (i, c) in claims.iter().enumerate() {
            if let Some(c) = c.as_ref().filter(|c| !finished.contains(&c.writer)) {
                return Err(perr(format!(
                    "chunk {:?} was written by writer {} that did not finish; nothing was published",
                    meta.coords(i as u64),
                    id_hex(&c.writer)
                )));
            }
        }
        let missing: Vec<u64> = (0..n).filter(|&i| claims[i as usize].is_none()).collect();
        if !missing.is_empty() {
            let first: Vec<Vec<u64>> = missing.iter().take(4).map(|&i| meta.coords(i)).collect();
            return Err(perr(format!(
                "{} of {n} chunks were not written (first: {first:?}); nothing was published",
                missing.len()
            )));
        }
        let head = record::encode(id, &meta);
        let head_id = new_id();
        self.put_obj(&format!("data/{}", id_hex(&head_id)), head.clone(), true)?;
        let mut pieces: Vec<Piece> = claims
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                let c = c.expect("none missing");
                Piece {
                    file_off: i as u64 * cb,
                    len: cb,
                    chunk: c.chunk,
                    dir: 0,
                    block_off: 0,
                    block_len: cb + 4,
                    block_crc: c.block_crc,
                    skip: 0,
                }
            })
            .collect();
        pieces.push(Piece {
            file_off: n * cb,
            len: head.len() as u64,
            chunk: head_id,
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
        let number = self.publish(name, v)?;
        // Published: the staging objects are bookkeeping only now (`begin`
        // first, so a retried commit finds the version by its id).
        let _ = self.be.delete_object(&format!("{dir}/begin"));
        for k in keys {
            let _ = self.be.delete_object(&k);
        }
        Ok(Committed { number, id: *id })
    }

    /// Give up a chunked put: its chunk objects and staging objects removed.
    pub fn abort(&self, name: &str, id: &VersionId) -> Result<()> {
        self.staged(name, id)?;
        if let Some(n) = self.published(name, id)? {
            return Err(Error::Put {
                name: name.to_owned(),
                id: id_hex(id),
                why: format!("already published as version {n}: nothing to abort"),
            });
        }
        let dir = format!("staging/{}", id_hex(id));
        let _ = self.be.delete_object(&format!("{dir}/begin"));
        for k in self
            .be
            .list_objects(&format!("{dir}/"))
            .map_err(|e| self.err(e))?
        {
            if k[dir.len() + 1..].starts_with('c') {
                if let Some(b) = self.get(&k)? {
                    if let Ok((_, c)) = decode_claim(&b, &self.shown(&k)) {
                        let _ = self.be.delete_object(&format!("data/{}", id_hex(&c.chunk)));
                    }
                }
            }
            let _ = self.be.delete_object(&k);
        }
        Ok(())
    }

    /// PUT a whole array (row-major little-endian bytes) by one process.
    pub fn put(&self, name: &str, meta: &ArrayMeta, data: &[u8]) -> Result<Committed> {
        crate::put::check_whole(name, meta, data)?;
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

    /// Write one whole chunk at grid coordinates `coords`: its object,
    /// then its claim (create-only: another writer's claim refuses it).
    pub fn write_chunk(&mut self, coords: &[u64], data: &[u8]) -> Result<()> {
        let i = chunk_index(&self.meta, &self.name, coords, data)?;
        let dir = format!("staging/{}", id_hex(&self.id));
        let mut block = Vec::with_capacity(data.len() + 4);
        block.extend_from_slice(data);
        block.extend_from_slice(&paralog_checksum::crc32c(data).to_le_bytes());
        let claim = Claim {
            chunk: new_id(),
            dir: 0,
            block_crc: paralog_checksum::crc32c(&block),
            writer: self.writer,
        };
        let s = self.store;
        let data_key = format!("data/{}", id_hex(&claim.chunk));
        s.put_obj(&data_key, block, true)?;
        if !s.put_obj(&format!("{dir}/c{i:020}"), encode_claim(i, &claim), true)? {
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
        let d = meta.ndim();
        let isz = meta.dtype.size();
        let mut chunk = vec![0u8; meta.chunk_len() as usize];
        let mut err = None;
        for_each_index(&vec![0; d], &meta.grid(), |c| {
            if err.is_some() {
                return;
            }
            let origin: Vec<u64> = (0..d).map(|i| c[i] * meta.chunks[i]).collect();
            let n: Vec<u64> = (0..d)
                .map(|i| meta.chunks[i].min(meta.shape[i] - origin[i]))
                .collect();
            chunk.fill(0);
            copy_box(
                isz,
                data,
                &meta.shape,
                &origin,
                &mut chunk,
                &meta.chunks,
                &vec![0; d],
                &n,
            );
            if let Err(e) = self.write_chunk(c, &chunk) {
                err = Some(e);
            }
        });
        err.map_or(Ok(()), Err)
    }
}
