//! What must be refused, with a message naming the object (and version
//! and chunk), and nothing published: bad names, bad metadata and buffers,
//! overlapping or missing chunks, writers that did not finish, damaged
//! chunks and records.

mod common;

use common::{objstore, plain};
use paralog_objects::{ArrayMeta, DType, Error, Store};

#[test]
fn names_that_escape_or_alias_are_refused() {
    let (_t, store) = plain();
    let meta = ArrayMeta::new(DType::U8, &[1], &[1]);
    for bad in [
        "",
        "/abs",
        "../x",
        "a/../b",
        "a//b",
        "a/",
        ".hidden",
        "a/./b",
        "a/v0000000001",
        "a\nb",
    ] {
        let e = store.put(bad, &meta, &[0]).unwrap_err();
        assert!(matches!(e, Error::BadName { .. }), "{bad:?}: {e}");
    }
    assert!(store.list().unwrap().is_empty());
}

#[test]
fn bad_metadata_and_buffers_are_refused() {
    let (_t, store) = plain();
    let meta = ArrayMeta::new(DType::I32, &[10, 10], &[4, 4]);
    let e = store.put("m", &meta, &[0; 399]).unwrap_err();
    assert!(e.to_string().contains("399 bytes"), "{e}");
    let e = store
        .put("m", &ArrayMeta::new(DType::I32, &[10, 10], &[4]), &[0; 400])
        .unwrap_err();
    assert!(e.to_string().starts_with("m: chunk shape"), "{e}");
    let mut put = store.begin("m", &meta).unwrap();
    let e = put.write_chunk(&[3, 0], &[0; 64]).unwrap_err();
    assert!(
        e.to_string().contains("outside the chunk grid [3, 3]"),
        "{e}"
    );
    let e = put.write_chunk(&[0, 0], &[0; 63]).unwrap_err();
    assert!(e.to_string().contains("63 bytes given"), "{e}");
    let other = ArrayMeta::new(DType::I64, &[10, 10], &[4, 4]);
    let e = store.join_as("m", &put.id(), &other).unwrap_err();
    assert!(
        e.to_string().contains("int64") && e.to_string().contains("is not the put's"),
        "{e}"
    );
    let e = store.join("not-m", &put.id()).unwrap_err();
    assert!(e.to_string().contains("the put is of \"m\""), "{e}");
}

#[test]
fn overlapping_and_missing_chunks_are_refused() {
    let (_t, store) = objstore(4, 3);
    let meta = ArrayMeta::new(DType::U8, &[4, 4], &[2, 2]);
    let mut a = store.begin("o", &meta).unwrap();
    let id = a.id();
    let mut b = store.join("o", &id).unwrap();
    a.write_chunk(&[0, 0], &[1; 4]).unwrap();
    let e = b.write_chunk(&[0, 0], &[2; 4]).unwrap_err();
    assert!(
        matches!(e, Error::Overlap { ref chunk, .. } if chunk == &[0, 0]),
        "{e}"
    );
    b.write_chunk(&[1, 1], &[2; 4]).unwrap();
    a.finish().unwrap();
    // b has not finished: its chunk could still be in flight.
    let e = store.commit("o", &id).unwrap_err();
    assert!(e.to_string().contains("did not finish"), "{e}");
    b.finish().unwrap();
    let e = store.commit("o", &id).unwrap_err();
    assert!(
        e.to_string()
            .contains("2 of 4 chunks were not written (first: [[0, 1], [1, 0]])"),
        "{e}"
    );
    assert!(store.versions("o").unwrap().is_empty(), "nothing published");
    let mut c = store.join("o", &id).unwrap();
    c.write_chunk(&[0, 1], &[3; 4]).unwrap();
    c.write_chunk(&[1, 0], &[4; 4]).unwrap();
    c.finish().unwrap();
    let done = store.commit("o", &id).unwrap();
    // A retried commit (the caller lost the answer) publishes nothing new.
    assert_eq!(store.commit("o", &id).unwrap(), done);
    assert_eq!(store.versions("o").unwrap().len(), 1);
    let av = store.array("o", None).unwrap();
    assert_eq!(
        av.read_all(&store).unwrap(),
        [1, 1, 3, 3, 1, 1, 3, 3, 4, 4, 2, 2, 4, 4, 2, 2]
    );
    // The first writer of a chunk is what the version holds.
    assert_eq!(av.read(&store, &[0, 0], &[1, 1]).unwrap(), [1]);
    let e = store.join("o", &id).unwrap_err();
    assert!(e.to_string().contains("no such put in progress"), "{e}");
}

/// A put of a 4-byte array (chunks of 2) begun as `name`, its first chunk
/// written, and left there (as by a writer that stopped): the array's
/// meta and the put's id.
fn begun(store: &Store, name: &str) -> (ArrayMeta, paralog_objects::VersionId) {
    let meta = ArrayMeta::new(DType::U8, &[4], &[2]);
    let mut p = store.begin(name, &meta).unwrap();
    p.write_chunk(&[0], &[1, 2]).unwrap();
    let id = p.id();
    (meta, id)
}

#[test]
fn abort_removes_the_put_and_its_chunks() {
    let (t, store) = objstore(1, 3);
    let (_, id) = begun(&store, "ab");
    store.abort("ab", &id).unwrap();
    assert_eq!(
        std::fs::read_dir(t.path().join("data/0")).unwrap().count(),
        0
    );
    assert!(store.commit("ab", &id).is_err());
}

/// A put whose writer finished and whose commit was killed after writing
/// the array record, before its publish: the record's chunk file, named
/// by the put's id (here a torn one), is in `data/0/`.
fn killed_before_publish(
    store: &Store,
    root: &std::path::Path,
    name: &str,
) -> paralog_objects::VersionId {
    let meta = ArrayMeta::new(DType::U8, &[4], &[2]);
    let mut p = store.begin(name, &meta).unwrap();
    p.write_chunk(&[0], &[1, 2]).unwrap();
    p.write_chunk(&[1], &[3, 4]).unwrap();
    let id = p.id();
    p.finish().unwrap();
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(root.join("data/0").join(hex), b"PLGARRAY torn").unwrap();
    id
}

#[test]
fn a_commit_killed_before_its_publish_is_retried_or_aborted_by_its_id() {
    let (t, store) = objstore(1, 3);
    let files = || std::fs::read_dir(t.path().join("data/0")).unwrap().count();
    // Retried: the record is written again under the same name (no second
    // one left over) and the version reads back.
    let id = killed_before_publish(&store, t.path(), "re");
    assert_eq!(files(), 3);
    let c = store.commit("re", &id).unwrap();
    assert_eq!(c.number, 1);
    assert_eq!(store.commit("re", &id).unwrap().number, 1, "a second retry");
    let av = store.array("re", None).unwrap();
    assert_eq!(av.read_all(&store).unwrap(), vec![1, 2, 3, 4]);
    assert_eq!(files(), 3, "2 chunks and 1 array record");
    // Aborted: the record goes with the chunks.
    let id = killed_before_publish(&store, t.path(), "ab");
    assert_eq!(files(), 6);
    store.abort("ab", &id).unwrap();
    assert_eq!(files(), 3, "the aborted put's chunks or record left");
}

/// The file of chunk `coords` of the latest version of `name`, found
/// through its Zarr view (a hard link to it).
fn chunk_file(store: &Store, name: &str, coords: &str) -> std::path::PathBuf {
    let av = store.array(name, None).unwrap();
    store.view_dir(name, av.number).join("c").join(coords)
}

#[test]
fn a_flipped_byte_and_a_truncated_chunk_are_refused_by_name() {
    let (_t, store) = objstore(4, 3);
    let meta = ArrayMeta::new(DType::I32, &[64, 4096], &[16, 4096]);
    let data: Vec<u8> = (0..meta.array_len()).map(|i| (i * 7) as u8).collect();
    store.put("dmg", &meta, &data).unwrap();
    let f = chunk_file(&store, "dmg", "2/0");
    let mut bytes = std::fs::read(&f).unwrap();
    bytes[12345] ^= 1;
    std::fs::write(&f, &bytes).unwrap();
    let av = store.array("dmg", None).unwrap();
    let e = av.read_all(&store).unwrap_err();
    assert_eq!(
        e.to_string()
            .split(':')
            .take(2)
            .collect::<Vec<_>>()
            .join(":"),
        "dmg version 1: chunk [2, 0]",
        "{e}"
    );
    assert!(e.to_string().contains("checksum mismatch"), "{e}");
    // Slabs that do not touch the damaged chunk still read.
    assert_eq!(
        av.read(&store, &[0, 0], &[32, 4096]).unwrap(),
        data[..32 * 4096 * 4]
    );
    assert!(av.verify_chunks(&store).is_err());
    bytes[12345] ^= 1;
    std::fs::write(&f, &bytes[..bytes.len() - 100]).unwrap();
    let e = av.read(&store, &[40, 5], &[1, 1]).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("dmg version 1: chunk [2, 0]: truncated"),
        "{e}"
    );
}

#[test]
fn a_damaged_array_record_is_refused_and_a_missing_view_chunk_found() {
    let (t, store) = objstore(1, 3);
    let meta = ArrayMeta::new(DType::U8, &[4], &[2]);
    store.put("rec", &meta, &[1, 2, 3, 4]).unwrap();
    let av = store.array("rec", None).unwrap();
    paralog_objects::zarr::check_view(&store, &av).unwrap();
    std::fs::remove_file(chunk_file(&store, "rec", "1")).unwrap();
    let e = paralog_objects::zarr::check_view(&store, &av).unwrap_err();
    assert!(
        e.to_string().contains("rec version 1: chunk [1]")
            && e.to_string().contains("missing from the Zarr view"),
        "{e}"
    );
    // The array record is the largest file in data/0 (the chunks are 6 bytes).
    let rec = std::fs::read_dir(t.path().join("data/0"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let mut b = std::fs::read(&rec).unwrap();
    b[20] ^= 0xff;
    std::fs::write(&rec, &b).unwrap();
    let e = store.array("rec", None).unwrap_err();
    assert!(e.to_string().contains("fails its checksum"), "{e}");
}

#[test]
fn abandoned_puts_are_collected_and_live_ones_kept() {
    let (t, store) = objstore(1, 3);
    let (meta, dead_id) = begun(&store, "g");
    // A put being written now is not abandoned under an hour's grace.
    assert_eq!(
        store
            .collect_abandoned(std::time::Duration::from_secs(3600))
            .unwrap(),
        0
    );
    let chunks = || std::fs::read_dir(t.path().join("data/0")).unwrap().count();
    assert_eq!(chunks(), 1);
    // A committed put whose staging directory a crash left behind keeps
    // its chunks: its version uses them.
    let mut done = store.begin("g", &meta).unwrap();
    done.write_chunk(&[0], &[5, 6]).unwrap();
    done.write_chunk(&[1], &[7, 8]).unwrap();
    let done_id = done.id();
    let staged = t
        .path()
        .join("staging")
        .join(paralog_objects::id_hex(&done_id));
    let copy = t.path().join("staging-copy");
    std::fs::create_dir(&copy).unwrap();
    for e in std::fs::read_dir(&staged).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), copy.join(e.file_name())).unwrap();
    }
    done.commit().unwrap();
    // The crash: the staging directory is back, as if never removed.
    std::fs::rename(&copy, &staged).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let grace = std::time::Duration::from_millis(10);
    assert_eq!(store.collect_abandoned(grace).unwrap(), 2);
    assert!(
        store.commit("g", &dead_id).is_err(),
        "the abandoned put is gone"
    );
    assert_eq!(store.commit("g", &done_id).unwrap().number, 1);
    let av = store.array("g", None).unwrap();
    assert_eq!(av.read_all(&store).unwrap(), [5, 6, 7, 8]);
    // Left: the committed version's two chunks and its record.
    assert_eq!(chunks(), 3);
    // A view half made by a process that died goes too; made views stay.
    let half = t.path().join("zarr/g/.v0000000009.tmp.0123");
    std::fs::create_dir_all(half.join("c")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    store.collect_abandoned(grace).unwrap();
    assert!(!half.exists());
    paralog_objects::zarr::check_view(&store, &av).unwrap();
}

#[test]
fn a_commit_retried_through_a_handle_with_other_dirs_publishes_once() {
    // Killed after its publish (its staging left, restored here), then
    // retried with the plain path of an objstore://ROOT?dirs=4 store: the
    // retry must find the version by the array record the first commit
    // wrote, wherever that handle would have placed it.
    for k in 0..8 {
        let (t, four) = common::objstore(4, 100);
        let plain = common::plain_at(t.path());
        let meta = ArrayMeta::new(DType::U8, &[4], &[2]);
        let mut p = four.begin("r", &meta).unwrap();
        p.write_chunk(&[0], &[1, 2]).unwrap();
        p.write_chunk(&[1], &[3, 4]).unwrap();
        let id = p.id();
        p.finish().unwrap();
        let staging = t.path().join("staging");
        let saved = tempfile::tempdir().unwrap();
        common::copy_tree(&staging, saved.path());
        assert_eq!(four.commit("r", &id).unwrap().number, 1);
        std::fs::remove_dir_all(&staging).unwrap();
        common::copy_tree(saved.path(), &staging);
        assert_eq!(plain.commit("r", &id).unwrap().number, 1, "round {k}");
        assert_eq!(common::kept_numbers(&four, "r"), vec![1], "round {k}");
    }
}
