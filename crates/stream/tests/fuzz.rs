//! The segment decoder against damaged input (proptest; more cases with
//! `PROPTEST_CASES=100000`): a segment of random batches, then cut short
//! at a random byte, or with random bytes flipped, or replaced by noise.
//! The decoder must never panic; what it returns as committed batches must
//! be exactly the batches written, in order; and where it stops it either
//! reports a torn tail (only at the end of the file) or refuses the bytes
//! naming the file and an offset inside it.

use std::io::Write;
use std::path::Path;

use paralog_stream::format::*;
use paralog_stream::objects::ObjectIndex;
use paralog_stream::segment::{read_batch, Next};
use proptest::prelude::*;

const PARTS: u32 = 4;

/// (partition, key, payload) of each event of each batch.
type Batches = Vec<Vec<(u32, Option<Vec<u8>>, Vec<u8>)>>;
/// Each batch's (start, end), and how reading ended.
type ReadOut = (Vec<(u64, u64)>, Result<Option<String>, String>);

/// A segment body (no header) of `batches`, each a list of (partition,
/// key, payload); returns the bytes and each batch's (start, end).
fn build(batches: &Batches) -> (Vec<u8>, Vec<(u64, u64)>) {
    let mut out = Vec::new();
    let mut spans = Vec::new();
    let mut seq = 0u64;
    for b in batches {
        let start = out.len();
        let mut body = Vec::new();
        for (p, k, v) in b {
            encode_frame(&mut body, *p, 1, seq, seq as i64, k.as_deref(), v);
            seq += 1;
        }
        BatchHeader {
            kind: KIND_LOCAL_BATCH,
            body: body.len() as u64,
            count: b.len() as u32,
            partition: ANY_PARTITION,
            first: seq - b.len() as u64,
            round: 0,
        }
        .encode(&mut out);
        out.extend_from_slice(&body);
        encode_commit(&mut out, start, start as u64, b.len() as u32);
        spans.push((start as u64, out.len() as u64));
    }
    (out, spans)
}

/// Read every batch from 0: the committed batches' spans, and how it ended.
fn read_all(path: &Path, bytes: &[u8]) -> ReadOut {
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(bytes).unwrap();
    drop(f);
    let f = std::fs::File::open(path).unwrap();
    let len = bytes.len() as u64;
    let mut pos = 0;
    let mut got = Vec::new();
    loop {
        match read_batch(&f, path, pos, len, KIND_LOCAL_BATCH, PARTS) {
            Ok(Next::Batch(b)) => {
                got.push((b.pos, b.end));
                pos = b.end;
            }
            Ok(Next::End) => return (got, Ok(None)),
            Ok(Next::Torn(why)) => return (got, Ok(Some(why))),
            Err(e) => return (got, Err(e.to_string())),
        }
    }
}

fn batches() -> impl Strategy<Value = Batches> {
    let event = (
        0..PARTS,
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
        proptest::collection::vec(any::<u8>(), 0..40),
    );
    proptest::collection::vec(proptest::collection::vec(event, 1..5), 1..6)
}

proptest! {
    /// Cut short anywhere: the whole batches before the cut are read, the
    /// rest is a torn tail (never an error, never a batch).
    #[test]
    fn truncated(bs in batches(), cut in any::<prop::sample::Index>()) {
        let (bytes, spans) = build(&bs);
        let at = cut.index(bytes.len() + 1);
        let dir = tempfile::tempdir().unwrap();
        let (got, end) = read_all(&dir.path().join("seg"), &bytes[..at]);
        let whole: Vec<_> = spans.iter().copied().filter(|s| s.1 <= at as u64).collect();
        prop_assert_eq!(&got, &whole);
        match end {
            Ok(None) => prop_assert!(whole.last().map_or(0, |s| s.1) == at as u64),
            Ok(Some(_)) => prop_assert!(whole.last().map_or(0, |s| s.1) < at as u64),
            Err(e) => prop_assert!(false, "a truncation is an error: {}", e),
        }
    }

    /// Bytes flipped: the batches returned are the written ones (a flip
    /// is never read as data), and a stop before the end is a torn tail of
    /// the last batch or an error naming the file and an offset.
    #[test]
    fn flipped(bs in batches(), flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4)) {
        let (mut bytes, spans) = build(&bs);
        let mut first = usize::MAX;
        for (i, x) in &flips {
            let i = i.index(bytes.len());
            bytes[i] ^= x;
            first = first.min(i);
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg");
        let (got, end) = read_all(&path, &bytes);
        // Every batch returned is a written batch that no flip touched.
        for g in &got {
            prop_assert!(spans.contains(g));
            prop_assert!(g.1 as usize <= first, "batch {:?} read although byte {} was flipped", g, first);
        }
        match end {
            Ok(None) => prop_assert!(false, "damage read to the end"),
            // Only the last batch can look like an unfinished flush: a
            // damaged batch with bytes after it is refused.
            Ok(Some(_)) => prop_assert_eq!(got.len() + 1, spans.len(), "torn before the last batch"),
            Err(e) => {
                prop_assert!(e.contains(&path.display().to_string()), "{}", e);
                prop_assert!(e.contains("offset"), "{}", e);
            }
        }
    }

    /// Noise: no panic, no batch.
    #[test]
    fn noise(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let dir = tempfile::tempdir().unwrap();
        let (got, _) = read_all(&dir.path().join("seg"), &bytes);
        prop_assert!(got.is_empty());
        // And the record decoders on the same noise.
        let p = Path::new("noise");
        let _ = Cut::decode(&bytes, p, 0);
        let _ = Watermark::decode(&bytes, p);
        let _ = GroupOffsets::decode(&bytes, p);
        let _ = ObjectIndex::decode(&bytes, p);
        let _ = paralog_stream::object_trim::TrimRequest::decode(&bytes, p);
        let _ = Header::decode(&bytes, KIND_SEGMENT, p);
        let _ = Base::decode(&bytes, p, 0);
    }

    /// A base record (kind 12) encodes and decodes to itself; with bytes
    /// flipped it is refused naming the file, never read as another base.
    #[test]
    fn base_record(round in 1u64.., parts in proptest::collection::vec(any::<(u64, u64, u64)>(), 1..6),
                   ids in proptest::collection::btree_map(any::<u64>(), any::<u64>(), 0..6),
                   flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 0..3)) {
        let base = Base {
            round,
            parts: parts.iter().map(|&(next, seg_first, seg_end)| PartMark { next, seg_first, seg_end }).collect(),
            producers: ids.into_iter().collect(),
        };
        let orig = base.encode();
        let mut b = orig.clone();
        let p = Path::new("/named/cuts");
        prop_assert_eq!(&Base::decode(&b, p, 0).unwrap(), &base);
        for (i, x) in &flips {
            let i = i.index(b.len());
            b[i] ^= x;
        }
        if b != orig {
            let e = Base::decode(&b, p, 0);
            prop_assert!(e.is_err(), "a damaged base decoded");
            prop_assert!(e.unwrap_err().to_string().contains("/named/cuts"));
        }
    }

    /// A valid batch header in front of noise: the header's length leads
    /// nowhere dangerous.
    #[test]
    fn header_then_noise(body in 0u64..1_000_000, count in 1u32..100, tail in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut bytes = Vec::new();
        BatchHeader { kind: KIND_LOCAL_BATCH, body, count, partition: ANY_PARTITION, first: 0, round: 0 }.encode(&mut bytes);
        bytes.extend_from_slice(&tail);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seg");
        let (got, _) = read_all(&path, &bytes);
        prop_assert!(got.is_empty());
    }
}
