//! Chunks written by several writers in disjoint parts (`Put::write_part`,
//! docs/objects.md "Parts of a chunk"): each writer's region of the array,
//! put together by the commit into whole chunks that read back equal to
//! the array; parts that overlap, leave a hole, or come from a writer that
//! did not finish are refused and nothing is published; abort leaves no
//! chunk file; a logged put made of parts is published equal.

mod common;

use common::{files_under, objstore, plain, slab_of, Rng};
use paralog_objects::{publish_committed, ArrayMeta, DType, Error, LoggedStore, Store};

/// Put `data` of `meta` as `regions` (start, count), one writer each, and
/// commit: the version's number.
fn put_regions(
    store: &Store,
    name: &str,
    meta: &ArrayMeta,
    data: &[u8],
    regions: &[(Vec<u64>, Vec<u64>)],
) -> u64 {
    let id = store.begin(name, meta).unwrap().id();
    let isz = meta.dtype.size();
    for (start, count) in regions {
        let mut w = store.join_as(name, &id, meta).unwrap();
        w.write_part(start, count, &slab_of(data, isz, &meta.shape, start, count))
            .unwrap();
        w.finish().unwrap();
    }
    store.commit(name, &id).unwrap().number
}

#[test]
fn regions_of_several_writers_read_back_as_the_array() {
    for (t, store) in [objstore(4, 100), plain()] {
        // Row bands across chunk rows (the seed's ranks of 16 rows in
        // chunks of 64), column bands, bands that cut edge chunks, and a
        // 3-D array cut along its last dimension.
        type Regions = Vec<(Vec<u64>, Vec<u64>)>;
        let cases: Vec<(ArrayMeta, Regions)> = vec![
            (
                ArrayMeta::new(DType::I32, &[64, 4096], &[64, 4096]),
                (0..4).map(|r| (vec![16 * r, 0], vec![16, 4096])).collect(),
            ),
            (
                ArrayMeta::new(DType::F64, &[10, 7], &[4, 4]),
                vec![
                    (vec![0, 0], vec![3, 7]),
                    (vec![3, 0], vec![4, 7]),
                    (vec![7, 0], vec![3, 7]),
                ],
            ),
            (
                ArrayMeta::new(DType::U16, &[9, 13], &[4, 5]),
                vec![(vec![0, 0], vec![9, 6]), (vec![0, 6], vec![9, 7])],
            ),
            (
                ArrayMeta::new(DType::I8, &[5, 6, 7], &[4, 4, 4]),
                vec![
                    (vec![0, 0, 0], vec![5, 6, 3]),
                    (vec![0, 0, 3], vec![5, 3, 4]),
                    (vec![0, 3, 3], vec![5, 3, 4]),
                ],
            ),
        ];
        for (k, (meta, regions)) in cases.iter().enumerate() {
            let name = format!("parts/{k}");
            let data = Rng(k as u64 + 1).bytes(meta.array_len() as usize);
            let v = put_regions(&store, &name, meta, &data, regions);
            let av = store.array(&name, Some(v)).unwrap();
            assert_eq!(av.read_all(&store).unwrap(), data, "{name}");
            let (start, count) = Rng(k as u64).slab(&meta.shape);
            assert_eq!(
                av.read(&store, &start, &count).unwrap(),
                slab_of(&data, meta.dtype.size(), &meta.shape, &start, &count),
                "{name} slab"
            );
            // Every chunk file is a version's: no part left behind.
            let files = files_under(&t.path().join("data")).len() as u64;
            assert!(files <= (k as u64 + 1) + (0..=k).map(|j| cases[j].0.n_chunks()).sum::<u64>());
        }
        // The staging of the puts is gone.
        let staging = t.path().join("staging");
        assert_eq!(
            std::fs::read_dir(&staging).map(|d| d.count()).unwrap_or(0),
            0
        );
    }
}

/// A 2-writer put of `name` (8x6 uint8, one chunk) whose parts are the
/// row boxes `a` and `b`, both finished: the put's id.
fn two_parts(
    store: &Store,
    name: &str,
    a: (&[u64], &[u64]),
    b: (&[u64], &[u64]),
) -> paralog_objects::VersionId {
    let meta = ArrayMeta::new(DType::U8, &[8, 6], &[8, 6]);
    let id = store.begin(name, &meta).unwrap().id();
    for (k, (start, count)) in [a, b].into_iter().enumerate() {
        let mut w = store.join(name, &id).unwrap();
        let n = count.iter().product::<u64>() as usize;
        w.write_part(start, count, &vec![k as u8 + 1; n]).unwrap();
        w.finish().unwrap();
    }
    id
}

#[test]
fn overlapping_parts_and_holes_are_refused_and_nothing_is_published() {
    let (t, store) = objstore(2, 100);
    let id = two_parts(&store, "over", (&[0, 0], &[5, 6]), (&[4, 0], &[4, 6]));
    let e = store.commit("over", &id).unwrap_err();
    assert!(matches!(e, Error::PartsOverlap { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.starts_with("over: put ")
            && msg.contains("chunk [0, 0]: parts written by writers ")
            && msg.contains("nothing was published"),
        "{msg}"
    );
    assert!(store.versions("over").unwrap().is_empty());
    store.abort("over", &id).unwrap();
    assert!(
        files_under(&t.path().join("data")).is_empty(),
        "abort left a part's chunk file"
    );

    let id = two_parts(&store, "hole", (&[0, 0], &[3, 6]), (&[4, 0], &[4, 6]));
    let e = store.commit("hole", &id).unwrap_err().to_string();
    assert!(
        e.contains("chunk [0, 0] is not covered by its parts (42 of its 48 bytes"),
        "{e}"
    );
    assert!(store.versions("hole").unwrap().is_empty());
    // Another writer fills the hole: the put commits.
    let mut w = store.join("hole", &id).unwrap();
    w.write_part(&[3, 0], &[1, 6], &[9; 6]).unwrap();
    w.finish().unwrap();
    store.commit("hole", &id).unwrap();
    let got = store.array("hole", None).unwrap().read_all(&store).unwrap();
    assert_eq!(got, [vec![1; 18], vec![9; 6], vec![2; 24]].concat());
}

#[test]
fn a_part_of_a_writer_that_did_not_finish_or_over_a_whole_chunk_is_refused() {
    let (_t, store) = plain();
    let meta = ArrayMeta::new(DType::U8, &[4, 4], &[2, 2]);
    let id = store.begin("u", &meta).unwrap().id();
    let mut a = store.join("u", &id).unwrap();
    a.write_part(&[0, 0], &[1, 4], &[1; 4]).unwrap();
    let mut b = store.join("u", &id).unwrap();
    b.write_part(&[1, 0], &[3, 4], &[2; 12]).unwrap();
    b.finish().unwrap();
    let e = store.commit("u", &id).unwrap_err().to_string();
    assert!(e.contains("did not finish"), "{e}");
    a.finish().unwrap();
    assert_eq!(store.commit("u", &id).unwrap().number, 1);
    assert_eq!(
        store.array("u", None).unwrap().read_all(&store).unwrap(),
        [vec![1; 4], vec![2; 12]].concat()
    );

    // A part of a chunk another writer wrote whole: refused at the write
    // when the whole chunk came first, at the commit otherwise.
    let id = store.begin("w", &meta).unwrap().id();
    let mut a = store.join("w", &id).unwrap();
    a.write_chunk(&[0, 0], &[1; 4]).unwrap();
    let mut b = store.join("w", &id).unwrap();
    let e = b.write_part(&[0, 0], &[1, 2], &[2; 2]).unwrap_err();
    assert!(
        matches!(e, Error::Overlap { ref chunk, .. } if chunk == &[0, 0]),
        "{e}"
    );
    b.write_part(&[2, 2], &[1, 2], &[2; 2]).unwrap();
    a.write_chunk(&[1, 1], &[1; 4]).unwrap();
    a.finish().unwrap();
    b.finish().unwrap();
    let e = store.commit("w", &id).unwrap_err();
    assert!(
        matches!(e, Error::Overlap { ref chunk, .. } if chunk == &[1, 1]),
        "{e}"
    );
}

#[test]
fn bad_regions_are_refused_by_name() {
    let (_t, store) = plain();
    let meta = ArrayMeta::new(DType::I32, &[10, 10], &[4, 4]);
    let mut w = store.begin("r", &meta).unwrap();
    for (start, count, len, said) in [
        (vec![0, 0], vec![4], 16, "needs 2 starts and counts"),
        (vec![8, 0], vec![3, 10], 120, "outside the array [10, 10]"),
        (vec![0, 0], vec![0, 10], 0, "empty"),
        (vec![0, 0], vec![2, 2], 15, "15 bytes given, it has 16"),
    ] {
        let e = w
            .write_part(&start, &count, &vec![0; len])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("r: ") && e.contains(said), "{said}: {e}");
    }
}

#[test]
fn a_damaged_part_claim_is_refused_naming_its_file() {
    let (_t, store) = plain();
    let id = {
        let meta = ArrayMeta::new(DType::U8, &[8, 6], &[8, 6]);
        let id = store.begin("d", &meta).unwrap().id();
        let mut w = store.join("d", &id).unwrap();
        w.write_part(&[0, 0], &[4, 6], &[5; 24]).unwrap();
        w.write_part(&[4, 0], &[4, 6], &[6; 24]).unwrap();
        w.finish().unwrap();
        id
    };
    let dir = store
        .root()
        .join("staging")
        .join(paralog_objects::id_hex(&id));
    let claim = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with('p'))
        .unwrap()
        .path();
    let mut b = std::fs::read(&claim).unwrap();
    b[20] ^= 1;
    std::fs::write(&claim, &b).unwrap();
    let e = store.commit("d", &id).unwrap_err();
    assert!(
        matches!(e, Error::Damaged { ref path, .. } if path == &claim),
        "{e}"
    );
    assert!(store.versions("d").unwrap().is_empty());
}

#[test]
fn a_logged_put_of_parts_is_published_equal() {
    let (r, _) = objstore(4, 100);
    let url = format!("objstore://{}?dirs=4&keep=100", r.path().display());
    let local = tempfile::tempdir().unwrap();
    let ls = LoggedStore::open(&url, local.path()).unwrap();
    let meta = ArrayMeta::new(DType::I32, &[48, 10], &[32, 10]);
    let data = Rng(9).bytes(48 * 10 * 4);
    let id = ls.begin("lg", &meta).unwrap().id();
    for w in 0..3u64 {
        let mut put = ls.join_as("lg", &id, &meta).unwrap();
        let (start, count) = ([16 * w, 0], [16, 10]);
        put.write_part(
            &start,
            &count,
            &slab_of(&data, 4, &meta.shape, &start, &count),
        )
        .unwrap();
        put.finish().unwrap();
    }
    ls.commit("lg", &id).unwrap();
    let p = publish_committed(local.path()).unwrap();
    assert_eq!((p.len(), p[0].committed.number), (1, 1));
    let remote = Store::open(&url.parse().unwrap()).unwrap();
    let av = remote.array("lg", None).unwrap();
    assert_eq!(av.read_all(&remote).unwrap(), data);
    assert!(files_under(&local.path().join(".paralog-objects/data")).is_empty());
}

#[test]
fn a_part_writer_that_died_before_its_claim_leaves_nothing_after_abort() {
    let (t, store) = objstore(2, 100);
    let meta = ArrayMeta::new(DType::U8, &[8, 6], &[8, 6]);
    let id = store.begin("dead", &meta).unwrap().id();
    let mut a = store.join("dead", &id).unwrap();
    a.write_part(&[0, 0], &[4, 6], &[1; 24]).unwrap();
    a.finish().unwrap();
    let mut b = store.join("dead", &id).unwrap();
    b.write_part(&[4, 0], &[4, 6], &[2; 24]).unwrap();
    // As if b died between its bytes and its claim's rename (the crash
    // point objects.mid_chunk): its claim only under the temporary name.
    let dir = store
        .root()
        .join("staging")
        .join(paralog_objects::id_hex(&id));
    let placed: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|f| f.starts_with('p'))
        .collect();
    assert_eq!(placed.len(), 2);
    let hex = |w: &str| w.split('.').nth(1).unwrap().to_owned();
    let bs = placed
        .iter()
        .find(|f| !dir.join(format!("w{}", hex(f))).exists())
        .unwrap();
    std::fs::rename(dir.join(bs), dir.join(format!(".part.{}.0.0", hex(bs)))).unwrap();
    drop(b);
    let e = store.commit("dead", &id).unwrap_err().to_string();
    assert!(
        e.contains("not covered by its parts (24 of its 48 bytes"),
        "{e}"
    );
    let puts = store.puts().unwrap();
    assert_eq!((puts.len(), puts[0].claimed, puts[0].finished), (1, 1, 1));
    assert_eq!(
        files_under(&t.path().join("data")).len(),
        1,
        "one shared chunk file"
    );
    store.abort("dead", &id).unwrap();
    assert!(
        files_under(&t.path().join("data")).is_empty(),
        "abort left the chunk file"
    );
    assert!(store.versions("dead").unwrap().is_empty());
}

#[test]
fn an_older_binarys_publishing_mark_is_not_a_part_claim() {
    // Its name starts with `p` too (found by tests/objects/s3.py "older
    // commit" on S3; the same on a directory).
    let (_t, store) = plain();
    let meta = ArrayMeta::new(DType::U8, &[4], &[2]);
    let mut p = store.begin("old", &meta).unwrap();
    p.write_part(&[0], &[4], &[1, 2, 3, 4]).unwrap();
    let id = p.id();
    p.finish().unwrap();
    let dir = store
        .root()
        .join("staging")
        .join(paralog_objects::id_hex(&id));
    std::fs::write(dir.join("publishing"), b"").unwrap();
    assert_eq!(store.commit("old", &id).unwrap().number, 1);
    assert_eq!(
        store.array("old", None).unwrap().read_all(&store).unwrap(),
        [1, 2, 3, 4]
    );
}

#[test]
fn a_committer_or_gc_that_opened_the_store_with_other_dirs_finds_the_parts() {
    // Writers on objstore://ROOT?dirs=4; the commit, the abort and `obj
    // gc` through the plain path ROOT (one storage directory): the parts'
    // chunk file is where its claims say (found by tests/objects/crash.py:
    // `obj gc ROOT` left the parts' files of a dead put).
    let (t, four) = objstore(4, 100);
    let plain = common::plain_at(t.path());
    let meta = ArrayMeta::new(DType::U16, &[8, 6], &[8, 6]);
    let data = Rng(5).bytes(8 * 6 * 2);
    for k in 0..8 {
        let name = format!("d/{k}");
        let id = four.begin(&name, &meta).unwrap().id();
        for (lo, n) in [(0u64, 5u64), (5, 3)] {
            let mut w = four.join(&name, &id).unwrap();
            let at = (lo * 12) as usize;
            w.write_part(&[lo, 0], &[n, 6], &data[at..at + n as usize * 12])
                .unwrap();
            w.finish().unwrap();
        }
        if k % 2 == 0 {
            plain.commit(&name, &id).unwrap();
            let av = four.array(&name, None).unwrap();
            assert_eq!(av.read_all(&four).unwrap(), data, "{name}");
        } else {
            plain.abort(&name, &id).unwrap();
        }
    }
    // 4 versions: 4 chunk files and 4 array records, no aborted part.
    assert_eq!(files_under(&t.path().join("data")).len(), 8);
}
