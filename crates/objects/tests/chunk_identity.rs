//! A version's record names each of its chunks (docs/objects-format.md
//! "The version"): another valid chunk in a chunk's place is refused, as
//! a damaged or truncated one is; and versions written before (whose
//! record holds the whole stored object's CRC-32C, the same for every
//! chunk) still read as they did, from a store an older binary wrote.

mod common;

use std::path::{Path, PathBuf};

use common::{objstore, plain};
use paralog_backend::objstore::Version;
use paralog_objects::{ArrayMeta, DType, Store};

/// CRC-32C of any bytes followed by their own CRC-32C.
const RESIDUE: u32 = 0x4867_4bc7;

/// Chunk `coords`'s file of the latest version of `name`, through its
/// Zarr view (a hard link: writing it in place changes the version's).
fn chunk_file(store: &Store, name: &str, coords: &str) -> PathBuf {
    let av = store.array(name, None).unwrap();
    store.view_dir(name, av.number).join("c").join(coords)
}

/// The object-layout record of version 1 of `name` under `root`.
fn record(root: &Path, name: &str) -> Version {
    let p = root.join("meta").join(name).join("v0000000001");
    Version::decode(&std::fs::read(&p).unwrap(), &p).unwrap()
}

fn values(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 131 % 251) as u8).collect()
}

/// Chunk [0, 0]'s file replaced in place by chunk [0, 1]'s (same size,
/// intact trailer): refused by a read and by the verification, naming the
/// object, version and chunk; chunks it does not touch still read.
fn swapped_chunk_is_refused(store: &Store) {
    let meta = ArrayMeta::new(DType::I32, &[8, 32], &[4, 16]);
    let data = values(meta.array_len() as usize);
    store.put("swap", &meta, &data).unwrap();
    let (a, b) = (
        chunk_file(store, "swap", "0/0"),
        chunk_file(store, "swap", "0/1"),
    );
    let good = std::fs::read(&a).unwrap();
    let other = std::fs::read(&b).unwrap();
    assert_eq!(good.len(), other.len());
    assert_ne!(good, other);
    std::fs::write(&a, &other).unwrap();
    let av = store.array("swap", None).unwrap();
    let e = av.read_all(store).unwrap_err().to_string();
    assert!(
        e.starts_with("swap version 1: chunk [0, 0]: another chunk"),
        "{e}"
    );
    let e = av.verify_chunks(store).unwrap_err().to_string();
    assert!(
        e.starts_with("swap version 1: chunk [0, 0]: another chunk"),
        "{e}"
    );
    // The lower half (chunks [1, *]) does not touch it.
    assert_eq!(
        av.read(store, &[4, 0], &[4, 32]).unwrap(),
        data[data.len() / 2..]
    );
    // A flipped byte of the trailer alone (the data intact): refused too,
    // since the Zarr view's readers would refuse it.
    let mut t = good.clone();
    let last = t.len() - 1;
    t[last] ^= 0x10;
    std::fs::write(&a, &t).unwrap();
    let e = av.read_all(store).unwrap_err().to_string();
    assert!(
        e.contains("chunk [0, 0]: damaged (checksum mismatch"),
        "{e}"
    );
    // The trailer cut off: truncated.
    std::fs::write(&a, &good[..good.len() - 4]).unwrap();
    let e = av.read_all(store).unwrap_err().to_string();
    assert!(
        e.starts_with("swap version 1: chunk [0, 0]: truncated"),
        "{e}"
    );
    std::fs::write(&a, &good).unwrap();
    assert_eq!(av.read_all(store).unwrap(), data);
    av.verify_chunks(store).unwrap();
}

#[test]
fn a_swapped_chunk_is_refused_on_a_plain_directory() {
    let (_t, store) = plain();
    swapped_chunk_is_refused(&store);
}

#[test]
fn a_swapped_chunk_is_refused_on_objstore() {
    let (_t, store) = objstore(3, 3);
    swapped_chunk_is_refused(&store);
}

#[test]
fn a_new_version_records_each_chunks_data_crc() {
    let (t, store) = objstore(2, 3);
    let meta = ArrayMeta::new(DType::U16, &[6, 5], &[4, 4]);
    let data = values(meta.array_len() as usize);
    store.put("new", &meta, &data).unwrap();
    let v = record(t.path(), "new");
    let cb = meta.chunk_len();
    assert_eq!(v.pieces.len(), 5, "4 chunks and the array record");
    for (i, p) in v.pieces[..4].iter().enumerate() {
        let path = chunk_file(&store, "new", &format!("{}/{}", i / 2, i % 2));
        let file = std::fs::read(path).unwrap();
        let crc = paralog_checksum::crc32c(&file[..cb as usize]);
        assert_eq!((p.block_off, p.block_len, p.block_crc), (0, cb, crc));
        assert_eq!(file[cb as usize..], crc.to_le_bytes(), "the trailer");
    }
    // The array record's piece is a plain block, as before.
    let head = v.pieces[4];
    assert_eq!(head.block_len, head.len);
}

/// `tests/vectors/old_store`: version 1 of `old` (int32 [4, 6] in chunks
/// of [2, 4], values `i * 37 - 100`), written by the binary before chunk
/// pieces named their chunk, views left out.
fn old_store() -> (tempfile::TempDir, Store) {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/old_store");
    let t = tempfile::tempdir().unwrap();
    for sub in ["data/0", "data/1", "meta/old", "staging"] {
        std::fs::create_dir_all(t.path().join(sub)).unwrap();
        let Ok(rd) = std::fs::read_dir(from.join(sub)) else {
            continue;
        };
        for e in rd {
            let e = e.unwrap();
            std::fs::copy(e.path(), t.path().join(sub).join(e.file_name())).unwrap();
        }
    }
    let url = format!("objstore://{}?dirs=2", t.path().display());
    let s = Store::open(&url.parse().unwrap()).unwrap();
    (t, s)
}

#[test]
fn an_old_version_reads_as_before() {
    let (t, store) = old_store();
    let want: Vec<u8> = (0..24)
        .flat_map(|i: i32| (i * 37 - 100).to_le_bytes())
        .collect();
    let v = record(t.path(), "old");
    let cb = 2 * 4 * 4;
    for p in &v.pieces[..4] {
        assert_eq!((p.block_len, p.block_crc), (cb + 4, RESIDUE), "old form");
    }
    let av = store.array("old", None).unwrap();
    assert_eq!(
        (av.meta.dtype, &av.meta.shape[..], &av.meta.chunks[..]),
        (DType::I32, &[4, 6][..], &[2, 4][..])
    );
    assert_eq!(av.meta.attrs["step"], 1);
    assert_eq!(av.read_all(&store).unwrap(), want);
    assert_eq!(
        av.read_as::<i32>(&store, &[1, 3], &[2, 2]).unwrap(),
        [9 * 37 - 100, 10 * 37 - 100, 15 * 37 - 100, 16 * 37 - 100]
    );
    av.verify_chunks(&store).unwrap();
    // A flipped byte is still refused by name.
    let p = &v.pieces[1];
    let f = t.path().join(format!("data/{}", p.dir)).join(hex(&p.chunk));
    let good = std::fs::read(&f).unwrap();
    let mut bad = good.clone();
    bad[5] ^= 1;
    std::fs::write(&f, &bad).unwrap();
    let e = av.read_all(&store).unwrap_err().to_string();
    assert!(e.starts_with("old version 1: chunk [0, 1]: damaged"), "{e}");
    assert!(av.verify_chunks(&store).is_err());
    // Another intact chunk in its place is not: the old record cannot
    // tell which chunk it holds (why new versions record the data's CRC).
    let q = &v.pieces[2];
    let other = t.path().join(format!("data/{}", q.dir)).join(hex(&q.chunk));
    std::fs::write(&f, std::fs::read(other).unwrap()).unwrap();
    assert!(av.read_all(&store).is_ok());
    std::fs::write(&f, &good).unwrap();
    assert_eq!(av.read_all(&store).unwrap(), want);
}

fn hex(id: &[u8; 16]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}
