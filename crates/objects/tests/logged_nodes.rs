//! Logged puts across nodes (docs/objects.md "Logged mode across nodes"),
//! two node-local roots standing for two nodes: the writers of node B
//! commit shares there, the commit on node A names them, and the version
//! is published once both nodes' publishers ran, never before, once.

mod common;

use paralog_objects::{
    id_hex, publish_committed, publish_round, ArrayMeta, DType, Error, LoggedStore, Store,
};

const NAME: &str = "run/t";

/// Two nodes' node-local roots, and the store `url` logged on each (node
/// B named nB).
fn two_nodes(
    url: &str,
) -> (
    tempfile::TempDir,
    tempfile::TempDir,
    LoggedStore,
    LoggedStore,
) {
    let (na, nb) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = LoggedStore::open(url, na.path()).unwrap();
    let b = LoggedStore::open(url, nb.path()).unwrap().on_node("nB");
    (na, nb, a, b)
}

fn remote(url: &str) -> Store {
    Store::open(&url.parse().unwrap()).unwrap()
}

/// A put of 4 chunks: rows 0 and 1 by two writers on node A (which
/// begins), rows 2 and 3 by two writers on node B. Returns the id, the
/// data and B's share records.
fn put_on_two_nodes(
    a: &LoggedStore,
    b: &LoggedStore,
    meta: &ArrayMeta,
    seed: u64,
) -> (paralog_objects::VersionId, Vec<u8>, Vec<u8>) {
    let data = common::Rng(seed).bytes(64 * 8 * 4);
    let id = a.begin(NAME, meta).unwrap().id();
    let mut shares = Vec::new();
    for w in 0..4u64 {
        let node = if w < 2 { a } else { b };
        let mut put = node.join_share(NAME, &id, meta).unwrap();
        let at = (w * 16 * 8 * 4) as usize;
        put.write_chunk(&[w, 0], &data[at..at + 512]).unwrap();
        let share = node.finish(put).unwrap();
        assert_eq!(
            share.is_some(),
            w >= 2,
            "writer {w}: a share only on node B"
        );
        shares.extend(share.unwrap_or_default());
    }
    (id, data, shares)
}

#[test]
fn published_once_when_every_node_copied_its_share() {
    let (r, _) = common::objstore(2, 100);
    let url = format!("objstore://{}?dirs=2&keep=100", r.path().display());
    let (na, nb, a, b) = two_nodes(&url);
    let meta = ArrayMeta::new(DType::I32, &[64, 8], &[16, 8]);
    let (id, data, shares) = put_on_two_nodes(&a, &b, &meta, 3);
    // Without B's shares the commit is refused: two chunks not written.
    let err = a.commit(NAME, &id).unwrap_err().to_string();
    assert!(err.contains("2 of 4 chunks were not written"), "{err}");
    a.commit_shares(NAME, &id, &shares).unwrap();

    // Node A alone: its share copied, the version waits for B's, and the
    // round says so, naming node B (its name and directory, from its
    // writers' share records) and its two writers.
    let round = publish_round(na.path()).unwrap();
    assert!(round.published.is_empty());
    let [p] = &round.pending[..] else {
        panic!("pending: {:?}", round.pending)
    };
    assert_eq!(
        (p.name.as_str(), p.id, p.share, p.lasting()),
        (NAME, id, false, false)
    );
    assert_eq!(p.waits_for(), ["nB"]);
    let m = p.message();
    let dir = std::path::absolute(nb.path()).unwrap();
    assert!(
        m.contains(&format!(
            "node nB (2 writer(s), node-local directory {})",
            dir.display()
        )) && m.contains("2 of 4 chunks not yet copied"),
        "{m}"
    );
    assert!(publish_committed(na.path()).unwrap().is_empty());
    assert!(matches!(
        remote(&url).array(NAME, None),
        Err(Error::NotFound { .. })
    ));
    // B copies its shares; then A publishes, once.
    assert!(publish_committed(nb.path()).unwrap().is_empty());
    let p = publish_committed(na.path()).unwrap();
    assert_eq!(
        (p.len(), p[0].committed.number, p[0].committed.id),
        (1, 1, id)
    );
    let s = remote(&url);
    let av = s.array(NAME, None).unwrap();
    assert_eq!(av.read_all(&s).unwrap(), data);
    assert!(publish_committed(na.path()).unwrap().is_empty());
    // B's next round sees the version and drops its (empty) share.
    assert!(publish_committed(nb.path()).unwrap().is_empty());
    for n in [na.path(), nb.path()] {
        let left = common::files_under(&n.join(paralog_objects::logged::LOCAL_DIR));
        assert!(
            left.iter()
                .all(|f| f.ends_with("meta/.store") || f.to_string_lossy().contains("/meta/")),
            "left: {left:?}"
        );
    }
    assert_eq!(s.versions(NAME).unwrap().len(), 1);
    // The store holds exactly the version's chunk files.
    let chunks = common::files_under(&r.path().join("data")).len();
    assert_eq!(chunks as u64, meta.n_chunks() + 1, "chunk files");
    assert!(!r.path().join("staging").join(id_hex(&id)).exists());
}

/// Node B's copier "killed" after it copied: its node-local shares as they
/// were before, its writers' marks gone from the remote put, one copied
/// chunk damaged and one claim lost. The next round resumes: the good
/// copy kept, the others written again, nothing left over.
#[test]
fn an_interrupted_copy_resumes() {
    let (r, _) = common::plain();
    let url = r.path().to_str().unwrap().to_owned();
    let (na, nb, a, b) = two_nodes(&url);
    let meta = ArrayMeta::new(DType::I32, &[64, 8], &[16, 8]);
    let (id, data, shares) = put_on_two_nodes(&a, &b, &meta, 9);
    a.commit_shares(NAME, &id, &shares).unwrap();
    let saved = tempfile::tempdir().unwrap();
    let lb = nb.path().join(paralog_objects::logged::LOCAL_DIR);
    common::copy_tree(&lb, saved.path());
    assert!(publish_committed(nb.path()).unwrap().is_empty());
    let rdir = r.path().join("staging").join(id_hex(&id));
    let names = |p: &str| -> Vec<std::path::PathBuf> {
        let mut v: Vec<_> = std::fs::read_dir(&rdir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(p))
            .map(|e| e.path())
            .collect();
        v.sort();
        v
    };
    assert_eq!((names("w").len(), names("c").len()), (2, 2), "B's copy");
    for m in names("w") {
        std::fs::remove_file(m).unwrap();
    }
    // Chunk [2]'s copy damaged (the data file its claim names), chunk
    // [3]'s claim lost.
    let before: std::collections::BTreeSet<_> = common::files_under(&r.path().join("data"))
        .into_iter()
        .collect();
    let c2 = before
        .iter()
        .find(|f| {
            std::fs::read(f).unwrap().len() == 16 * 8 * 4 + 4 && {
                let b = std::fs::read(f).unwrap();
                b[..512] == data[2 * 512..3 * 512]
            }
        })
        .unwrap()
        .clone();
    let mut bytes = std::fs::read(&c2).unwrap();
    bytes[5] ^= 1;
    std::fs::write(&c2, bytes).unwrap();
    std::fs::remove_file(&names("c")[1]).unwrap();
    std::fs::remove_dir_all(&lb).unwrap();
    common::copy_tree(saved.path(), &lb);

    assert!(publish_committed(nb.path()).unwrap().is_empty());
    assert_eq!(
        (names("w").len(), names("c").len()),
        (2, 2),
        "B's copy again"
    );
    let p = publish_committed(na.path()).unwrap();
    assert_eq!((p.len(), p[0].committed.number), (1, 1));
    let s = remote(&url);
    assert_eq!(s.array(NAME, None).unwrap().read_all(&s).unwrap(), data);
    s.array(NAME, None).unwrap().verify_chunks(&s).unwrap();
    // The version's chunk files, and one more: the chunk of the lost
    // claim, which nothing names any more (`recover --gc` collects such
    // orphans); the damaged copy was removed.
    let after = common::files_under(&r.path().join("data"));
    assert!(!after.contains(&c2), "the damaged copy is removed");
    assert_eq!(after.len() as u64, meta.n_chunks() + 2, "{after:?}");
}

#[test]
fn a_chunk_written_on_two_nodes_is_refused_at_the_commit() {
    let (r, _) = common::plain();
    let url = r.path().to_str().unwrap().to_owned();
    let (na, _nb, a, b) = two_nodes(&url);
    let meta = ArrayMeta::new(DType::U8, &[16], &[8]);
    let id = a.begin(NAME, &meta).unwrap().id();
    let mut pa = a.join_share(NAME, &id, &meta).unwrap();
    pa.write_chunk(&[0], &[1; 8]).unwrap();
    pa.write_chunk(&[1], &[2; 8]).unwrap();
    assert!(a.finish(pa).unwrap().is_none());
    let mut pb = b.join_share(NAME, &id, &meta).unwrap();
    pb.write_chunk(&[1], &[3; 8]).unwrap();
    let share = b.finish(pb).unwrap().expect("a share");
    let err = a.commit_shares(NAME, &id, &share).unwrap_err();
    assert!(
        matches!(err, Error::Overlap { ref chunk, .. } if chunk == &vec![1]),
        "{err}"
    );
    // Another put's share, or a share of another array, is refused too.
    let other = ArrayMeta::new(DType::U8, &[24], &[8]);
    let id2 = a.begin(NAME, &other).unwrap().id();
    let mut pb = b.join_share(NAME, &id2, &meta).unwrap();
    pb.write_chunk(&[2 - 1], &[3; 8]).unwrap();
    let share = b.finish(pb).unwrap().unwrap();
    let err = a.commit_shares(NAME, &id2, &share).unwrap_err().to_string();
    assert!(err.contains("is not of this put"), "{err}");
    assert!(publish_committed(na.path()).unwrap().is_empty());
}

/// Rows `16w..16w+16` of a 96 x 6 array of 32-row chunks by writer `w`,
/// on node A for `on_a(w)`, else on node B: the commit on A, each node's
/// publisher, then the version read back. Returns it and the remote.
fn parts_on_two_nodes(url: &str, on_a: impl Fn(u64) -> bool) -> paralog_objects::Result<Vec<u8>> {
    let (na, nb, a, b) = two_nodes(url);
    let meta = ArrayMeta::new(DType::I32, &[96, 6], &[32, 6]);
    let data = common::Rng(11).bytes(96 * 6 * 4);
    let id = a.begin(NAME, &meta).unwrap().id();
    let mut shares = Vec::new();
    for w in 0..6u64 {
        let node = if on_a(w) { &a } else { &b };
        let mut put = node.join_share(NAME, &id, &meta).unwrap();
        let (start, count) = ([16 * w, 0], [16, 6]);
        let slab = common::slab_of(&data, 4, &meta.shape, &start, &count);
        put.write_part(&start, &count, &slab).unwrap();
        shares.extend(node.finish(put).unwrap().unwrap_or_default());
    }
    a.commit_shares(NAME, &id, &shares)?;
    // Node A alone publishes nothing: B's parts are not on the remote.
    let round = publish_round(na.path()).unwrap();
    assert!(round.published.is_empty(), "{:?}", round.published);
    let [p] = &round.pending[..] else {
        panic!("pending: {:?}", round.pending)
    };
    assert_eq!(p.waits_for(), ["nB"], "{}", p.message());
    assert!(publish_committed(nb.path()).unwrap().is_empty());
    let p = publish_committed(na.path()).unwrap();
    assert_eq!((p.len(), p[0].committed.id), (1, id));
    assert!(publish_committed(nb.path()).unwrap().is_empty());
    // Nothing left on either node.
    for n in [na.path(), nb.path()] {
        let left = common::files_under(&n.join(paralog_objects::logged::LOCAL_DIR));
        assert!(
            left.iter().all(|f| f.to_string_lossy().contains("/meta/")),
            "left: {left:?}"
        );
    }
    assert_eq!(data.len(), 96 * 6 * 4);
    Ok(data)
}

/// Chunks written in parts by writers on two nodes of a logged put: chunk
/// 0's parts on both nodes, chunk 1's on A only (put together at A's
/// commit), chunk 2's on B only; the remote commit puts 0 and 2 together
/// from the parts both nodes' publishers copied. On both layouts.
#[test]
fn chunks_written_in_parts_on_two_nodes_are_published_whole() {
    let (r1, _) = common::objstore(3, 100);
    let (r2, _) = common::plain();
    let urls = [
        format!("objstore://{}?dirs=3&keep=100", r1.path().display()),
        r2.path().to_str().unwrap().to_owned(),
    ];
    for (url, root) in urls.iter().zip([r1.path(), r2.path()]) {
        let data = parts_on_two_nodes(url, |w| [0, 2, 3].contains(&w)).unwrap();
        let s = remote(url);
        let av = s.array(NAME, None).unwrap();
        assert_eq!(av.read_all(&s).unwrap(), data, "{url}");
        // Exactly the version's three chunk files and its array record.
        let files = common::files_under(&root.join("data"));
        assert_eq!(files.len(), 4, "{url}: {files:?}");
        assert!(!root.join("staging").join(id_hex(&av.id)).exists());
    }
}

/// Parts across nodes that overlap, or leave a hole, are refused by the
/// commit on the committing node, naming the chunk; nothing is published.
#[test]
fn parts_across_nodes_that_overlap_or_leave_a_hole_are_refused() {
    let (r, _) = common::plain();
    let url = r.path().to_str().unwrap().to_owned();
    let (na, nb, a, b) = two_nodes(&url);
    let meta = ArrayMeta::new(DType::U8, &[8, 4], &[8, 4]);
    for (rows_b, what) in [(3..8u64, "overlap"), (5..8, "not covered")] {
        let id = a.begin(NAME, &meta).unwrap().id();
        let mut pa = a.join_share(NAME, &id, &meta).unwrap();
        pa.write_part(&[0, 0], &[4, 4], &[1; 16]).unwrap();
        assert!(a.finish(pa).unwrap().is_none());
        let mut pb = b.join_share(NAME, &id, &meta).unwrap();
        let n = rows_b.end - rows_b.start;
        pb.write_part(&[rows_b.start, 0], &[n, 4], &vec![2; 4 * n as usize])
            .unwrap();
        let share = b.finish(pb).unwrap().expect("a share");
        let err = a.commit_shares(NAME, &id, &share).unwrap_err();
        let m = err.to_string();
        assert!(m.contains(what) && m.contains("chunk [0, 0]"), "{m}");
        if what == "overlap" {
            assert!(matches!(err, Error::PartsOverlap { .. }), "{err}");
        }
        b.discard_share(NAME, &id);
        a.abort(NAME, &id).unwrap();
    }
    assert!(publish_committed(na.path()).unwrap().is_empty());
    assert!(publish_committed(nb.path()).unwrap().is_empty());
    assert!(common::files_under(&r.path().join("data")).is_empty());
}

/// A part damaged in node B's log after its writer's share was committed:
/// B's publisher refuses to copy it (its run fails its claim), naming the
/// file, and the version stays absent.
#[test]
fn a_damaged_part_in_a_share_is_refused_not_copied() {
    let (r, _) = common::plain();
    let url = r.path().to_str().unwrap().to_owned();
    let (na, nb, a, b) = two_nodes(&url);
    let meta = ArrayMeta::new(DType::U8, &[8, 4], &[8, 4]);
    let id = a.begin(NAME, &meta).unwrap().id();
    let mut pa = a.join_share(NAME, &id, &meta).unwrap();
    pa.write_part(&[0, 0], &[4, 4], &[1; 16]).unwrap();
    assert!(a.finish(pa).unwrap().is_none());
    let mut pb = b.join_share(NAME, &id, &meta).unwrap();
    pb.write_part(&[4, 0], &[4, 4], &[2; 16]).unwrap();
    let share = b.finish(pb).unwrap().expect("a share");
    a.commit_shares(NAME, &id, &share).unwrap();
    let [file] = &common::files_under(
        &nb.path()
            .join(paralog_objects::logged::LOCAL_DIR)
            .join("data"),
    )[..] else {
        panic!("not one part file on node B")
    };
    let mut bytes = std::fs::read(file).unwrap();
    bytes[20] ^= 1;
    std::fs::write(file, bytes).unwrap();
    let e = publish_committed(nb.path()).unwrap_err().to_string();
    assert!(
        e.contains("fails its claim") && e.contains(&file.display().to_string()),
        "{e}"
    );
    assert!(publish_committed(na.path()).unwrap().is_empty());
    assert!(matches!(
        remote(&url).array(NAME, None),
        Err(Error::NotFound { .. })
    ));
}

/// The boxes of a grid cut along each dimension at `cuts[d]` (sorted, from
/// 0 to the extent): every (start, count).
fn boxes_of(cuts: &[Vec<u64>]) -> Vec<(Vec<u64>, Vec<u64>)> {
    let mut out = vec![(Vec::new(), Vec::new())];
    for c in cuts {
        out = out
            .into_iter()
            .flat_map(|(s, n)| {
                c.windows(2).map(move |w| {
                    let (mut s, mut n) = (s.clone(), n.clone());
                    s.push(w[0]);
                    n.push(w[1] - w[0]);
                    (s, n)
                })
            })
            .collect();
    }
    out
}

/// Random arrays (1 to 3 dimensions, random chunk grids with edge chunks)
/// cut into random boxes, each box written by one of four writers, two on
/// each node (some writing nothing): whole chunks, parts put together at
/// the commit and parts put together on the remote, in any mix. Every
/// version is published once both nodes' publishers ran, equal to its
/// array, and the store holds exactly its chunks.
#[test]
fn random_boxes_by_writers_on_two_nodes_are_published_equal() {
    let mut rng = common::Rng(0x005e_ed0f_b0e5);
    for case in 0..30 {
        let nd = 1 + rng.below(3) as usize;
        let most = [40, 14, 7][nd - 1];
        let shape: Vec<u64> = (0..nd).map(|_| 1 + rng.below(most)).collect();
        let chunks: Vec<u64> = shape.iter().map(|&s| 1 + rng.below(s)).collect();
        let cuts: Vec<Vec<u64>> = shape
            .iter()
            .map(|&s| {
                let mut c = vec![0];
                c.extend((1..s).filter(|_| rng.below(3) == 0));
                c.push(s);
                c
            })
            .collect();
        let meta = ArrayMeta::new(DType::I16, &shape, &chunks);
        let data = common::Rng(case).bytes(shape.iter().product::<u64>() as usize * 2);
        let (r, _) = common::objstore(1 + rng.below(3) as u32, 100);
        let url = format!("objstore://{}?keep=100", r.path().display());
        let (na, nb, a, b) = two_nodes(&url);
        let id = a.begin(NAME, &meta).unwrap().id();
        let mut mine: Vec<Vec<(Vec<u64>, Vec<u64>)>> = vec![Vec::new(); 4];
        for bx in boxes_of(&cuts) {
            mine[rng.below(4) as usize].push(bx);
        }
        let mut shares = Vec::new();
        for (w, boxes) in mine.iter().enumerate() {
            let node = if w < 2 { &a } else { &b };
            let mut put = node.join_share(NAME, &id, &meta).unwrap();
            for (start, count) in boxes {
                let slab = common::slab_of(&data, 2, &shape, start, count);
                put.write_part(start, count, &slab).unwrap();
            }
            shares.extend(node.finish(put).unwrap().unwrap_or_default());
        }
        let what = format!("case {case}: {shape:?} in {chunks:?}, cuts {cuts:?}");
        a.commit_shares(NAME, &id, &shares)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        if rng.below(2) == 0 {
            // A first: it publishes only if B's writers wrote nothing.
            let p = publish_committed(na.path()).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(
                p.is_empty() || mine[2..].iter().all(|m| m.is_empty()),
                "{what}"
            );
        }
        publish_committed(nb.path()).unwrap_or_else(|e| panic!("{what}: {e}"));
        publish_committed(na.path()).unwrap_or_else(|e| panic!("{what}: {e}"));
        publish_committed(nb.path()).unwrap_or_else(|e| panic!("{what}: {e}"));
        let s = remote(&url);
        let av = s
            .array(NAME, None)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!((av.number, av.id), (1, id), "{what}");
        assert_eq!(av.read_all(&s).unwrap(), data, "{what}");
        let files = common::files_under(&r.path().join("data"));
        assert_eq!(files.len() as u64, meta.n_chunks() + 1, "{what}: {files:?}");
        for n in [na.path(), nb.path()] {
            let left = common::files_under(&n.join(paralog_objects::logged::LOCAL_DIR));
            assert!(
                left.iter().all(|f| f.to_string_lossy().contains("/meta/")),
                "{what}: left {left:?}"
            );
        }
    }
}
