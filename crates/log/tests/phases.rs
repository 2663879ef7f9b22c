//! Writes of different ranks to the same bytes in one epoch are merged in
//! the order the program gave them: a synchronizing point that every rank
//! passes (a collective call, a barrier) starts a new phase, and a later
//! phase wins whatever the ranks' numbers (issue 12: rank order won, so a
//! barrier-separated overwrite by rank 0 lost to rank 1's earlier bytes).

mod common;

use paralog_log::{RankLog, WriterConfig};

fn logs(root: &std::path::Path, n: u32) -> Vec<RankLog> {
    let ident = common::ident("j", "/app/f", "f", 1);
    common::ranks(root, &ident, n, WriterConfig::default())
}

fn commit_and_read(root: &std::path::Path, logs: &mut [RankLog], len: usize) -> Vec<u8> {
    common::commit_all(logs);
    common::read_committed(root, len)
}

#[test]
fn a_later_phase_wins_over_a_higher_rank() {
    let d = tempfile::tempdir().unwrap();
    let mut l = logs(d.path(), 2);
    l[1].write_at(0, &[1u8; 8]).unwrap();
    // A barrier: every rank passes it.
    l.iter_mut().for_each(RankLog::sync_point);
    l[0].write_at(0, &[0u8; 4]).unwrap();
    assert_eq!(
        commit_and_read(d.path(), &mut l, 8),
        [0, 0, 0, 0, 1, 1, 1, 1]
    );
}

#[test]
fn within_one_phase_the_higher_rank_wins() {
    let d = tempfile::tempdir().unwrap();
    let mut l = logs(d.path(), 2);
    l[1].write_at(0, &[1u8; 8]).unwrap();
    l[0].write_at(0, &[0u8; 4]).unwrap();
    assert_eq!(commit_and_read(d.path(), &mut l, 8), [1u8; 8]);
}

#[test]
fn phases_and_size_operations_interleave_in_program_order() {
    let d = tempfile::tempdir().unwrap();
    let mut l = logs(d.path(), 3);
    // Phase 0: rank 2 writes 12 bytes of 2.
    l[2].write_at(0, &[2u8; 12]).unwrap();
    l.iter_mut().for_each(RankLog::sync_point);
    // Phase 1: rank 0 overwrites the first 4; then a collective set size
    // to 10 ends phase 1.
    l[0].write_at(0, &[7u8; 4]).unwrap();
    l.iter_mut().for_each(|r| r.set_size(10));
    // Phase 2 and 3: rank 2 writes again at 8, a barrier, rank 1 writes 9.
    l[2].write_at(8, &[5u8; 4]).unwrap();
    l.iter_mut().for_each(RankLog::sync_point);
    l[1].write_at(9, &[9u8; 1]).unwrap();
    assert_eq!(
        commit_and_read(d.path(), &mut l, 12),
        [7, 7, 7, 7, 2, 2, 2, 2, 5, 9, 5, 5]
    );
}

#[test]
fn a_rank_that_wrote_nothing_in_between_keeps_phase_numbers_aligned() {
    let d = tempfile::tempdir().unwrap();
    let mut l = logs(d.path(), 2);
    // Rank 0 writes in phase 0, passes 5 barriers writing nothing, then
    // rank 1 writes in phase 5 and rank 0 in phase 3 (before rank 1).
    l[0].write_at(0, &[1u8; 4]).unwrap();
    for i in 0..5 {
        l.iter_mut().for_each(RankLog::sync_point);
        if i == 2 {
            l[0].write_at(2, &[3u8; 4]).unwrap();
        }
    }
    l[1].write_at(3, &[8u8; 2]).unwrap();
    assert_eq!(commit_and_read(d.path(), &mut l, 6), [1, 1, 3, 8, 8, 3]);
}
