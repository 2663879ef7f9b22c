//! A scan through a cache (reader/cache.rs) sees exactly what a scan from
//! scratch sees, whatever changed in between: new epochs, a commit record
//! appended to a data log, a deleted data log, and a data log changed in
//! place within the same clock tick as the scan that read it (the "racily
//! clean" case: a cache keyed by modification times must not keep it).

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use paralog_log::layout::{epoch_file_name, EpochFileKind};
use paralog_log::reader::ScanCache;
use paralog_log::{EpochId, Inventory, WriterConfig};

/// A cached scan of `root`, checked against one from scratch.
fn scan_both(root: &Path, cache: &mut ScanCache) -> Inventory {
    cache.begin();
    let cached = Inventory::scan_cached(root, cache).unwrap();
    cache.sweep();
    let fresh = Inventory::scan(root).unwrap();
    assert_eq!(format!("{cached:?}"), format!("{fresh:?}"));
    cached
}

fn rank_dir(root: &Path, rank: u32) -> std::path::PathBuf {
    let inv = Inventory::scan(root).unwrap();
    inv.jobs[0].files[0].gens[&1].ranks[&rank].dir.clone()
}

#[test]
fn a_cached_scan_reads_only_what_changed_and_sees_what_a_fresh_one_sees() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    let ident = common::ident("j", "/app/f", "f", 1);
    let mut logs = common::ranks(root, &ident, 2, WriterConfig::default());
    for e in 0..3u64 {
        for (r, l) in logs.iter_mut().enumerate() {
            l.write_at(100 * r as u64 + e, b"bytes of an epoch")
                .unwrap();
        }
        common::commit_all(&mut logs);
    }
    // Epoch 4: rank 0 committed locally, rank 1 is still writing.
    logs[0].write_at(0, b"four").unwrap();
    logs[1].write_at(100, b"four").unwrap();
    logs[0].commit_local().unwrap();
    // Older than a clock tick of any file system: kept by the first scan.
    std::thread::sleep(Duration::from_millis(1100));
    let mut cache = ScanCache::new();
    scan_both(root, &mut cache);
    let read = cache.reads;
    assert!(read > 0 && !cache.is_empty());
    scan_both(root, &mut cache);
    // Nothing changed: only rank 1's data log of epoch 4, without a commit
    // record yet (nothing to keep), is read again.
    assert_eq!(cache.reads, read + 1);
    assert_eq!(cache.hits + 1, read, "everything else came from the cache");

    // Rank 1 commits epoch 4: its data log grows by the commit record.
    logs[1].commit_local().unwrap();
    let inv = scan_both(root, &mut cache);
    let f = &inv.jobs[0].files[0];
    assert!(f.gens[&1].ranks[&1].epochs[&4].manifest.is_some());
    assert_eq!(f.manifests(EpochId::new(1, 4)).unwrap().len(), 2);

    // Changed in place, same size, right after a scan read it: the scan
    // must not have kept it, whatever the file system's time resolution.
    let data = rank_dir(root, 1).join(epoch_file_name(4, EpochFileKind::Data));
    let len = std::fs::metadata(&data).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&data)
        .unwrap();
    let mut last = [0u8; 1];
    file.read_exact_at(&mut last, len - 1).unwrap();
    file.write_all_at(&[last[0] ^ 0xff], len - 1).unwrap();
    let inv = scan_both(root, &mut cache);
    let e = &inv.jobs[0].files[0].gens[&1].ranks[&1].epochs[&4];
    assert!(e.manifest.is_none() && e.torn.is_some(), "{e:?}");

    // A data log deleted: gone from the scan and from the cache.
    let kept = cache.len();
    std::fs::remove_file(rank_dir(root, 0).join(epoch_file_name(1, EpochFileKind::Data))).unwrap();
    let inv = scan_both(root, &mut cache);
    // (its commit mark stays)
    let e = &inv.jobs[0].files[0].gens[&1].ranks[&0].epochs[&1];
    assert!(e.data.is_none() && e.manifest.is_none() && e.mark, "{e:?}");
    assert!(cache.len() < kept);
}
