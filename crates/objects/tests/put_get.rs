//! PUT and GET: every element type, edge chunks, random hyperslabs, the
//! seed's chunk shapes written by several writers, versions, listing,
//! describing, deleting, and the Zarr view's bookkeeping.

mod common;

use common::{kept_numbers, objstore, plain, slab_of, Rng};
use paralog_objects::{ArrayMeta, Attrs, DType, Error, Store};

fn attrs() -> Attrs {
    let mut a = Attrs::new();
    a.insert("units".into(), "kelvin".into());
    a.insert("step".into(), 5.into());
    a.insert("origin".into(), serde_json::json!([0.5, -1.0]));
    a
}

/// Put random bytes as `meta`, read the whole array and `slabs` random
/// hyperslabs back: each equal to the reference slice of what was put.
fn round_trip(store: &Store, name: &str, meta: &ArrayMeta, rng: &mut Rng, slabs: usize) {
    let data = rng.bytes(meta.array_len() as usize);
    let c = store.put(name, meta, &data).unwrap();
    let av = store.array(name, None).unwrap();
    assert_eq!((av.number, av.id), (c.number, c.id));
    assert_eq!(&av.meta, meta);
    assert_eq!(av.read_all(store).unwrap(), data, "{name} whole");
    for _ in 0..slabs {
        let (start, count) = rng.slab(&meta.shape);
        let want = slab_of(&data, meta.dtype.size(), &meta.shape, &start, &count);
        assert_eq!(
            av.read(store, &start, &count).unwrap(),
            want,
            "{name} {start:?} {count:?}"
        );
    }
    paralog_objects::zarr::check_view(store, &av).unwrap();
}

#[test]
fn every_dtype_with_edge_chunks_and_random_slabs() {
    let (_t, store) = objstore(4, 3);
    let mut rng = Rng(0x5eed);
    for (k, d) in DType::ALL.into_iter().enumerate() {
        // 37x19 in chunks of 8x5: edge chunks on both sides.
        let meta = ArrayMeta::new(d, &[37, 19], &[8, 5]).with_attrs(attrs());
        round_trip(&store, &format!("dtypes/{}", d.name()), &meta, &mut rng, 40);
        assert_eq!(store.list().unwrap().len(), k + 1);
    }
}

#[test]
fn one_three_and_four_dimensions() {
    let (_t, store) = plain();
    let mut rng = Rng(7);
    for (shape, chunks) in [
        (vec![1000], vec![64]),
        (vec![1], vec![1]),
        (vec![9, 10, 11], vec![4, 3, 5]),
        (vec![5, 6, 7, 8], vec![2, 6, 3, 8]),
        (vec![3, 4], vec![10, 10]),
    ] {
        let meta = ArrayMeta::new(DType::F64, &shape, &chunks);
        round_trip(&store, &format!("nd/{}", shape.len()), &meta, &mut rng, 60);
    }
}

#[test]
fn typed_api_round_trips_values() {
    let (_t, store) = plain();
    let v: Vec<f32> = (0..600).map(|i| i as f32 * 0.25 - 17.0).collect();
    store
        .put_as("t", &[20, 30], &[7, 30], Attrs::new(), &v)
        .unwrap();
    let av = store.array("t", None).unwrap();
    assert_eq!(av.read_as::<f32>(&store, &[0, 0], &[20, 30]).unwrap(), v);
    assert_eq!(
        av.read_as::<f32>(&store, &[19, 29], &[1, 1]).unwrap(),
        [v[599]]
    );
    // The wrong element type is refused, not reinterpreted.
    assert!(matches!(
        av.read_as::<i32>(&store, &[0, 0], &[1, 1]),
        Err(Error::Invalid { .. })
    ));
}

/// The seed's layout: each writer puts its own 16x4096 (32, 64) int32 rows
/// as one chunk; one commit publishes them.
#[test]
fn seed_chunk_shapes_written_by_several_writers() {
    let (_t, store) = objstore(8, 3);
    for rows in [16u64, 32, 64] {
        for writers in [1u64, 2, 4] {
            let meta = ArrayMeta::new(DType::I32, &[rows * writers, 4096], &[rows, 4096]);
            let name = format!("seed/{rows}x4096/{writers}");
            let id = store.begin(&name, &meta).unwrap().id();
            let mut want = Vec::new();
            std::thread::scope(|s| {
                let hs: Vec<_> = (0..writers)
                    .map(|r| {
                        let (store, name, meta) = (&store, &name, &meta);
                        s.spawn(move || {
                            let mut put = store.join_as(name, &id, meta).unwrap();
                            let vals: Vec<i32> = (0..rows * 4096)
                                .map(|i| (r * 1_000_000 + i) as i32)
                                .collect();
                            put.write_chunk_as(&[r, 0], &vals).unwrap();
                            put.finish().unwrap();
                            vals
                        })
                    })
                    .collect();
                for h in hs {
                    want.extend(h.join().unwrap());
                }
            });
            let c = store.commit(&name, &id).unwrap();
            let av = store.array(&name, None).unwrap();
            assert_eq!(av.number, c.number);
            let shape = meta.shape.clone();
            assert_eq!(av.read_as::<i32>(&store, &[0, 0], &shape).unwrap(), want);
            paralog_objects::zarr::check_view(&store, &av).unwrap();
        }
    }
}

#[test]
fn forty_versions_each_read_back_as_its_own() {
    let (_t, store) = objstore(4, 64);
    let meta = ArrayMeta::new(DType::U16, &[12, 10], &[5, 4]);
    let mut rng = Rng(40);
    let mut puts = Vec::new();
    for _ in 0..40 {
        let data = rng.bytes(meta.array_len() as usize);
        puts.push((store.put("v", &meta, &data).unwrap(), data));
    }
    let kept = store.versions("v").unwrap();
    assert_eq!(kept.len(), 40);
    for (c, data) in &puts {
        let av = store.array("v", Some(c.number)).unwrap();
        assert_eq!(av.id, c.id);
        assert_eq!(&av.read_all(&store).unwrap(), data, "version {}", c.number);
    }
    assert_eq!(store.array("v", None).unwrap().number, puts[39].0.number);
}

#[test]
fn retention_drops_versions_and_their_views() {
    let (t, store) = objstore(2, 3);
    let meta = ArrayMeta::new(DType::I8, &[4], &[2]);
    for i in 0..6u8 {
        store.put("r", &meta, &[i; 4]).unwrap();
    }
    let kept = kept_numbers(&store, "r");
    assert_eq!(kept, [4, 5, 6]);
    let views: Vec<String> = std::fs::read_dir(t.path().join("zarr/r"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(views.len(), 3, "{views:?}");
    assert!(store.array("r", Some(2)).is_err());
    assert_eq!(
        store.array("r", Some(4)).unwrap().read_all(&store).unwrap(),
        [3; 4]
    );
}

#[test]
fn list_describe_delete() {
    let (_t, store) = plain();
    let meta = ArrayMeta::new(DType::U8, &[3], &[2]).with_attrs(attrs());
    store.put("b/x", &meta, &[1, 2, 3]).unwrap();
    store.put("a", &meta, &[4, 5, 6]).unwrap();
    store.put("a", &meta, &[7, 8, 9]).unwrap();
    assert_eq!(store.list().unwrap(), ["a", "b/x"]);
    let info = store.describe("a").unwrap();
    assert_eq!(info.latest.meta.attrs, attrs());
    assert_eq!(info.versions.len(), 2);
    assert_eq!(info.latest.number, 2);
    let del = store.delete("a").unwrap();
    assert_eq!(del, 3);
    assert_eq!(store.list().unwrap(), ["b/x"]);
    assert!(matches!(
        store.array("a", None),
        Err(Error::NotFound { .. })
    ));
    // Older versions stay readable by number until retention drops them.
    assert_eq!(
        store.array("a", Some(1)).unwrap().read_all(&store).unwrap(),
        [4, 5, 6]
    );
    // A new put after the deletion is the latest again.
    store.put("a", &meta, &[0, 0, 1]).unwrap();
    assert_eq!(
        store.array("a", None).unwrap().read_all(&store).unwrap(),
        [0, 0, 1]
    );
    assert!(matches!(
        store.delete("nothing"),
        Err(Error::NotFound { .. })
    ));
}

#[test]
fn locate_splits_store_and_name() {
    let (t, store) = objstore(4, 3);
    store
        .put("dir/obj", &ArrayMeta::new(DType::U8, &[1], &[1]), &[9])
        .unwrap();
    let url = format!("objstore://{}/dir/obj?dirs=4", t.path().display());
    let (s, name) = Store::locate(&url.parse().unwrap()).unwrap();
    assert_eq!(s.root(), t.path());
    assert_eq!(name.as_deref(), Some("dir/obj"));
    let (_, none) = Store::locate(&format!("{}", t.path().display()).parse().unwrap()).unwrap();
    assert_eq!(none, None);
}

#[test]
fn empty_arrays_and_unicode_names() {
    let (_t, store) = plain();
    // No chunk at all: a version holding only its array record.
    let meta = ArrayMeta::new(DType::F32, &[0, 5], &[4, 4]);
    let c = store.put("empty/größe", &meta, &[]).unwrap();
    let av = store.array("empty/größe", None).unwrap();
    assert_eq!((av.number, av.meta.n_chunks()), (c.number, 0));
    assert!(av.read_all(&store).unwrap().is_empty());
    paralog_objects::zarr::check_view(&store, &av).unwrap();
    assert_eq!(store.list().unwrap(), ["empty/größe"]);
    // A hyperslab past an empty dimension is refused, not clamped.
    assert!(av.read(&store, &[0, 0], &[1, 1]).is_err());
}
