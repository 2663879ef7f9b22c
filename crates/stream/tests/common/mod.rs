//! Set-ups shared by the stream's integration tests.

// Each test binary uses its own part of this module.
#![allow(dead_code)]

pub mod job;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use paralog_stream::{
    layout, Delivered, From, ObjectStore, Order, Partitioner, Producer, Reader, RemoteStream,
    StreamError, StreamPlace,
};

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

/// An object store of whole files under a directory (each PUT a new
/// file renamed into place: whole objects, as S3 gives).
pub struct DirStore(pub PathBuf);

impl ObjectStore for DirStore {
    fn describe(&self, key: &str) -> String {
        self.0.join(key).display().to_string()
    }
    fn get(&self, key: &str) -> paralog_stream::Result<Option<Vec<u8>>> {
        layout::read_small(&self.0.join(key))
    }
    fn put(&self, key: &str, bytes: &[u8]) -> paralog_stream::Result<()> {
        let path = self.0.join(key);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        layout::write_atomic(&path, bytes, 0o644)
    }
    fn delete(&self, key: &str) -> paralog_stream::Result<()> {
        match std::fs::remove_file(self.0.join(key)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(StreamError::Store {
                object: self.describe(key),
                op: "delete",
                error: e.to_string(),
            }),
            _ => Ok(()),
        }
    }
    fn children(&self, prefix: &str) -> paralog_stream::Result<Vec<String>> {
        let mut out: Vec<String> = match std::fs::read_dir(self.0.join(prefix)) {
            Ok(rd) => rd
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect(),
            Err(_) => Vec::new(),
        };
        out.sort();
        Ok(out)
    }
    fn modified(&self, key: &str) -> paralog_stream::Result<Option<std::time::SystemTime>> {
        Ok(std::fs::metadata(self.0.join(key))
            .ok()
            .map(|m| m.modified().unwrap()))
    }
}

/// A reader of stream `S` in the directory `remote`, alone, from the
/// start, in cut order.
pub fn reader_from_start(remote: &Path) -> Reader {
    Reader::open(
        RemoteStream::open(remote, S).unwrap(),
        None,
        From::Earliest,
        Order::Cut,
    )
    .unwrap()
}

/// Every event of stream `S` at `place` from `from` in cut order, as group
/// `group` (its offsets committed after) or no group.
pub fn read_from(
    place: &StreamPlace,
    group: Option<&str>,
    from: From,
) -> paralog_stream::Result<Vec<Delivered>> {
    let mut r = Reader::open(RemoteStream::open_at(place, S)?, group, from, Order::Cut)?;
    let mut out = Vec::new();
    while let Some(d) = r.next_event()? {
        out.push(d);
    }
    if group.is_some() {
        r.commit()?;
    }
    Ok(out)
}

/// Every file under `dir` with its bytes.
pub fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(
                    p.strip_prefix(dir).unwrap().to_path_buf(),
                    std::fs::read(&p).unwrap(),
                );
            }
        }
    }
    out
}

/// Copy the files under `from` into `to` (made if missing).
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.path().is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}
