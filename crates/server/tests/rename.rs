//! Renames in the drain (`src/rename.rs`, docs/format.md "Namespace
//! operations"), on logs written by the log core's writer: the source of a
//! rename waits for its target, the target is published whole under its
//! final name from the source's records, and the source's bytes never
//! reach the remote under its own name.

mod common;

use std::path::Path;

use common::{dirs, expected, ident, posix, ranks, write_epoch, JOB};
use paralog_log::format::RenameRef;
use paralog_log::{EpochId, FileInventory, RankLog, WriterConfig};
use paralog_server::drain::{drain_file, DrainCtx, DrainError};
use paralog_server::pool::BufferPool;
use paralog_server::recover::recover_node;

/// `rename(from, to)` as capture records it: the target's epoch first,
/// then the source's, naming each other. Returns the target's epoch.
fn rename(root: &Path, from: &str, at: EpochId, to: &str) -> EpochId {
    let mut dst = RankLog::create_single(root, ident(to), WriterConfig::default()).unwrap();
    dst.rename_from(RenameRef::new(from.as_bytes(), at));
    dst.commit_local().unwrap();
    let dst_at = EpochId::new(dst.ident().gen, dst.epoch());
    dst.complete_epoch().unwrap();
    let mut src = RankLog::create_single(root, ident(from), WriterConfig::default()).unwrap();
    src.renamed_to(RenameRef::new(to.as_bytes(), dst_at));
    src.commit_local().unwrap();
    src.complete_epoch().unwrap();
    dst_at
}

fn inventory(root: &Path, rel: &str) -> FileInventory {
    FileInventory::scan_path(root, JOB, rel.as_bytes())
        .unwrap()
        .unwrap()
}

#[test]
fn the_source_waits_and_the_target_is_published_whole() {
    let (_d, root, remote_dir) = dirs();
    std::fs::write(remote_dir.join("ckpt"), b"the previous checkpoint").unwrap();
    // The new checkpoint, written by two ranks into ckpt.tmp: epoch 1:1.
    let mut tmp = ranks(&root, "ckpt.tmp", 2);
    write_epoch(&mut tmp, 1, true);
    drop(tmp);
    let want = expected(&root, "ckpt.tmp", None);
    rename(&root, "ckpt.tmp", EpochId::new(1, 1), "ckpt");

    let remote = posix(&remote_dir);
    let backend = remote.backend_for(&inventory(&root, "ckpt")).unwrap();
    let pool = BufferPool::new(1 << 20, 4096);
    let ctx = DrainCtx {
        backend: backend.as_ref(),
        pool: &pool,
        limit: None,
        flush: true,
        deleter: None,
        keep_drained: false,
    };
    // The source first: it must wait, and nothing of it may reach the
    // remote under its name.
    let r = drain_file(&ctx, &inventory(&root, "ckpt.tmp"), &mut |_| {});
    assert!(matches!(r, Err(DrainError::Waiting(_))), "{r:?}");
    assert!(!remote_dir.join("ckpt.tmp").exists());
    assert_eq!(
        std::fs::read(remote_dir.join("ckpt")).unwrap(),
        b"the previous checkpoint"
    );

    // Recovery drains the target (from the source's records), then the
    // source, whatever order it finds them in.
    let report = recover_node(&root, None, &remote, false).unwrap();
    assert_eq!(report.failed, 0, "{:?}", report.files);
    assert_eq!(std::fs::read(remote_dir.join("ckpt")).unwrap(), want);
    let names: Vec<_> = std::fs::read_dir(&remote_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec!["ckpt".to_string()], "no temporary, no source");
    // Nothing left to drain; a second recovery changes nothing.
    for rel in ["ckpt", "ckpt.tmp"] {
        assert!(inventory(&root, rel).pending_epochs().unwrap().is_empty());
    }
    let again = recover_node(&root, None, &remote, false).unwrap();
    assert_eq!(again.failed, 0);
    assert_eq!(std::fs::read(remote_dir.join("ckpt")).unwrap(), want);
}

#[test]
fn a_chain_of_renames_with_a_write_on_top_reaches_the_last_name_only() {
    let (_d, root, remote_dir) = dirs();
    let mut a = ranks(&root, "a", 1);
    write_epoch(&mut a, 1, true);
    drop(a);
    let first = expected(&root, "a", None);
    let b_at = rename(&root, "a", EpochId::new(1, 1), "dir/b");
    rename(&root, "dir/b", b_at, "c");
    // A write onto c after the renames: on top of a's bytes.
    let mut c = RankLog::create_single(&root, ident("c"), WriterConfig::default()).unwrap();
    c.write_at(first.len() as u64, b"tail").unwrap();
    c.commit_local().unwrap();
    c.complete_epoch().unwrap();
    let report = recover_node(&root, None, &posix(&remote_dir), false).unwrap();
    assert_eq!(report.failed, 0, "{:?}", report.files);
    let mut want = first;
    want.extend_from_slice(b"tail");
    assert_eq!(std::fs::read(remote_dir.join("c")).unwrap(), want);
    assert!(!remote_dir.join("a").exists() && !remote_dir.join("dir/b").exists());
}
