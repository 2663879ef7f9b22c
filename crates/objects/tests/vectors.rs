//! The array record's golden vector (docs/objects-format.md): the bytes of
//! a fixed record, checked in. Encoding must reproduce them and decoding
//! must give back the fixed values: a change of the format is a new
//! format version, not a silent change of these bytes.
//! `PARALOG_WRITE_VECTORS=1` writes the file (once, when the format is made).

use std::path::Path;

use paralog_objects::record::{decode, encode};
use paralog_objects::{ArrayMeta, Attrs, DType};

fn fixed() -> ([u8; 16], ArrayMeta) {
    let mut a = Attrs::new();
    a.insert("step".into(), 5.into());
    a.insert("units".into(), "K".into());
    let id: [u8; 16] = std::array::from_fn(|i| i as u8);
    (
        id,
        ArrayMeta::new(DType::I32, &[64, 4096], &[16, 4096]).with_attrs(a),
    )
}

#[test]
fn array_record_v1() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/array_v1.bin");
    let (id, meta) = fixed();
    if std::env::var_os("PARALOG_WRITE_VECTORS").is_some() {
        std::fs::write(&path, encode(&id, &meta)).unwrap();
    }
    let golden = std::fs::read(&path).unwrap();
    assert_eq!(encode(&id, &meta), golden);
    assert_eq!(decode(&golden, &path).unwrap(), (id, meta));
    // The fields at the offsets the spec gives.
    assert_eq!(&golden[..8], b"PLGARRAY");
    assert_eq!(golden[10], 3, "int32's code");
    assert_eq!(
        u64::from_le_bytes(golden[32..40].try_into().unwrap()),
        16 * 4096 * 4
    );
    assert_eq!(u64::from_le_bytes(golden[40..48].try_into().unwrap()), 4);
    assert_eq!(&golden[88..88 + 22], br#"{"step":5,"units":"K"}"#);
}
