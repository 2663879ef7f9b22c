//! A container of a set on the object layout being written
//! (docs/aggregate.md, "On the object layout"): one chunk of the layout
//! (a new random UUID), one layout block per set block (so the layout's
//! CRC-32C and the record's cover the same bytes), made durable and
//! published as the only version of the object `SET/NAME` when finished.
//! The one-node writer (`ContainerFile::create_obj`) and each leader of a
//! server job write their containers through it.
//!
//! **The marker.** A chunk that no version names yet (its writer was
//! killed before it finished) is invisible to the set's orphan
//! collection, and the layout's own collection takes it only after an
//! hour's grace. So, right after its chunk is created, a container leaves
//! an empty marker file beside the set's objects, in the set's metadata
//! directory, whose name says which chunk it is:
//!
//! ```text
//! ROOT/meta/<set dir>/.set.plr.chunk.<storage dir>.<chunk uuid hex>.<container name>
//! ```
//!
//! and removes it once the container is published (its version names the
//! chunk) or abandoned. `objpublish::collect_orphans_obj` removes the
//! chunk of every marker whose container no kept record lists, then the
//! marker. The layout ignores plain files among its metadata directories
//! (it lists directories and `v<n>` records only). A kill between the
//! chunk's creation and its marker leaves an empty chunk file, which
//! `paralog recover --gc` collects after the grace.

use std::ffi::OsStr;
use std::fs::OpenOptions;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use paralog_backend::objstore::{ChunkWriter, ObjStore, Piece, Version};

use crate::container::remove_object;
use crate::error::{AggError, Result};
use crate::format;
use crate::objset;
use crate::store::ContainerSink;

/// The start of a marker's name.
pub const MARKER: &str = ".set.plr.chunk.";

pub struct ObjContainer {
    store: ObjStore,
    /// The object `SET/NAME`.
    object: Vec<u8>,
    /// `objstore://ROOT/SET/NAME`, for messages.
    path: PathBuf,
    chunk: Option<ChunkWriter>,
    chunk_path: PathBuf,
    marker: PathBuf,
    pieces: Vec<Piece>,
    /// Bytes of one layout block, the set's block size.
    block: u32,
    published: bool,
}

/// The marker's file name for the chunk `id` in storage directory `dir`.
fn marker_name(dir: u32, id: &[u8; 16], container: &[u8]) -> Vec<u8> {
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let mut n = format!("{MARKER}{dir}.{hex}.").into_bytes();
    n.extend_from_slice(container);
    n
}

/// The storage directory, chunk and container a marker's name gives;
/// `None` when it is not one.
pub fn parse_marker(name: &[u8]) -> Option<(u32, [u8; 16], Vec<u8>)> {
    let rest = name.strip_prefix(MARKER.as_bytes())?;
    let dot = rest.iter().position(|&b| b == b'.')?;
    let dir: u32 = std::str::from_utf8(&rest[..dot]).ok()?.parse().ok()?;
    let rest = &rest[dot + 1..];
    let hex = std::str::from_utf8(rest.get(..32)?).ok()?;
    if rest.get(32) != Some(&b'.') {
        return None;
    }
    let mut id = [0u8; 16];
    for (i, b) in id.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    let container = &rest[33..];
    format::is_container_name(container).then(|| (dir, id, container.to_vec()))
}

impl ObjContainer {
    /// A new container `name` of the set `set` on `store`: its chunk
    /// created, then its marker (durable before any byte of the chunk).
    pub fn create(store: &ObjStore, set: &[u8], name: &[u8], block: u32) -> Result<ObjContainer> {
        let object = objset::object_name(set, name);
        let path = objset::display_path(store, &object);
        let chunk = store.writer().map_err(objset::obj_err(&path))?;
        let chunk_path = chunk.path().to_path_buf();
        let dir = chunk_path
            .parent()
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str())
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| AggError::Invalid {
                path: chunk_path.clone(),
                what: "a chunk outside the layout's storage directories".into(),
            })?;
        let meta = store.meta_dir(set);
        let marker = meta.join(OsStr::from_bytes(&marker_name(dir, &chunk.id(), name)));
        let made = std::fs::create_dir_all(&meta)
            .and_then(|()| {
                OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o644)
                    .open(&marker)
            })
            .map_err(AggError::io(&marker, "create a container's marker"))
            .and_then(|_| sync_meta(store, &meta));
        if let Err(e) = made {
            let _ = std::fs::remove_file(&chunk_path);
            let _ = std::fs::remove_file(&marker);
            return Err(e);
        }
        Ok(ObjContainer {
            store: store.clone(),
            object,
            path,
            chunk: Some(chunk),
            chunk_path,
            marker,
            pieces: Vec::new(),
            block,
            published: false,
        })
    }

    /// `objstore://ROOT/SET/NAME`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one layout block holding the container's bytes `at..`.
    pub fn add_block(&mut self, at: u64, data: &[u8]) -> Result<()> {
        let Some(w) = &mut self.chunk else {
            return Err(AggError::Invalid {
                path: self.path.clone(),
                what: "written after it was made durable".into(),
            });
        };
        self.pieces
            .push(w.add(at, data).map_err(objset::obj_err(&self.path))?);
        Ok(())
    }

    fn remove_marker(&self) {
        if std::fs::remove_file(&self.marker).is_ok() {
            if let Some(meta) = self.marker.parent() {
                // A marker left by a crash only costs a look at its
                // container at the next collection.
                let _ = sync_meta(&self.store, meta);
            }
        }
    }
}

/// fsync of a metadata directory, unless the store is `sync=0`.
fn sync_meta(store: &ObjStore, dir: &Path) -> Result<()> {
    if store.durable() {
        crate::publish::sync_dir(dir)?;
    }
    Ok(())
}

impl ContainerSink for ObjContainer {
    /// One layout block per set block from `at` (the record's CRCs are
    /// per block of each extent, which starts at a block of its own).
    fn write(&mut self, at: u64, data: &[u8]) -> Result<()> {
        let mut o = at;
        for b in data.chunks(self.block as usize) {
            self.add_block(o, b)?;
            o += b.len() as u64;
        }
        Ok(())
    }

    /// The chunk made durable (file and directory), then published as the
    /// container's object (one version, `end` bytes: the set record that
    /// names it is the commit), then the marker removed.
    fn finish(&mut self, end: u64) -> Result<()> {
        if let Some(w) = self.chunk.take() {
            w.finish().map_err(objset::obj_err(&self.path))?;
        }
        if !self.published {
            let mut pieces = std::mem::take(&mut self.pieces);
            pieces.sort_by_key(|p| p.file_off);
            let v = Version {
                number: 0,
                size: end,
                deleted: false,
                epoch: Default::default(),
                origin: [0; 16],
                name: Vec::new(),
                pieces,
            };
            self.store
                .publish(&self.object, v)
                .map_err(objset::obj_err(&self.path))?;
            self.published = true;
            self.remove_marker();
        }
        Ok(())
    }

    /// Nothing of it left: the object (if published), the chunk, the
    /// marker. A failure leaves an orphan for the next collection.
    fn abandon(&mut self) {
        if self.published {
            let _ = remove_object(&self.store, &self.object);
        }
        self.chunk = None;
        let _ = std::fs::remove_file(&self.chunk_path);
        self.remove_marker();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_name_round_trips_and_nothing_else_parses() {
        let c = format::container_name(1, 2, 0xabc);
        let id = [0x5au8; 16];
        let n = marker_name(7, &id, &c);
        assert_eq!(parse_marker(&n), Some((7, id, c.clone())));
        for bad in [
            &b"set.plr"[..],
            b".set.plr.chunk.x.5a5a.c0000",
            b".set.plr.chunk.7.5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a.notacontainer",
            &n[..n.len() - 1],
        ] {
            assert_eq!(parse_marker(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
