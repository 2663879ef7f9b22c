//! Golden test vectors: small binary records committed under tests/vectors/.
//! They pin format version 1: the decoder must read them to exactly the
//! values below, the encoder must reproduce them byte for byte, and a single
//! flipped bit anywhere in them must be refused.
//!
//! Regenerate (only when the format version changes, with a new name):
//! `cargo test -p paralog-log --test vectors -- --ignored regenerate`

use std::path::{Path, PathBuf};

use paralog_log::format::{CommitMark, DataHeader, PathRecord, ProgressRecord, DATA_HEADER_LEN};
use paralog_log::{Extent, FileIdent, Manifest, Op};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors")
}

fn manifest() -> Manifest {
    Manifest {
        ident: FileIdent {
            job: "job-42".into(),
            path: b"/scratch/run/out.h5".to_vec(),
            rel: b"run/out.h5".to_vec(),
            gen: 2,
        },
        rank: 3,
        comm_size: 4,
        epoch: 7,
        data_len: DATA_HEADER_LEN + 300,
        ops: vec![
            Op::Extent(Extent {
                file_off: 0,
                len: 100,
                log_pos: 4096,
                crc: 0x1234_5678,
            }),
            Op::Extent(Extent {
                file_off: 200,
                len: 50,
                log_pos: 4196,
                crc: 0x9abc_def0,
            }),
            Op::SetSize(220),
            Op::Extent(Extent {
                file_off: 1 << 40,
                len: 150,
                log_pos: 4246,
                crc: 0x0bad_cafe,
            }),
            Op::Preallocate(1 << 41),
        ],
    }
}

/// A manifest whose phases come from synchronizing points, not only size
/// operations (issue 12): phase 2 after two barriers, a set size ending
/// phase 2, then phase 5.
fn manifest_phases() -> Manifest {
    let mut m = manifest();
    m.ops = vec![
        Op::Extent(Extent {
            file_off: 0,
            len: 100,
            log_pos: 4096,
            crc: 0x1234_5678,
        }),
        Op::Phase(2),
        Op::Extent(Extent {
            file_off: 0,
            len: 50,
            log_pos: 4196,
            crc: 0x9abc_def0,
        }),
        Op::SetSize(220),
        Op::Phase(5),
        Op::Extent(Extent {
            file_off: 10,
            len: 150,
            log_pos: 4246,
            crc: 0x0bad_cafe,
        }),
    ];
    m
}

fn data_header() -> DataHeader {
    DataHeader {
        rank: 3,
        comm_size: 4,
        gen: 2,
        epoch: 7,
    }
}

fn mark() -> CommitMark {
    CommitMark {
        rank: 3,
        comm_size: 4,
        gen: 2,
        epoch: 7,
    }
}

fn path_record() -> PathRecord {
    PathRecord {
        path: b"/scratch/run/out.h5".to_vec(),
        rel: b"run/out.h5".to_vec(),
    }
}

fn progress() -> ProgressRecord {
    ProgressRecord { gen: 2, epoch: 7 }
}

type Check = fn(&[u8], &Path) -> bool;

/// (file name, encoded bytes, decode-and-compare)
fn vectors() -> Vec<(&'static str, Vec<u8>, Check)> {
    vec![
        ("manifest_v1.bin", manifest().encode(), |b, p| {
            Manifest::decode(b, p).is_ok_and(|m| m == manifest())
        }),
        (
            "manifest_phases_v1.bin",
            manifest_phases().encode(),
            |b, p| Manifest::decode(b, p).is_ok_and(|m| m == manifest_phases()),
        ),
        ("data_header_v1.bin", data_header().encode(), |b, p| {
            DataHeader::decode(b, p).is_ok_and(|h| h == data_header())
        }),
        ("commit_mark_v1.bin", mark().encode(), |b, p| {
            CommitMark::decode(b, p).is_ok_and(|m| m == mark())
        }),
        ("progress_v1.bin", progress().encode(), |b, p| {
            ProgressRecord::decode(b, p).is_ok_and(|r| r == progress())
        }),
        ("path_record_v1.bin", path_record().encode(), |b, p| {
            PathRecord::decode(b, p).is_ok_and(|r| r == path_record())
        }),
    ]
}

#[test]
#[ignore = "writes the vectors; run by hand when the format changes"]
fn regenerate() {
    for (name, bytes, _) in vectors() {
        std::fs::write(dir().join(name), bytes).unwrap();
    }
}

#[test]
fn vectors_decode_to_expected_values_and_reencode_identically() {
    for (name, expected, check) in vectors() {
        let path = dir().join(name);
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            check(&bytes, &path),
            "{name} does not decode to the expected record"
        );
        assert_eq!(
            bytes, expected,
            "{name}: the encoder no longer produces the golden bytes"
        );
    }
}

#[test]
fn manifest_vector_fields() {
    // Spelled out once, independent of the encoder, so that an encoder and
    // decoder that drift together are still caught.
    let bytes = std::fs::read(dir().join("manifest_v1.bin")).unwrap();
    assert_eq!(&bytes[..8], b"PLGMNFST");
    assert_eq!(
        u16::from_le_bytes([bytes[8], bytes[9]]),
        1,
        "format version"
    );
    assert_eq!(
        u32::from_le_bytes(bytes[16..20].try_into().unwrap()),
        3,
        "rank"
    );
    assert_eq!(
        u64::from_le_bytes(bytes[32..40].try_into().unwrap()),
        7,
        "epoch"
    );
    assert_eq!(
        u32::from_le_bytes(bytes[48..52].try_into().unwrap()),
        5,
        "operations"
    );
    let strings = "job-42".len() + "/scratch/run/out.h5".len() + "run/out.h5".len();
    assert_eq!(bytes.len(), 64 + strings + 5 * 32 + 4);
    let op3 = 64 + strings + 3 * 32;
    assert_eq!(bytes[op3], 1, "fourth operation is an extent");
    assert_eq!(
        u64::from_le_bytes(bytes[op3 + 8..op3 + 16].try_into().unwrap()),
        1 << 40
    );
}

#[test]
fn phase_operations_must_move_forward() {
    let path = dir().join("manifest_phases_v1.bin");
    for bad in [
        vec![Op::Phase(0)],
        vec![Op::SetSize(1), Op::Phase(1)],
        vec![Op::Phase(3), Op::Phase(3)],
        vec![Op::Phase(1 << 33)],
    ] {
        let mut m = manifest_phases();
        m.ops = bad.clone();
        let e = Manifest::decode(&m.encode(), &path).expect_err("accepted");
        assert!(e.to_string().contains("phase"), "{bad:?}: {e}");
    }
}

#[test]
fn every_flipped_bit_is_detected() {
    for (name, _, check) in vectors() {
        let path = dir().join(name);
        let bytes = std::fs::read(&path).unwrap();
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut damaged = bytes.clone();
                damaged[i] ^= 1 << bit;
                assert!(
                    !check(&damaged, &path),
                    "{name}: flipping bit {bit} of byte {i} went unnoticed"
                );
            }
        }
    }
}

#[test]
fn truncations_are_refused() {
    for (name, _, check) in vectors() {
        let path = dir().join(name);
        let bytes = std::fs::read(&path).unwrap();
        for len in 0..bytes.len() {
            // A data header shorter than its padding is fine as long as the
            // meaningful 48 bytes are whole (the data log is read through it).
            if name.starts_with("data_header") && len >= 48 {
                continue;
            }
            assert!(
                !check(&bytes[..len], &path),
                "{name} cut to {len} bytes was accepted"
            );
        }
    }
}

/// A header whose checksum is right but whose length field or reserved
/// bytes say something the format does not (a writer that is not ours):
/// refused, naming the offset.
#[test]
fn headers_that_break_the_format_under_a_good_checksum_are_refused() {
    let path = dir().join("crafted");
    let reseal = |mut b: Vec<u8>| {
        let crc = paralog_checksum::crc32c(&b[..44]);
        b[44..48].copy_from_slice(&crc.to_le_bytes());
        b
    };
    let data_bytes = data_header().encode();
    let mark_bytes = mark().encode();
    for (what, bytes, offset) in [
        (
            "data length",
            reseal({
                let mut b = data_bytes.clone();
                b[12] ^= 1;
                b
            }),
            12,
        ),
        (
            "data reserved",
            reseal({
                let mut b = data_bytes.clone();
                b[41] = 7;
                b
            }),
            41,
        ),
        (
            "mark length",
            reseal({
                let mut b = mark_bytes.clone();
                b[12] = 49;
                b
            }),
            12,
        ),
        (
            "mark reserved",
            reseal({
                let mut b = mark_bytes.clone();
                b[43] = 1;
                b
            }),
            43,
        ),
    ] {
        let err = if what.starts_with("data") {
            DataHeader::decode(&bytes, &path).map(|_| ()).unwrap_err()
        } else {
            CommitMark::decode(&bytes, &path).map(|_| ()).unwrap_err()
        };
        match err {
            paralog_log::LogError::Corrupt { offset: o, .. } => {
                assert_eq!(o, offset, "{what}: {err}")
            }
            other => panic!("{what}: {other}"),
        }
    }
    // The untouched headers, resealed, still decode.
    assert_eq!(
        DataHeader::decode(&reseal(data_bytes), &path).unwrap(),
        data_header()
    );
    assert_eq!(
        CommitMark::decode(&reseal(mark_bytes), &path).unwrap(),
        mark()
    );
}
