//! Sets on a store that is not a file system (S3, docs/aggregate.md): the
//! few operations a set needs from it, so that the record's format, the
//! spreading of members over containers, the block checksums and the
//! orphan rules stay in this crate (one code path) while the network
//! client lives with its remote (`paralog-s3`, which implements these).
//!
//! Names: the set `SET` (relative to the store's root) holds its files as
//! `SET/NAME` (`set.plr`, the containers), as on a POSIX remote.

use std::path::PathBuf;

use crate::error::Result;
#[cfg(feature = "writer")]
use crate::format::{self, SetRecord};
#[cfg(feature = "writer")]
use std::collections::BTreeSet;

/// Reading a set's containers (what `SetReader` needs).
pub trait ContainerSource: Send + Sync {
    /// Bytes `at..at + buf.len()` of the file `name` of the set `set`;
    /// returns how many there were (fewer: the object ends at `at + n`).
    fn read_at(&self, set: &[u8], name: &[u8], at: u64, buf: &mut [u8]) -> Result<usize>;

    /// How messages name the file `name` of the set `set` (empty `name`:
    /// the set directory), e.g. `s3://BUCKET/PREFIX/SET/NAME`.
    fn display(&self, set: &[u8], name: &[u8]) -> PathBuf;
}

/// Writing sets (feature `writer`): the containers, the record (whose
/// write is the commit: the store must make it atomic, complete or
/// absent), deletion, and what orphan collection needs.
#[cfg(feature = "writer")]
pub trait SetStore: ContainerSource {
    /// The published record of `set`, decoded (damage refused); `None`
    /// when there is none.
    fn read_record(&self, set: &[u8]) -> Result<Option<SetRecord>>;

    /// A new container `name` of `set` (never an existing one: names are
    /// per attempt).
    fn create_container(&self, set: &[u8], name: &[u8]) -> Result<Box<dyn ContainerSink>>;

    /// Write `record` as the set's record, replacing the previous one at
    /// once: **the commit**.
    fn put_record(&self, record: &SetRecord) -> Result<()>;

    /// Delete the file `name` of `set` (no error if it is gone).
    fn delete(&self, set: &[u8], name: &[u8]) -> Result<()>;

    /// The names of the files of `set` (one level: `SET/NAME`).
    fn list(&self, set: &[u8]) -> Result<Vec<Vec<u8>>>;

    /// Abort every unfinished upload of a file of `set` (a crashed
    /// writer's); returns how many.
    fn abort_uploads(&self, set: &[u8]) -> Result<usize>;
}

/// A container being written to a store: bytes arrive in increasing
/// offsets (the gaps between are holes, stored as zeros); `finish` makes
/// it a complete object of exactly `end` bytes.
#[cfg(feature = "writer")]
pub trait ContainerSink: Send {
    fn write(&mut self, at: u64, data: &[u8]) -> Result<()>;
    fn finish(&mut self, end: u64) -> Result<()>;
    /// Best effort: nothing of it is left (the upload aborted, or the
    /// object deleted once finished).
    fn abandon(&mut self);
}

/// `collect_orphans` on a store: the containers of `set` its record does
/// not list are deleted, and every unfinished upload under the set is
/// aborted (no record ever names one). Only where no writer of this set is
/// running; a record that does not decode stops it before anything is
/// removed. Returns what was removed (aborted uploads as `NAME (upload)`).
#[cfg(feature = "writer")]
pub fn collect_orphans_store(store: &dyn SetStore, set: &[u8]) -> Result<Vec<PathBuf>> {
    let record = store.read_record(set)?;
    let live: BTreeSet<Vec<u8>> = record
        .iter()
        .flat_map(|r| r.containers.iter().map(|c| c.name.clone()))
        .collect();
    let mut removed = Vec::new();
    for _ in 0..store.abort_uploads(set)? {
        removed.push(store.display(set, b"(unfinished upload)"));
    }
    for n in store.list(set)? {
        if format::is_container_name(&n) && !live.contains(&n) {
            store.delete(set, &n)?;
            removed.push(store.display(set, &n));
        }
    }
    Ok(removed)
}

/// `commit_record` on a store: the record written whole (**the commit**:
/// the store replaces the object at once, readers see the previous record
/// or this one), then the containers only `previous` used are deleted.
/// A crash between leaves them as orphans (`collect_orphans_store`).
#[cfg(feature = "writer")]
pub fn commit_record_store(
    store: &dyn SetStore,
    record: &SetRecord,
    previous: Option<&SetRecord>,
    hook: &dyn Fn(&str),
    committed: &mut dyn FnMut(),
) -> Result<()> {
    store.put_record(record)?;
    committed();
    hook("aggregate.after_record");
    if let Some(prev) = previous {
        let keep: BTreeSet<&[u8]> = record.containers.iter().map(|c| &c.name[..]).collect();
        for c in prev
            .containers
            .iter()
            .filter(|c| !keep.contains(&c.name[..]))
        {
            store.delete(&record.set, &c.name)?;
        }
    }
    Ok(())
}

/// A set removed from a store (its program deleted every member): the
/// record deleted (the commit), then the containers.
#[cfg(feature = "writer")]
pub fn remove_set_store(store: &dyn SetStore, previous: &SetRecord) -> Result<()> {
    store.delete(&previous.set, format::RECORD_NAME.as_bytes())?;
    for c in &previous.containers {
        store.delete(&previous.set, &c.name)?;
    }
    Ok(())
}

/// The node-local list of the checkpoint sets on an S3 remote, written
/// in the local directory before a program starts (`paralog run` and
/// `paralog server` with `--aggregate` and `s3://`), so that capture,
/// which does no network I/O, can tell a read of a member on S3 and refuse
/// it naming the set and `paralog extract` (docs/aggregate.md).
pub const S3_INDEX: &str = ".paralog-s3-sets";

/// The index's text: the remote's URL on the first line, then one set
/// directory (relative to the remote) per line (a name holding a newline
/// is left out).
pub fn encode_s3_index(url: &str, sets: &[String]) -> String {
    let mut s = format!("{url}\n");
    for d in sets.iter().filter(|d| !d.contains('\n')) {
        s.push_str(d);
        s.push('\n');
    }
    s
}

/// The URL and the set directories of an index's text.
pub fn decode_s3_index(text: &[u8]) -> Option<(String, Vec<Vec<u8>>)> {
    let mut lines = text.split(|&b| b == b'\n').filter(|l| !l.is_empty());
    let url = String::from_utf8_lossy(lines.next()?).into_owned();
    Some((url, lines.map(<[u8]>::to_vec).collect()))
}
