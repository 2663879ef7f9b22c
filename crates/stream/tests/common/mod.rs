//! Set-ups shared by the stream's integration tests.

// Each test binary uses its own part of this module.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use paralog_stream::{Partitioner, Producer};

/// The stream the tests write.
pub const S: &str = "tele";

/// A fresh directory with a node-local root `local` (the first producer
/// makes it) and an empty remote: (the directory, local, remote).
pub fn dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let (local, remote) = (t.path().join("local"), t.path().join("remote"));
    std::fs::create_dir(&remote).unwrap();
    (t, local, remote)
}

/// A producer of stream `S` with `partitions` partitions, round robin.
pub fn round_robin(local: &Path, partitions: u32) -> Producer {
    Producer::open(local, S, partitions, Partitioner::RoundRobin).unwrap()
}

/// Every file below `dir` (not the directories), sorted.
pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}
