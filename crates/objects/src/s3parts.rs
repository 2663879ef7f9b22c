//! Parts of a chunk on S3 (crate::parts; docs/objects.md "Parts of a
//! chunk"). S3 has no `pwrite`, so each part is an object of its own in
//! the put's staging, `d<chunk>.<writer>.<n>` (the part's bytes in its
//! box's row-major order), written before its claim `p<chunk>.<writer>.<n>`;
//! the commit, once the claims are checked, reads each chunk's parts,
//! checks every run against its claim's CRC-32C, and writes the chunk as
//! one object named by the put's id and the chunk's index (a retried
//! commit writes the same key again), which the version then names as
//! any chunk. The parts go with the put's staging.

use crate::error::{Error, Result};
use crate::part_write::{split_region, Region};
use crate::parts::{chunk_file_id, claim_name, runs, PartClaim, Planned};
use crate::record::ArrayMeta;
use crate::s3put::S3Put;
use crate::s3store::S3Store;
use crate::{id_hex, VersionId};

/// The key of a part's bytes, beside its claim `p…` in the put's staging.
pub(crate) fn part_data_key(dir: &str, claim_file: &str) -> String {
    format!("{dir}/d{}", &claim_file[1..])
}

impl S3Put<'_> {
    /// [`crate::Put::write_part`] on S3: whole chunks as
    /// [`S3Put::write_chunk`], each part its own object and claim. A part
    /// over a chunk another writer wrote whole is refused at the commit.
    pub fn write_part(&mut self, start: &[u64], count: &[u64], data: &[u8]) -> Result<()> {
        let (meta, name) = (self.meta().clone(), self.name().to_owned());
        split_region(&meta, &name, start, count, data, |piece| match piece {
            Region::Whole(c, chunk) => self.write_chunk(c, chunk),
            Region::Part(i, at, n, part) => self.write_part_object(i, at, n, part),
        })
    }

    /// One part of chunk `i` (its box in the chunk, its bytes): its
    /// object, then its claim, numbered in this writer's order.
    pub(crate) fn write_part_object(
        &mut self,
        i: u64,
        at: &[u64],
        count: &[u64],
        data: &[u8],
    ) -> Result<()> {
        let claim = PartClaim::of(self.meta(), (i, self.writer(), 0), at, count, data);
        let dir = format!("staging/{}", id_hex(&self.id()));
        let file = claim_name(i, &self.writer(), self.next_part());
        let s = self.store();
        s.put_obj(&part_data_key(&dir, &file), data.to_vec(), false)?;
        crate::failpoint("objects.mid_chunk");
        s.put_obj(&format!("{dir}/{file}"), claim.encode(), false)?;
        Ok(())
    }
}

impl S3Store {
    /// The chunks of put `id` written in parts, checked
    /// ([`Found::plan`]): each put together from its parts' objects and
    /// written as one chunk object.
    pub(crate) fn compose_parts(
        &self,
        id: &VersionId,
        meta: &ArrayMeta,
        planned: Vec<Planned>,
    ) -> Result<()> {
        let dir = format!("staging/{}", id_hex(id));
        let (cb, isz) = (meta.chunk_len() as usize, meta.dtype.size());
        for p in planned {
            let mut chunk = vec![0u8; cb];
            for part in &p.parts {
                let key = part_data_key(&dir, &part.file);
                let c = &part.claim;
                let (run, offsets) = runs(&meta.chunks, &c.start, &c.count, isz);
                let bytes = self.get(&key)?.unwrap_or_default();
                let damaged = |what: String| Error::Damaged {
                    path: self.shown(&key),
                    offset: 0,
                    what: format!("a part of chunk {:?}: {what}", meta.coords(p.chunk)),
                };
                if bytes.len() as u64 != run * offsets.len() as u64 {
                    return Err(damaged(format!(
                        "{} bytes, its claim says {}",
                        bytes.len(),
                        run * offsets.len() as u64
                    )));
                }
                for (r, off) in offsets.iter().enumerate() {
                    let src = &bytes[r * run as usize..(r + 1) * run as usize];
                    if paralog_checksum::crc32c(src) != c.run_crcs[r] {
                        return Err(damaged(format!("run {r} fails its checksum")));
                    }
                    chunk[*off as usize..*off as usize + src.len()].copy_from_slice(src);
                }
            }
            let (block, crc) = crate::stored::stored_block(&chunk);
            debug_assert_eq!(crc, p.crc, "the composed CRC is the chunk's");
            let key = format!("data/{}", id_hex(&chunk_file_id(id, p.chunk)));
            self.put_obj(&key, block, false)?;
        }
        Ok(())
    }
}
