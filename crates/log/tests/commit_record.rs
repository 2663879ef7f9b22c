//! Crash points inside a format-2 commit (docs/format.md, "Commit record"):
//! the data log cut at every byte of its commit record, or one bit of the
//! record (or of the header it covers) flipped, as a crash during its write
//! and fdatasync can leave it. Without other proof the epoch is then not
//! committed: ignored by readers, removed by gc. With a commit mark (the
//! agreement said every rank committed) the same damage is refused, naming
//! the data log and the offset. Also: a one-process writer stopped between
//! its commit and its rename (the staging directory is read in place, kept
//! by gc, published by the server), and a path record lost in a crash.

use std::path::{Path, PathBuf};

use paralog_log::gc::collect_garbage;
use paralog_log::layout::{self, epoch_file_name, EpochFileKind};
use paralog_log::reader::{ManifestAt, SourceReader};
use paralog_log::{EpochId, FileIdent, FileInventory, LogError, RankLog, WriterConfig};

fn ident(gen: u64) -> FileIdent {
    FileIdent {
        job: "j".into(),
        path: b"/app/f".to_vec(),
        rel: b"f".to_vec(),
        gen,
    }
}

/// Two ranks; epoch 1 committed with marks; epoch 2 committed locally by
/// both, before the agreement (no marks). Returns the rank directories.
fn build(root: &Path) -> Vec<PathBuf> {
    let cfg = WriterConfig::default();
    let mut logs: Vec<RankLog> = (0..2)
        .map(|r| RankLog::create(root, ident(1), r, 2, cfg).unwrap())
        .collect();
    for e in 1..=2u8 {
        for (r, l) in logs.iter_mut().enumerate() {
            l.write_at(r as u64 * 100, &[e * 10 + r as u8; 100])
                .unwrap();
        }
        for l in logs.iter_mut() {
            l.commit_local().unwrap();
        }
        if e == 1 {
            for l in logs.iter_mut() {
                l.complete_epoch().unwrap();
            }
        }
    }
    logs.iter().map(|l| l.rank_dir().to_path_buf()).collect()
}

fn read(root: &Path, len: usize) -> Result<Vec<u8>, LogError> {
    let inv = FileInventory::scan_path(root, "j", b"f")?.unwrap();
    let lf = inv.logical_file(None)?;
    let mut buf = vec![0u8; len];
    lf.read_at(&mut SourceReader::default(), 0, &mut buf, 0, &mut |_, _| {
        Ok(())
    })?;
    Ok(buf)
}

fn expect(epoch: u8) -> Vec<u8> {
    let mut v = vec![epoch * 10; 100];
    v.extend(vec![epoch * 10 + 1; 100]);
    v
}

/// Where rank `dir`'s epoch-2 commit record starts, and the log's bytes.
fn record_of(dir: &Path) -> (PathBuf, Vec<u8>, usize) {
    let p = dir.join(epoch_file_name(2, EpochFileKind::Data));
    let bytes = std::fs::read(&p).unwrap();
    let n = bytes.len();
    let off = u64::from_le_bytes(bytes[n - 16..n - 8].try_into().unwrap()) as usize;
    (p, bytes, off)
}

/// `build` in a fresh directory, and rank 1's epoch-2 data log
/// (`record_of`): the log the tests below damage and restore.
struct Built {
    _dir: tempfile::TempDir,
    root: PathBuf,
    ranks: Vec<PathBuf>,
    data: PathBuf,
    bytes: Vec<u8>,
    start: usize,
}

impl Built {
    fn new() -> Built {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let ranks = build(&root);
        let (data, bytes, start) = record_of(&ranks[1]);
        Built {
            _dir: dir,
            root,
            ranks,
            data,
            bytes,
            start,
        }
    }

    /// Put the intact log back: epoch 2 reads again.
    fn restore(&self) {
        std::fs::write(&self.data, &self.bytes).unwrap();
        assert_eq!(read(&self.root, 200).unwrap(), expect(2), "restored");
    }
}

/// The damaged log of rank 1 is in place: epoch 2 is not committed, reads
/// give epoch 1, gc would remove epoch 2 of both ranks; with a mark it is
/// refused naming the data log.
fn check_torn(root: &Path, ranks: &[PathBuf], data: &Path, what: &str) {
    let inv = FileInventory::scan_path(root, "j", b"f").unwrap().unwrap();
    assert_eq!(
        inv.committed_epochs().unwrap(),
        vec![EpochId::new(1, 1)],
        "{what}"
    );
    let files = &inv.gens[&1].ranks[&1].epochs[&2];
    assert!(files.manifest.is_none() && files.torn.is_some(), "{what}");
    assert_eq!(read(root, 200).unwrap(), expect(1), "{what}");
    let gc = collect_garbage(&inv, true).unwrap();
    for r in ranks {
        let p = r.join(epoch_file_name(2, EpochFileKind::Data));
        assert!(gc.removed.contains(&p), "{what}: gc keeps {}", p.display());
    }
    // The agreement said it committed: the same bytes are damage.
    let mark = ranks[0].join(epoch_file_name(2, EpochFileKind::Mark));
    std::fs::write(&mark, b"").unwrap();
    match read(root, 200) {
        Err(
            LogError::Corrupt { path, .. }
            | LogError::Checksum { path, .. }
            | LogError::UnsupportedVersion { path, .. },
        ) => {
            assert_eq!(path, data, "{what}")
        }
        other => panic!("{what}: a marked epoch with a torn record gave {other:?}"),
    }
    std::fs::remove_file(&mark).unwrap();
}

#[test]
fn a_cut_commit_record_is_not_a_commit_and_marked_it_is_damage() {
    let b = Built::new();
    assert_eq!(read(&b.root, 200).unwrap(), expect(2), "intact");
    for cut in b.start..b.bytes.len() {
        std::fs::write(&b.data, &b.bytes[..cut]).unwrap();
        check_torn(&b.root, &b.ranks, &b.data, &format!("cut at {cut}"));
    }
    b.restore();
}

#[test]
fn a_flipped_bit_in_a_commit_record_or_its_header_is_not_a_commit() {
    let built = Built::new();
    let (root, ranks, data) = (built.root.as_path(), &built.ranks, &built.data);
    let covered = (0..48).chain(built.start..built.bytes.len());
    for at in covered {
        for bit in 0..8 {
            let mut b = built.bytes.clone();
            b[at] ^= 1 << bit;
            std::fs::write(data, &b).unwrap();
            let what = format!("bit {bit} of byte {at}");
            let inv = FileInventory::scan_path(root, "j", b"f").unwrap().unwrap();
            assert_eq!(
                inv.committed_epochs().unwrap(),
                vec![EpochId::new(1, 1)],
                "{what}"
            );
            assert_eq!(read(root, 200).unwrap(), expect(1), "{what}");
            if bit == 0 {
                check_torn(root, ranks, data, &what);
            }
        }
    }
    built.restore();
}

#[test]
fn gc_removes_a_torn_epoch_and_keeps_the_committed_ones() {
    let b = Built::new();
    std::fs::write(&b.data, &b.bytes[..b.start + 10]).unwrap();
    let inv = FileInventory::scan_path(&b.root, "j", b"f")
        .unwrap()
        .unwrap();
    collect_garbage(&inv, false).unwrap();
    for r in &b.ranks {
        assert!(!r.join(epoch_file_name(2, EpochFileKind::Data)).exists());
        assert!(r.join(epoch_file_name(1, EpochFileKind::Data)).exists());
    }
    assert_eq!(read(&b.root, 200).unwrap(), expect(1));
}

#[test]
fn a_later_epoch_proves_the_commit_too() {
    // Rank 1 went on to epoch 3 (the agreement of 2 succeeded), but its
    // marks were lost: a torn record of epoch 2 is damage, not a crash.
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    let ranks = build(root);
    let (data, bytes, start) = record_of(&ranks[1]);
    std::fs::write(ranks[1].join(epoch_file_name(3, EpochFileKind::Data)), b"").unwrap();
    std::fs::write(&data, &bytes[..start + 1]).unwrap();
    let err = read(root, 200).unwrap_err();
    assert!(
        matches!(&err, LogError::Corrupt { path, .. } if *path == data),
        "{err}"
    );
}

#[test]
fn every_commit_has_its_record_in_the_data_log_and_no_other_file() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    let ranks = build(root);
    for r in &ranks {
        let mut names: Vec<String> = std::fs::read_dir(r)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["e0000000001.commit", "e0000000001.data", "e0000000002.data"]
        );
    }
    let inv = FileInventory::scan_path(root, "j", b"f").unwrap().unwrap();
    assert!(matches!(
        inv.gens[&1].ranks[&0].epochs[&2].manifest,
        Some(ManifestAt::Log { .. })
    ));
    // An epoch without data still has a data log: header and record.
    let mut r = RankLog::create(root, ident(2), 0, 1, WriterConfig::default()).unwrap();
    r.set_size(50);
    r.commit_local().unwrap();
    r.complete_epoch().unwrap();
    let inv = FileInventory::scan_path(root, "j", b"f").unwrap().unwrap();
    assert_eq!(
        inv.committed_epochs().unwrap().last(),
        Some(&EpochId::new(2, 1))
    );
    assert_eq!(read(root, 50).unwrap(), expect(2)[..50]);
}

#[test]
fn an_epoch_committed_again_after_a_failed_agreement_keeps_one_valid_record() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    // No coalescing: every write reaches the data log at once.
    let cfg = WriterConfig {
        coalesce_bytes: 0,
        ..WriterConfig::default()
    };
    let mut r = RankLog::create(root, ident(1), 0, 1, cfg).unwrap();
    r.write_at(0, b"first").unwrap();
    r.commit_local().unwrap();
    // The agreement failed: the epoch goes on, and is read back in between.
    let mut buf = [0u8; 5];
    r.read_own(0, &mut buf).unwrap();
    assert_eq!(&buf, b"first");
    r.write_at(5, b" second").unwrap();
    // Between the commits the log does not end with a record: not committed.
    let inv = FileInventory::scan_path(root, "j", b"f").unwrap().unwrap();
    assert!(inv.committed_epochs().unwrap().is_empty());
    r.commit_local().unwrap();
    r.complete_epoch().unwrap();
    assert_eq!(read(root, 12).unwrap(), b"first second");
}

// ---- one-process writers stopped between commit and rename ----

fn single_ident() -> FileIdent {
    ident(0)
}

/// A one-process writer's two commits (generations 1 and 2); then the
/// second is put back into a staging directory, as a crash after its
/// fdatasync and before its rename leaves it.
fn staged_after_crash(root: &Path) -> (PathBuf, PathBuf) {
    let mut w = RankLog::create_single(root, single_ident(), WriterConfig::default()).unwrap();
    w.write_at(0, b"generation one").unwrap();
    w.commit_local().unwrap();
    w.complete_epoch().unwrap();
    w.write_at(0, b"GENERATION").unwrap();
    w.commit_local().unwrap();
    let published = w.rank_dir().to_path_buf();
    drop(w);
    let file_dir = published.parent().unwrap().parent().unwrap().to_path_buf();
    for s in paralog_log::single::staging_dirs(&file_dir).unwrap() {
        std::fs::remove_dir_all(s).unwrap();
    }
    let stage = file_dir.join(".stage-1-2-3");
    std::fs::create_dir(&stage).unwrap();
    let staged = stage.join(layout::rank_dir_name(0));
    std::fs::rename(&published, &staged).unwrap();
    assert!(file_dir.join("g000002").is_dir());
    (file_dir, staged)
}

#[test]
fn a_committed_epoch_left_in_its_staging_directory_is_read_kept_and_published() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    let (file_dir, staged) = staged_after_crash(root);
    let inv = FileInventory::scan_dir(&file_dir).unwrap();
    assert!(inv.gens[&2].ranks[&0].staged);
    assert_eq!(
        inv.committed_epochs().unwrap(),
        vec![EpochId::new(1, 1), EpochId::new(2, 1)]
    );
    assert_eq!(read(root, 14).unwrap(), b"GENERATION one");
    // gc keeps it.
    let gc = collect_garbage(&inv, false).unwrap();
    assert!(gc.removed.is_empty(), "{:?}", gc.removed);
    assert!(staged.exists());
    // Not while a writer's commit is in progress (its lock is held).
    {
        let _held = paralog_log::single::lock(&file_dir).unwrap();
        let seen = std::thread::scope(|s| {
            s.spawn(|| FileInventory::scan_dir(&file_dir).unwrap())
                .join()
                .unwrap()
        });
        assert!(!seen.gens.get(&2).is_some_and(|g| g.ranks.contains_key(&0)));
    }
    // The server finishes the rename.
    assert_eq!(paralog_log::single::finish_publishes(&inv).unwrap(), 1);
    assert!(!staged.exists() && !staged.parent().unwrap().exists());
    let inv = FileInventory::scan_dir(&file_dir).unwrap();
    assert!(!inv.gens[&2].ranks[&0].staged);
    assert_eq!(read(root, 14).unwrap(), b"GENERATION one");
    assert_eq!(paralog_log::single::finish_publishes(&inv).unwrap(), 0);
}

#[test]
fn a_staging_directory_with_a_torn_record_is_not_a_commit() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    let (file_dir, staged) = staged_after_crash(root);
    let data = staged.join(epoch_file_name(1, EpochFileKind::Data));
    let bytes = std::fs::read(&data).unwrap();
    std::fs::write(&data, &bytes[..bytes.len() - 1]).unwrap();
    let inv = FileInventory::scan_dir(&file_dir).unwrap();
    assert_eq!(inv.committed_epochs().unwrap(), vec![EpochId::new(1, 1)]);
    assert_eq!(read(root, 14).unwrap(), b"generation one");
    let gc = collect_garbage(&inv, false).unwrap();
    assert_eq!(gc.removed, vec![staged.parent().unwrap().to_path_buf()]);
    assert!(!staged.exists());
}

// ---- the path record ----

#[test]
fn a_lost_path_record_is_rebuilt_from_the_manifests() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    build(root);
    let inv = FileInventory::scan_path(root, "j", b"f").unwrap().unwrap();
    let path_file = inv.dir.join(layout::PATH_FILE);
    let good = std::fs::read(&path_file).unwrap();
    for damaged in [
        None,
        Some(Vec::new()),
        Some(good[..good.len() - 1].to_vec()),
    ] {
        match &damaged {
            None => std::fs::remove_file(&path_file).unwrap(),
            Some(b) => std::fs::write(&path_file, b).unwrap(),
        }
        let inv = FileInventory::scan_path(root, "j", b"f").unwrap().unwrap();
        assert!(inv.record_rebuilt && inv.path_error.is_some());
        assert_eq!(inv.record.as_ref().unwrap().path, b"/app/f");
        assert_eq!(read(root, 200).unwrap(), expect(2));
        assert_eq!(FileInventory::path_of(&inv.dir).unwrap().rel, b"f");
        // A writer of the file writes it again.
        drop(RankLog::create(root, ident(7), 0, 1, WriterConfig::default()).unwrap());
        assert_eq!(std::fs::read(&path_file).unwrap(), good);
        std::fs::remove_file(&path_file).unwrap();
        // And the server's repair.
        let inv = FileInventory::scan_path(root, "j", b"f").unwrap().unwrap();
        assert!(inv.repair_path_record().unwrap());
        assert_eq!(std::fs::read(&path_file).unwrap(), good);
        let inv = FileInventory::scan_path(root, "j", b"f").unwrap().unwrap();
        assert!(!inv.record_rebuilt);
        std::fs::remove_dir_all(inv.dir.join("g000007")).unwrap();
    }
    // A record that reads but disagrees is refused, as before.
    let other = paralog_log::format::PathRecord {
        path: b"/app/g".to_vec(),
        rel: b"g".to_vec(),
    };
    std::fs::write(&path_file, other.encode()).unwrap();
    let inv = FileInventory::scan_dir(&inv.dir).unwrap();
    assert!(matches!(
        inv.manifests(EpochId::new(1, 1)),
        Err(LogError::Inconsistent { .. })
    ));
}

#[test]
fn the_commit_policy_follows_the_file_system() {
    use paralog_log::CommitSync;
    if Path::new("/dev/shm").is_dir() {
        assert_eq!(
            CommitSync::for_root(Path::new("/dev/shm")),
            CommitSync::Journal
        );
    }
    assert_eq!(
        CommitSync::for_root(Path::new("/proc")),
        CommitSync::Explicit
    );
    assert_eq!(
        CommitSync::for_root(Path::new("/no/such/dir")),
        CommitSync::Explicit
    );
    // The explicit policy writes the same log.
    let d = tempfile::tempdir().unwrap();
    let cfg = WriterConfig {
        commit_sync: CommitSync::Explicit,
        ..WriterConfig::default()
    };
    let mut r = RankLog::create(d.path(), ident(1), 0, 1, cfg).unwrap();
    assert_eq!(r.commit_sync(), CommitSync::Explicit);
    r.write_at(0, &[7; 200]).unwrap();
    r.commit_local().unwrap();
    r.complete_epoch().unwrap();
    assert_eq!(read(d.path(), 200).unwrap(), vec![7; 200]);
}

#[test]
fn a_mark_that_cannot_be_written_does_not_keep_the_rank_in_its_committed_epoch() {
    // The agreement said epoch 1 committed, but its mark cannot be written
    // (here: a directory in its place; in life a full disk). The rank must
    // still go on to epoch 2: writing on into epoch 1's data log would tear
    // its commit record.
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    let mut r = RankLog::create(root, ident(1), 0, 1, WriterConfig::default()).unwrap();
    r.write_at(0, b"one").unwrap();
    r.commit_local().unwrap();
    std::fs::create_dir(r.rank_dir().join(epoch_file_name(1, EpochFileKind::Mark))).unwrap();
    assert_eq!(r.complete_epoch().unwrap(), 1);
    assert_eq!(r.epoch(), 2);
    r.write_at(3, b"two").unwrap();
    r.commit_local().unwrap();
    r.complete_epoch().unwrap();
    assert_eq!(read(root, 6).unwrap(), b"onetwo");
}
