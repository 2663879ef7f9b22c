//! Damage to committed records is refused with an error naming the file and
//! the offset; it never yields wrong bytes and never panics.

mod common;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use paralog_log::layout::{epoch_file_name, EpochFileKind};
use paralog_log::{EpochId, Inventory, LogError, RankLog, WriterConfig};

/// Two ranks, two committed epochs, and a third epoch only rank 0 committed.
fn build(root: &Path) -> Vec<PathBuf> {
    let ident = common::ident("j", "/pfs/out", "out", 1);
    let mut logs = common::ranks(root, &ident, 2, WriterConfig::default());
    for epoch in 1..=2u8 {
        for (r, log) in logs.iter_mut().enumerate() {
            let data = vec![epoch * 10 + r as u8; 1000];
            log.write_at(r as u64 * 1000, &data).unwrap();
        }
        common::commit_all(&mut logs);
    }
    logs[0].write_at(0, &[99; 10]).unwrap();
    logs[0].commit_local().unwrap();
    logs.iter().map(|l| l.rank_dir().to_path_buf()).collect()
}

/// `build` in a fresh directory, and the data log of `rank`'s `epoch`
/// there (the one a test damages).
fn built_log(rank: usize, epoch: u64) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let ranks = build(dir.path());
    let data = ranks[rank].join(epoch_file_name(epoch, EpochFileKind::Data));
    (dir, data)
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
    let (dir, data) = built_log(1, 2);
    // The cut takes the commit record with it: epoch 2 has commit marks,
    // so that is damage, named where a trailer should be (the last 32
    // bytes).
    OpenOptions::new()
        .write(true)
        .open(&data)
        .unwrap()
        .set_len(4096 + 500)
        .unwrap();
    let err = materialize(dir.path()).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, LogError::Corrupt { offset: 4564, .. }),
        "{text}"
    );
    assert!(text.contains(&data.display().to_string()), "{text}");
}

#[test]
fn extent_past_the_data_is_refused_naming_file_and_offset() {
    // A manifest whose extent runs into its own commit record (a writer
    // that is not ours, with a valid record): refused before any read,
    // naming the operation's offset in the data log.
    let (dir, data) = built_log(1, 2);
    let log = std::fs::read(&data).unwrap();
    let (header, mut m) = paralog_log::format::decode_data_log(&log, &data).unwrap();
    m.ops = vec![paralog_log::Op::Extent(paralog_log::Extent {
        file_off: 1000,
        len: 1000,
        log_pos: 4096,
        crc: 0,
    })];
    m.data_len = 4096 + 500;
    let mut short = log[..4096 + 500].to_vec();
    let record =
        paralog_log::format::CommitTrailer::record(&header.encode()[..48], &m.encode(), 4596);
    short.extend_from_slice(&record);
    std::fs::write(&data, &short).unwrap();
    let err = materialize(dir.path()).unwrap_err();
    let ops_at = 4596 + 64 + "j".len() + "/pfs/out".len() + "out".len();
    assert!(
        matches!(&err, LogError::Corrupt { path, offset, .. } if *path == data && *offset == ops_at as u64),
        "{err}"
    );
}

#[test]
fn flipped_data_byte_is_a_checksum_error() {
    let (dir, data) = built_log(0, 2);
    let f = OpenOptions::new().write(true).open(&data).unwrap();
    f.write_all_at(&[0xFF], 4096 + 123).unwrap();
    let err = materialize(dir.path()).unwrap_err();
    assert!(
        matches!(&err, LogError::Checksum { path, offset: 4096, len: 1000, .. } if *path == data),
        "{err}"
    );
}

#[test]
fn damaged_commit_record_of_a_marked_epoch_is_refused() {
    let (dir, data) = built_log(1, 1);
    let bytes = std::fs::read(&data).unwrap();
    std::fs::write(&data, &bytes[..bytes.len() - 7]).unwrap();
    let err = materialize(dir.path()).unwrap_err();
    assert!(
        err.to_string().contains(&data.display().to_string()),
        "{err}"
    );
    assert!(
        matches!(err, LogError::Corrupt { offset, .. } if offset == bytes.len() as u64 - 7 - 32),
        "{err}"
    );
}

#[test]
fn damaged_manifest_inside_a_valid_record_is_refused() {
    // The record's checksum holds (resealed) but the manifest breaks its
    // own rules: corruption, named in the data log.
    let (dir, data) = built_log(1, 1);
    let mut log = std::fs::read(&data).unwrap();
    let n = log.len();
    let off = u64::from_le_bytes(log[n - 16..n - 8].try_into().unwrap()) as usize;
    // Reserved header bytes 58..64 of the manifest, and its own checksum.
    log[off + 60] = 1;
    let mlen = n - 32 - off;
    let crc = paralog_checksum::crc32c(&log[off..off + mlen - 4]);
    log[off + mlen - 4..off + mlen].copy_from_slice(&crc.to_le_bytes());
    let crc = paralog_checksum::crc32c_append(
        paralog_checksum::crc32c_append(paralog_checksum::crc32c(&log[..48]), &log[off..n - 32]),
        &log[n - 32..n - 4],
    );
    log[n - 4..].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&data, &log).unwrap();
    let err = materialize(dir.path()).unwrap_err();
    assert!(
        matches!(&err, LogError::Corrupt { path, offset, .. } if *path == data && *offset == off as u64 + 58),
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
    let ident = common::ident("j", "/pfs/out", "out", 1);
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
    let ident = common::ident("j", "/pfs/b", "b", 1);
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
