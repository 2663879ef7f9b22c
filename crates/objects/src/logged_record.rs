//! The local commit of a logged put (`staging/<id>/logged`,
//! docs/objects-format.md "The logged commit record"): one self-checking
//! record holding everything its publisher needs (the object's name, the
//! remote's URL, the array record and every chunk's claim), so that the
//! commit makes one file durable instead of every claim, `begin`, `name`
//! and `remote` one by one.
//!
//! Version 1 of the mark was the commit's time as decimal text, the put's
//! other files synced before it; such a mark is still published (from the
//! put's files, as before). Version 3 adds the writers whose shares are on
//! other nodes (crate::share): the publisher copies every other claim from
//! this node and waits for theirs in the remote's staging. Version 2 (no
//! such list: every claim on this node) is still read.

use std::path::Path;

use crate::error::{Error, Result};
use crate::record::{self, ArrayMeta};
use crate::staging::{decode_claim, encode_claim, Claim};
use crate::VersionId;

const MAGIC: &[u8; 8] = b"PLGLOGGD";
const VERSION: u32 = 3;
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
    /// The writers whose chunks are on other nodes (their shares, copied
    /// to the remote by those nodes' servers), sorted.
    pub(crate) away: Vec<[u8; 16]>,
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
    b.extend_from_slice(&(c.away.len() as u32).to_le_bytes());
    for w in &c.away {
        b.extend_from_slice(w);
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
    let version = u32_at(8);
    if !(version == 2 || version == VERSION) || u32_at(12) != 0 {
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
    let claims_end = HEAD + nl + rl + bl + n * CLAIM_LEN;
    // Version 3: the away writers' count and ids after the claims.
    let away_at = claims_end + 4;
    let m = match version {
        2 => 0,
        _ if b.len() >= away_at + 4 => u32_at(claims_end) as usize,
        _ => return Err(damaged(40, "lengths that do not add up to the record's")),
    };
    let end = if version == 2 {
        claims_end
    } else {
        away_at + 16 * m
    };
    if end + 4 != b.len() {
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
    let away: Vec<[u8; 16]> = (0..m)
        .map(|k| {
            b[away_at + 16 * k..away_at + 16 * (k + 1)]
                .try_into()
                .expect("16")
        })
        .collect();
    if away.windows(2).any(|w| w[0] >= w[1]) {
        return Err(damaged(away_at, "away writers not sorted or repeated"));
    }
    if let Some(w) = away
        .iter()
        .find(|w| !claims.iter().any(|c| &c.writer == *w))
    {
        return Err(damaged(
            away_at,
            &format!("away writer {} claims no chunk", crate::id_hex(w)),
        ));
    }
    Ok(Mark::Record(Commit {
        time_ns,
        name,
        remote,
        meta,
        claims,
        away,
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
        fixed_away(Vec::new())
    }

    fn fixed_away(away: Vec<[u8; 16]>) -> (VersionId, Commit) {
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
            away,
        };
        (id, c)
    }

    fn same(got: &Commit, c: &Commit) {
        assert_eq!(
            (got.time_ns, &got.name, &got.remote, &got.meta, &got.away),
            (c.time_ns, &c.name, &c.remote, &c.meta, &c.away)
        );
        assert_eq!(got.claims, c.claims);
    }

    /// The version 2 golden vector (docs/objects-format.md), written by the
    /// previous binary: still read, as a put whose claims are all here.
    #[test]
    fn golden_vector_v2_still_reads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/logged_v2.bin");
        let (id, c) = fixed();
        let golden = std::fs::read(&path).unwrap();
        assert_eq!(&golden[..8], b"PLGLOGGD");
        assert_eq!(u32::from_le_bytes(golden[8..12].try_into().unwrap()), 2);
        let Mark::Record(got) = decode(&golden, &id, &path).unwrap() else {
            panic!("not a record")
        };
        same(&got, &c);
    }

    /// The version 3 golden vector: `PARALOG_WRITE_VECTORS=1` writes it
    /// (once, when the format is made). Writer `21 21 …` is away.
    #[test]
    fn golden_vector_v3() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/logged_v3.bin");
        let (id, c) = fixed_away(vec![[0x21; 16]]);
        if std::env::var_os("PARALOG_WRITE_VECTORS").is_some() {
            std::fs::write(&path, encode(&id, &c)).unwrap();
        }
        let golden = std::fs::read(&path).unwrap();
        assert_eq!(encode(&id, &c), golden);
        assert_eq!(&golden[..8], b"PLGLOGGD");
        assert_eq!(u32::from_le_bytes(golden[8..12].try_into().unwrap()), 3);
        assert_eq!(&golden[16..32], &id);
        // The away list: after the claims, before the CRC.
        let n = golden.len();
        assert_eq!(&golden[n - 20..n - 4], &[0x21; 16]);
        assert_eq!(
            u32::from_le_bytes(golden[n - 24..n - 20].try_into().unwrap()),
            1
        );
        let Mark::Record(got) = decode(&golden, &id, &path).unwrap() else {
            panic!("not a record")
        };
        same(&got, &c);
        // An away writer that claims nothing is damage.
        let (id, c) = fixed_away(vec![[0x77; 16]]);
        let e = decode(&encode(&id, &c), &id, &path).err().expect("refused");
        assert!(e.to_string().contains("claims no chunk"), "{e}");
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
