//! A logged put's share on another node (docs/objects.md "Logged mode
//! across nodes"; docs/objects-format.md "A share"): the ranks of a put on
//! a node other than the committing one (rank 0's) write their chunks to
//! their own node-local store, in a staging directory of the put's id
//! marked `share`. Each such writer's `finish` writes one self-checking
//! record of its claims, `s<writer>`, durable: the node's local commit of
//! its part, before the put's agreement. The same bytes go to rank 0 in
//! the commit (an MPI gather), which names every rank's claims and these
//! writers as away in its commit record; this node's server copies each
//! share to the remote's staging under the writer's own id.

use std::path::Path;

use crate::error::{Error, Result};
use crate::parts::PartClaim;
use crate::record::{self, ArrayMeta};
use crate::staging::{decode_claim, encode_claim, Claim};
use crate::{id_hex, VersionId};

const MAGIC: &[u8; 8] = b"PLGSHARE";
const VERSION: u32 = 3;
/// Magic, version, reserved, put id, writer id, four lengths (version 1),
/// six (version 2: the node's name and directory too) or seven (version
/// 3: the part claims' bytes too).
const HEAD_V1: usize = 8 + 4 + 4 + 16 + 16 + 4 * 4;
const HEAD_V2: usize = HEAD_V1 + 2 * 4;
const HEAD: usize = HEAD_V2 + 4;
const CLAIM_LEN: usize = 60;

/// The file in a put's staging directory that makes it a share (begun by
/// a rank of another node than the put's committing one).
pub(crate) const MARK: &str = "share";

/// One writer's share of a logged put.
#[derive(Debug, Clone)]
pub(crate) struct Share {
    pub(crate) writer: [u8; 16],
    pub(crate) name: String,
    pub(crate) remote: String,
    pub(crate) meta: ArrayMeta,
    /// (chunk index, claim), ascending by index.
    pub(crate) claims: Vec<(u64, Claim)>,
    /// Where the writer ran: its node's name (PARALOG_NODE, else the host
    /// name) and node-local directory; empty in a version 1 record.
    pub(crate) node: String,
    pub(crate) local: String,
    /// The writer's parts of chunks (crate::parts), in the order it wrote
    /// them; none in a record of version 1 or 2.
    pub(crate) parts: Vec<PartClaim>,
}

/// The share record's file name in the put's directory.
pub(crate) fn file_name(writer: &[u8; 16]) -> String {
    format!("s{}", id_hex(writer))
}

/// Whether a file name is a share record's (`s` and a writer id).
pub(crate) fn writer_of(file: &str) -> Option<[u8; 16]> {
    file.strip_prefix('s').and_then(crate::parse_id)
}

/// Whether `dir` (a put's staging directory) holds a share record that
/// is not torn (a damaged one counts): a node's local commit of its part,
/// which nothing may collect before its server copied it.
pub(crate) fn holds_shares(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|es| {
        es.flatten().any(|e| {
            writer_of(&e.file_name().to_string_lossy()).is_some()
                && std::fs::read(e.path()).is_ok_and(|b| !matches!(decode(&b, &e.path()), Ok(None)))
        })
    })
}

pub(crate) fn encode(id: &VersionId, s: &Share) -> Vec<u8> {
    let begin = record::encode(id, &s.meta);
    let texts = [
        s.name.as_bytes(),
        s.remote.as_bytes(),
        s.node.as_bytes(),
        s.local.as_bytes(),
    ];
    let mut parts = Vec::new();
    for p in &s.parts {
        p.encode_prefixed(&mut parts);
    }
    let mut b = Vec::with_capacity(
        HEAD + texts.iter().map(|t| t.len()).sum::<usize>()
            + begin.len()
            + CLAIM_LEN * s.claims.len()
            + parts.len()
            + 4,
    );
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(id);
    b.extend_from_slice(&s.writer);
    for t in texts {
        b.extend_from_slice(&(t.len() as u32).to_le_bytes());
    }
    for n in [begin.len(), s.claims.len(), parts.len()] {
        b.extend_from_slice(&(n as u32).to_le_bytes());
    }
    for t in texts {
        b.extend_from_slice(t);
    }
    b.extend_from_slice(&begin);
    for (i, c) in &s.claims {
        b.extend_from_slice(&encode_claim(*i, c));
    }
    b.extend_from_slice(&parts);
    let crc = paralog_checksum::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// A record's header: its size and its lengths.
struct Header {
    head: usize,
    /// name, remote, node, local.
    texts: [usize; 4],
    /// The array record's bytes.
    begin: usize,
    claims: usize,
    /// The part claims' bytes (each its length and its claim).
    parts: usize,
}

/// The header of the record at the start of `b`; None: not even a
/// header, or another version.
fn header(b: &[u8]) -> Option<Header> {
    let u = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes")) as usize;
    if b.len() < HEAD_V1 {
        return None;
    }
    let (head, texts, at) = match u(8) as u32 {
        1 => (HEAD_V1, [u(48), u(52), 0, 0], 56),
        2 if b.len() >= HEAD_V2 => (HEAD_V2, [u(48), u(52), u(56), u(60)], 64),
        3 if b.len() >= HEAD => (HEAD, [u(48), u(52), u(56), u(60)], 64),
        _ => return None,
    };
    Some(Header {
        head,
        texts,
        begin: u(at),
        claims: u(at + 4),
        parts: if head == HEAD { u(at + 8) } else { 0 },
    })
}

/// The length of the share record at the start of `b`, from its header
/// (None: not even a header): how the commit splits the gathered shares.
pub(crate) fn record_len(b: &[u8]) -> Option<usize> {
    let h = header(b)?;
    Some(h.head + h.texts.iter().sum::<usize>() + h.begin + CLAIM_LEN * h.claims + h.parts + 4)
}

/// Decode a share record. `None`: torn (short, or its CRC-32C fails): a
/// writer killed during its `finish`, whose put's commit therefore never
/// happened. A record that checks but does not decode is damage, refused
/// naming the file (or the rank's bytes) and the offset.
pub(crate) fn decode(b: &[u8], path: &Path) -> Result<Option<(VersionId, Share)>> {
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
    if b.len() < HEAD_V1 + 4 || paralog_checksum::crc32c(&b[..b.len() - 4]) != u32_at(b.len() - 4) {
        return Ok(None);
    }
    let damaged = |offset: usize, what: &str| Error::Damaged {
        path: path.to_path_buf(),
        offset: offset as u64,
        what: what.into(),
    };
    if &b[..8] != MAGIC {
        return Err(damaged(0, "not a share record (magic)"));
    }
    let Some(h) = header(b).filter(|_| u32_at(12) == 0) else {
        return Err(damaged(8, "a share record of another version"));
    };
    let id: VersionId = b[16..32].try_into().expect("16");
    let writer: [u8; 16] = b[32..48].try_into().expect("16");
    if record_len(b) != Some(b.len()) {
        return Err(damaged(48, "lengths that do not add up to the record's"));
    }
    let (bl, n) = (h.begin, h.claims);
    let mut at = h.head;
    let mut texts = Vec::with_capacity(4);
    for (len, what) in h.texts.iter().zip([
        "a name that is not UTF-8",
        "a remote URL that is not UTF-8",
        "a node name that is not UTF-8",
        "a node-local directory that is not UTF-8",
    ]) {
        texts.push(String::from_utf8(b[at..at + len].to_vec()).map_err(|_| damaged(at, what))?);
        at += len;
    }
    let [name, remote, node, local]: [String; 4] = texts.try_into().expect("4 texts");
    let (rid, meta) = record::decode(&b[at..at + bl], path)?;
    if rid != id {
        return Err(damaged(at + 16, "the array record's id is not the share's"));
    }
    let mut claims: Vec<(u64, Claim)> = Vec::with_capacity(n);
    for k in 0..n {
        let off = at + bl + k * CLAIM_LEN;
        let (i, c) = decode_claim(&b[off..off + CLAIM_LEN], path)?;
        if i >= meta.n_chunks() || claims.last().is_some_and(|(j, _)| *j >= i) {
            return Err(damaged(
                off + 8,
                "claims out of chunk order or outside the grid",
            ));
        }
        if c.writer != writer {
            return Err(damaged(off + 40, "a claim of another writer"));
        }
        claims.push((i, c));
    }
    let mut parts = Vec::new();
    let mut at = at + bl + n * CLAIM_LEN;
    let end = at + h.parts;
    while at < end {
        let Some((p, next)) = PartClaim::decode_prefixed(b, at, end, path)? else {
            return Err(damaged(at, "a part claim's length past the record's end"));
        };
        if p.chunk >= meta.n_chunks() || p.writer != writer {
            return Err(damaged(
                at + 4,
                "a part claim of another writer or outside the grid",
            ));
        }
        parts.push(p);
        at = next;
    }
    Ok(Some((
        id,
        Share {
            writer,
            name,
            remote,
            meta,
            claims,
            node,
            local,
            parts,
        },
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grid::DType;

    fn fixed() -> (VersionId, Share) {
        let id: VersionId = std::array::from_fn(|i| i as u8);
        let writer = [0x21; 16];
        let claims = [1u64, 3]
            .iter()
            .map(|&i| {
                (
                    i,
                    Claim {
                        chunk: [0x10 + i as u8; 16],
                        dir: 0,
                        block_crc: 0xbeef_0000 + i as u32,
                        writer,
                    },
                )
            })
            .collect();
        let s = Share {
            writer,
            name: "run/t".into(),
            remote: "objstore:///scratch/objs?dirs=4".into(),
            meta: ArrayMeta::new(DType::I32, &[64, 4], &[16, 4]),
            claims,
            node: "n1".into(),
            local: "/local/n1".into(),
            parts: Vec::new(),
        };
        (id, s)
    }

    /// [`fixed`] with a part of chunk 2 (rows 8..16 of its 16).
    fn fixed_parts() -> (VersionId, Share) {
        let (id, mut s) = fixed();
        s.parts = vec![PartClaim {
            chunk: 2,
            writer: s.writer,
            dir: 0,
            start: vec![8, 0],
            count: vec![8, 4],
            run_crcs: vec![0x600d_f00d],
        }];
        (id, s)
    }

    fn same(got: &Share, s: &Share) {
        assert_eq!(
            (&got.writer, &got.name, &got.remote, &got.meta, &got.claims),
            (&s.writer, &s.name, &s.remote, &s.meta, &s.claims)
        );
        assert_eq!((&got.node, &got.local), (&s.node, &s.local));
        assert_eq!(got.parts, s.parts);
    }

    /// The version 1 golden vector, written by the previous binary: still
    /// read, its writer's node unknown.
    #[test]
    fn golden_vector_v1_still_reads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/share_v1.bin");
        let (id, mut s) = fixed();
        (s.node, s.local) = (String::new(), String::new());
        let golden = std::fs::read(&path).unwrap();
        assert_eq!(u32::from_le_bytes(golden[8..12].try_into().unwrap()), 1);
        assert_eq!(record_len(&golden), Some(golden.len()));
        let (gid, got) = decode(&golden, &path).unwrap().expect("whole");
        assert_eq!(gid, id);
        same(&got, &s);
    }

    /// The version 2 golden vector (no parts), written by the previous
    /// binary: still read.
    #[test]
    fn golden_vector_v2_still_reads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/share_v2.bin");
        let (id, s) = fixed();
        let golden = std::fs::read(&path).unwrap();
        assert_eq!(u32::from_le_bytes(golden[8..12].try_into().unwrap()), 2);
        // The texts after the six lengths: name, remote, node, local.
        let texts = b"run/tobjstore:///scratch/objs?dirs=4n1/local/n1";
        assert_eq!(&golden[72..72 + texts.len()], texts);
        assert_eq!(record_len(&golden), Some(golden.len()));
        let (gid, got) = decode(&golden, &path).unwrap().expect("whole");
        assert_eq!(gid, id);
        same(&got, &s);
    }

    /// The version 3 golden vector (docs/objects-format.md "A share"):
    /// `PARALOG_WRITE_VECTORS=1` writes it (once, when the format is made).
    #[test]
    fn golden_vector_v3() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/share_v3.bin");
        let (id, s) = fixed_parts();
        if std::env::var_os("PARALOG_WRITE_VECTORS").is_some() {
            std::fs::write(&path, encode(&id, &s)).unwrap();
        }
        let golden = std::fs::read(&path).unwrap();
        assert_eq!(encode(&id, &s), golden);
        assert_eq!(&golden[..8], b"PLGSHARE");
        assert_eq!(u32::from_le_bytes(golden[8..12].try_into().unwrap()), 3);
        assert_eq!(&golden[16..32], &id);
        assert_eq!(&golden[32..48], &s.writer);
        // The seventh length: the parts' bytes, one claim and its length.
        let part = s.parts[0].encode();
        assert_eq!(
            u32::from_le_bytes(golden[72..76].try_into().unwrap()) as usize,
            4 + part.len()
        );
        // The texts after the seven lengths: name, remote, node, local.
        let texts = b"run/tobjstore:///scratch/objs?dirs=4n1/local/n1";
        assert_eq!(&golden[76..76 + texts.len()], texts);
        // The part claim last, before the record's CRC.
        let n = golden.len();
        assert_eq!(&golden[n - 4 - part.len()..n - 4], &part[..]);
        assert_eq!(record_len(&golden), Some(golden.len()));
        let (gid, got) = decode(&golden, &path).unwrap().expect("whole");
        assert_eq!(gid, id);
        same(&got, &s);
        // A part claim of another writer, its CRC made to hold: damage.
        let (id, mut bad) = fixed_parts();
        bad.parts[0].writer = [0x55; 16];
        let e = decode(&encode(&id, &bad), &path).expect_err("refused");
        assert!(e.to_string().contains("another writer"), "{e}");
    }

    #[test]
    fn a_torn_share_is_no_commit_and_a_checked_wrong_one_is_damage() {
        let (id, s) = fixed_parts();
        let b = encode(&id, &s);
        let p = Path::new("staging/x/s21");
        for cut in [0, 8, 63, 71, 75, b.len() - 20, b.len() - 1] {
            assert!(decode(&b[..cut], p).unwrap().is_none(), "cut at {cut}");
        }
        let mut flipped = b.clone();
        flipped[70] ^= 1;
        assert!(decode(&flipped, p).unwrap().is_none());
        // Claims out of order, CRC made to hold: damage, named.
        let mut bad = s.clone();
        bad.claims.reverse();
        let e = decode(&encode(&id, &bad), p).expect_err("refused");
        assert!(
            e.to_string().contains("staging/x/s21") && e.to_string().contains("out of chunk order"),
            "{e}"
        );
    }
}
