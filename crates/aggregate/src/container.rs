//! A container being written: one file of a set directory, named per
//! attempt (`format::container_name`) and created new, so that a crash
//! leaves an orphan to collect and never a half-overwritten live
//! container. Members are appended at aligned offsets (the gap stays a
//! hole); each extent's blocks are checksummed as they pass. Data only:
//! where each byte belongs is in the set record, never in the container.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use paralog_backend::objstore::{ObjStore, NUMBERS_LOCK};

use crate::error::{AggError, Result};
use crate::objcontainer::ObjContainer;
use crate::objset;
use crate::store::{ContainerSink, SetStore};

pub struct ContainerFile {
    /// The file, or on the object layout `objstore://ROOT/SET/NAME`.
    pub path: PathBuf,
    pub name: Vec<u8>,
    sink: Sink,
    /// Where the next byte goes (the file's length so far).
    pub end: u64,
}

/// Where a container's bytes go: a file of the set directory, or one chunk
/// of the object layout (a layout block per set block) published as the
/// object `SET/NAME` when it is made durable (`objcontainer`).
enum Sink {
    File(File),
    Chunk(Box<ObjContainer>),
    /// A container of a store reached through a client (S3: one
    /// multipart upload, or one PUT when it is small).
    Store(Box<dyn ContainerSink>),
    /// A container of the replaced version that the new one lists again
    /// unchanged (`SetWriter::keep_container`): never written, never
    /// removed by this writer.
    Kept,
}

impl ContainerFile {
    /// Create the container `name` in `dir`; it must not exist.
    pub fn create(dir: &Path, name: Vec<u8>) -> Result<ContainerFile> {
        use std::os::unix::ffi::OsStrExt;
        let path = dir.join(std::ffi::OsStr::from_bytes(&name));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&path)
            .map_err(AggError::io(&path, "create container"))?;
        Ok(ContainerFile {
            path,
            name,
            sink: Sink::File(file),
            end: 0,
        })
    }

    /// Create the container `name` of the set `set` on an object layout:
    /// a new chunk (random UUID: never an existing one).
    /// Its layout blocks are the `block` of each `write_extent`.
    pub fn create_obj(store: &ObjStore, set: &[u8], name: Vec<u8>) -> Result<ContainerFile> {
        let c = ObjContainer::create(store, set, &name, crate::format::DEFAULT_BLOCK)?;
        Ok(ContainerFile {
            path: c.path().to_path_buf(),
            name,
            sink: Sink::Chunk(Box::new(c)),
            end: 0,
        })
    }

    /// Create the container `name` of the set `set` on a store (S3).
    pub fn create_store(store: &dyn SetStore, set: &[u8], name: Vec<u8>) -> Result<ContainerFile> {
        let sink = store.create_container(set, &name)?;
        Ok(ContainerFile {
            path: store.display(set, &name),
            name,
            sink: Sink::Store(sink),
            end: 0,
        })
    }

    /// Container `name` of the replaced version, `size` bytes, kept as it
    /// is; `path` names it in messages.
    pub fn kept(path: PathBuf, name: Vec<u8>, size: u64) -> ContainerFile {
        ContainerFile {
            path,
            name,
            sink: Sink::Kept,
            end: size,
        }
    }

    /// Whether it is a container of the replaced version, kept.
    pub fn is_kept(&self) -> bool {
        matches!(self.sink, Sink::Kept)
    }

    /// The offset the next member starts at.
    pub fn aligned_end(&self, align: u64) -> u64 {
        self.end.next_multiple_of(align)
    }

    /// Append `len` bytes from `src` at `at` (≥ `end`), returning the
    /// CRC-32C of each `block` bytes. `buf` is the copy buffer (its length
    /// a multiple of `block`). A source that ends early is an error.
    pub fn write_extent(
        &mut self,
        at: u64,
        len: u64,
        src: &mut dyn Read,
        block: u32,
        buf: &mut [u8],
    ) -> Result<Vec<u32>> {
        debug_assert!(at >= self.end && buf.len().is_multiple_of(block as usize));
        let mut crcs = Vec::with_capacity(len.div_ceil(block as u64) as usize);
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(buf.len() as u64) as usize;
            let chunk = &mut buf[..n];
            src.read_exact(chunk).map_err(|e| AggError::Invalid {
                path: self.path.clone(),
                what: format!("the member's bytes ended at {done} of {len} ({e})"),
            })?;
            for b in chunk.chunks(block as usize) {
                crcs.push(paralog_checksum::crc32c(b));
            }
            match &mut self.sink {
                Sink::File(f) => f
                    .write_all_at(chunk, at + done)
                    .map_err(AggError::io(&self.path, "write container"))?,
                Sink::Chunk(c) => {
                    let mut o = at + done;
                    for b in chunk.chunks(block as usize) {
                        c.add_block(o, b)?;
                        o += b.len() as u64;
                    }
                }
                Sink::Store(w) => w.write(at + done, chunk)?,
                Sink::Kept => {
                    return Err(AggError::Invalid {
                        path: self.path.clone(),
                        what: "a container kept from the replaced version is not written".into(),
                    })
                }
            }
            done += n as u64;
        }
        self.end = at + len;
        Ok(crcs)
    }

    /// Make its bytes and length durable. Its name becomes durable with
    /// the directory's fsync that precedes the record.
    /// On the object layout: the chunk made durable, then published as
    /// the container's object (one version; the set record that names it
    /// is the commit).
    pub fn sync(&mut self) -> Result<()> {
        let end = self.end;
        match &mut self.sink {
            Sink::File(f) => {
                // A hole at the end is not written: give the file its full length.
                f.set_len(end)
                    .map_err(AggError::io(&self.path, "set container length"))?;
                f.sync_all()
                    .map_err(AggError::io(&self.path, "fsync container"))
            }
            Sink::Chunk(c) => c.finish(end),
            Sink::Store(w) => w.finish(end),
            Sink::Kept => Ok(()),
        }
    }

    /// Remove what this container wrote (a writer that gave up before its
    /// record): the file, or the chunk and the object if published.
    pub fn remove(&mut self) {
        match &mut self.sink {
            Sink::Store(w) => w.abandon(),
            Sink::Kept => {}
            Sink::File(_) => {
                let _ = std::fs::remove_file(&self.path);
            }
            Sink::Chunk(c) => c.abandon(),
        }
    }
}

/// Remove an object of the layout whole: every version's chunks, the
/// version records, its metadata directory. For a set's containers only
/// (an object of one version whose chunk no other object uses).
pub fn remove_object(store: &ObjStore, name: &[u8]) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = objset::display_path(store, name);
    let meta = store
        .root()
        .join("meta")
        .join(std::ffi::OsStr::from_bytes(name));
    for n in store.versions(name).map_err(objset::obj_err(&path))? {
        if let Ok(Some(v)) = store.version(name, Some(n)) {
            for p in &v.pieces {
                match std::fs::remove_file(store.chunk_path(p.dir, &p.chunk)) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(AggError::io(&path, "remove a container's chunk")(e)),
                }
            }
        }
        let rec = meta.join(format!("v{n:010}"));
        match std::fs::remove_file(&rec) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(AggError::io(&rec, "remove a container's version")(e)),
        }
    }
    let lock = meta.join(NUMBERS_LOCK);
    match std::fs::remove_file(&lock) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(AggError::io(&lock, "remove a container's lock")(e)),
    }
    match std::fs::remove_dir(&meta) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(AggError::io(&meta, "remove a container object")(e)),
    }
    crate::publish::sync_dir(meta.parent().expect("an object has a parent"))
}
