//! The drain deletes a drained epoch's records one file at a time, rank
//! after rank, after its progress record. A reader that looks at the file in
//! any of those states must see the same committed file: the drained epochs
//! are in the base (the remote), the rest in the log, and no state of the
//! deletion may make the file look incomplete (another node's) or differ.
//! Issue 12: reopen-and-read loops failed with "written on another node"
//! while the server deleted the epoch they had just written.

mod common;

use std::path::Path;

use paralog_log::format::ProgressRecord;
use paralog_log::layout::{self, EpochFileKind};
use paralog_log::reader::SourceReader;
use paralog_log::{EpochId, FileInventory, WriterConfig};

const RANKS: u32 = 3;
const EPOCHS: u64 = 3;

/// Every rank writes its own block, and rank 0 overwrites the head of
/// rank 1's block, at every epoch, with bytes that depend on the epoch.
fn write_epochs(root: &Path) {
    let ident = common::ident("j", "/app/f", "f", 1);
    let mut logs = common::ranks(root, &ident, RANKS, WriterConfig::default());
    for e in 1..=EPOCHS {
        for (r, log) in logs.iter_mut().enumerate() {
            let block = vec![(e as u8) * 16 + r as u8; 1000];
            log.write_at(r as u64 * 1000, &block).unwrap();
        }
        logs[0].write_at(0, &[0xe0 + e as u8; 10]).unwrap();
        common::commit_all(&mut logs);
    }
}

/// The committed file as a reader through the log sees it: the base file
/// (`None`: empty) plus the epochs the scan finds pending.
fn read_view(root: &Path, base: &Path) -> Vec<u8> {
    let inv = FileInventory::scan_path(root, "j", b"f").unwrap().unwrap();
    assert!(
        inv.complete_locally().unwrap(),
        "the file looks incomplete (written on another node)"
    );
    let lf = inv.logical_file(None).unwrap();
    let base_bytes = std::fs::read(base).unwrap_or_default();
    let size = lf.size.final_size(base_bytes.len() as u64);
    let mut buf = vec![0u8; size as usize];
    let mut reader = SourceReader::default();
    let mut from_base = |at: u64, dst: &mut [u8]| {
        dst.copy_from_slice(&base_bytes[at as usize..at as usize + dst.len()]);
        Ok(())
    };
    lf.read_at(
        &mut reader,
        0,
        &mut buf,
        base_bytes.len() as u64,
        &mut from_base,
    )
    .unwrap();
    buf
}

#[test]
fn every_state_of_a_drained_epochs_deletion_reads_the_same_file() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("local");
    std::fs::create_dir(&root).unwrap();
    write_epochs(&root);
    let base = d.path().join("remote-f");
    let expected = read_view(&root, &base);
    assert_eq!(expected.len(), 3000);

    let inv = FileInventory::scan_path(&root, "j", b"f").unwrap().unwrap();
    let file_dir = inv.dir.clone();
    // The remote file after each epoch, built before anything is deleted.
    let remote_after: Vec<Vec<u8>> = (1..=EPOCHS)
        .map(|e| {
            let out = d.path().join(format!("remote-after-{e}"));
            inv.logical_file(Some(EpochId::new(1, e)))
                .unwrap()
                .materialize(&out, None)
                .unwrap();
            std::fs::read(out).unwrap()
        })
        .collect();
    let mut states = 0;
    for drained in 1..=EPOCHS {
        // The drain: the remote holds epochs up to `drained`, durably...
        std::fs::write(&base, &remote_after[drained as usize - 1]).unwrap();
        // ...then the progress record...
        paralog_log::durable::write_atomic(
            &file_dir.join(layout::PROGRESS_FILE),
            &file_dir.join("progress.tmp"),
            &ProgressRecord {
                gen: 1,
                epoch: drained,
            }
            .encode(),
        )
        .unwrap();
        assert_eq!(
            read_view(&root, &base),
            expected,
            "after progress {drained}"
        );
        // ...then the deletion, one record at a time, in the drain's order.
        for rank in 0..RANKS {
            let rank_dir = inv.gens[&1].ranks[&rank].dir.clone();
            for kind in [
                EpochFileKind::Data,
                EpochFileKind::Manifest,
                EpochFileKind::ManifestTmp,
                EpochFileKind::Mark,
            ] {
                let p = rank_dir.join(layout::epoch_file_name(drained, kind));
                if std::fs::remove_file(&p).is_ok() {
                    states += 1;
                    assert_eq!(
                        read_view(&root, &base),
                        expected,
                        "epoch {drained} drained, rank {rank}'s {kind:?} deleted"
                    );
                }
            }
        }
    }
    // Format 2: a data log (with its commit record) and a mark per rank.
    assert_eq!(states, (RANKS as u64 * EPOCHS * 2) as usize);
}
