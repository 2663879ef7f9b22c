//! A writer's region of the array (any box, in array coordinates): the
//! chunks it covers whole are written whole, the others as parts
//! (crate::parts), which the commit composes.

use std::io::ErrorKind;

use crate::error::{io_err, Error, Result};
use crate::grid::{copy_box, for_each_index};
use crate::id_hex;
use crate::parts::{chunk_file_id, claim_name, PartClaim};
use crate::put::Put;
use crate::record::ArrayMeta;

impl Put<'_> {
    /// Write the box of `count` elements at `start` (array coordinates)
    /// from `data` (its row-major little-endian bytes). A chunk the box
    /// covers whole (its part inside the array, for an edge chunk) is
    /// written whole, as [`Put::write_chunk`]; of any other chunk it
    /// meets, the box's part is written, and the commit puts the chunk
    /// together from the parts that writers wrote, refusing parts that
    /// overlap or leave a hole. Durable on return, as a chunk write.
    pub fn write_part(&mut self, start: &[u64], count: &[u64], data: &[u8]) -> Result<()> {
        let (meta, name) = (self.meta.clone(), self.name.clone());
        split_region(&meta, &name, start, count, data, |piece| match piece {
            Region::Whole(c, chunk) => self.write_chunk(c, chunk),
            Region::Part(i, at, n, part) => self.write_chunk_part(i, at, n, part),
        })
    }

    /// One part of chunk `i`: the box `count` at `at` in the chunk, its
    /// bytes `data`. The claim's temporary name first (it names the chunk
    /// file, so that abort and gc find it), then the bytes at their
    /// offsets in the chunk file every writer of a part on this store
    /// shares, durable, then the claim placed. A writer of a logged put's
    /// share on another node writes its parts in its own node's file; the
    /// publishers copy them into the remote's, where the remote commit
    /// puts the chunk together (crate::remote_put). The publisher's copy
    /// of a part comes here too, numbered as the writer numbered it, so a
    /// copy retried writes the same claim again.
    pub(crate) fn write_chunk_part(
        &mut self,
        i: u64,
        at: &[u64],
        count: &[u64],
        data: &[u8],
    ) -> Result<()> {
        let coords = self.meta.coords(i);
        let gone = || Error::Put {
            name: self.name.clone(),
            id: id_hex(&self.id),
            why: "no such put in progress (committed or aborted)".into(),
        };
        if self.dir.join(format!("c{i:020}")).exists() {
            return Err(Error::Overlap {
                name: self.name.clone(),
                id: id_hex(&self.id),
                chunk: coords,
            });
        }
        let file = chunk_file_id(&self.id, i);
        let dir = self.store.os.dir_of(&file);
        let claim = PartClaim::of(&self.meta, (i, self.writer, dir), at, count, data);
        let n = self.parts.len() as u64;
        let placed = self.dir.join(claim_name(i, &self.writer, n));
        let tmp = self
            .dir
            .join(format!(".part.{}.{i}.{n}", id_hex(&self.writer)));
        if let Err(e) = std::fs::write(&tmp, claim.encode()) {
            return Err(match e.kind() {
                ErrorKind::NotFound => gone(),
                _ => io_err(&tmp, "write")(e),
            });
        }
        crate::failpoint("objects.claim_staged");
        let mut w = self.store.os.shared_writer(file, dir)?;
        let (run, offsets) =
            crate::parts::runs(&self.meta.chunks, at, count, self.meta.dtype.size());
        for (r, off) in offsets.iter().enumerate() {
            w.write_at(*off, &data[r * run as usize..(r + 1) * run as usize])?;
        }
        self.chunk_dirs.insert(w.dir());
        w.finish_file()?;
        crate::failpoint("objects.mid_chunk");
        std::fs::rename(&tmp, &placed).map_err(|e| match e.kind() {
            ErrorKind::NotFound => gone(),
            _ => io_err(&placed, "claim part")(e),
        })?;
        self.parts.push(claim);
        Ok(())
    }
}

/// A piece of a writer's region: a whole chunk (its grid coordinates and
/// its bytes, padded), or the region's part of chunk `i` (its box in the
/// chunk, its bytes).
pub(crate) enum Region<'a> {
    Whole(&'a [u64], &'a [u8]),
    Part(u64, &'a [u64], &'a [u64], &'a [u8]),
}

/// Cut the box of `count` elements at `start` (array coordinates), whose
/// row-major bytes are `data`, into whole chunks and parts of chunks, in
/// grid order, refusing a box outside the array or a buffer of another
/// size (every store's `write_part` checks this first).
pub(crate) fn split_region(
    m: &ArrayMeta,
    name: &str,
    start: &[u64],
    count: &[u64],
    data: &[u8],
    mut put: impl FnMut(Region<'_>) -> Result<()>,
) -> Result<()> {
    let d = m.ndim();
    let invalid = |why: String| Error::Invalid {
        name: name.to_owned(),
        why,
    };
    if start.len() != d || count.len() != d {
        return Err(invalid(format!(
            "a part of {d}-dimensional {:?} needs {d} starts and counts, not {} and {}",
            m.shape,
            start.len(),
            count.len()
        )));
    }
    let outside = (0..d).any(|j| {
        count[j] == 0
            || start[j]
                .checked_add(count[j])
                .is_none_or(|e| e > m.shape[j])
    });
    if outside {
        return Err(invalid(format!(
            "part at {start:?} of {count:?} is empty or outside the array {:?}",
            m.shape
        )));
    }
    let isz = m.dtype.size();
    let want = count.iter().product::<u64>() * isz as u64;
    if data.len() as u64 != want {
        return Err(invalid(format!(
            "part at {start:?} of {count:?}: {} bytes given, it has {want}",
            data.len()
        )));
    }
    let first: Vec<u64> = (0..d).map(|j| start[j] / m.chunks[j]).collect();
    let end: Vec<u64> = (0..d)
        .map(|j| (start[j] + count[j] - 1) / m.chunks[j] + 1)
        .collect();
    let mut coords = Vec::new();
    for_each_index(&first, &end, |c| coords.push(c.to_vec()));
    for c in coords {
        let i = m.linear(&c).expect("inside the grid");
        let origin: Vec<u64> = (0..d).map(|j| c[j] * m.chunks[j]).collect();
        let inside = m.inside(&c);
        let lo: Vec<u64> = (0..d).map(|j| start[j].max(origin[j])).collect();
        let hi: Vec<u64> = (0..d)
            .map(|j| (start[j] + count[j]).min(origin[j] + inside[j]))
            .collect();
        let n: Vec<u64> = (0..d).map(|j| hi[j] - lo[j]).collect();
        let from: Vec<u64> = (0..d).map(|j| lo[j] - start[j]).collect();
        if n == inside {
            // Edge chunks: the part outside the array stays zero.
            let mut chunk = vec![0u8; m.chunk_len() as usize];
            copy_box(
                isz,
                data,
                count,
                &from,
                &mut chunk,
                &m.chunks,
                &vec![0; d],
                &n,
            );
            put(Region::Whole(&c, &chunk))?;
        } else {
            let mut part = vec![0u8; n.iter().product::<u64>() as usize * isz];
            copy_box(isz, data, count, &from, &mut part, &n, &vec![0; d], &n);
            let at: Vec<u64> = (0..d).map(|j| lo[j] - origin[j]).collect();
            put(Region::Part(i, &at, &n, &part))?;
        }
    }
    Ok(())
}
