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
//! this node and waits for theirs in the remote's staging. Version 4
//! names each away writer's node (its name and node-local directory, from
//! its share record), so that a put waiting for a share says whose server
//! has not copied it. Version 5 adds the parts of the chunks with a part
//! written on another node (crate::parts): their writers copy them to
//! the remote, where the remote commit puts each chunk together; such a
//! chunk's claim names the file the parts make (its CRC-32C combined from
//! theirs). Versions 2 (no such list: every claim on this node), 3 (the
//! away writers' ids alone) and 4 (no parts) are still read.

use std::path::Path;

use crate::error::{Error, Result};
use crate::parts::PartClaim;
use crate::record::{self, ArrayMeta};
use crate::staging::{decode_claim, encode_claim, Claim};
use crate::VersionId;

const MAGIC: &[u8; 8] = b"PLGLOGGD";
const VERSION: u32 = 5;
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
    /// to the remote by those nodes' servers), sorted by writer.
    pub(crate) away: Vec<Away>,
    /// The parts of the chunks put together on the remote (with a part
    /// written on another node), each chunk's together, in chunk order; the
    /// writers' on this node copied by this node's publisher.
    pub(crate) parts: Vec<PartClaim>,
}

/// A writer whose chunks are on another node, and where it ran (empty in
/// a version 3 record, and for a share record of version 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Away {
    pub(crate) writer: [u8; 16],
    pub(crate) node: String,
    pub(crate) local: String,
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
    for a in &c.away {
        b.extend_from_slice(&a.writer);
        b.extend_from_slice(&(a.node.len() as u32).to_le_bytes());
        b.extend_from_slice(&(a.local.len() as u32).to_le_bytes());
        b.extend_from_slice(a.node.as_bytes());
        b.extend_from_slice(a.local.as_bytes());
    }
    b.extend_from_slice(&(c.parts.len() as u32).to_le_bytes());
    for p in &c.parts {
        p.encode_prefixed(&mut b);
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
    if !(2..=VERSION).contains(&version) || u32_at(12) != 0 {
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
    let short = || damaged(40, "lengths that do not add up to the record's");
    // Versions 3 and 4: the away writers after the claims.
    let (away_at, m) = match version {
        2 => (claims_end, 0),
        _ if b.len() >= claims_end + 8 => (claims_end + 4, u32_at(claims_end) as usize),
        _ => return Err(short()),
    };
    let end = b.len() - 4;
    let mut away = Vec::with_capacity(m.min(end));
    let mut at = away_at;
    for _ in 0..m {
        let entry = if version == 3 { 16 } else { 24 };
        if at + entry > end {
            return Err(short());
        }
        let writer: [u8; 16] = b[at..at + 16].try_into().expect("16");
        let (node, local) = if version == 3 {
            (String::new(), String::new())
        } else {
            let (ln, ll) = (u32_at(at + 16) as usize, u32_at(at + 20) as usize);
            if at + entry + ln + ll > end {
                return Err(short());
            }
            let t = at + entry;
            let utf8 = |r: std::ops::Range<usize>| {
                String::from_utf8(b[r.clone()].to_vec())
                    .map_err(|_| damaged(r.start, "an away writer's node that is not UTF-8"))
            };
            let texts = (utf8(t..t + ln)?, utf8(t + ln..t + ln + ll)?);
            at += ln + ll;
            texts
        };
        at += entry;
        away.push(Away {
            writer,
            node,
            local,
        });
    }
    // Version 5: the parts after the away writers.
    let mut parts = Vec::new();
    if version >= 5 {
        if at + 4 > end {
            return Err(short());
        }
        let k = u32_at(at) as usize;
        at += 4;
        for _ in 0..k {
            let (p, next) = PartClaim::decode_prefixed(b, at, end, path)?.ok_or_else(short)?;
            parts.push(p);
            at = next;
        }
    }
    if at != end {
        return Err(short());
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
    if away.windows(2).any(|w| w[0].writer >= w[1].writer) {
        return Err(damaged(away_at, "away writers not sorted or repeated"));
    }
    let claiming: std::collections::BTreeSet<[u8; 16]> = claims
        .iter()
        .map(|c| c.writer)
        .chain(parts.iter().map(|p| p.writer))
        .collect();
    if let Some(a) = away.iter().find(|a| !claiming.contains(&a.writer)) {
        return Err(damaged(
            away_at,
            &format!(
                "away writer {} claims no chunk or part",
                crate::id_hex(&a.writer)
            ),
        ));
    }
    if let Some(p) = parts.iter().find(|p| {
        p.chunk >= n as u64
            || claims[p.chunk as usize].chunk != crate::parts::chunk_file_id(id, p.chunk)
    }) {
        return Err(damaged(
            away_at,
            &format!(
                "a part of chunk {} whose claim is not of a chunk put together from parts",
                p.chunk
            ),
        ));
    }
    Ok(Mark::Record(Commit {
        time_ns,
        name,
        remote,
        meta,
        claims,
        away,
        parts,
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

    fn fixed_away(away: Vec<Away>) -> (VersionId, Commit) {
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
            parts: Vec::new(),
        };
        (id, c)
    }

    /// [`fixed_away`] with chunk 1 written in two parts, rows 0..8 by
    /// writer `20 20 …` (here), rows 8..16 by writer `21 21 …` (on n1).
    fn fixed_parts() -> (VersionId, Commit) {
        let (id, mut c) = fixed_away(away("n1", "/local/n1"));
        c.claims[1].chunk = crate::parts::chunk_file_id(&id, 1);
        c.parts = [0x20u8, 0x21]
            .iter()
            .enumerate()
            .map(|(k, &w)| PartClaim {
                chunk: 1,
                writer: [w; 16],
                dir: 0,
                start: vec![8 * k as u64, 0],
                count: vec![8, 4],
                run_crcs: vec![0x0bad_0000 + k as u32],
            })
            .collect();
        (id, c)
    }

    fn same(got: &Commit, c: &Commit) {
        assert_eq!(
            (got.time_ns, &got.name, &got.remote, &got.meta, &got.away),
            (c.time_ns, &c.name, &c.remote, &c.meta, &c.away)
        );
        assert_eq!(got.claims, c.claims);
        assert_eq!(got.parts, c.parts);
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

    fn away(node: &str, local: &str) -> Vec<Away> {
        vec![Away {
            writer: [0x21; 16],
            node: node.into(),
            local: local.into(),
        }]
    }

    /// The version 3 golden vector (writer `21 21 …` away, its node not
    /// named), written by the previous binary: still read.
    #[test]
    fn golden_vector_v3_still_reads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/logged_v3.bin");
        let (id, c) = fixed_away(away("", ""));
        let golden = std::fs::read(&path).unwrap();
        assert_eq!(u32::from_le_bytes(golden[8..12].try_into().unwrap()), 3);
        let Mark::Record(got) = decode(&golden, &id, &path).unwrap() else {
            panic!("not a record")
        };
        same(&got, &c);
    }

    /// The version 4 golden vector, written by the previous binary: still
    /// read. Writer `21 21 …` is away, on node `n1` whose node-local
    /// directory is `/local/n1`.
    #[test]
    fn golden_vector_v4_still_reads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/logged_v4.bin");
        let (id, c) = fixed_away(away("n1", "/local/n1"));
        let golden = std::fs::read(&path).unwrap();
        assert_eq!(&golden[..8], b"PLGLOGGD");
        assert_eq!(u32::from_le_bytes(golden[8..12].try_into().unwrap()), 4);
        assert_eq!(&golden[16..32], &id);
        // The away list: after the claims, before the CRC: its count, then
        // the writer, the two lengths, the node's name and directory.
        let n = golden.len();
        assert_eq!(&golden[n - 15..n - 4], b"n1/local/n1");
        assert_eq!(&golden[n - 39..n - 23], &[0x21; 16]);
        assert_eq!(&golden[n - 23..n - 15], &[2, 0, 0, 0, 9, 0, 0, 0]);
        assert_eq!(
            u32::from_le_bytes(golden[n - 43..n - 39].try_into().unwrap()),
            1
        );
        let Mark::Record(got) = decode(&golden, &id, &path).unwrap() else {
            panic!("not a record")
        };
        same(&got, &c);
    }

    /// The version 5 golden vector: `PARALOG_WRITE_VECTORS=1` writes it
    /// (once, when the format is made). As version 4's, with chunk 1
    /// written in two parts, one here and one on n1.
    #[test]
    fn golden_vector_v5() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/logged_v5.bin");
        let (id, c) = fixed_parts();
        if std::env::var_os("PARALOG_WRITE_VECTORS").is_some() {
            std::fs::write(&path, encode(&id, &c)).unwrap();
        }
        let golden = std::fs::read(&path).unwrap();
        assert_eq!(encode(&id, &c), golden);
        assert_eq!(&golden[..8], b"PLGLOGGD");
        assert_eq!(u32::from_le_bytes(golden[8..12].try_into().unwrap()), 5);
        // The parts after the away list, before the CRC: their count, then
        // each claim's length and bytes.
        let (p0, p1) = (c.parts[0].encode(), c.parts[1].encode());
        let n = golden.len();
        assert_eq!(&golden[n - 4 - p1.len()..n - 4], &p1[..]);
        let at = n - 4 - p1.len() - 4 - p0.len() - 4 - 4;
        assert_eq!(&golden[at..at + 4], &2u32.to_le_bytes());
        assert_eq!(&golden[at - 11..at], b"n1/local/n1");
        let Mark::Record(got) = decode(&golden, &id, &path).unwrap() else {
            panic!("not a record")
        };
        same(&got, &c);
        // A part of a chunk whose claim is an ordinary one is damage.
        let (id, mut bad) = fixed_parts();
        bad.claims[1].chunk = [0x11; 16];
        let e = decode(&encode(&id, &bad), &id, &path)
            .err()
            .expect("refused");
        assert!(e.to_string().contains("put together from parts"), "{e}");
        // An away writer that claims nothing is damage.
        let (id, mut c) = fixed_away(away("n1", "/l"));
        c.away[0].writer = [0x77; 16];
        let e = decode(&encode(&id, &c), &id, &path).err().expect("refused");
        assert!(e.to_string().contains("claims no chunk"), "{e}");
        // Lengths past the record's end are damage, not a panic.
        let mut b = encode(&id, &fixed_away(away("n1", "/l")).1);
        let at = b.len() - 4 - 4 - 4 - 8; // the node name's length
        b[at..at + 4].copy_from_slice(&1000u32.to_le_bytes());
        let crc = paralog_checksum::crc32c(&b[..b.len() - 4]);
        let len = b.len();
        b[len - 4..].copy_from_slice(&crc.to_le_bytes());
        let e = decode(&b, &id, &path).err().expect("refused");
        assert!(e.to_string().contains("do not add up"), "{e}");
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
