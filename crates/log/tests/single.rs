//! Several processes writing one file, each a communicator of one (issue
//! 12): each commit becomes a generation of its own, in the order the
//! commits became durable, so no process's bytes are lost and the one that
//! committed last wins where they overlap.

mod common;

use common::read_committed;
use paralog_log::{EpochId, FileIdent, FileInventory, RankLog, WriterConfig};

fn ident() -> FileIdent {
    FileIdent {
        job: "j".into(),
        path: b"/app/f".to_vec(),
        rel: b"f".to_vec(),
        gen: 0,
    }
}

#[test]
fn processes_commit_as_generations_in_commit_order() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    let cfg = WriterConfig::default();
    let mut a = RankLog::create_single(root, ident(), cfg).unwrap();
    let mut b = RankLog::create_single(root, ident(), cfg).unwrap();
    a.write_at(0, b"aaaaaaaa").unwrap();
    b.write_at(4, b"bbbbbbbb").unwrap();
    // Nothing is committed yet: the staging places are not opens.
    let inv = FileInventory::scan_path(root, "j", b"f").unwrap().unwrap();
    assert!(
        inv.gens.is_empty(),
        "staging seen as an open: {:?}",
        inv.gens.keys()
    );
    // b commits first, then a: a's bytes are the later ones.
    common::commit(&mut b);
    common::commit(&mut a);
    assert_eq!(read_committed(root, 12), b"aaaaaaaabbbb");
    // Both go on: b's second epoch commits last and wins.
    a.write_at(0, b"AA").unwrap();
    b.write_at(1, b"BB").unwrap();
    common::commit(&mut a);
    common::commit(&mut b);
    assert_eq!(read_committed(root, 12), b"ABBaaaaabbbb");
    let inv = FileInventory::scan_path(root, "j", b"f").unwrap().unwrap();
    let gens: Vec<u64> = inv.gens.keys().copied().collect();
    assert_eq!(gens, vec![1, 2, 3, 4]);
    assert_eq!(
        inv.committed_epochs().unwrap(),
        [1, 2, 3, 4].map(|gen| EpochId::new(gen, 1))
    );
    a.mark_closed().unwrap();
    b.mark_closed().unwrap();
    // The staging places of the epochs that never came are gone.
    let staging: Vec<_> = std::fs::read_dir(&inv.dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".stage-"))
        .collect();
    assert!(staging.is_empty());
}
