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
//! - `staging/<id>/...`: a chunked put until its commit (`s3put`).
//! - `zarr/<name>/v<n>/...`: the Zarr view of a version (`s3view`);
//!   what dead puts and the rest leave is collected by `s3gc`.
//!
//! Retention (`keep=K` in the URL; every version by default): after each
//! publish the versions of the name beyond the newest K are dropped, their
//! record first (no reader starts on it), then the chunk objects no kept
//! version uses, and their Zarr views (`s3view`). A chunk is verified against the version record's block
//! CRC-32C before any byte is used.

use std::path::PathBuf;

use paralog_backend::objstore::{Piece, Version};
use paralog_backend::{BackendError, S3Url};
use paralog_s3::S3Backend;

use crate::error::{Error, Result};
use crate::id_hex;
use crate::read::{checked_array, ArrayVersion};
use crate::record::MAGIC;
use crate::store::{check_name, VersionInfo};

const STORE_MARK: &str = "meta/.store";

/// An array store on S3.
#[derive(Debug)]
pub struct S3Store {
    pub(crate) be: S3Backend,
    url: S3Url,
}

pub(crate) fn version_key(name: &str, n: u64) -> String {
    format!("meta/{name}/v{n:010}")
}

pub(crate) fn is_version_file(f: &str) -> Option<u64> {
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

    pub(crate) fn err(&self, e: BackendError) -> Error {
        Error::Url {
            url: self.url.to_string(),
            why: e.to_string(),
        }
    }

    /// Where a key is, for messages (`s3://bucket/prefix/key`).
    pub(crate) fn shown(&self, key: &str) -> PathBuf {
        PathBuf::from(format!(
            "s3://{}/{}",
            self.url.bucket,
            self.be.key(key.as_bytes())
        ))
    }

    pub(crate) fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.be.get_object(key).map_err(|e| self.err(e))
    }

    pub(crate) fn put_obj(&self, key: &str, body: Vec<u8>, create_only: bool) -> Result<bool> {
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

    /// Whether the object `key` is there (a HEAD).
    pub(crate) fn exists(&self, key: &str) -> Result<bool> {
        self.be
            .object_modified(key)
            .map(|t| t.is_some())
            .map_err(|e| self.err(e))
    }

    /// Whether the record of version `n` of `name` is there (a HEAD).
    pub(crate) fn record_exists(&self, name: &str, n: u64) -> Result<bool> {
        self.exists(&version_key(name, n))
    }

    pub(crate) fn record(&self, name: &str, n: u64) -> Result<Option<Version>> {
        let key = version_key(name, n);
        match self.get(&key)? {
            Some(b) => Ok(Some(Version::decode(&b, &self.shown(&key))?)),
            None => Ok(None),
        }
    }

    /// Every version of `name`, ascending.
    pub fn versions(&self, name: &str) -> Result<Vec<VersionInfo>> {
        check_name(name)?;
        crate::store::version_infos(self.numbers(name)?, |n| self.record(name, n))
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
    /// The object is read whole: its bytes are checked against the CRC-32C
    /// the version records (which names the chunk), and its length and
    /// trailer too (crate::stored::check_stored).
    pub fn read_chunk(&self, av: &ArrayVersion, linear: u64) -> Result<Vec<u8>> {
        let p = av.record.pieces[linear as usize];
        let key = format!("data/{}", id_hex(&p.chunk));
        let shown = self.shown(&key).display().to_string();
        let cb = av.meta.chunk_len();
        let checked = match self.be.get_object(&key) {
            Ok(Some(b)) => crate::stored::check_stored(&b, cb, p.block_crc)
                .map(|()| b)
                .map_err(|why| format!("{why}: object {shown}")),
            Ok(None) => Err(format!("object {shown} is missing")),
            Err(e) => Err(e.to_string()),
        };
        let mut b = checked.map_err(|why| Error::Chunk {
            name: av.name.clone(),
            version: av.number,
            chunk: av.meta.coords(linear),
            why,
        })?;
        b.truncate(cb as usize);
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
    pub(crate) fn publish(&self, name: &str, mut v: Version) -> Result<u64> {
        v.name = name.as_bytes().to_vec();
        let first = self.numbers(name)?.last().copied().unwrap_or(0) + 1;
        for n in first..first + 10_000 {
            v.number = n;
            if self.put_obj(&version_key(name, n), v.encode(), true)? {
                // Published whatever retention does: what it fails to drop
                // now, the next publish of the name drops.
                let _ = self.retain(name);
                return Ok(n);
            }
            // A 412 can answer our own record: the client retried a PUT
            // whose answer was lost after the server made it. Taking the
            // next number would publish this version twice; its origin (the
            // put's id, or a deletion's own UUID) says whether it is ours.
            if self.record(name, n)?.is_some_and(|r| r.origin == v.origin) {
                return Ok(n);
            }
        }
        Err(Error::Invalid {
            name: name.to_owned(),
            why: "no free version number after 10000 tries".into(),
        })
    }

    /// Drop the versions of `name` beyond the newest `keep`: each record,
    /// then its Zarr view, then the chunk objects only dropped versions
    /// used. A version whose put's commit has not finished stays (one
    /// HEAD a version past the K; [`S3Store::commit_unfinished`]). Another
    /// publisher's retention may run at once: deletes of what is gone are
    /// no error. A crash between leaves chunk objects no version names.
    pub(crate) fn retain(&self, name: &str) -> Result<()> {
        let keep = self.url.keep;
        if keep == u64::MAX {
            return Ok(()); // every version kept: no listing
        }
        let all = self.numbers(name)?;
        if all.len() as u64 <= keep {
            return Ok(());
        }
        let (old, kept) = all.split_at(all.len() - keep as usize);
        let mut used = std::collections::BTreeSet::new();
        for &n in kept {
            if let Some(v) = self.record(name, n)? {
                used.extend(v.pieces.iter().map(|p| p.chunk));
            }
        }
        let mut dropped = std::collections::BTreeSet::new();
        for &n in old {
            if let Ok(Some(v)) = self.record(name, n) {
                if self.commit_unfinished(&v.origin)? {
                    used.extend(v.pieces.iter().map(|p| p.chunk));
                    continue;
                }
                dropped.extend(v.pieces.iter().map(|p| p.chunk));
            }
            self.be
                .delete_object(&version_key(name, n))
                .map_err(|e| self.err(e))?;
            self.remove_view(name, n)?;
        }
        for id in dropped.difference(&used) {
            self.be
                .delete_object(&format!("data/{}", id_hex(id)))
                .map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// Delete `name`: a deletion published as its next version.
    pub fn delete(&self, name: &str) -> Result<u64> {
        check_name(name)?;
        let v = crate::store::deletion(name, self.numbers(name)?.is_empty())?;
        self.publish(name, v)
    }
}
