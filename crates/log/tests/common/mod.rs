//! Helpers shared by the log's integration tests: an open's identity, the
//! rank logs of one open, commits as the shim's agreement makes them, and
//! the read-back of the committed file.

// Each test binary uses its own part of this module.
#![allow(dead_code)]

use std::path::Path;

use paralog_log::{FileIdent, FileInventory, RankLog, WriterConfig};

/// The identity of open `gen` of the file the program knows as `path`
/// (`rel` under the prefix) in `job`.
pub fn ident(job: &str, path: &str, rel: &str, gen: u64) -> FileIdent {
    FileIdent {
        job: job.into(),
        path: path.as_bytes().to_vec(),
        rel: rel.as_bytes().to_vec(),
        gen,
    }
}

/// The `n` rank logs of one open of `ident`, each written with `cfg`.
pub fn ranks(root: &Path, ident: &FileIdent, n: u32, cfg: WriterConfig) -> Vec<RankLog> {
    (0..n)
        .map(|r| RankLog::create(root, ident.clone(), r, n, cfg).unwrap())
        .collect()
}

/// One epoch of every rank in `logs` committed as the shim's agreement
/// does it: every local commit, then every commit mark.
pub fn commit_all(logs: &mut [RankLog]) {
    for l in logs.iter_mut() {
        l.commit_local().unwrap();
    }
    for l in logs.iter_mut() {
        l.complete_epoch().unwrap();
    }
}

/// One writer's epoch committed on its own (a communicator of one).
pub fn commit(log: &mut RankLog) {
    log.commit_local().unwrap();
    log.complete_epoch().unwrap();
}

/// The first `len` bytes of file "f" of job "j" at its last committed epoch,
/// on top of nothing, checking that this root holds all of it.
pub fn read_committed(root: &Path, len: usize) -> Vec<u8> {
    let inv = FileInventory::scan_path(root, "j", b"f").unwrap().unwrap();
    assert!(inv.complete_locally().unwrap(), "the file looks incomplete");
    let lf = inv.logical_file(None).unwrap();
    let mut buf = vec![0u8; len];
    let mut reader = paralog_log::reader::SourceReader::default();
    lf.read_at(&mut reader, 0, &mut buf, 0, &mut |_, _| Ok(()))
        .unwrap();
    buf
}
