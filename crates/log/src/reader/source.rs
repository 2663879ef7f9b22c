//! Verified reads of the bytes a manifest extent points at: a data log's
//! header must name the extent's rank, generation and epoch, and a whole
//! extent passes its checksum before any of its bytes is handed out.

use std::fs::File;
use std::path::PathBuf;

use super::EpochId;
use crate::durable;
use crate::error::{IoContext, LogError, Result};
use crate::format::{DataHeader, Extent};

/// Where a manifest extent's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceExtent {
    pub epoch: EpochId,
    pub rank: u32,
    pub data_path: PathBuf,
    pub extent: Extent,
}

/// Reads pieces of source extents, verifying each whole extent's checksum
/// once before handing out any of its bytes.
#[derive(Default)]
pub struct SourceReader {
    open: Option<(PathBuf, File)>,
    verified: std::collections::HashSet<(PathBuf, u64)>,
}

impl SourceReader {
    /// The data log of `src`, opened (and its header checked) once.
    fn file(&mut self, src: &SourceExtent) -> Result<&File> {
        if self.open.as_ref().is_none_or(|(p, _)| *p != src.data_path) {
            let f = File::open(&src.data_path).ctx("open data log", &src.data_path)?;
            check_data_header(&f, src)?;
            self.open = Some((src.data_path.clone(), f));
        }
        Ok(&self.open.as_ref().expect("just opened").1)
    }

    /// The data log of a source extent that already passed [`Self::verify`],
    /// for an in-kernel copy of its bytes (`copy_file_range`).
    pub fn verified_file(&mut self, src: &SourceExtent) -> Result<&File> {
        self.verify(src)?;
        self.file(src)
    }

    /// Check a whole source extent against its checksum (once per extent).
    pub fn verify(&mut self, src: &SourceExtent) -> Result<()> {
        let key = (src.data_path.clone(), src.extent.log_pos);
        if self.verified.contains(&key) {
            return Ok(());
        }
        let e = src.extent;
        let f = self.file(src)?;
        let mut crc = 0;
        let mut chunk = vec![0u8; (e.len as usize).min(1 << 20)];
        let mut done = 0;
        while done < e.len {
            let n = ((e.len - done) as usize).min(chunk.len());
            durable::pread_exact(f, &mut chunk[..n], e.log_pos + done, &src.data_path)?;
            crc = paralog_checksum::crc32c_append(crc, &chunk[..n]);
            done += n as u64;
        }
        e.check_crc(&src.data_path, crc)?;
        self.verified.insert(key);
        Ok(())
    }

    /// Bytes `[skip, skip + buf.len())` of a source extent, never before the
    /// whole extent passed its checksum. Reading a whole extent checks it in
    /// the same pass.
    pub fn read(&mut self, src: &SourceExtent, skip: u64, buf: &mut [u8]) -> Result<()> {
        let e = src.extent;
        if skip == 0 && buf.len() as u64 == e.len {
            let f = self.file(src)?;
            durable::pread_exact(f, buf, e.log_pos, &src.data_path)?;
            e.check_crc(&src.data_path, paralog_checksum::crc32c(buf))?;
            self.verified.insert((src.data_path.clone(), e.log_pos));
            return Ok(());
        }
        self.verify(src)?;
        let f = self.file(src)?;
        durable::pread_exact(f, buf, e.log_pos + skip, &src.data_path)
    }
}

/// A data log must belong to the rank, generation and epoch whose manifest
/// points at it (catches logs moved or restored to the wrong place).
fn check_data_header(f: &File, src: &SourceExtent) -> Result<()> {
    let mut head = [0u8; crate::format::DATA_HEADER_USED];
    durable::pread_exact(f, &mut head, 0, &src.data_path)?;
    let h = DataHeader::decode(&head, &src.data_path)?;
    if (h.rank, h.id()) != (src.rank, src.epoch) {
        return Err(LogError::Inconsistent {
            path: src.data_path.clone(),
            what: format!(
                "data log belongs to rank {} generation {} epoch {}, its manifest to rank {} generation {} epoch {}",
                h.rank, h.gen, h.epoch, src.rank, src.epoch.gen, src.epoch.epoch
            ),
        });
    }
    Ok(())
}
