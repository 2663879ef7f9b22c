//! The writer's two paths with the default tuning: small writes copied
//! into the coalescing buffer and gathered into runs, large ones written
//! straight from the caller's buffer, a write's CRC continued from the
//! range it extends. What is committed reads back
//! byte for byte (the reader checks every extent's CRC), and reads of own
//! bytes in between see every byte written.

mod common;

use paralog_log::{RankLog, ReadSource, WriterConfig};

const KIB: usize = 1 << 10;

fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn write(log: &mut RankLog, model: &mut Vec<u8>, off: usize, data: &[u8]) {
    log.write_at(off as u64, data).unwrap();
    if model.len() < off + data.len() {
        model.resize(off + data.len(), 0);
    }
    model[off..off + data.len()].copy_from_slice(data);
}

fn check_own(log: &mut RankLog, model: &[u8]) {
    let mut buf = vec![0u8; model.len()];
    for r in log.read_own(0, &mut buf).unwrap() {
        assert!(matches!(r.source, ReadSource::Own { .. }), "{r:?}");
    }
    assert!(buf == model, "own bytes differ from what was written");
}

#[test]
fn small_runs_and_direct_writes_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let ident = common::ident("j", "/p/f", "f", 1);
    let cfg = WriterConfig::default();
    assert!(cfg.small_write <= 256 * KIB, "the sizes below assume it");
    let mut logs = common::ranks(root, &ident, 1, cfg);
    let log = &mut logs[0];
    let mut model = Vec::new();

    // Epoch 1: appends only, small ones (a run) around large ones, each
    // continuing the CRC of what it extends: one extent whose CRC was
    // never combined.
    let mut at = 0;
    for (i, len) in [1000, 3000, 700 * KIB + 5, 100, 4 * KIB, 1 << 20, 7]
        .into_iter()
        .enumerate()
    {
        let data = bytes(i as u64, len);
        write(log, &mut model, at, &data);
        at += len;
        if i == 3 {
            // Mid-run: bytes in the log, in the buffer, and in the run.
            check_own(log, &model);
        }
    }
    check_own(log, &model);
    let done = log.commit_local().unwrap();
    assert_eq!(done.extents, 1);
    log.complete_epoch().unwrap();
    assert!(common::read_committed(root, model.len()) == model);

    // Epoch 2: overwrites cut the epoch's ranges (their CRCs are then
    // computed at commit), and a small write lands inside a large one.
    write(log, &mut model, 10_000, &bytes(20, 300 * KIB));
    write(log, &mut model, 10_000 + 300 * KIB, &bytes(21, 2 * KIB));
    write(log, &mut model, 20_000, &bytes(22, 64));
    check_own(log, &model);
    write(log, &mut model, 5_000, &bytes(23, 6_000));
    let done = log.commit_local().unwrap();
    assert_eq!(done.extents, 4);
    log.complete_epoch().unwrap();
    assert!(common::read_committed(root, model.len()) == model);
}

/// Every committed data log under `dir`, decoded: its extents.
fn extents_under(dir: &std::path::Path) -> Vec<paralog_log::format::Extent> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(extents_under(&path));
        } else if path.extension().is_some_and(|e| e == "data") {
            let bytes = std::fs::read(&path).unwrap();
            let (_, m) = paralog_log::format::decode_data_log(&bytes, &path).unwrap();
            out.extend(m.ops.into_iter().filter_map(|op| match op {
                paralog_log::format::Op::Extent(e) => Some(e),
                _ => None,
            }));
        }
    }
    out
}

/// A large write that extends no range is placed in the log where it is
/// in the file, modulo the largest page-cache folio it could fill (a power
/// of two up to its length and 2 MiB), past a hole; one that extends a
/// range stays with it. (Placed 4 KiB off, after the header, 1 MiB writes
/// ran at 0.93x of raw `pwrite` on ext4: docs/benchmarks.md §1.)
#[test]
fn large_writes_keep_their_file_alignment_in_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let ident = common::ident("j", "/p/f", "f", 1);
    let mut logs = common::ranks(root, &ident, 1, WriterConfig::default());
    let log = &mut logs[0];
    let mut model = Vec::new();
    const MIB: usize = 1 << 20;
    // Appends of 1 MiB from 0: one extent, at a 1 MiB boundary of the log.
    for i in 0..4 {
        write(log, &mut model, i * MIB, &bytes(30 + i as u64, MIB));
    }
    // A small write (buffered, at an odd place in the log), then large
    // writes elsewhere in the file: 300 KiB 4 KiB past 8 MiB, 3 MiB at
    // 12 MiB + 12 KiB, and one that extends the last.
    write(log, &mut model, 5 * MIB + 7, &bytes(40, 999));
    write(log, &mut model, 8 * MIB + 4096, &bytes(41, 300 * KIB));
    write(log, &mut model, 12 * MIB + 12 * KIB, &bytes(42, 3 * MIB));
    write(log, &mut model, 15 * MIB + 12 * KIB, &bytes(43, 256 * KIB));
    // One written in three pieces (crates/log's LARGE_WRITE_PIECE, 2 MiB),
    // the last of 3 bytes: one extent, its CRC the whole write's.
    write(log, &mut model, 20 * MIB, &bytes(44, 4 * MIB + 3));
    // The holes are not data: what the program wrote, no more (the
    // timeline's bytes per consistency point).
    let written = 4 * MIB + 999 + 300 * KIB + 3 * MIB + 256 * KIB + 4 * MIB + 3;
    assert_eq!(log.epoch_data_bytes(), written as u64);
    let mut own = vec![0u8; model.len()];
    log.read_own(0, &mut own).unwrap();
    assert!(own == model, "own bytes differ from what was written");
    common::commit(log);
    assert!(common::read_committed(root, model.len()) == model);

    let mut extents = extents_under(root);
    extents.sort_by_key(|e| e.file_off);
    let at = |off: usize| {
        extents
            .iter()
            .find(|e| e.file_off == off as u64)
            .unwrap_or_else(|| panic!("no extent at {off}: {extents:?}"))
    };
    let four = at(0);
    assert_eq!((four.len, four.log_pos % MIB as u64), (4 * MIB as u64, 0));
    // The 4 MiB from 1 MiB in the log, then the small write where it ends
    // (no hole for a small one).
    assert_eq!(four.log_pos, MIB as u64);
    assert_eq!(at(5 * MIB + 7).log_pos, 5 * MIB as u64);
    let mid = at(8 * MIB + 4096);
    assert_eq!(mid.log_pos % (256 * KIB) as u64, 4096);
    let big = at(12 * MIB + 12 * KIB);
    assert_eq!(
        big.len,
        (3 * MIB + 256 * KIB) as u64,
        "the extending write joined it"
    );
    assert_eq!(big.log_pos % (2 * MIB) as u64, (12 * KIB) as u64);
    let pieces = at(20 * MIB);
    assert_eq!(
        (pieces.len, pieces.log_pos % (2 * MIB) as u64),
        ((4 * MIB + 3) as u64, 0)
    );
    assert_eq!(extents.len(), 5, "{extents:?}");
}
