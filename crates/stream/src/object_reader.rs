//! Reading a stream on an object store (docs/streams.md "Object
//! remotes"): the description, the object index (which replaces the
//! watermark), groups' offsets as whole objects, and the segment object
//! that holds an offset, fetched whole and checked as a POSIX segment
//! is. A reader never lists: the index names every object it reads (only
//! `ls` and `describe` list, for the streams and the groups).

use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{corrupt, Result, StreamError};
use crate::format::{self, GroupOffsets, Header, KIND_PART_SEGMENT, KIND_STREAM};
use crate::layout::{GROUPS, STREAMS_DIR, STREAM_RECORD};
use crate::object_remote::{stream_key, ObjectRemote, ObjectStore};
use crate::objects::{object_key, Object, ObjectIndex, INDEX};
use crate::reader::{Open, RemoteStream, Seg};
use crate::remote::StreamPlace;

type Store = Arc<dyn ObjectStore>;

fn path(store: &Store, key: &str) -> PathBuf {
    PathBuf::from(store.describe(key))
}

/// The streams on the store that have a description.
pub(crate) fn list_streams(store: &Store) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for name in store.children(STREAMS_DIR)? {
        if format::valid_name("stream", &name).is_ok()
            && store.get(&stream_key(&name, STREAM_RECORD))?.is_some()
        {
            out.push(name);
        }
    }
    Ok(out)
}

pub(crate) fn open_stream(store: &Store, name: &str) -> Result<RemoteStream> {
    let key = stream_key(name, STREAM_RECORD);
    let b = store.get(&key)?.ok_or_else(|| StreamError::UnknownStream {
        stream: name.into(),
        root: PathBuf::from(store.describe("")),
    })?;
    let h = Header::decode(&b, KIND_STREAM, &path(store, &key))?;
    if h.name != name {
        return Err(corrupt(
            &path(store, &key),
            48,
            format!("names stream {}", h.name),
        ));
    }
    Ok(RemoteStream {
        dir: path(store, &format!("{STREAMS_DIR}/{name}")),
        name: h.name,
        partitions: h.partitions,
        place: StreamPlace::Store(store.clone()),
    })
}

/// The published index, with as many partitions as the stream.
pub(crate) fn index(store: &Store, rs: &RemoteStream) -> Result<ObjectIndex> {
    let ix = ObjectRemote::new(store.clone()).index(&rs.name, rs.partitions)?;
    if ix.parts.len() != rs.partitions as usize {
        return Err(corrupt(
            &path(store, &stream_key(&rs.name, INDEX)),
            24,
            format!(
                "{} partitions in a stream of {}",
                ix.parts.len(),
                rs.partitions
            ),
        ));
    }
    Ok(ix)
}

/// Each partition's first offset still on the store.
pub(crate) fn first_offsets(ix: &ObjectIndex) -> Vec<u64> {
    ix.parts
        .iter()
        .map(|p| p.objects.first().map_or(p.next, |o| o.first))
        .collect()
}

pub(crate) fn groups(store: &Store, rs: &RemoteStream) -> Result<Vec<String>> {
    store.children(&stream_key(&rs.name, GROUPS))
}

fn group_key(rs: &RemoteStream, group: &str) -> String {
    stream_key(&rs.name, &format!("{GROUPS}/{group}"))
}

pub(crate) fn group_offsets(
    store: &Store,
    rs: &RemoteStream,
    group: &str,
) -> Result<Option<(Vec<u8>, PathBuf)>> {
    let key = group_key(rs, group);
    Ok(store.get(&key)?.map(|b| (b, path(store, &key))))
}

/// One PUT: the store replaces the object whole (a reader gets the old
/// offsets or the new).
pub(crate) fn commit_group(
    store: &Store,
    rs: &RemoteStream,
    group: &str,
    offsets: &[u64],
) -> Result<()> {
    let b = GroupOffsets {
        offsets: offsets.to_vec(),
    }
    .encode();
    store.put(&group_key(rs, group), &b)
}

/// The object of `partition` that holds `offset` (below the high
/// watermark of `ix`), fetched whole: its length must be the index's, its
/// header must name this stream, partition and first offset.
pub(crate) fn open_object(
    store: &Store,
    rs: &RemoteStream,
    ix: &ObjectIndex,
    partition: u32,
    offset: u64,
) -> Result<Open> {
    let locate = |ix: &ObjectIndex| {
        ix.locate(&rs.name, partition, offset)?
            .ok_or_else(|| StreamError::Invalid {
                what: format!(
                    "stream {}: partition {partition} has no offset {offset} below its high watermark",
                    rs.name
                ),
            })
    };
    let key = |o: &Object| stream_key(&rs.name, &object_key(partition, o.first, o.end));
    let o = locate(ix)?;
    let (o, bytes) = match store.get(&key(&o))? {
        Some(b) => (o, b),
        None => {
            // Compacted and deleted since `ix` was read (a reader slower
            // than the grace period): a newer index names the object that
            // holds the offset now, and holds every offset `ix` did.
            let newer = locate(&index(store, rs)?)?;
            match (newer != o)
                .then(|| store.get(&key(&newer)))
                .transpose()?
                .flatten()
            {
                Some(b) => (newer, b),
                None => {
                    return Err(corrupt(
                        &path(store, &key(&o)),
                        0,
                        format!(
                            "the index of round {} names this object, and the store has none",
                            ix.round
                        ),
                    ))
                }
            }
        }
    };
    let path = path(store, &key(&o));
    if bytes.len() as u64 != o.bytes {
        return Err(corrupt(
            &path,
            bytes.len().min(o.bytes as usize) as u64,
            format!(
                "object of {} bytes, the index says {}",
                bytes.len(),
                o.bytes
            ),
        ));
    }
    let h = Header::decode(&bytes, KIND_PART_SEGMENT, &path)?;
    if h.name != rs.name
        || h.partition != partition
        || h.first != o.first
        || h.partitions != rs.partitions
    {
        return Err(corrupt(
            &path,
            0,
            "object header names another stream, partition or offset",
        ));
    }
    Ok(Open {
        path,
        pos: h.len(),
        end: o.bytes,
        first: o.first,
        last: Some(o.end),
        src: Seg::Bytes(bytes),
    })
}
