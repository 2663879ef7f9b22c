//! The Zarr v3 view of a version on S3 (docs/objects.md "S3"): the same
//! keys as on a directory, `STORE/zarr/<name>/v<number>/zarr.json` and one
//! object per chunk `c/<i>/<j>...`, so that zarr-python (through s3fs) and
//! tensorstore (its `s3` kvstore) open `s3://bucket/STORE/zarr/<name>/v<n>`.
//!
//! Each view chunk is a server-side copy (CopyObject) of the version's
//! chunk object, which already holds the Zarr `bytes` + `crc32c` encoding.
//! Copies, not the chunk objects themselves: a chunk object is named by
//! the UUID its writer drew before any version number existed (the number
//! is taken at the publish, and two writers or a retried write must never
//! share a key), and S3 has no links, so no key under `v<number>/` can be
//! the chunk object. `obj verify` compares every view chunk with the
//! version's chunk object, byte for byte.
//!
//! A view appears only after its version and only whole: it is made after
//! the publish, every chunk copied and checked before `zarr.json` is put,
//! and a Zarr reader opens nothing without `zarr.json`. It is removed
//! `zarr.json` first (retention, `obj gc`), so a reader that opens after
//! that finds no array rather than fill values.

use crate::error::{Error, Result};
use crate::id_hex;
use crate::read::ArrayVersion;
use crate::s3store::S3Store;

/// The view's prefix of version `n` of `name`, relative to the store.
pub(crate) fn view_prefix(name: &str, n: u64) -> String {
    format!("zarr/{name}/v{n:010}/")
}

fn chunk_key(prefix: &str, coords: &[u64]) -> String {
    let mut k = format!("{prefix}c");
    for c in coords {
        k.push('/');
        k.push_str(&c.to_string());
    }
    k
}

impl S3Store {
    /// Where the Zarr view of version `n` of `name` is (`s3://...`, no
    /// trailing slash), whether or not it is made.
    pub fn view_url(&self, name: &str, n: u64) -> String {
        let p = view_prefix(name, n);
        self.shown(p.trim_end_matches('/')).display().to_string()
    }

    /// Whether the view of version `n` of `name` is there (its `zarr.json`).
    pub fn view_made(&self, name: &str, n: u64) -> Result<bool> {
        self.exists(&format!("{}zarr.json", view_prefix(name, n)))
    }

    /// Make the Zarr view of a version if it is not there; returns its URL.
    /// A version that retention dropped meanwhile gets none (what was
    /// copied is removed).
    pub fn make_view(&self, av: &ArrayVersion) -> Result<String> {
        let prefix = view_prefix(&av.name, av.number);
        if self.view_made(&av.name, av.number)? {
            return Ok(self.view_url(&av.name, av.number));
        }
        let pieces = av.chunk_pieces();
        let pairs: Vec<(String, String)> = pieces
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let to = chunk_key(&prefix, &av.meta.coords(i as u64));
                (format!("data/{}", id_hex(&p.chunk)), to)
            })
            .collect();
        let copied = self.be.copy_objects(&pairs);
        for (i, (copy, (_, to))) in copied.into_iter().zip(&pairs).enumerate() {
            let bad = |why: String| Error::Chunk {
                name: av.name.clone(),
                version: av.number,
                chunk: av.meta.coords(i as u64),
                why,
            };
            // The server's CRC32C is the whole object's: for every intact
            // chunk object (bytes, then their CRC-32C) CRC-32C's residue.
            let want = crate::stored::RESIDUE;
            match copy {
                // The copy's bytes are the version's by construction (the
                // source is the key its record names). Where the server
                // gives the copy's CRC32C (AWS S3 does; the MinIO of the
                // tests does not), it is checked: this proves the copy
                // whole; which chunk it is follows from its source key.
                Ok(Some(crc)) if crc != want => {
                    let _ = self.be.delete_object(to);
                    return Err(bad(format!(
                        "the copy {} is damaged (CRC-32C {crc:08x}, an intact chunk object's is {want:08x})",
                        self.shown(to).display()
                    )));
                }
                Ok(_) => {}
                Err(e) => return Err(bad(format!("copy into the Zarr view: {e}"))),
            }
        }
        let meta = serde_json::to_vec_pretty(&crate::zarr::metadata(av)).expect("JSON");
        self.put_obj(&format!("{prefix}zarr.json"), meta, false)?;
        if self.record_exists(&av.name, av.number)? {
            Ok(self.view_url(&av.name, av.number))
        } else {
            self.remove_view(&av.name, av.number)?;
            Err(Error::NotFound {
                name: av.name.clone(),
                why: format!("version {} was dropped by retention", av.number),
            })
        }
    }

    /// Remove the view of version `n` of `name`: `zarr.json` first (no
    /// reader opens it after), then its chunks.
    pub(crate) fn remove_view(&self, name: &str, n: u64) -> Result<()> {
        let prefix = view_prefix(name, n);
        self.be
            .delete_object(&format!("{prefix}zarr.json"))
            .map_err(|e| self.err(e))?;
        for k in self.be.list_objects(&prefix).map_err(|e| self.err(e))? {
            self.be.delete_object(&k).map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// Check the view of a version: its `zarr.json` is the version's, and
    /// every chunk of the version is in it, byte for byte the version's
    /// chunk object (read and checked too). Returns the view's URL.
    pub fn check_view(&self, av: &ArrayVersion) -> Result<String> {
        let prefix = view_prefix(&av.name, av.number);
        let zj = format!("{prefix}zarr.json");
        let at = self.shown(&zj);
        let Some(bytes) = self.get(&zj)? else {
            return Err(Error::NotFound {
                name: av.name.clone(),
                why: format!(
                    "version {}: no Zarr view ({} is missing; `paralog obj view` makes it)",
                    av.number,
                    at.display()
                ),
            });
        };
        crate::zarr::check_metadata(&bytes, &at, av)?;
        for (i, p) in av.chunk_pieces().iter().enumerate() {
            let coords = av.meta.coords(i as u64);
            let key = chunk_key(&prefix, &coords);
            let shown = self.shown(&key).display().to_string();
            // The version's own object, whole (its CRC-32C checked).
            let own = crate::stored::stored_block(&self.read_chunk(av, i as u64)?).0;
            let why = match self.get(&key)? {
                None => Some(format!(
                    "{shown}: missing from the Zarr view: its readers would see fill values"
                )),
                Some(b) if b.len() != own.len() => Some(format!(
                    "{shown}: {} bytes in the Zarr view, the version's chunk has {}",
                    b.len(),
                    own.len()
                )),
                Some(b) if b != own => Some(format!(
                    "{shown}: not the version's chunk object data/{} (checksum mismatch: {})",
                    id_hex(&p.chunk),
                    match paralog_checksum::crc32c(&b) == crate::stored::RESIDUE {
                        true => "a whole chunk, but another",
                        false => "damaged",
                    }
                )),
                Some(_) => None,
            };
            if let Some(why) = why {
                return Err(Error::Chunk {
                    name: av.name.clone(),
                    version: av.number,
                    chunk: coords,
                    why,
                });
            }
        }
        Ok(self.view_url(&av.name, av.number))
    }
}
