//! A scan lists rank directories one after another: it can see another
//! rank's commit mark (written after every rank's manifest) yet have listed
//! this rank before its manifest was renamed into place. The epoch's
//! manifests must then still include this rank, or the drain would apply a
//! committed epoch without its bytes.

use paralog_log::{FileIdent, FileInventory, RankLog, WriterConfig};

#[test]
fn a_manifest_renamed_after_its_rank_was_listed_is_not_missed() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    let ident = FileIdent {
        job: "j".into(),
        path: b"/app/f".to_vec(),
        rel: b"f".to_vec(),
        gen: 1,
    };
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
        .manifests((1, 1))
        .unwrap()
        .iter()
        .map(|(m, _)| m.rank)
        .collect();
    assert_eq!(ranks, vec![0, 1]);
    let lf = stale.logical_file(Some((1, 1)));
    // The stale listing has no mark, but all manifests are found: committed.
    assert!(lf.is_ok(), "{lf:?}");
    assert_eq!(lf.unwrap().size.min_size, 108);
}
