//! Golden vector of the object layout's version record (docs/objstore.md):
//! the committed file decodes to the documented fields, encodes back to the
//! same bytes, and any flipped bit is refused.

use std::path::Path;

use paralog_backend::objstore::{Piece, Version};

fn golden() -> Version {
    Version {
        number: 7,
        size: 10_000,
        deleted: false,
        epoch: paralog_backend::EpochId::new(2, 5),
        origin: [0; 16],
        name: b"out/field.dat".to_vec(),
        pieces: vec![
            Piece {
                file_off: 0,
                len: 4096,
                chunk: *b"0123456789abcdef",
                dir: 1,
                block_off: 0,
                block_len: 4096,
                block_crc: 0xdead_beef,
                skip: 0,
            },
            Piece {
                file_off: 8192,
                len: 100,
                chunk: *b"fedcba9876543210",
                dir: 3,
                block_off: 65536,
                block_len: 1000,
                block_crc: 0x1234_5678,
                skip: 900,
            },
        ],
    }
}

/// Version 2: the same, with the origin of the log it was drained from.
fn golden_v2() -> Version {
    Version {
        origin: *b"origin-of-a-log!",
        ..golden()
    }
}

const VECTOR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/version_v1.bin");
const VECTOR_V2: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/version_v2.bin");

#[test]
fn golden_version_record() {
    check_vector(VECTOR, golden(), 64, 1);
}

#[test]
fn golden_version_record_v2() {
    check_vector(VECTOR_V2, golden_v2(), 80, 2);
}

fn check_vector(vector: &str, want: Version, header: usize, format: u16) {
    let path = Path::new(vector);
    if std::env::var_os("PARALOG_WRITE_VECTORS").is_some() {
        std::fs::write(path, want.encode()).unwrap();
    }
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(bytes.len(), header + 13 + 2 * 64 + 4);
    assert_eq!(&bytes[..8], b"PLGOBJVR");
    assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), format);
    let v = Version::decode(&bytes, path).unwrap();
    assert_eq!(v, want);
    assert_eq!(v.encode(), bytes);
    for bit in 0..bytes.len() * 8 {
        let mut b = bytes.clone();
        b[bit / 8] ^= 1 << (bit % 8);
        assert!(
            Version::decode(&b, path).is_err(),
            "flipped bit {bit} not detected"
        );
    }
    for cut in 0..bytes.len() {
        assert!(
            Version::decode(&bytes[..cut], path).is_err(),
            "truncation at {cut} not detected"
        );
    }
}
