//! Damage to committed records is refused with an error naming the file and
//! the offset; it never yields wrong bytes and never panics.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use paralog_log::layout::{epoch_file_name, EpochFileKind};
use paralog_log::{EpochId, FileIdent, Inventory, LogError, RankLog, WriterConfig};

/// Two ranks, two committed epochs, and a third epoch only rank 0 committed.
fn build(root: &Path) -> Vec<PathBuf> {
    let ident = FileIdent {
        job: "j".into(),
        path: b"/pfs/out".to_vec(),
        rel: b"out".to_vec(),
        gen: 1,
    };
    let mut logs: Vec<RankLog> = (0..2)
        .map(|r| RankLog::create(root, ident.clone(), r, 2, WriterConfig::default()).unwrap())
        .collect();
    for epoch in 1..=2u8 {
        for (r, log) in logs.iter_mut().enumerate() {
            let data = vec![epoch * 10 + r as u8; 1000];
            log.write_at(r as u64 * 1000, &data).unwrap();
        }
        logs.iter_mut().for_each(|l| {
            l.commit_local().unwrap();
        });
        logs.iter_mut().for_each(|l| {
            l.complete_epoch().unwrap();
        });
    }
    logs[0].write_at(0, &[99; 10]).unwrap();
    logs[0].commit_local().unwrap();
    logs.iter().map(|l| l.rank_dir().to_path_buf()).collect()
}

fn materialize(root: &Path) -> Result<Vec<u8>, LogError> {
    let inv = Inventory::scan(root)?;
    let file = inv.find_file(None, b"/pfs/out")[0].1.clone();
    let lf = file.logical_file(None)?;
    let out = root.join("out.materialized");
    lf.materialize(&out, None)?;
    Ok(std::fs::read(out).unwrap())
}

#[test]
fn intact_log_reads_back_and_ignores_the_uncommitted_epoch() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let bytes = materialize(dir.path()).unwrap();
    let mut expected = vec![20u8; 1000];
    expected.extend(vec![21u8; 1000]);
    assert_eq!(bytes, expected, "epoch 3 (rank 0 only) must not show");
}

#[test]
fn truncated_data_log_names_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let ranks = build(dir.path());
    let data = ranks[1].join(epoch_file_name(2, EpochFileKind::Data));
    OpenOptions::new()
        .write(true)
        .open(&data)
        .unwrap()
        .set_len(4096 + 500)
        .unwrap();
    let err = materialize(dir.path()).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, LogError::Corrupt { offset: 4096, .. }),
        "{text}"
    );
    assert!(text.contains(&data.display().to_string()), "{text}");
}

#[test]
fn flipped_data_byte_is_a_checksum_error() {
    let dir = tempfile::tempdir().unwrap();
    let ranks = build(dir.path());
    let data = ranks[0].join(epoch_file_name(2, EpochFileKind::Data));
    let f = OpenOptions::new().write(true).open(&data).unwrap();
    f.write_all_at(&[0xFF], 4096 + 123).unwrap();
    let err = materialize(dir.path()).unwrap_err();
    assert!(
        matches!(&err, LogError::Checksum { path, offset: 4096, len: 1000, .. } if *path == data),
        "{err}"
    );
}

#[test]
fn damaged_manifest_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ranks = build(dir.path());
    let manifest = ranks[1].join(epoch_file_name(1, EpochFileKind::Manifest));
    let bytes = std::fs::read(&manifest).unwrap();
    std::fs::write(&manifest, &bytes[..bytes.len() - 7]).unwrap();
    let err = materialize(dir.path()).unwrap_err();
    assert!(
        err.to_string().contains(&manifest.display().to_string()),
        "{err}"
    );
}

#[test]
fn data_log_of_another_rank_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ranks = build(dir.path());
    let name = epoch_file_name(2, EpochFileKind::Data);
    std::fs::copy(ranks[0].join(&name), ranks[1].join(&name)).unwrap();
    let err = materialize(dir.path()).unwrap_err();
    assert!(matches!(err, LogError::Inconsistent { .. }), "{err}");
}

#[test]
fn reused_generation_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let ident = FileIdent {
        job: "j".into(),
        path: b"/pfs/out".to_vec(),
        rel: b"out".to_vec(),
        gen: 1,
    };
    let err = RankLog::create(dir.path(), ident, 0, 2, WriterConfig::default())
        .err()
        .expect("must refuse");
    assert!(err.to_string().contains("not fresh"), "{err}");
    assert_eq!(
        paralog_log::next_generation(dir.path(), "j", b"out").unwrap(),
        2
    );
}

#[test]
fn base_file_semantics() {
    // A program that opens an existing 3000-byte file, writes 10 bytes at
    // 100, truncates to 2000, then grows it to 2500 by a write at 2400.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let ident = FileIdent {
        job: "j".into(),
        path: b"/pfs/b".to_vec(),
        rel: b"b".to_vec(),
        gen: 1,
    };
    let mut log = RankLog::create(root, ident, 0, 1, WriterConfig::default()).unwrap();
    log.write_at(100, &[1; 10]).unwrap();
    log.commit_local().unwrap();
    log.complete_epoch().unwrap();
    log.set_size(2000);
    log.write_at(2400, &[2; 100]).unwrap();
    log.commit_local().unwrap();
    log.complete_epoch().unwrap();
    let base_path = root.join("base");
    std::fs::write(&base_path, vec![7u8; 3000]).unwrap();

    let inv = Inventory::scan(root).unwrap();
    let file = inv.find_file(None, b"b")[0].1.clone();
    let out = root.join("o");
    file.logical_file(Some(EpochId::new(1, 1)))
        .unwrap()
        .materialize(&out, Some(&base_path))
        .unwrap();
    let mut expected = vec![7u8; 3000];
    expected[100..110].fill(1);
    assert_eq!(
        std::fs::read(&out).unwrap(),
        expected,
        "epoch 1 on top of the base"
    );

    file.logical_file(None)
        .unwrap()
        .materialize(&out, Some(&base_path))
        .unwrap();
    expected.truncate(2000);
    expected.resize(2400, 0);
    expected.extend([2u8; 100]);
    assert_eq!(
        std::fs::read(&out).unwrap(),
        expected,
        "epoch 2: cut base, zeros, new bytes"
    );
}
