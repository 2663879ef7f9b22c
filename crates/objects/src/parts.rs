//! Parts of a chunk written by several writers (docs/objects.md "Parts of
//! a chunk"; format: docs/objects-format.md "Part claims").
//!
//! A chunk that no single writer holds whole (a rank's rows are a quarter
//! of a chunk's) is written in parts: every writer of a part opens the
//! same chunk file, whose UUID is derived from the put's id and the
//! chunk's index, and writes its bytes at their offsets in the chunk's
//! row-major layout. Its claim (`p<chunk>.<writer>.<n>`) records the
//! part's box in the chunk and the CRC-32C of each contiguous run of it.
//!
//! The commit composes each such chunk without reading it: the runs of
//! all its parts, sorted by offset, must not overlap (two writers of one
//! element are refused, naming both) and must cover every element of the
//! chunk inside the array (a hole is refused); the chunk's CRC-32C is
//! then combined from the runs' CRCs and the zeros between them (an edge
//! chunk's padding), and written as the file's trailer. From there the
//! chunk is an ordinary one: one piece of the version, as a chunk one
//! writer wrote whole, so readers and views do not change. Like a whole
//! chunk's CRC, a part's is made from the writer's buffer, not read back.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::grid::for_each_index;
use crate::record::{ArrayMeta, MAX_NDIM};
use crate::staging::Claim;
use crate::{id_hex, VersionId};

const PART_MAGIC: &[u8; 8] = b"PLGPART1";

/// One writer's part of one chunk: its box inside the chunk (in elements,
/// from the chunk's origin) and the CRC-32C of each run of it, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartClaim {
    pub(crate) chunk: u64,
    pub(crate) writer: [u8; 16],
    /// The storage directory of the chunk file (0 on S3): where the first
    /// writer's store placed it, so that a writer, committer or `obj gc`
    /// that opened the store with another `dirs` finds the same file.
    pub(crate) dir: u32,
    pub(crate) start: Vec<u64>,
    pub(crate) count: Vec<u64>,
    pub(crate) run_crcs: Vec<u32>,
}

/// The UUID of the chunk file that holds chunk `i` of put `put` when it is
/// written in parts: the put's id with UUID version 8 ("custom", where a
/// put's own ids are version 4, so it is never a put's array record) and
/// its last 8 bytes XORed with `i + 1`. Every writer computes it alone.
pub(crate) fn chunk_file_id(put: &VersionId, i: u64) -> [u8; 16] {
    let mut id = *put;
    id[6] = (id[6] & 0x0f) | 0x80;
    for (b, x) in id[8..].iter_mut().zip((i + 1).to_le_bytes()) {
        *b ^= x;
    }
    id
}

/// The name of a placed part claim: `p<chunk>.<writer>.<n>`.
pub(crate) fn claim_name(i: u64, writer: &[u8; 16], n: u64) -> String {
    format!("p{i:020}.{}.{n}", id_hex(writer))
}

/// The chunk index a placed part claim's name holds; `None` for any
/// other name (an older binary's `publishing` mark also starts with `p`).
pub(crate) fn claim_chunk(file: &str) -> Option<u64> {
    let rest = file.strip_prefix('p')?;
    let (i, _) = rest.split_once('.')?;
    let digits = i.len() == 20 && i.bytes().all(|b| b.is_ascii_digit());
    digits.then(|| i.parse().ok()).flatten()
}

/// The runs of a box in a chunk of `chunks` elements of `isz` bytes: the
/// bytes of one run (the box's innermost dimension not spanning the chunk,
/// with every full dimension after it) and each run's offset in the
/// chunk, in the box's row-major order (the order of a buffer holding it).
pub(crate) fn runs(chunks: &[u64], start: &[u64], count: &[u64], isz: usize) -> (u64, Vec<u64>) {
    let d = chunks.len();
    let mut k = d - 1;
    while k > 0 && start[k] == 0 && count[k] == chunks[k] {
        k -= 1;
    }
    let mut strides = vec![isz as u64; d];
    for j in (0..d - 1).rev() {
        strides[j] = strides[j + 1] * chunks[j + 1];
    }
    let run = count[k] * strides[k];
    let mut offsets = Vec::new();
    for_each_index(&vec![0; k], &count[..k], |idx| {
        let mut off = start[k] * strides[k];
        for j in 0..k {
            off += (start[j] + idx[j]) * strides[j];
        }
        offsets.push(off);
    });
    (run, offsets)
}

impl PartClaim {
    /// The part's claim, from the writer's buffer (the box in row-major
    /// order): one CRC-32C per run.
    pub(crate) fn of(
        meta: &ArrayMeta,
        (i, writer, dir): (u64, [u8; 16], u32),
        start: &[u64],
        count: &[u64],
        data: &[u8],
    ) -> PartClaim {
        let (run, offsets) = runs(&meta.chunks, start, count, meta.dtype.size());
        let run_crcs = (0..offsets.len())
            .map(|r| paralog_checksum::crc32c(&data[r * run as usize..(r + 1) * run as usize]))
            .collect();
        PartClaim {
            chunk: i,
            writer,
            dir,
            start: start.to_vec(),
            count: count.to_vec(),
            run_crcs,
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(PART_MAGIC);
        b.extend_from_slice(&self.chunk.to_le_bytes());
        b.extend_from_slice(&self.writer);
        b.extend_from_slice(&self.dir.to_le_bytes());
        b.extend_from_slice(&(self.start.len() as u32).to_le_bytes());
        for v in self.start.iter().chain(&self.count) {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&(self.run_crcs.len() as u64).to_le_bytes());
        for c in &self.run_crcs {
            b.extend_from_slice(&c.to_le_bytes());
        }
        let crc = paralog_checksum::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// The claim as a record carries it (a share's, a logged commit's):
    /// its length (4 bytes, little-endian), then its bytes.
    pub(crate) fn encode_prefixed(&self, out: &mut Vec<u8>) {
        let e = self.encode();
        out.extend_from_slice(&(e.len() as u32).to_le_bytes());
        out.extend_from_slice(&e);
    }

    /// The inverse of [`PartClaim::encode_prefixed`], at `at` in `b`, not
    /// past `end`: the claim and where the next begins; `None` if its
    /// length runs past `end` (the caller names the record's damage).
    pub(crate) fn decode_prefixed(
        b: &[u8],
        at: usize,
        end: usize,
        path: &Path,
    ) -> Result<Option<(PartClaim, usize)>> {
        if end.saturating_sub(at) < 4 {
            return Ok(None);
        }
        let len = u32::from_le_bytes(b[at..at + 4].try_into().expect("4")) as usize;
        if len > end - at - 4 {
            return Ok(None);
        }
        let p = PartClaim::decode(&b[at + 4..at + 4 + len], path)?;
        Ok(Some((p, at + 4 + len)))
    }

    pub(crate) fn decode(b: &[u8], path: &Path) -> Result<PartClaim> {
        let bad = |offset: usize, what: &str| Error::Damaged {
            path: path.to_path_buf(),
            offset: offset as u64,
            what: format!("not a whole part claim ({what})"),
        };
        let whole = b.len() >= 52
            && &b[..8] == PART_MAGIC
            && paralog_checksum::crc32c(&b[..b.len() - 4])
                == u32::from_le_bytes(b[b.len() - 4..].try_into().expect("4"));
        if !whole {
            return Err(bad(0, "bad length, magic or checksum"));
        }
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8"));
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4"));
        let nd = u32_at(36) as usize;
        if nd == 0 || nd > MAX_NDIM {
            return Err(bad(36, "dimensions"));
        }
        let runs_at = 40 + 16 * nd;
        if b.len() < runs_at + 12 {
            return Err(bad(40, "cut short"));
        }
        let n_runs = u64_at(runs_at);
        if n_runs
            .checked_mul(4)
            .and_then(|l| l.checked_add(runs_at as u64 + 12))
            != Some(b.len() as u64)
        {
            return Err(bad(runs_at, "run count"));
        }
        Ok(PartClaim {
            chunk: u64_at(8),
            writer: b[16..32].try_into().expect("16"),
            dir: u32_at(32),
            start: (0..nd).map(|j| u64_at(40 + 8 * j)).collect(),
            count: (0..nd).map(|j| u64_at(40 + 8 * (nd + j))).collect(),
            run_crcs: (0..n_runs as usize)
                .map(|r| u32_at(runs_at + 8 + 4 * r))
                .collect(),
        })
    }
}

/// Why the parts of one chunk cannot make it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Two parts share bytes: their writers.
    Overlap([u8; 16], [u8; 16]),
    /// Bytes of the chunk inside the array that no part holds.
    Hole { written: u64, inside: u64 },
    /// A claim whose box or runs are not of this chunk (the index of the
    /// part in the slice given).
    Foreign(usize, String),
}

/// The CRC-32C of chunk `i` made of `parts` (each of chunk `i`), checked
/// to be disjoint and to cover the chunk's elements inside the array; the
/// bytes outside them are the zeros of an edge chunk's padding.
pub(crate) fn compose(
    meta: &ArrayMeta,
    i: u64,
    parts: &[PartClaim],
) -> std::result::Result<u32, Refused> {
    let (isz, inside) = (meta.dtype.size(), meta.inside(&meta.coords(i)));
    let mut all = Vec::new();
    for (n, p) in parts.iter().enumerate() {
        let fits = p.chunk == i
            && p.start.len() == inside.len()
            && p.count.len() == inside.len()
            && (0..inside.len()).all(|d| {
                p.count[d] > 0
                    && p.start[d]
                        .checked_add(p.count[d])
                        .is_some_and(|e| e <= inside[d])
            });
        if !fits {
            return Err(Refused::Foreign(
                n,
                format!(
                    "box at {:?} of {:?} is not inside the chunk's {inside:?}",
                    p.start, p.count
                ),
            ));
        }
        let (run, offsets) = runs(&meta.chunks, &p.start, &p.count, isz);
        if offsets.len() != p.run_crcs.len() {
            return Err(Refused::Foreign(
                n,
                format!(
                    "{} run checksums for {} runs",
                    p.run_crcs.len(),
                    offsets.len()
                ),
            ));
        }
        all.extend(
            offsets
                .into_iter()
                .zip(&p.run_crcs)
                .map(|(off, &crc)| (off, run, crc, n)),
        );
    }
    all.sort_unstable_by_key(|r| r.0);
    for w in all.windows(2) {
        if w[0].0 + w[0].1 > w[1].0 {
            return Err(Refused::Overlap(parts[w[0].3].writer, parts[w[1].3].writer));
        }
    }
    let written: u64 = all.iter().map(|r| r.1).sum();
    let inside_bytes = inside.iter().product::<u64>() * isz as u64;
    if written != inside_bytes {
        return Err(Refused::Hole {
            written,
            inside: inside_bytes,
        });
    }
    let (mut crc, mut at) = (0u32, 0u64);
    for (off, len, run_crc, _) in all {
        crc = zeros_after(crc, off - at);
        crc = paralog_checksum::crc32c_combine(crc, run_crc, len);
        at = off + len;
    }
    Ok(zeros_after(crc, meta.chunk_len() - at))
}

/// The CRC-32C of `a` followed by `n` zero bytes, given `a`'s.
fn zeros_after(mut crc: u32, mut n: u64) -> u32 {
    static ZEROS: [u8; 1 << 16] = [0; 1 << 16];
    while n > 0 {
        let k = n.min(ZEROS.len() as u64);
        crc = paralog_checksum::crc32c_append(crc, &ZEROS[..k as usize]);
        n -= k;
    }
    crc
}

/// The parts' refusal as the put's error, naming the chunk.
pub(crate) fn refusal(
    name: &str,
    id: &VersionId,
    meta: &ArrayMeta,
    i: u64,
    r: Refused,
    paths: &[PathBuf],
) -> Error {
    let chunk = meta.coords(i);
    match r {
        Refused::Overlap(a, b) => Error::PartsOverlap {
            name: name.to_owned(),
            id: id_hex(id),
            what: format!(
                "chunk {chunk:?}: parts written by writers {} and {} overlap",
                id_hex(&a),
                id_hex(&b)
            ),
        },
        Refused::Hole { written, inside } => Error::Put {
            name: name.to_owned(),
            id: id_hex(id),
            why: format!(
                "chunk {chunk:?} is not covered by its parts ({written} of its {inside} bytes inside the array were written); nothing was published"
            ),
        },
        Refused::Foreign(n, what) => Error::Damaged {
            path: paths[n].clone(),
            offset: 0,
            what: format!("a part claim of chunk {chunk:?}: {what}"),
        },
    }
}

/// The part claims of one put found in its staging, by chunk.
#[derive(Default)]
pub(crate) struct Found(BTreeMap<u64, Vec<FoundPart>>);

/// A part claim, where it was read (its path, or its key as shown) and
/// its file name there.
pub(crate) struct FoundPart {
    pub(crate) at: PathBuf,
    pub(crate) file: String,
    pub(crate) claim: PartClaim,
}

/// A chunk whose parts were checked (disjoint, covering it, every writer
/// finished): its CRC-32C, and its parts with where their claims are.
pub(crate) struct Planned {
    pub(crate) chunk: u64,
    pub(crate) crc: u32,
    pub(crate) parts: Vec<FoundPart>,
}

impl Found {
    /// One part claim, read from `at` (its file or key, named `file`), of
    /// a put of `n` chunks.
    pub(crate) fn add(&mut self, at: PathBuf, file: &str, bytes: &[u8], n: u64) -> Result<()> {
        let p = PartClaim::decode(bytes, &at)?;
        if p.chunk >= n || claim_chunk(file) != Some(p.chunk) {
            return Err(Error::Damaged {
                path: at,
                offset: 8,
                what: format!("claims a part of chunk {} of {n}", p.chunk),
            });
        }
        self.0.entry(p.chunk).or_default().push(FoundPart {
            at,
            file: file.to_owned(),
            claim: p,
        });
        Ok(())
    }

    /// The parts of chunk `i` found, taken out.
    pub(crate) fn take(&mut self, i: u64) -> Vec<FoundPart> {
        self.0.remove(&i).unwrap_or_default()
    }

    /// The claims found, in chunk order.
    pub(crate) fn into_claims(self) -> Vec<PartClaim> {
        self.0.into_values().flatten().map(|f| f.claim).collect()
    }

    /// Check each chunk's parts and put the claim a whole chunk would have
    /// in `claims` (its file: [`chunk_file_id`] in the storage directory
    /// its parts' claims name): the chunks to be put together. A chunk
    /// also written whole is an overlap; a part whose writer did not
    /// finish leaves a claim of that writer, which the commit refuses as
    /// it refuses a whole chunk's; parts that overlap or leave a hole, or
    /// that name different storage directories (writers that opened the
    /// store with different `dirs`: their bytes are in different files),
    /// are refused.
    pub(crate) fn plan(
        self,
        (name, id, meta): (&str, &VersionId, &ArrayMeta),
        claims: &mut [Option<Claim>],
        finished: &crate::put::Writers,
    ) -> Result<Vec<Planned>> {
        let mut out = Vec::new();
        for (i, parts) in self.0 {
            let file = chunk_file_id(id, i);
            let dir = parts[0].claim.dir;
            if let Some(p) = parts.iter().find(|p| p.claim.dir != dir) {
                return Err(Error::Put {
                    name: name.to_owned(),
                    id: id_hex(id),
                    why: format!(
                        "chunk {:?}: its parts are in storage directories {dir} and {} (its writers opened the store with different `dirs`); nothing was published",
                        meta.coords(i),
                        p.claim.dir
                    ),
                });
            }
            if claims[i as usize].is_some() {
                return Err(Error::Overlap {
                    name: name.to_owned(),
                    id: id_hex(id),
                    chunk: meta.coords(i),
                });
            }
            let unfinished = parts.iter().find(|p| !finished.contains(&p.claim.writer));
            let crc = match unfinished {
                Some(_) => 0,
                None => {
                    let claims: Vec<PartClaim> = parts.iter().map(|p| p.claim.clone()).collect();
                    compose(meta, i, &claims).map_err(|r| {
                        let paths: Vec<PathBuf> = parts.iter().map(|p| p.at.clone()).collect();
                        refusal(name, id, meta, i, r, &paths)
                    })?
                }
            };
            claims[i as usize] = Some(Claim {
                chunk: file,
                dir,
                block_crc: crc,
                writer: unfinished.unwrap_or(&parts[0]).claim.writer,
            });
            if unfinished.is_none() {
                out.push(Planned {
                    chunk: i,
                    crc,
                    parts,
                });
            }
        }
        Ok(out)
    }
}

impl crate::store::Store {
    /// The chunks of put `id` written in parts (`found`: their placed
    /// claims) checked ([`Found::plan`]) and each made one chunk: its
    /// CRC-32C written as the shared file's trailer, synced when the
    /// store syncs.
    pub(crate) fn compose_parts(
        &self,
        name: &str,
        id: &VersionId,
        meta: &ArrayMeta,
        claims: &mut [Option<Claim>],
        finished: &crate::put::Writers,
        found: Found,
    ) -> Result<()> {
        let planned = found.plan((name, id, meta), claims, finished)?;
        for p in planned {
            let dir = p.parts[0].claim.dir;
            let mut w = self.os.shared_writer(chunk_file_id(id, p.chunk), dir)?;
            w.write_at(meta.chunk_len(), &p.crc.to_le_bytes())?;
            w.finish_file()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grid::{copy_box, DType};

    fn meta(shape: &[u64], chunks: &[u64]) -> ArrayMeta {
        ArrayMeta::new(DType::I16, shape, chunks)
    }

    /// The parts' claims from a whole chunk's bytes (padded, row-major),
    /// as writers holding those boxes would make them.
    fn parts_of(m: &ArrayMeta, i: u64, chunk: &[u8], boxes: &[(&[u64], &[u64])]) -> Vec<PartClaim> {
        boxes
            .iter()
            .enumerate()
            .map(|(n, (start, count))| {
                let mut buf = vec![0u8; count.iter().product::<u64>() as usize * 2];
                copy_box(
                    2,
                    chunk,
                    &m.chunks,
                    start,
                    &mut buf,
                    count,
                    &vec![0; count.len()],
                    count,
                );
                PartClaim::of(m, (i, [n as u8; 16], 0), start, count, &buf)
            })
            .collect()
    }

    fn chunk_bytes(m: &ArrayMeta, i: u64) -> Vec<u8> {
        // Values inside the array, zeros in the padding.
        let inside = m.inside(&m.coords(i));
        let mut b = vec![0u8; m.chunk_len() as usize];
        for_each_index(&vec![0; inside.len()], &inside, |idx| {
            let mut off = 0u64;
            for (d, x) in idx.iter().enumerate() {
                off = off * m.chunks[d] + x;
            }
            let v = (off as u16).wrapping_mul(7919).wrapping_add(i as u16) | 1;
            b[off as usize * 2..off as usize * 2 + 2].copy_from_slice(&v.to_le_bytes());
        });
        b
    }

    #[test]
    fn composed_crc_is_the_whole_chunks() {
        // Rows, columns, a 3-D block split every way, and an edge chunk
        // whose parts cover only what lies inside the array.
        type Boxes = Vec<(Vec<u64>, Vec<u64>)>;
        let cases: Vec<(ArrayMeta, u64, Boxes)> = vec![
            (
                meta(&[8, 6], &[8, 6]),
                0,
                vec![(vec![0, 0], vec![3, 6]), (vec![3, 0], vec![5, 6])],
            ),
            (
                meta(&[8, 6], &[8, 6]),
                0,
                vec![(vec![0, 0], vec![8, 2]), (vec![0, 2], vec![8, 4])],
            ),
            (
                meta(&[4, 4, 4], &[4, 4, 4]),
                0,
                vec![
                    (vec![0, 0, 0], vec![4, 2, 4]),
                    (vec![0, 2, 0], vec![4, 2, 1]),
                    (vec![0, 2, 1], vec![4, 2, 3]),
                ],
            ),
            (
                meta(&[10, 5], &[4, 4]),
                5,
                vec![(vec![0, 0], vec![1, 1]), (vec![1, 0], vec![1, 1])],
            ),
            (
                meta(&[10, 5], &[4, 4]),
                4,
                vec![(vec![0, 0], vec![1, 4]), (vec![1, 0], vec![1, 4])],
            ),
        ];
        for (m, i, boxes) in cases {
            let whole = chunk_bytes(&m, i);
            let b: Vec<(&[u64], &[u64])> = boxes.iter().map(|(s, c)| (&s[..], &c[..])).collect();
            let parts = parts_of(&m, i, &whole, &b);
            assert_eq!(
                compose(&m, i, &parts),
                Ok(paralog_checksum::crc32c(&whole)),
                "{boxes:?}"
            );
        }
    }

    #[test]
    fn overlaps_holes_and_foreign_boxes_are_refused() {
        let m = meta(&[8, 6], &[8, 6]);
        let whole = chunk_bytes(&m, 0);
        let over = parts_of(&m, 0, &whole, &[(&[0, 0], &[4, 6]), (&[3, 0], &[5, 6])]);
        assert_eq!(
            compose(&m, 0, &over),
            Err(Refused::Overlap([0; 16], [1; 16]))
        );
        let cols = parts_of(&m, 0, &whole, &[(&[0, 0], &[8, 3]), (&[2, 2], &[6, 4])]);
        assert!(matches!(compose(&m, 0, &cols), Err(Refused::Overlap(..))));
        let hole = parts_of(&m, 0, &whole, &[(&[0, 0], &[3, 6]), (&[4, 0], &[4, 6])]);
        assert_eq!(
            compose(&m, 0, &hole),
            Err(Refused::Hole {
                written: 84,
                inside: 96
            })
        );
        let mut far = parts_of(&m, 0, &whole, &[(&[0, 0], &[8, 6])]);
        far[0].count[0] = 9;
        assert!(matches!(compose(&m, 0, &far), Err(Refused::Foreign(0, _))));
    }

    #[test]
    fn a_claim_round_trips_and_damage_is_refused() {
        let m = meta(&[8, 6], &[8, 6]);
        let p = &parts_of(&m, 0, &chunk_bytes(&m, 0), &[(&[2, 1], &[3, 4])])[0];
        assert_eq!(p.run_crcs.len(), 3);
        let b = p.encode();
        assert_eq!(&PartClaim::decode(&b, Path::new("x")).unwrap(), p);
        for at in [0, 9, 40, b.len() - 1] {
            let mut d = b.clone();
            d[at] ^= 1;
            assert!(
                PartClaim::decode(&d, Path::new("x")).is_err(),
                "flip at {at}"
            );
        }
        assert!(PartClaim::decode(&b[..b.len() - 1], Path::new("x")).is_err());
    }

    /// The part claim's golden vector (docs/objects-format.md "Part
    /// claims"): a fixed claim's bytes, checked in.
    /// `PARALOG_WRITE_VECTORS=1` writes the file (once, when the format is
    /// made).
    #[test]
    fn part_claim_v1() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/part_v1.bin");
        let fixed = PartClaim {
            chunk: 5,
            writer: std::array::from_fn(|i| 0xa0 + i as u8),
            dir: 3,
            start: vec![8, 0],
            count: vec![16, 4096],
            run_crcs: vec![0x1234_5678],
        };
        if std::env::var_os("PARALOG_WRITE_VECTORS").is_some() {
            std::fs::write(&path, fixed.encode()).unwrap();
        }
        let golden = std::fs::read(&path).unwrap();
        assert_eq!(fixed.encode(), golden);
        assert_eq!(PartClaim::decode(&golden, &path).unwrap(), fixed);
        assert_eq!(golden.len(), 40 + 16 * 2 + 8 + 4 + 4);
        assert_eq!(&golden[..8], b"PLGPART1");
        assert_eq!(u64::from_le_bytes(golden[8..16].try_into().unwrap()), 5);
        assert_eq!(u32::from_le_bytes(golden[32..36].try_into().unwrap()), 3);
        assert_eq!(u32::from_le_bytes(golden[36..40].try_into().unwrap()), 2);
        assert_eq!(u64::from_le_bytes(golden[48..56].try_into().unwrap()), 0);
        assert_eq!(u64::from_le_bytes(golden[72..80].try_into().unwrap()), 1);
        assert_eq!(&golden[80..84], &0x1234_5678u32.to_le_bytes());
        // The file a part of chunk 5 of put 00..0f goes to.
        let put: VersionId = std::array::from_fn(|i| i as u8);
        assert_eq!(
            id_hex(&chunk_file_id(&put, 5)),
            "00010203040586070e090a0b0c0d0e0f"
        );
    }

    #[test]
    fn file_ids_differ_by_chunk_and_from_the_put() {
        let put = *uuid::Uuid::new_v4().as_bytes();
        let ids: std::collections::BTreeSet<_> =
            (0..1000).map(|i| chunk_file_id(&put, i)).collect();
        assert_eq!(ids.len(), 1000);
        assert!(!ids.contains(&put));
        assert_eq!(claim_chunk(&claim_name(42, &put, 3)), Some(42));
        for other in ["publishing", "p", "p12.x", "p+0000000000000000001.x"] {
            assert_eq!(claim_chunk(other), None, "{other}");
        }
    }
}
