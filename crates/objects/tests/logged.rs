//! Logged puts: chunks to a node-local store, a local commit, published
//! to the remote by `publish_committed` exactly once (also when the
//! publisher died after the remote publish), never a damaged chunk.

mod common;

use paralog_objects::{publish_committed, ArrayMeta, DType, Error, LoggedStore, Store};

fn remote(url: &str) -> Store {
    Store::open(&url.parse().unwrap()).unwrap()
}

#[test]
fn published_once_by_the_publisher() {
    let (_r, _) = common::objstore(4, 100);
    let url = format!("objstore://{}?dirs=4&keep=100", _r.path().display());
    let local = tempfile::tempdir().unwrap();
    let ls = LoggedStore::open(&url, local.path()).unwrap();
    let meta = ArrayMeta::new(DType::I32, &[48, 10], &[16, 10]);
    let data = common::Rng(7).bytes(48 * 10 * 4);
    let id = ls.begin("run/t", &meta).unwrap().id();
    for w in 0..3u64 {
        let mut put = ls.join_as("run/t", &id, &meta).unwrap();
        let at = (w * 640) as usize;
        put.write_chunk(&[w, 0], &data[at..at + 640]).unwrap();
        put.finish().unwrap();
    }
    ls.commit("run/t", &id).unwrap();
    // Logged, not published yet: the remote has no version.
    assert!(matches!(
        remote(&url).array("run/t", None),
        Err(Error::NotFound { .. })
    ));
    let err = ls.abort("run/t", &id).unwrap_err().to_string();
    assert!(err.contains("committed"), "{err}");

    // A copy of the node-local log as it was: the publisher "dies" after
    // the remote publish, before its cleanup.
    let saved = tempfile::tempdir().unwrap();
    common::copy_tree(&local.path().join(".paralog-objects"), saved.path());
    let p = publish_committed(local.path()).unwrap();
    assert_eq!(
        (p.len(), p[0].committed.number, p[0].committed.id),
        (1, 1, id)
    );
    let av = remote(&url).array("run/t", None).unwrap();
    assert_eq!(av.read_all(&remote(&url)).unwrap(), data);
    assert_eq!(
        common::files_under(&local.path().join(".paralog-objects/data")).len(),
        0
    );
    assert!(publish_committed(local.path()).unwrap().is_empty());

    std::fs::remove_dir_all(local.path().join(".paralog-objects")).unwrap();
    common::copy_tree(saved.path(), &local.path().join(".paralog-objects"));
    let p = publish_committed(local.path()).unwrap();
    assert_eq!((p.len(), p[0].committed.number), (1, 1), "published again");
    assert_eq!(remote(&url).versions("run/t").unwrap().len(), 1);
}

#[test]
fn uncommitted_and_damaged_puts_are_not_published() {
    let (r, _) = common::plain();
    let url = r.path().to_str().unwrap().to_owned();
    let local = tempfile::tempdir().unwrap();
    let ls = LoggedStore::open(&url, local.path()).unwrap();
    let meta = ArrayMeta::new(DType::U8, &[16], &[8]);
    let mut put = ls.begin("u", &meta).unwrap();
    let open_id = put.id();
    put.write_chunk(&[0], &[1; 8]).unwrap();
    put.finish().unwrap();
    // One chunk missing: the local commit refuses, naming it.
    let err = ls.commit("u", &open_id).unwrap_err().to_string();
    assert!(err.contains("1 of 2 chunks were not written"), "{err}");
    assert!(publish_committed(local.path()).unwrap().is_empty());

    let mut put = ls.begin("d", &meta).unwrap();
    let id = put.id();
    put.write_chunk(&[0], &[2; 8]).unwrap();
    put.write_chunk(&[1], &[3; 8]).unwrap();
    put.finish().unwrap();
    ls.commit("d", &id).unwrap();
    let data = local.path().join(".paralog-objects/data/0");
    let files: Vec<_> = std::fs::read_dir(&data)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    let first = |byte: u8| -> &std::path::PathBuf {
        files
            .iter()
            .find(|f| std::fs::read(f).unwrap()[0] == byte)
            .unwrap()
    };
    // Chunk [0]'s file holding chunk [1]'s (intact): refused by its claim.
    let (c0, c1) = (first(2).clone(), first(3).clone());
    let good = std::fs::read(&c0).unwrap();
    std::fs::write(&c0, std::fs::read(&c1).unwrap()).unwrap();
    let err = publish_committed(local.path()).unwrap_err().to_string();
    assert!(
        err.contains("logged chunk [0]")
            && err.contains("another chunk")
            && err.contains("not published"),
        "{err}"
    );
    assert!(remote(&url).versions("d").unwrap().is_empty());
    std::fs::write(&c0, good).unwrap();
    // Flip a byte of every logged chunk file: refused, nothing published.
    for f in &files {
        let mut b = std::fs::read(f).unwrap();
        b[3] ^= 1;
        std::fs::write(f, b).unwrap();
    }
    let err = publish_committed(local.path()).unwrap_err().to_string();
    assert!(
        err.contains("damaged (checksum mismatch") && err.contains("not published"),
        "{err}"
    );
    assert!(remote(&url).versions("d").unwrap().is_empty());
}

/// A put committed with a version 1 mark (the commit's time as text, the
/// put's own files beside it) is still published; a torn commit record is
/// no commit: never published, and collected as an abandoned put.
#[test]
fn version_1_marks_are_published_and_torn_records_are_not() {
    let (r, _) = common::plain();
    let url = r.path().to_str().unwrap().to_owned();
    let local = tempfile::tempdir().unwrap();
    let ls = LoggedStore::open(&url, local.path()).unwrap();
    let meta = ArrayMeta::new(DType::U8, &[16], &[8]);
    let staging = local.path().join(".paralog-objects/staging");
    let mut ids = Vec::new();
    for (name, byte) in [("old", 5u8), ("torn", 6)] {
        let mut put = ls.begin(name, &meta).unwrap();
        let id = put.id();
        put.write_chunk(&[0], &[byte; 8]).unwrap();
        put.write_chunk(&[1], &[byte + 1; 8]).unwrap();
        put.finish().unwrap();
        ls.commit(name, &id).unwrap();
        ids.push(id);
    }
    let mark = |id| staging.join(paralog_objects::id_hex(id)).join("logged");
    std::fs::write(mark(&ids[0]), b"1795000000000000000").unwrap();
    let whole = std::fs::read(mark(&ids[1])).unwrap();
    std::fs::write(mark(&ids[1]), &whole[..whole.len() / 2]).unwrap();
    let p = publish_committed(local.path()).unwrap();
    assert_eq!(p.len(), 1, "only the version 1 put: {p:?}");
    assert_eq!(p[0].name, "old");
    let av = remote(&url).array("old", None).unwrap();
    assert_eq!(
        av.read_all(&remote(&url)).unwrap(),
        [[5u8; 8], [6u8; 8]].concat()
    );
    assert!(remote(&url).versions("torn").unwrap().is_empty());
    let node = paralog_objects::Store::open(&paralog_backend::RemoteUrl::Posix(
        local.path().join(paralog_objects::logged::LOCAL_DIR),
    ))
    .unwrap();
    let gone = node.collect_abandoned(std::time::Duration::ZERO).unwrap();
    assert_eq!(gone, 1, "the torn put is collected");
    assert!(!staging.join(paralog_objects::id_hex(&ids[1])).exists());
}
