//! Golden vectors of the set record, format version 1
//! (docs/aggregate.md, "Set record, version 1"): the decoder must read
//! them to exactly the values below, the encoder must reproduce them byte
//! for byte, and every single flipped bit and every truncation must be
//! refused with the file named.
//!
//! Regenerate (only for a new format version, under a new name):
//! `cargo test -p paralog-aggregate --test vectors -- --ignored regenerate`

use std::path::{Path, PathBuf};

use paralog_aggregate::format::{Container, Extent, Member, SetRecord};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors")
}

/// Two containers, four members: one whole, one sparse with two extents
/// (a hole between them and after), one empty, one in a subdirectory.
fn record() -> SetRecord {
    SetRecord {
        set: b"ckpt/step-000100".to_vec(),
        version: 3,
        complete: true,
        block_size: 4096,
        align: 4096,
        origin: *b"0123456789abcdef",
        job: b"job-42".to_vec(),
        containers: vec![
            Container {
                name: b"c0000-v000003-00000000cafef00d.plc".to_vec(),
                size: 10000,
            },
            Container {
                name: b"c0001-v000003-00000000cafef00d.plc".to_vec(),
                size: 4196,
            },
        ],
        members: vec![
            Member {
                path: b"empty.dat".to_vec(),
                size: 0,
                mode: 0o600,
                extents: vec![],
            },
            Member {
                path: b"node1/rank-00002.dat".to_vec(),
                size: 100,
                mode: 0o644,
                extents: vec![Extent {
                    offset: 0,
                    len: 100,
                    container: 1,
                    container_offset: 4096,
                    crcs: vec![0x0102_0304],
                }],
            },
            Member {
                path: b"rank-00000.dat".to_vec(),
                size: 10000,
                mode: 0o644,
                extents: vec![Extent {
                    offset: 0,
                    len: 10000,
                    container: 0,
                    container_offset: 0,
                    crcs: vec![0x1111_1111, 0x2222_2222, 0x3333_3333],
                }],
            },
            Member {
                path: b"rank-00001.dat".to_vec(),
                size: 9000,
                mode: 0o640,
                extents: vec![
                    Extent {
                        offset: 0,
                        len: 3000,
                        container: 1,
                        container_offset: 0,
                        crcs: vec![0xaaaa_aaaa],
                    },
                    Extent {
                        offset: 5000,
                        len: 1000,
                        container: 1,
                        container_offset: 3000,
                        crcs: vec![0xbbbb_bbbb],
                    },
                ],
            },
        ],
    }
}

fn incomplete() -> SetRecord {
    SetRecord {
        set: b"s".to_vec(),
        version: 1,
        complete: false,
        block_size: 1 << 20,
        align: 1 << 20,
        origin: [0; 16],
        job: Vec::new(),
        containers: vec![],
        members: vec![Member {
            path: b"a".to_vec(),
            size: 5,
            mode: 0o644,
            extents: vec![],
        }],
    }
}

fn vectors() -> Vec<(&'static str, SetRecord)> {
    vec![
        ("set_v1.bin", record()),
        ("set_incomplete_v1.bin", incomplete()),
    ]
}

#[test]
#[ignore]
fn regenerate() {
    for (name, r) in vectors() {
        std::fs::write(dir().join(name), r.encode()).unwrap();
    }
}

#[test]
fn golden_vectors_decode_and_reencode() {
    for (name, want) in vectors() {
        let path = dir().join(name);
        let bytes = std::fs::read(&path).unwrap();
        let got = SetRecord::decode(&bytes, &path).unwrap();
        assert_eq!(got, want, "{name}");
        assert_eq!(want.encode(), bytes, "{name}: the encoder changed");
    }
}

#[test]
fn golden_vector_fields_at_their_offsets() {
    let bytes = std::fs::read(dir().join("set_v1.bin")).unwrap();
    assert_eq!(&bytes[0..8], b"PLGSETRC");
    assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), 1);
    assert_eq!(u16::from_le_bytes([bytes[10], bytes[11]]), 1);
    assert_eq!(u32::from_le_bytes(bytes[12..16].try_into().unwrap()), 96);
    assert_eq!(
        u64::from_le_bytes(bytes[16..24].try_into().unwrap()),
        bytes.len() as u64
    );
    assert_eq!(u64::from_le_bytes(bytes[24..32].try_into().unwrap()), 3);
    assert_eq!(u32::from_le_bytes(bytes[32..36].try_into().unwrap()), 1);
    assert_eq!(u32::from_le_bytes(bytes[64..68].try_into().unwrap()), 2);
    assert_eq!(u32::from_le_bytes(bytes[68..72].try_into().unwrap()), 4);
    assert_eq!(&bytes[96..96 + 16], b"ckpt/step-000100");
}

#[test]
fn every_bit_flip_and_truncation_is_refused() {
    for (name, _) in vectors() {
        let path = dir().join(name);
        let bytes = std::fs::read(&path).unwrap();
        for i in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[i / 8] ^= 1 << (i % 8);
            let e = SetRecord::decode(&b, &path).expect_err("a flipped bit must be refused");
            assert!(e.to_string().contains(name), "{e}");
            assert!(e.to_string().contains("at offset"), "{e}");
        }
        for n in 0..bytes.len() {
            let e =
                SetRecord::decode(&bytes[..n], &path).expect_err("a truncation must be refused");
            assert!(e.to_string().contains("at offset"), "{e}");
        }
    }
}

#[test]
fn a_newer_version_is_refused_by_name() {
    let path = dir().join("set_v1.bin");
    let mut b = std::fs::read(&path).unwrap();
    b[8] = 2;
    let e = SetRecord::decode(&b, &path).unwrap_err().to_string();
    assert!(
        e.contains("format version 2 is not supported (this build reads version 1)"),
        "{e}"
    );
    assert!(e.contains("at offset 8"), "{e}");
}
