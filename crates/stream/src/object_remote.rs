//! A stream on an object store (docs/streams.md "Object remotes"): the
//! drain's remote steps as PUTs of immutable objects, then the object
//! index, PUT last. The store is behind [`ObjectStore`] (S3 and the object
//! layout implement it outside this crate, which the producers' library
//! links and which stays free of their clients).

use std::path::PathBuf;

use crate::error::{corrupt, Result, StreamError};
use crate::format::{Header, Watermark, KIND_PART_SEGMENT, KIND_STREAM};
use crate::layout::{STREAMS_DIR, STREAM_RECORD};
use crate::object_compact::{self, Compaction};
use crate::objects::{object_key, Object, ObjectIndex, INDEX};
use crate::publish::header_len;
use crate::remote::{RoundWrite, StreamRemote};
use crate::retention::Trimmed;

/// Whole-object operations on a store of immutable objects, by key.
pub trait ObjectStore: Send + Sync {
    /// How `key` is shown in messages (e.g. `s3://bucket/prefix/key`).
    fn describe(&self, key: &str) -> String;
    /// The object's bytes, `None` if there is none.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>>;
    /// Create or replace the object whole: a reader sees the old bytes
    /// or the new, never a part.
    fn put(&self, key: &str, bytes: &[u8]) -> Result<()>;
    /// Remove the object; a missing one is no error.
    fn delete(&self, key: &str) -> Result<()>;
    /// The names one level below `prefix` (a key without a trailing
    /// '/'): of `a/b/c` and `a/d` under `a`, `b` and `d`; sorted, each
    /// once. Only `ls` and `describe` list (the streams, a stream's
    /// groups): the drain and the readers read the index.
    fn children(&self, prefix: &str) -> Result<Vec<String>>;
    /// When the store last wrote the object (`None`: there is none), by
    /// the store's clock: what `paralog stream trim --older-than` goes by.
    fn modified(&self, key: &str) -> Result<Option<std::time::SystemTime>>;
}

impl<T: ObjectStore + ?Sized> ObjectStore for std::sync::Arc<T> {
    fn describe(&self, key: &str) -> String {
        (**self).describe(key)
    }
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        (**self).get(key)
    }
    fn put(&self, key: &str, bytes: &[u8]) -> Result<()> {
        (**self).put(key, bytes)
    }
    fn delete(&self, key: &str) -> Result<()> {
        (**self).delete(key)
    }
    fn children(&self, prefix: &str) -> Result<Vec<String>> {
        (**self).children(prefix)
    }
    fn modified(&self, key: &str) -> Result<Option<std::time::SystemTime>> {
        (**self).modified(key)
    }
}

/// [`ObjectStore::children`] from a store's listing of whole keys under
/// `prefix/`.
pub fn children_of<'a>(prefix: &str, keys: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let base = format!("{prefix}/");
    let mut out: Vec<String> = keys
        .into_iter()
        .filter_map(|k| k.strip_prefix(&base))
        .filter_map(|rest| rest.split('/').next())
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The drain's remote on an object store.
pub struct ObjectRemote<S> {
    pub store: S,
    pub compaction: Compaction,
}

impl<S> ObjectRemote<S> {
    /// With the default compaction.
    pub fn new(store: S) -> ObjectRemote<S> {
        ObjectRemote {
            store,
            compaction: Compaction::default(),
        }
    }
}

/// The key of `rel` in the stream's place.
pub fn stream_key(stream: &str, rel: &str) -> String {
    format!("{STREAMS_DIR}/{stream}/{rel}")
}

impl<S: ObjectStore> ObjectRemote<S> {
    /// The published index (round 0, nothing, if none yet).
    pub fn index(&self, stream: &str, partitions: u32) -> Result<ObjectIndex> {
        let key = stream_key(stream, INDEX);
        match self.store.get(&key)? {
            Some(b) => ObjectIndex::decode(&b, &PathBuf::from(self.store.describe(&key))),
            None => Ok(ObjectIndex::empty(partitions)),
        }
    }
}

impl<S: ObjectStore> StreamRemote for ObjectRemote<S> {
    fn stream_dir(&self, stream: &str) -> PathBuf {
        PathBuf::from(self.store.describe(&format!("{STREAMS_DIR}/{stream}")))
    }

    /// Each round's batch of a partition is its own object.
    fn roll_bytes(&self, _asked: u64) -> u64 {
        0
    }

    fn ensure(&self, stream: &str, partitions: u32) -> Result<()> {
        let key = stream_key(stream, STREAM_RECORD);
        if let Some(b) = self.store.get(&key)? {
            let h = Header::decode(&b, KIND_STREAM, &PathBuf::from(self.store.describe(&key)))?;
            if h.name != stream || h.partitions != partitions {
                return Err(StreamError::PartitionMismatch {
                    stream: stream.into(),
                    existing: h.partitions,
                    asked: partitions,
                });
            }
            return Ok(());
        }
        let h = Header {
            kind: KIND_STREAM,
            id: 0,
            first: 0,
            partition: 0,
            partitions,
            name: stream.into(),
        };
        self.store.put(&key, &h.encode())
    }

    fn watermark(&self, stream: &str, partitions: u32) -> Result<Watermark> {
        let ix = self.index(stream, partitions)?;
        Ok(Watermark {
            round: ix.round,
            parts: ix.marks(),
        })
    }

    /// PUT each partition's object (a part segment header, then the
    /// round's batch: what the POSIX drain writes rolling every round),
    /// compact and expire (`object_compact.rs`), then PUT the index
    /// naming them. A cut planned for a POSIX remote (its
    /// batch appended to an earlier segment) is refused: its objects
    /// could not stand alone.
    fn apply(&self, stream: &str, n: u32, round: RoundWrite<'_>) -> Result<()> {
        let RoundWrite { cut, bytes, after } = round;
        let index_path = PathBuf::from(self.store.describe(&stream_key(stream, INDEX)));
        let mut ix = self.index(stream, n)?;
        let mut new = vec![None; n as usize];
        for (p, (part, b)) in cut.parts.iter().zip(bytes).enumerate() {
            if part.count == 0 {
                continue;
            }
            if part.pos != header_len(stream) || part.seg_first != part.first {
                return Err(StreamError::Invalid {
                    what: format!(
                        "stream {stream}: round {} appends partition {p} to the segment at offset {} (byte {}): this node's cut log was planned for a POSIX remote; drain it to that remote",
                        cut.round, part.seg_first, part.pos
                    ),
                });
            }
            let mut obj = Header {
                kind: KIND_PART_SEGMENT,
                id: 0,
                first: part.first,
                partition: p as u32,
                partitions: n,
                name: stream.into(),
            }
            .encode();
            obj.extend_from_slice(b);
            let end = part.first + part.count;
            let key = stream_key(stream, &object_key(p as u32, part.first, end));
            self.store.put(&key, &obj)?;
            crate::failpoint::hit("stream.mid_apply");
            new[p] = Some(Object {
                first: part.first,
                end,
                bytes: obj.len() as u64,
            });
        }
        ix.add_round(cut.round, &new, &index_path)?;
        if ix.marks() != after {
            return Err(corrupt(
                &index_path,
                0,
                format!(
                    "round {} would publish an index that disagrees with the cut",
                    cut.round
                ),
            ));
        }
        object_compact::run(&self.store, stream, cut.round, &self.compaction, &mut ix)?;
        crate::failpoint::hit("stream.before_watermark");
        self.store.put(&stream_key(stream, INDEX), &ix.encode())
    }

    /// Apply a trim request (`object_trim.rs`): here, because only the
    /// drain PUTs the index. The request is looked for first: an idle
    /// round costs one GET, not two.
    fn after_round(&self, stream: &str, n: u32) -> Result<Vec<Trimmed>> {
        if !crate::object_trim::pending(&self.store, stream)? {
            return Ok(Vec::new());
        }
        let mut ix = self.index(stream, n)?;
        crate::object_trim::apply_request(&self.store, stream, &mut ix)
    }

    /// A trim request may wait for any round, idle or not.
    fn works_after_rounds(&self) -> bool {
        true
    }
}
