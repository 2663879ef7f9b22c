//! Sets on the object layout: written through `SetWriter::new_obj`, read
//! back byte for byte, K container objects plus one record object, a
//! newer version replacing the old one's containers, a crashed attempt's
//! containers collected (also a killed writer's unpublished chunk, by its
//! marker), damage refused naming the chunk and offset.

use std::path::Path;

use paralog_aggregate::container::ContainerFile;
use paralog_aggregate::objpublish::collect_orphans_obj;
use paralog_aggregate::objset;
use paralog_aggregate::publish::SetWriter;
use paralog_aggregate::reader::{BlockCache, SetReader};
use paralog_backend::objstore::ObjStore;
use paralog_backend::url::ObjStoreUrl;

fn store(root: &Path) -> ObjStore {
    ObjStore::new(&ObjStoreUrl {
        root: root.to_path_buf(),
        dirs: 4,
        keep: 3,
        sync: true,
    })
}

fn bytes(seed: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

/// The objects under `meta/<set>/` (names).
fn objects(root: &Path, set: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root.join("meta").join(set))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn read_member(r: &SetReader, path: &[u8]) -> Result<Vec<u8>, String> {
    let m = r.member(path).expect("member listed");
    let mut out = vec![0u8; m.size as usize];
    r.read_at(m, 0, &mut out, &mut BlockCache::default())
        .map_err(|e| e.to_string())?;
    Ok(out)
}

fn write_set(s: &ObjStore, members: &[(&str, Vec<u8>)], k: u32) {
    let mut w = SetWriter::new_obj(s, b"ckpt/step-1", k, 4096).unwrap();
    for (p, b) in members {
        w.add_member(p.as_bytes(), b.len() as u64, 0o644, &mut &b[..])
            .unwrap();
    }
    w.publish(true).unwrap();
}

#[test]
fn a_set_round_trips_as_k_objects_and_one_record() {
    let d = tempfile::tempdir().unwrap();
    let s = store(d.path());
    let members = [
        ("rank-0.dat", bytes(1, 3 << 20)),
        ("rank-1.dat", bytes(2, (2 << 20) + 17)),
        ("rank-2.dat", bytes(3, 5000)),
        ("empty.dat", Vec::new()),
    ];
    write_set(&s, &members, 2);
    let objs = objects(d.path(), "ckpt/step-1");
    assert_eq!(objs.len(), 3, "{objs:?}");
    assert!(objs.contains(&"set.plr".to_string()));
    let r = SetReader::open_obj(&s, b"ckpt/step-1").unwrap().unwrap();
    assert_eq!(r.record().containers.len(), 2);
    for (p, b) in &members {
        assert_eq!(&read_member(&r, p.as_bytes()).unwrap(), b, "{p}");
    }
    let sets = objset::list_sets(&s).unwrap();
    assert_eq!(sets.len(), 1);
    assert_eq!(sets[0].0, Path::new("ckpt/step-1"));
    assert_eq!(
        objset::find_set(&s, b"ckpt/step-1/rank-0.dat"),
        Some((b"ckpt/step-1".to_vec(), b"rank-0.dat".to_vec()))
    );

    // A newer version replaces the old one's containers.
    let newer = [("rank-0.dat", bytes(9, 70000))];
    write_set(&s, &newer, 2);
    assert_eq!(objects(d.path(), "ckpt/step-1").len(), 2);
    let r = SetReader::open_obj(&s, b"ckpt/step-1").unwrap().unwrap();
    assert_eq!(r.record().version, 2);
    assert_eq!(read_member(&r, b"rank-0.dat").unwrap(), newer[0].1);
}

#[test]
fn a_crashed_attempt_leaves_orphans_that_are_collected() {
    let d = tempfile::tempdir().unwrap();
    let s = store(d.path());
    write_set(&s, &[("rank-0.dat", bytes(1, 9000))], 1);
    // What a publisher killed after its containers were durable and
    // before its record leaves: a container object no record lists.
    let name = paralog_aggregate::format::container_name(0, 2, 0xfeed);
    let mut c = ContainerFile::create_obj(&s, b"ckpt/step-1", name.clone()).unwrap();
    c.write_extent(0, 5, &mut &b"hello"[..], 4096, &mut vec![0u8; 8192])
        .unwrap();
    c.sync().unwrap();
    std::mem::forget(c);
    assert_eq!(objects(d.path(), "ckpt/step-1").len(), 3);
    let removed = collect_orphans_obj(&s, b"ckpt/step-1").unwrap();
    assert_eq!(
        removed,
        vec![objset::display_path(
            &s,
            &objset::object_name(b"ckpt/step-1", &name)
        )]
    );
    assert_eq!(objects(d.path(), "ckpt/step-1").len(), 2);
    let r = SetReader::open_obj(&s, b"ckpt/step-1").unwrap().unwrap();
    assert_eq!(read_member(&r, b"rank-0.dat").unwrap(), bytes(1, 9000));
}

/// The chunk files under `data/`.
fn chunks(root: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for d in std::fs::read_dir(root.join("data")).unwrap() {
        for c in std::fs::read_dir(d.unwrap().path()).unwrap() {
            out.push(c.unwrap().path());
        }
    }
    out.sort();
    out
}

#[test]
fn a_writer_killed_mid_container_leaves_a_marked_chunk_that_is_collected() {
    let d = tempfile::tempdir().unwrap();
    let s = store(d.path());
    write_set(&s, &[("rank-0.dat", bytes(1, 9000))], 1);
    let before = chunks(d.path());
    // A container being written when its writer was killed: its chunk is
    // named by no version, only by its marker.
    let name = paralog_aggregate::format::container_name(0, 2, 0xbeef);
    let mut c = ContainerFile::create_obj(&s, b"ckpt/step-1", name.clone()).unwrap();
    c.write_extent(0, 5, &mut &b"hello"[..], 4096, &mut vec![0u8; 8192])
        .unwrap();
    std::mem::forget(c);
    assert_eq!(chunks(d.path()).len(), before.len() + 1);
    let marker = objects(d.path(), "ckpt/step-1")
        .into_iter()
        .find(|n| n.starts_with(paralog_aggregate::objcontainer::MARKER))
        .expect("a marker beside the set's objects");
    assert!(marker.ends_with(std::str::from_utf8(&name).unwrap()));
    // The layout does not take the marker for an object or a directory.
    assert_eq!(
        s.list_dir(b"ckpt/step-1").len(),
        2,
        "set.plr and one container"
    );
    let removed = collect_orphans_obj(&s, b"ckpt/step-1").unwrap();
    assert_eq!(removed.len(), 1, "{removed:?}");
    assert!(removed[0]
        .to_string_lossy()
        .ends_with("(unpublished chunk)"));
    assert_eq!(chunks(d.path()), before);
    let left = objects(d.path(), "ckpt/step-1");
    assert!(
        left.len() == 2 && left.iter().all(|n| !n.starts_with('.')),
        "{left:?}"
    );
    let r = SetReader::open_obj(&s, b"ckpt/step-1").unwrap().unwrap();
    assert_eq!(read_member(&r, b"rank-0.dat").unwrap(), bytes(1, 9000));
}

#[test]
fn a_published_container_keeps_no_marker_and_a_stale_one_never_takes_its_chunk() {
    let d = tempfile::tempdir().unwrap();
    let s = store(d.path());
    write_set(&s, &[("rank-0.dat", bytes(1, 9000))], 1);
    let names = objects(d.path(), "ckpt/step-1");
    assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
    // A crash between a container's publish and its marker's removal: the
    // marker names the live container's chunk, which must stay.
    let r = SetReader::open_obj(&s, b"ckpt/step-1").unwrap().unwrap();
    let live = r.record().containers[0].name.clone();
    let v = s
        .version(&objset::object_name(b"ckpt/step-1", &live), None)
        .unwrap()
        .unwrap();
    let p = &v.pieces[0];
    let hex: String = p.chunk.iter().map(|b| format!("{b:02x}")).collect();
    let marker = format!(
        "{}{}.{hex}.{}",
        paralog_aggregate::objcontainer::MARKER,
        p.dir,
        String::from_utf8_lossy(&live)
    );
    std::fs::write(d.path().join("meta/ckpt/step-1").join(&marker), b"").unwrap();
    assert_eq!(
        collect_orphans_obj(&s, b"ckpt/step-1").unwrap(),
        Vec::<std::path::PathBuf>::new()
    );
    assert!(!d.path().join("meta/ckpt/step-1").join(&marker).exists());
    let r = SetReader::open_obj(&s, b"ckpt/step-1").unwrap().unwrap();
    assert_eq!(read_member(&r, b"rank-0.dat").unwrap(), bytes(1, 9000));
}

#[test]
fn a_flipped_chunk_byte_is_refused_naming_the_chunk_and_offset() {
    let d = tempfile::tempdir().unwrap();
    let s = store(d.path());
    write_set(&s, &[("rank-0.dat", bytes(4, 3 << 20))], 1);
    let r = SetReader::open_obj(&s, b"ckpt/step-1").unwrap().unwrap();
    let c = &r.record().containers[0].name;
    let name = objset::object_name(b"ckpt/step-1", c);
    let v = s.version(&name, None).unwrap().unwrap();
    let p = v.pieces[1];
    let chunk = s.chunk_path(p.dir, &p.chunk);
    let mut b = std::fs::read(&chunk).unwrap();
    b[(p.block_off + 100) as usize] ^= 1;
    std::fs::write(&chunk, &b).unwrap();
    let e = read_member(&r, b"rank-0.dat").unwrap_err();
    assert!(
        e.contains(&chunk.display().to_string()) && e.contains(&format!("byte {}", p.block_off))
            || e.contains(&format!("offset {}", p.block_off)),
        "{e}"
    );
}

#[test]
fn two_publishers_at_once_lose_neither_set() {
    let d = tempfile::tempdir().unwrap();
    let s = store(d.path());
    let (a, b) = (bytes(5, 40000), bytes(6, 50000));
    let mut w1 = SetWriter::new_obj(&s, b"ckpt/step-1", 1, 4096).unwrap();
    let mut w2 = SetWriter::new_obj(&s, b"ckpt/step-1", 1, 4096).unwrap();
    w1.add_member(b"rank-0.dat", a.len() as u64, 0o644, &mut &a[..])
        .unwrap();
    w2.add_member(b"rank-0.dat", b.len() as u64, 0o644, &mut &b[..])
        .unwrap();
    w1.publish(true).unwrap();
    w2.publish(true).unwrap();
    // Both records are versions of the record object, each whole; the
    // later publish is the latest.
    let kept = objset::kept_records(&s, b"ckpt/step-1").unwrap();
    assert_eq!(kept.len(), 2);
    for (r, want) in kept.into_iter().zip([&a, &b]) {
        let r = SetReader::from_obj(&s, r);
        assert_eq!(&read_member(&r, b"rank-0.dat").unwrap(), want);
    }
    let latest = SetReader::open_obj(&s, b"ckpt/step-1").unwrap().unwrap();
    assert_eq!(read_member(&latest, b"rank-0.dat").unwrap(), b);
    // Neither is an orphan: both are version 1 of the set.
    assert!(collect_orphans_obj(&s, b"ckpt/step-1").unwrap().is_empty());
    assert_eq!(objects(d.path(), "ckpt/step-1").len(), 3);
}

#[test]
fn a_crash_right_after_the_record_leaves_the_replaced_containers_to_collect() {
    let d = tempfile::tempdir().unwrap();
    let s = store(d.path());
    write_set(&s, &[("rank-0.dat", bytes(1, 9000))], 1);
    let b = bytes(2, 7000);
    let mut w = SetWriter::new_obj(&s, b"ckpt/step-1", 1, 4096)
        .unwrap()
        .with_hook(|p| {
            if p == "aggregate.after_record" {
                panic!("killed at {p}")
            }
        });
    w.add_member(b"rank-0.dat", b.len() as u64, 0o644, &mut &b[..])
        .unwrap();
    let killed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || w.publish(true)));
    assert!(killed.is_err());
    // Version 2 is the latest; version 1's container is still there (its
    // kept record lists it) until a collection.
    assert_eq!(objects(d.path(), "ckpt/step-1").len(), 3);
    let removed = collect_orphans_obj(&s, b"ckpt/step-1").unwrap();
    assert_eq!(removed.len(), 1, "{removed:?}");
    assert_eq!(objects(d.path(), "ckpt/step-1").len(), 2);
    let r = SetReader::open_obj(&s, b"ckpt/step-1").unwrap().unwrap();
    assert_eq!(r.record().version, 2);
    assert_eq!(read_member(&r, b"rank-0.dat").unwrap(), b);
}

#[test]
fn a_set_whose_every_member_was_deleted_is_removed() {
    let d = tempfile::tempdir().unwrap();
    let s = store(d.path());
    write_set(
        &s,
        &[
            ("rank-0.dat", bytes(1, 5000)),
            ("rank-1.dat", bytes(2, 7000)),
        ],
        2,
    );
    let w = SetWriter::new_obj(&s, b"ckpt/step-1", 2, 4096).unwrap();
    assert!(w.is_empty());
    w.remove().unwrap();
    // The record object's latest version deletes it; the containers are gone.
    assert_eq!(objects(d.path(), "ckpt/step-1"), vec!["set.plr"]);
    assert!(objset::read_record(&s, b"ckpt/step-1").unwrap().is_none());
    assert!(objset::list_sets(&s).unwrap().is_empty());
    assert!(!s.is_directory(b"ckpt/step-1") && !s.is_directory(b"ckpt"));
}
