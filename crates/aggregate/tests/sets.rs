//! Sets written from real files and read back: uneven sizes (±20 %), K in
//! {1, 2, 4}, every member byte for byte through the reader; damage named
//! by file and offset; crash points and orphans; versions replacing each
//! other.

use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use paralog_aggregate::format::{self, RECORD_NAME};
use paralog_aggregate::publish::{collect_orphans, copy_member, SetWriter};
use paralog_aggregate::reader::{find_set, list_sets, read_record, MemberReader, SetReader};
use paralog_aggregate::AggError;

/// Deterministic bytes (xorshift), different per seed.
fn bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// `n` rank files of about `mean` bytes, ±20 %, under `dir`.
fn rank_files(dir: &Path, n: usize, mean: usize) -> Vec<(String, Vec<u8>)> {
    std::fs::create_dir_all(dir).unwrap();
    (0..n)
        .map(|r| {
            let spread = (mean / 5) as i64;
            let delta = (bytes(r as u64 + 100, 8)[0] as i64 * 2 * spread / 255) - spread;
            let data = bytes(r as u64, (mean as i64 + delta) as usize);
            let name = format!("rank-{r:05}.dat");
            std::fs::write(dir.join(&name), &data).unwrap();
            (name, data)
        })
        .collect()
}

fn write_set(
    remote: &Path,
    set: &str,
    k: u32,
    align: u64,
    files: &[(String, Vec<u8>)],
    src: &Path,
) {
    let mut w = SetWriter::new(remote, set.as_bytes(), k, align).unwrap();
    for (name, data) in files {
        let mut f = File::open(src.join(name)).unwrap();
        w.add_member(name.as_bytes(), data.len() as u64, 0o640, &mut f)
            .unwrap();
    }
    let r = w.publish(true).unwrap();
    assert_eq!(r.members.len(), files.len());
}

/// Set "s" of `n` rank files of about `mean` bytes (under src/), in `k`
/// containers aligned to `align`, published in a fresh directory: the
/// directory and the files.
fn published_set(
    n: usize,
    mean: usize,
    k: u32,
    align: u64,
) -> (tempfile::TempDir, Vec<(String, Vec<u8>)>) {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    let files = rank_files(&src, n, mean);
    write_set(t.path(), "s", k, align, &files, &src);
    (t, files)
}

fn set_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn uneven_members_read_back_byte_for_byte_for_k_1_2_4() {
    for k in [1u32, 2, 4] {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        let remote = t.path().join("remote");
        std::fs::create_dir(&remote).unwrap();
        let files = rank_files(&src, 9, 300_000);
        write_set(&remote, "ckpt/step-000100", k, 64 << 10, &files, &src);

        let dir = remote.join("ckpt/step-000100");
        let names = set_files(&dir);
        assert_eq!(
            names.len(),
            k as usize + 1,
            "K containers + 1 record: {names:?}"
        );
        assert!(names.contains(&RECORD_NAME.to_string()));

        let set = Arc::new(SetReader::open(&dir).unwrap().unwrap());
        let rec = set.record();
        assert_eq!(
            (rec.version, rec.complete, rec.containers.len()),
            (1, true, k as usize)
        );
        // Balanced by bytes: no container holds more than the mean plus one member.
        let max_member = files.iter().map(|f| f.1.len() as u64).max().unwrap();
        let total: u64 = files.iter().map(|f| f.1.len() as u64).sum();
        for c in &rec.containers {
            assert!(
                c.size <= total / k as u64 + max_member + (64 << 10) * 9,
                "{c:?}"
            );
        }
        for (name, data) in &files {
            let mut m = MemberReader::new(set.clone(), name.as_bytes()).unwrap();
            assert_eq!(m.size(), data.len() as u64);
            assert_eq!(m.member().mode, 0o640);
            // Every extent starts aligned.
            for e in &m.member().extents {
                assert_eq!(e.container_offset % (64 << 10), 0);
            }
            let mut whole = vec![0u8; data.len()];
            m.read_at(0, &mut whole).unwrap();
            assert!(whole == *data, "{name} differs (K={k})");
            // Small reads at odd offsets, across block boundaries, past the end.
            for (off, len) in [
                (1usize, 7usize),
                (4095, 3),
                ((1 << 20) - 1, 2),
                (data.len() - 5, 20),
            ] {
                if off >= data.len() {
                    continue;
                }
                let mut b = vec![0xffu8; len];
                m.read_at(off as u64, &mut b).unwrap();
                let end = (off + len).min(data.len());
                assert_eq!(&b[..end - off], &data[off..end]);
                assert!(b[end - off..].iter().all(|&x| x == 0));
            }
        }
        let sets = list_sets(&remote).unwrap();
        assert_eq!(sets.len(), 1);
        assert_eq!(sets[0].0, PathBuf::from("ckpt/step-000100"));
        assert_eq!(
            find_set(&remote, b"ckpt/step-000100/rank-00003.dat"),
            Some((b"ckpt/step-000100".to_vec(), b"rank-00003.dat".to_vec()))
        );
        assert_eq!(find_set(&remote, b"ckpt/rank-00003.dat"), None);
    }
}

#[test]
fn sparse_and_empty_members() {
    let t = tempfile::tempdir().unwrap();
    let mut w = SetWriter::new(t.path(), b"s", 2, 4096)
        .unwrap()
        .with_block_size(4096);
    let a = bytes(1, 5000);
    let b = bytes(2, 3000);
    let joined = [a.clone(), b.clone()].concat();
    w.add_member_sparse(
        b"sparse",
        100_000,
        0o600,
        &[(10, 5000), (60_000, 3000)],
        &mut &joined[..],
    )
    .unwrap();
    w.add_member(b"empty", 0, 0o644, &mut std::io::empty())
        .unwrap();
    w.add_member(b"sub/x", 3, 0o644, &mut &b"abc"[..]).unwrap();
    w.publish(false).unwrap();
    let set = Arc::new(SetReader::open(&t.path().join("s")).unwrap().unwrap());
    assert!(!set.record().complete);
    let mut m = MemberReader::new(set.clone(), b"sparse").unwrap();
    let mut all = vec![0xeeu8; 100_010];
    m.read_at(0, &mut all).unwrap();
    let mut want = vec![0u8; 100_010];
    want[10..5010].copy_from_slice(&a);
    want[60_000..63_000].copy_from_slice(&b);
    assert!(all == want);
    assert_eq!(MemberReader::new(set.clone(), b"empty").unwrap().size(), 0);
    assert!(MemberReader::new(set, b"missing").is_none());
}

#[test]
fn the_writer_refuses_paths_that_leave_the_set() {
    let t = tempfile::tempdir().unwrap();
    assert!(SetWriter::new(t.path(), b"../up", 1, 4096).is_err());
    assert!(SetWriter::new(t.path(), b"/abs", 1, 4096).is_err());
    assert!(SetWriter::new(t.path(), b"s", 0, 4096).is_err());
    assert!(SetWriter::new(t.path(), b"s", 1, 3000).is_err());
    let mut w = SetWriter::new(t.path(), b"s", 1, 4096).unwrap();
    for bad in [&b"../x"[..], b"/etc/x", b"a//b", b"", b"set.plr"] {
        let e = w.add_member(bad, 1, 0o644, &mut &b"x"[..]).unwrap_err();
        assert!(matches!(e, AggError::Invalid { .. }), "{e}");
    }
    w.add_member(b"a", 1, 0o644, &mut &b"x"[..]).unwrap();
    assert!(
        w.add_member(b"a", 1, 0o644, &mut &b"x"[..]).is_err(),
        "twice"
    );
    // Fewer bytes than the size promised.
    assert!(w.add_member(b"b", 10, 0o644, &mut &b"x"[..]).is_err());
}

#[test]
fn a_flipped_container_byte_is_refused_with_file_and_offset() {
    let (t, files) = published_set(3, 3 << 20, 1, 1 << 20);
    let dir = t.path().join("s");
    let set = Arc::new(SetReader::open(&dir).unwrap().unwrap());
    let e = &set.record().member(files[1].0.as_bytes()).unwrap().extents[0];
    let container = set.container_path(e.container);
    // Flip a byte in the member's second block.
    let at = e.container_offset + (1 << 20) + 12345;
    let mut c = std::fs::read(&container).unwrap();
    c[at as usize] ^= 0x40;
    std::fs::write(&container, &c).unwrap();
    let set = Arc::new(SetReader::open(&dir).unwrap().unwrap());
    let mut m = MemberReader::new(set.clone(), files[1].0.as_bytes()).unwrap();
    // The first block still reads.
    let mut b = vec![0u8; 100];
    m.read_at(0, &mut b).unwrap();
    assert_eq!(b, files[1].1[..100]);
    let mut b = vec![0u8; 10];
    let err = m.read_at((1 << 20) + 5, &mut b).unwrap_err();
    let s = err.to_string();
    assert!(s.contains(&container.display().to_string()), "{s}");
    assert!(
        s.contains(&format!("at offset {}", e.container_offset + (1 << 20))),
        "{s}"
    );
    assert_eq!(err.errno(), libc::EIO);
    // Other members are unaffected.
    let mut m0 = MemberReader::new(set, files[0].0.as_bytes()).unwrap();
    let mut all = vec![0u8; files[0].1.len()];
    m0.read_at(0, &mut all).unwrap();
    assert!(all == files[0].1);
    // A truncated container: named with its real end.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&container)
        .unwrap()
        .set_len(e.container_offset + 100)
        .unwrap();
    let set = Arc::new(SetReader::open(&dir).unwrap().unwrap());
    let mut m = MemberReader::new(set, files[1].0.as_bytes()).unwrap();
    let s = m.read_at(0, &mut b).unwrap_err().to_string();
    assert!(
        s.contains(&format!("at offset {}", e.container_offset + 100)),
        "{s}"
    );
}

#[test]
fn a_truncated_set_record_is_refused_with_file_and_offset() {
    let (t, _files) = published_set(2, 1000, 1, 4096);
    let rec = t.path().join("s").join(RECORD_NAME);
    let b = std::fs::read(&rec).unwrap();
    std::fs::write(&rec, &b[..b.len() - 10]).unwrap();
    let s = SetReader::open(&t.path().join("s"))
        .unwrap_err()
        .to_string();
    assert!(s.contains(&rec.display().to_string()), "{s}");
    assert!(s.contains("at offset 16"), "{s}");
    assert!(s.contains("truncated"), "{s}");
    // `list_sets` lists it with its error; `collect_orphans` removes nothing.
    let sets = list_sets(t.path()).unwrap();
    assert!(sets[0].1.is_err());
    assert!(collect_orphans(&t.path().join("s")).is_err());
    assert_eq!(set_files(&t.path().join("s")).len(), 2);
}

#[test]
fn a_crash_before_the_record_keeps_the_previous_version_and_leaves_orphans() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    let v1 = rank_files(&src.join("1"), 4, 50_000);
    write_set(t.path(), "s", 2, 4096, &v1, &src.join("1"));
    let dir = t.path().join("s");
    let before = set_files(&dir);

    // The writer of version 2 stops between its containers and its record
    // (a crash: nothing of it runs after that point).
    let v2 = rank_files(&src.join("2"), 4, 60_000);
    let mut w = SetWriter::new(t.path(), b"s", 2, 4096).unwrap();
    assert_eq!(w.version(), 2);
    for (name, data) in &v2 {
        w.add_member(name.as_bytes(), data.len() as u64, 0o644, &mut &data[..])
            .unwrap();
    }
    std::mem::forget(w);
    assert_eq!(set_files(&dir).len(), before.len() + 2, "orphans left");

    // Version 1 reads exactly as before.
    let set = Arc::new(SetReader::open(&dir).unwrap().unwrap());
    assert_eq!(set.record().version, 1);
    for (name, data) in &v1 {
        let mut m = MemberReader::new(set.clone(), name.as_bytes()).unwrap();
        let mut b = vec![0u8; data.len()];
        m.read_at(0, &mut b).unwrap();
        assert!(b == *data);
    }
    let removed = collect_orphans(&dir).unwrap();
    assert_eq!(removed.len(), 2);
    assert_eq!(set_files(&dir), before);

    // A crash inside publish, at each point (a hook that panics stands for
    // the kill): before the record, the old version is whole; after it,
    // the new one is.
    for (point, published) in [
        ("aggregate.before_record", false),
        ("aggregate.after_record", true),
    ] {
        let old = read_record(&dir).unwrap().unwrap();
        let w = SetWriter::new(t.path(), b"s", 2, 4096)
            .unwrap()
            .with_hook(move |p| {
                if p == point {
                    panic!("crash at {p}")
                }
            });
        let mut w = w;
        for (name, data) in &v2 {
            w.add_member(name.as_bytes(), data.len() as u64, 0o644, &mut &data[..])
                .unwrap();
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.publish(true)));
        assert!(r.is_err());
        let now = read_record(&dir).unwrap().unwrap();
        if published {
            assert_eq!(now.version, old.version + 1);
            // The old version's containers were not removed yet: orphans.
            collect_orphans(&dir).unwrap();
        } else {
            assert_eq!(now, old);
            collect_orphans(&dir).unwrap();
        }
        let names = set_files(&dir);
        assert_eq!(names.len(), 3, "{point}: {names:?}");
        let set = Arc::new(SetReader::open(&dir).unwrap().unwrap());
        let want = if published { &v2 } else { &v1 };
        for (name, data) in want {
            let mut m = MemberReader::new(set.clone(), name.as_bytes()).unwrap();
            let mut b = vec![0u8; data.len()];
            m.read_at(0, &mut b).unwrap();
            assert!(b == *data, "{point}: {name}");
        }
    }
}

#[test]
fn a_new_version_replaces_the_old_and_collects_its_containers() {
    let (t, files) = published_set(5, 20_000, 2, 4096);
    let dir = t.path().join("s");
    let old = SetReader::open(&dir).unwrap().unwrap();
    let old = Arc::new(old);
    // Version 2: member 0 rewritten, the others carried over verified.
    let mut w = SetWriter::new(t.path(), b"s", 2, 4096).unwrap();
    let new0 = bytes(99, 12_345);
    w.add_member(
        files[0].0.as_bytes(),
        new0.len() as u64,
        0o600,
        &mut &new0[..],
    )
    .unwrap();
    for m in &old.record().members[1..] {
        copy_member(&mut w, &old, m).unwrap();
    }
    let r = w.publish(true).unwrap();
    assert_eq!(r.version, 2);
    let names = set_files(&dir);
    assert_eq!(names.len(), 3, "the old containers are gone: {names:?}");
    assert!(names
        .iter()
        .filter(|n| format::is_container_name(n.as_bytes()))
        .all(|n| n.contains("-v000002-")));
    let set = Arc::new(SetReader::open(&dir).unwrap().unwrap());
    for (i, (name, data)) in files.iter().enumerate() {
        let want = if i == 0 { &new0 } else { data };
        let mut m = MemberReader::new(set.clone(), name.as_bytes()).unwrap();
        let mut b = vec![0u8; want.len()];
        m.read_at(0, &mut b).unwrap();
        assert!(b == *want);
    }
    assert_eq!(collect_orphans(&dir).unwrap(), Vec::<PathBuf>::new());
    let mode = std::fs::metadata(dir.join(RECORD_NAME))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o644);
}

#[test]
fn a_set_whose_every_member_was_deleted_is_removed() {
    let (t, _) = published_set(3, 10_000, 2, 4096);
    let dir = t.path().join("s");
    let w = SetWriter::new(t.path(), b"s", 2, 4096).unwrap();
    assert!(w.is_empty());
    w.remove().unwrap();
    assert!(set_files(&dir).is_empty(), "left: {:?}", set_files(&dir));
    assert!(SetReader::open(&dir).unwrap().is_none());
    // A crash after the record's removal (the commit) and before the
    // containers': they are orphans, collected.
    let (t, _) = published_set(3, 10_000, 2, 4096);
    let dir = t.path().join("s");
    std::fs::remove_file(dir.join(RECORD_NAME)).unwrap();
    assert_eq!(collect_orphans(&dir).unwrap().len(), 2);
    assert!(set_files(&dir).is_empty());
    // A set never published: nothing to remove.
    let t = tempfile::tempdir().unwrap();
    SetWriter::new(t.path(), b"s", 1, 4096)
        .unwrap()
        .remove()
        .unwrap();
    assert!(set_files(&t.path().join("s")).is_empty());
}
