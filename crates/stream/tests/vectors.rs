//! Golden vectors of format versions 1 and 2 (docs/streams-format.md;
//! version 2 adds the cut log's base record, kind 12): each record
//! encoded from fixed values must equal the file in tests/vectors, and the
//! file must decode to those values. A change to a layout shows up here;
//! it needs a new version, and these files stay and keep decoding.
//! `PARALOG_BLESS=1 cargo test -p paralog-stream --test vectors` writes
//! them (only for a new version's new files).

use std::path::{Path, PathBuf};

use paralog_stream::format::*;
use paralog_stream::object_trim::{TrimRequest, TrimRule};
use paralog_stream::objects::{Object, ObjectIndex, PartIndex, Retired};
use paralog_stream::segment::{read_batch, Next};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors")
}

fn golden(name: &str, bytes: &[u8]) {
    let path = dir().join(name);
    if std::env::var_os("PARALOG_BLESS").is_some() && !path.exists() {
        std::fs::write(&path, bytes).unwrap();
    }
    let want = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(bytes, &want[..], "{name} differs from its golden vector");
}

fn segment_header() -> Header {
    Header {
        kind: KIND_SEGMENT,
        id: 0x0123_4567_89ab_cdef,
        first: 1_700_000_000_000_000_000,
        partition: 4242,
        partitions: 3,
        name: "telemetry".into(),
    }
}

/// A producer's segment: header, then one batch of two events (one with a
/// key), then its commit record.
fn local_segment() -> Vec<u8> {
    let h = segment_header();
    let mut seg = h.encode();
    let start = seg.len();
    let mut body = Vec::new();
    encode_frame(
        &mut body,
        0,
        h.id,
        7,
        1_700_000_000_000_000_123,
        None,
        b"hello",
    );
    encode_frame(
        &mut body,
        2,
        h.id,
        8,
        1_700_000_000_000_000_456,
        Some(b"sensor-9"),
        b"\x00\x01\x02",
    );
    BatchHeader {
        kind: KIND_LOCAL_BATCH,
        body: body.len() as u64,
        count: 2,
        partition: ANY_PARTITION,
        first: 7,
        round: 0,
    }
    .encode(&mut seg);
    seg.extend_from_slice(&body);
    encode_commit(&mut seg, start, start as u64, 2);
    seg
}

#[test]
fn segment_header_v1() {
    let h = segment_header();
    golden("segment_header_v1.bin", &h.encode());
    let b = std::fs::read(dir().join("segment_header_v1.bin")).unwrap();
    assert_eq!(Header::decode(&b, KIND_SEGMENT, Path::new("v")).unwrap(), h);
    assert_eq!(b.len() as u64, h.len());
    // The kind is part of the record: a segment header is not a stream record.
    assert!(Header::decode(&b, KIND_STREAM, Path::new("v")).is_err());
}

#[test]
fn local_segment_v1() {
    let seg = local_segment();
    golden("local_segment_v1.bin", &seg);
    let path = dir().join("local_segment_v1.bin");
    let f = std::fs::File::open(&path).unwrap();
    let len = f.metadata().unwrap().len();
    let at = segment_header().len();
    let Next::Batch(b) = read_batch(&f, &path, at, len, KIND_LOCAL_BATCH, 3).unwrap() else {
        panic!("no batch")
    };
    assert_eq!(b.end, len);
    assert_eq!(b.header.first, 7);
    let ev: Vec<Event> = b.events().collect();
    assert_eq!(ev.len(), 2);
    assert_eq!(
        (
            ev[0].partition,
            ev[0].seq,
            ev[0].time_ns,
            ev[0].key.as_deref(),
            &ev[0].payload[..]
        ),
        (0, 7, 1_700_000_000_000_000_123, None, &b"hello"[..])
    );
    assert_eq!(
        (
            ev[1].partition,
            ev[1].seq,
            ev[1].key.as_deref(),
            &ev[1].payload[..]
        ),
        (2, 8, Some(&b"sensor-9"[..]), &b"\x00\x01\x02"[..])
    );
    assert!(matches!(
        read_batch(&f, &path, len, len, KIND_LOCAL_BATCH, 3).unwrap(),
        Next::End
    ));
    // Read as a remote batch (another kind), it is refused, not misread.
    assert!(
        read_batch(&f, &path, at, len, KIND_REMOTE_BATCH, 3).is_err()
            || matches!(
                read_batch(&f, &path, at, len, KIND_REMOTE_BATCH, 3).unwrap(),
                Next::Torn(_)
            )
    );
}

#[test]
fn part_segment_and_stream_v1() {
    let h = Header {
        kind: KIND_PART_SEGMENT,
        id: 0,
        first: 1000,
        partition: 2,
        partitions: 3,
        name: "telemetry".into(),
    };
    golden("part_segment_header_v1.bin", &h.encode());
    let s = Header {
        kind: KIND_STREAM,
        id: 0,
        first: 0,
        partition: 0,
        partitions: 3,
        name: "telemetry".into(),
    };
    golden("stream_v1.bin", &s.encode());
    let b = std::fs::read(dir().join("part_segment_header_v1.bin")).unwrap();
    assert_eq!(
        Header::decode(&b, KIND_PART_SEGMENT, Path::new("v")).unwrap(),
        h
    );
}

#[test]
fn cut_watermark_group_v1() {
    let cut = Cut {
        round: 5,
        ranges: vec![
            Range {
                producer: 0xaa,
                from: 61,
                to: 400,
            },
            Range {
                producer: 0xbb,
                from: 61,
                to: 900,
            },
        ],
        parts: vec![
            PartCut {
                first: 10,
                count: 4,
                seg_first: 0,
                pos: 800,
                len: 300,
            },
            PartCut {
                first: 7,
                count: 0,
                seg_first: 0,
                pos: 500,
                len: 0,
            },
        ],
    };
    golden("cut_v1.bin", &cut.encode());
    let b = std::fs::read(dir().join("cut_v1.bin")).unwrap();
    assert_eq!(Cut::decode(&b, Path::new("v"), 0).unwrap(), cut);

    let wm = Watermark {
        round: 5,
        parts: vec![
            PartMark {
                next: 14,
                seg_first: 0,
                seg_end: 1100,
            },
            PartMark {
                next: 7,
                seg_first: 0,
                seg_end: 500,
            },
        ],
    };
    golden("watermark_v1.bin", &wm.encode());
    let b = std::fs::read(dir().join("watermark_v1.bin")).unwrap();
    assert_eq!(Watermark::decode(&b, Path::new("v")).unwrap(), wm);

    let g = GroupOffsets {
        offsets: vec![14, 3],
    };
    golden("group_v1.bin", &g.encode());
    let b = std::fs::read(dir().join("group_v1.bin")).unwrap();
    assert_eq!(GroupOffsets::decode(&b, Path::new("v")).unwrap(), g);

    let ix = object_index();
    golden("object_index_v1.bin", &ix.encode());
    let b = std::fs::read(dir().join("object_index_v1.bin")).unwrap();
    assert_eq!(ObjectIndex::decode(&b, Path::new("v")).unwrap(), ix);

    golden("trim_request_v1.bin", &trim_request().encode());
    let b = std::fs::read(dir().join("trim_request_v1.bin")).unwrap();
    assert_eq!(
        TrimRequest::decode(&b, Path::new("v")).unwrap(),
        trim_request()
    );
}

/// The cut log's base record (kind 12, format version 2): two
/// partitions, two producers whose segments are still on the node.
fn base() -> Base {
    Base {
        round: 9,
        parts: vec![
            PartMark {
                next: 14,
                seg_first: 0,
                seg_end: 1100,
            },
            PartMark {
                next: 70,
                seg_first: 64,
                seg_end: 500,
            },
        ],
        producers: vec![(0xaa, 400), (0xbb, 61)],
    }
}

/// A rolled producer segment's header (kind 13, format version 2): kind
/// 1's layout, naming the segment it continues where kind 1 has its
/// creation time.
#[test]
fn rolled_segment_header_v2() {
    let h = Header {
        kind: KIND_ROLLED_SEGMENT,
        first: 0x0123_4567_89ab_cdef,
        id: 0x1111_2222_3333_4444,
        ..segment_header()
    };
    golden("rolled_segment_header_v2.bin", &h.encode());
    let b = std::fs::read(dir().join("rolled_segment_header_v2.bin")).unwrap();
    assert_eq!(&b[8..12], &[2, 0, 13, 0]);
    // Read where a producer's segment is expected.
    assert_eq!(Header::decode(&b, KIND_SEGMENT, Path::new("v")).unwrap(), h);
}

#[test]
fn base_v2() {
    golden("base_v2.bin", &base().encode());
    let b = std::fs::read(dir().join("base_v2.bin")).unwrap();
    assert_eq!(&b[8..10], &[2, 0], "a base is format version 2");
    assert_eq!(Base::decode(&b, Path::new("v"), 0).unwrap(), base());
    let p = Path::new("/named/cuts");
    // A base claiming version 1, or a cut claiming version 2, is refused
    // (the CRC made right, so that the version alone is wrong).
    let reseal = |mut r: Vec<u8>, v: u8| {
        r[8] = v;
        let n = r.len() - 4;
        let crc = paralog_checksum::crc32c(&r[..n]);
        r[n..].copy_from_slice(&crc.to_le_bytes());
        r
    };
    let e = Base::decode(&reseal(b.clone(), 1), p, 0).unwrap_err();
    assert!(
        e.to_string().contains("/named/cuts") && e.to_string().contains("version 1"),
        "{e}"
    );
    let cut = std::fs::read(dir().join("cut_v1.bin")).unwrap();
    let e = Cut::decode(&reseal(cut, 2), p, 0).unwrap_err();
    assert!(e.to_string().contains("version 2"), "{e}");
    let e = Base::decode(&reseal(b.clone(), 3), p, 0).unwrap_err();
    assert!(
        e.to_string().contains("format version 3 is not supported"),
        "{e}"
    );
    // Producers out of order are refused, naming where.
    let mut bad = base();
    bad.producers.reverse();
    let e = Base::decode(&bad.encode(), p, 0).unwrap_err();
    assert!(e.to_string().contains("ascending"), "{e}");
}

/// A trim request (kind 11): older than a time, asked a minute after it.
fn trim_request() -> TrimRequest {
    TrimRequest {
        rule: TrimRule::Before(1_700_000_000_000_000_000),
        asked_ns: 1_700_000_060_000_000_000,
    }
}

/// The object index of a 2-partition stream after round 5 (kind 10):
/// partition 0 compacted into one object, its two small ones retired at
/// round 5; partition 1 trimmed below offset 3.
fn object_index() -> ObjectIndex {
    let obj = |first, end, bytes| Object { first, end, bytes };
    ObjectIndex {
        round: 5,
        parts: vec![
            PartIndex {
                next: 14,
                objects: vec![obj(0, 14, 1100)],
            },
            PartIndex {
                next: 7,
                objects: vec![obj(3, 5, 200), obj(5, 7, 240)],
            },
        ],
        retired: vec![
            Retired {
                partition: 0,
                object: obj(0, 9, 700),
                round: 5,
            },
            Retired {
                partition: 0,
                object: obj(9, 14, 460),
                round: 5,
            },
        ],
    }
}

/// Every single-bit flip of every record is refused (never decoded to
/// other values), naming the file.
#[test]
fn every_bit_flip_is_refused() {
    let recs: Vec<(&str, Vec<u8>)> = vec![
        ("cut", std::fs::read(dir().join("cut_v1.bin")).unwrap()),
        (
            "watermark",
            std::fs::read(dir().join("watermark_v1.bin")).unwrap(),
        ),
        ("group", std::fs::read(dir().join("group_v1.bin")).unwrap()),
        (
            "index",
            std::fs::read(dir().join("object_index_v1.bin")).unwrap(),
        ),
        (
            "header",
            std::fs::read(dir().join("segment_header_v1.bin")).unwrap(),
        ),
        (
            "trim",
            std::fs::read(dir().join("trim_request_v1.bin")).unwrap(),
        ),
        ("base", std::fs::read(dir().join("base_v2.bin")).unwrap()),
    ];
    let p = Path::new("/named/file");
    for (what, rec) in recs {
        for bit in 0..rec.len() * 8 {
            let mut b = rec.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            let err = match what {
                "cut" => Cut::decode(&b, p, 0).err().map(|e| e.to_string()),
                "watermark" => Watermark::decode(&b, p).err().map(|e| e.to_string()),
                "group" => GroupOffsets::decode(&b, p).err().map(|e| e.to_string()),
                "index" => ObjectIndex::decode(&b, p).err().map(|e| e.to_string()),
                "trim" => TrimRequest::decode(&b, p).err().map(|e| e.to_string()),
                "base" => Base::decode(&b, p, 0).err().map(|e| e.to_string()),
                _ => Header::decode(&b, KIND_SEGMENT, p)
                    .err()
                    .map(|e| e.to_string()),
            };
            let err = err.unwrap_or_else(|| panic!("{what}: flip of bit {bit} decoded"));
            assert!(err.contains("/named/file"), "{err}");
        }
    }
}
