//! A scan lists rank directories one after another: it can see another
//! rank's commit mark (written after every rank's manifest) yet have listed
//! this rank before its manifest was renamed into place. The epoch's
//! manifests must then still include this rank, or the drain would apply a
//! committed epoch without its bytes.

mod common;

use paralog_log::{EpochId, FileInventory, RankLog, WriterConfig};

#[test]
fn a_manifest_renamed_after_its_rank_was_listed_is_not_missed() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    let ident = common::ident("j", "/app/f", "f", 1);
    let cfg = WriterConfig::default();
    let mut r0 = RankLog::create(root, ident.clone(), 0, 2, cfg).unwrap();
    let mut r1 = RankLog::create(root, ident, 1, 2, cfg).unwrap();
    r0.write_at(0, b"rank zero").unwrap();
    r1.write_at(100, b"rank one").unwrap();
    r1.commit_local().unwrap();
    // The listing as a scan made it before rank 0's manifest existed...
    let stale = FileInventory::scan_path(root, "j", b"f").unwrap().unwrap();
    // ...then rank 0 commits and the agreement marks the epoch.
    r0.commit_local().unwrap();
    r0.complete_epoch().unwrap();
    r1.complete_epoch().unwrap();
    let ranks: Vec<u32> = stale
        .manifests(EpochId::new(1, 1))
        .unwrap()
        .iter()
        .map(|(m, _)| m.rank)
        .collect();
    assert_eq!(ranks, vec![0, 1]);
    let lf = stale.logical_file(Some(EpochId::new(1, 1)));
    // The stale listing has no mark, but all manifests are found: committed.
    assert!(lf.is_ok(), "{lf:?}");
    assert_eq!(lf.unwrap().size.min_size, 108);
}

/// A scan that reads a new file directory's path record before the first
/// rank writes it, and lists the directory after that rank has committed,
/// must not report committed epochs of a file with no path (the server
/// parks such a file as damaged). Writers create files while a scanner
/// looks at each as soon as its directory exists.
#[test]
fn a_file_created_during_a_scan_never_shows_manifests_without_its_path() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let d = tempfile::tempdir().unwrap();
    let root = d.path().to_path_buf();
    let done = Arc::new(AtomicBool::new(false));
    let current = Arc::new(AtomicUsize::new(0));
    // The scanner looks at the file being created, over and over, so that
    // its scans straddle the creation.
    // More scanners than cores, so that scans are preempted midway.
    let scanners: Vec<_> = (0..6)
        .map(|_| {
            let (done, current, root) = (done.clone(), current.clone(), root.clone());
            std::thread::spawn(move || {
                let mut bad = Vec::new();
                let mut scans = 0u64;
                while !done.load(Ordering::SeqCst) {
                    let rel = format!("f{}", current.load(Ordering::SeqCst));
                    let Some(inv) = FileInventory::scan_path(&root, "j", rel.as_bytes()).unwrap()
                    else {
                        continue;
                    };
                    scans += 1;
                    let committed = inv.gens.values().any(|g| {
                        g.ranks
                            .values()
                            .any(|r| r.epochs.values().any(|e| e.manifest.is_some()))
                    });
                    if committed && inv.record.is_none() {
                        bad.push(format!("{rel}: {:?}", inv.path_error));
                    }
                }
                (bad, scans)
            })
        })
        .collect();
    for i in 0..400 {
        current.store(i, Ordering::SeqCst);
        let ident = common::ident("j", &format!("/app/f{i}"), &format!("f{i}"), 1);
        let mut r = RankLog::create(&root, ident, 0, 1, WriterConfig::default()).unwrap();
        r.write_at(0, b"x").unwrap();
        r.commit_local().unwrap();
        r.complete_epoch().unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let (mut bad, mut scans) = (Vec::new(), 0);
    for s in scanners {
        let (b, n) = s.join().unwrap();
        bad.extend(b);
        scans += n;
    }
    assert!(scans > 0);
    assert!(
        bad.is_empty(),
        "{} scan(s) saw manifests but no path record: {:?}",
        bad.len(),
        &bad[..bad.len().min(3)]
    );
}
