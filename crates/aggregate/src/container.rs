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

use crate::error::{AggError, Result};

pub struct ContainerFile {
    pub path: PathBuf,
    pub name: Vec<u8>,
    file: File,
    /// Where the next byte goes (the file's length so far).
    pub end: u64,
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
            file,
            end: 0,
        })
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
            self.file
                .write_all_at(chunk, at + done)
                .map_err(AggError::io(&self.path, "write container"))?;
            done += n as u64;
        }
        self.end = at + len;
        Ok(crcs)
    }

    /// Make its bytes and length durable. Its name becomes durable with
    /// the directory's fsync that precedes the record.
    pub fn sync(&self) -> Result<()> {
        // A hole at the end is not written: give the file its full length.
        self.file
            .set_len(self.end)
            .map_err(AggError::io(&self.path, "set container length"))?;
        self.file
            .sync_all()
            .map_err(AggError::io(&self.path, "fsync container"))
    }
}
