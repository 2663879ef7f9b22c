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
