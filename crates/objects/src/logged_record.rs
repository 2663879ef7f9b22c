//! The local commit of a logged put (`staging/<id>/logged`,
//! docs/objects-format.md "The logged commit record"): one self-checking
//! record holding everything its publisher needs (the object's name, the
//! remote's URL, the array record and every chunk's claim), so that the
//! commit makes one file durable instead of every claim, `begin`, `name`
//! and `remote` one by one.
//!
//! Version 1 of the mark was the commit's time as decimal text, the put's
//! other files synced before it; such a mark is still published (from the
//! put's files, as before).

use std::path::Path;

use crate::error::{Error, Result};
use crate::record::{self, ArrayMeta};
use crate::staging::{decode_claim, encode_claim, Claim};
use crate::VersionId;

const MAGIC: &[u8; 8] = b"PLGLOGGD";
const VERSION: u32 = 2;
/// Magic, version, reserved, id, time, four lengths.
const HEAD: usize = 8 + 4 + 4 + 16 + 8 + 4 * 4;
const CLAIM_LEN: usize = 60;

/// What a logged put's commit holds.
pub(crate) struct Commit {
    /// Nanoseconds since 1970: the publisher numbers versions in this order.
    pub(crate) time_ns: u64,
    pub(crate) name: String,
    pub(crate) remote: String,
    pub(crate) meta: ArrayMeta,
    /// Every chunk's claim, in chunk order.
    pub(crate) claims: Vec<Claim>,
}

/// A `logged` mark as found.
pub(crate) enum Mark {
    /// This format: the whole commit.
    Record(Commit),
    /// Version 1: the time only; the rest is in the put's files.
    Time(u64),
    /// Not a whole record: a crash during the commit, which therefore did
    /// not return (never published; `paralog obj gc` collects the put).
    Torn,
}

pub(crate) fn encode(id: &VersionId, c: &Commit) -> Vec<u8> {
    let begin = record::encode(id, &c.meta);
    let mut b = Vec::with_capacity(
        HEAD + c.name.len() + c.remote.len() + begin.len() + 64 * c.claims.len(),
    );
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(id);
    b.extend_from_slice(&c.time_ns.to_le_bytes());
    for n in [c.name.len(), c.remote.len(), begin.len(), c.claims.len()] {
        b.extend_from_slice(&(n as u32).to_le_bytes());
    }
    b.extend_from_slice(c.name.as_bytes());
    b.extend_from_slice(c.remote.as_bytes());
    b.extend_from_slice(&begin);
    for (i, claim) in c.claims.iter().enumerate() {
        b.extend_from_slice(&encode_claim(i as u64, claim));
    }
    let crc = paralog_checksum::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// Read a `logged` mark of the put `id`. A record whose checksum or
/// lengths fail is `Torn`; one that checks but does not decode (another
/// version, a claim out of place, another put's id) is damage, refused
/// naming the file and offset.
pub(crate) fn decode(b: &[u8], id: &VersionId, path: &Path) -> Result<Mark> {
    if !b.starts_with(MAGIC) {
        if b.len() < MAGIC.len() && MAGIC.starts_with(b) {
            return Ok(Mark::Torn);
        }
        return Ok(std::str::from_utf8(b)
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
            .map_or(Mark::Torn, Mark::Time));
    }
    let damaged = |offset: usize, what: &str| Error::Damaged {
        path: path.to_path_buf(),
        offset: offset as u64,
        what: what.into(),
    };
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
    if b.len() < HEAD + 4 || paralog_checksum::crc32c(&b[..b.len() - 4]) != u32_at(b.len() - 4) {
        return Ok(Mark::Torn);
    }
    if u32_at(8) != VERSION || u32_at(12) != 0 {
        return Err(damaged(8, "a logged commit record of another version"));
    }
    if &b[16..32] != id {
        return Err(damaged(16, "the record's id is not its put's"));
    }
    let time_ns = u64::from_le_bytes(b[32..40].try_into().expect("8 bytes"));
    let (nl, rl, bl, n) = (
        u32_at(40) as usize,
        u32_at(44) as usize,
        u32_at(48) as usize,
        u32_at(52) as usize,
    );
    if HEAD + nl + rl + bl + n * CLAIM_LEN + 4 != b.len() {
        return Err(damaged(40, "lengths that do not add up to the record's"));
    }
    let text = |at: usize, len: usize, what: &str| {
        String::from_utf8(b[at..at + len].to_vec()).map_err(|_| damaged(at, what))
    };
    let name = text(HEAD, nl, "a name that is not UTF-8")?;
    let remote = text(HEAD + nl, rl, "a remote URL that is not UTF-8")?;
    let at = HEAD + nl + rl;
    let (rid, meta) = record::decode(&b[at..at + bl], path)?;
    if &rid != id {
        return Err(damaged(at + 16, "the array record's id is not its put's"));
    }
    if meta.n_chunks() != n as u64 {
        return Err(damaged(
            52,
            "a claim count that is not the array's chunk count",
        ));
    }
    let mut claims = Vec::with_capacity(n);
    for i in 0..n {
        let off = at + bl + i * CLAIM_LEN;
        let (idx, c) = decode_claim(&b[off..off + CLAIM_LEN], path)?;
        if idx != i as u64 {
            return Err(damaged(off + 8, "claims out of chunk order"));
        }
        claims.push(c);
    }
    Ok(Mark::Record(Commit {
        time_ns,
        name,
        remote,
        meta,
        claims,
    }))
}

/// Whether the put in `dir` (`staging/<id>/`) is committed on this node:
/// its `logged` mark reads as a record or a version 1 time (a damaged one
/// counts: its publisher reports it, and nothing may collect the put).
pub(crate) fn committed(dir: &Path) -> bool {
    let path = dir.join("logged");
    let Ok(b) = std::fs::read(&path) else {
        return false;
    };
    let id = dir
        .file_name()
        .and_then(|f| f.to_str())
        .and_then(crate::parse_id);
    match id.map(|id| decode(&b, &id, &path)) {
        Some(Ok(Mark::Torn)) | None => false,
        Some(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grid::DType;

    fn fixed() -> (VersionId, Commit) {
        let id: VersionId = std::array::from_fn(|i| i as u8);
        let claims = (0..2u8)
            .map(|k| Claim {
                chunk: [0x10 + k; 16],
                dir: k as u32,
                block_crc: 0xdead_0000 + k as u32,
                writer: [0x20 + k; 16],
            })
            .collect();
        let c = Commit {
            time_ns: 1_795_000_000_123_456_789,
            name: "run/t".into(),
            remote: "objstore:///scratch/objs?dirs=4".into(),
            meta: ArrayMeta::new(DType::I32, &[32, 4], &[16, 4]),
            claims,
        };
        (id, c)
    }

    /// The golden vector (docs/objects-format.md): `PARALOG_WRITE_VECTORS=1`
    /// writes it (once, when the format is made).
    #[test]
    fn golden_vector_v2() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/logged_v2.bin");
        let (id, c) = fixed();
        if std::env::var_os("PARALOG_WRITE_VECTORS").is_some() {
            std::fs::write(&path, encode(&id, &c)).unwrap();
        }
        let golden = std::fs::read(&path).unwrap();
        assert_eq!(encode(&id, &c), golden);
        assert_eq!(&golden[..8], b"PLGLOGGD");
        assert_eq!(u32::from_le_bytes(golden[8..12].try_into().unwrap()), 2);
        assert_eq!(&golden[16..32], &id);
        let Mark::Record(got) = decode(&golden, &id, &path).unwrap() else {
            panic!("not a record")
        };
        assert_eq!(
            (got.time_ns, &got.name, &got.remote, &got.meta),
            (c.time_ns, &c.name, &c.remote, &c.meta)
        );
        let pairs = |v: &[Claim]| -> Vec<_> {
            v.iter()
                .map(|c| (c.chunk, c.dir, c.block_crc, c.writer))
                .collect()
        };
        assert_eq!(pairs(&got.claims), pairs(&c.claims));
    }

    #[test]
    fn a_torn_record_is_no_commit_and_a_checked_wrong_one_is_damage() {
        let (id, c) = fixed();
        let b = encode(&id, &c);
        let p = Path::new("staging/x/logged");
        for cut in [0, 3, 8, 40, b.len() - 1] {
            assert!(
                matches!(decode(&b[..cut], &id, p), Ok(Mark::Torn)),
                "cut at {cut}"
            );
        }
        let mut flipped = b.clone();
        flipped[100] ^= 1;
        assert!(matches!(decode(&flipped, &id, p), Ok(Mark::Torn)));
        let other: VersionId = [9; 16];
        let e = decode(&b, &other, p)
            .err()
            .expect("another put's record")
            .to_string();
        assert!(e.contains("staging/x/logged") && e.contains("16"), "{e}");
        // Version 1: the time as text.
        assert!(matches!(
            decode(b"1795000000123456789\n", &id, p),
            Ok(Mark::Time(1_795_000_000_123_456_789))
        ));
    }
}
