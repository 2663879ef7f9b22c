//! A stream on a remote (a POSIX directory, or an object store through
//! `object_reader.rs`): the streams there, a stream's description, its
//! high watermark, first offsets, and reader groups' committed offsets.

use std::path::{Path, PathBuf};

use crate::error::{corrupt, Result, StreamError};
use crate::format::{self, GroupOffsets, Header, Watermark, KIND_STREAM};
use crate::layout;
use crate::object_reader as objects;
use crate::objects::ObjectIndex;
use crate::remote::StreamPlace;

/// A stream on a remote.
#[derive(Debug, Clone)]
pub struct RemoteStream {
    pub dir: PathBuf,
    pub name: String,
    pub partitions: u32,
    pub(crate) place: StreamPlace,
}

/// The streams on a remote.
pub fn list_streams_at(place: &StreamPlace) -> Result<Vec<String>> {
    match place {
        StreamPlace::Dir(d) => list_streams(d),
        StreamPlace::Store(s) => objects::list_streams(s),
    }
}

/// The streams under a POSIX remote.
pub fn list_streams(remote: &Path) -> Result<Vec<String>> {
    Ok(layout::entries(&layout::streams_dir(remote))?
        .into_iter()
        .filter(|(_, path)| path.join(layout::STREAM_RECORD).exists())
        .map(|(name, _)| name)
        .collect())
}

impl RemoteStream {
    pub fn open(remote: &Path, name: &str) -> Result<RemoteStream> {
        RemoteStream::open_at(&StreamPlace::Dir(remote.to_path_buf()), name)
    }

    pub fn open_at(place: &StreamPlace, name: &str) -> Result<RemoteStream> {
        format::valid_name("stream name", name)?;
        let remote = match place {
            StreamPlace::Dir(d) => d,
            StreamPlace::Store(s) => return objects::open_stream(s, name),
        };
        let dir = layout::stream_dir(remote, name);
        let path = dir.join(layout::STREAM_RECORD);
        let b = layout::read_small(&path)?.ok_or_else(|| StreamError::UnknownStream {
            stream: name.into(),
            root: remote.to_path_buf(),
        })?;
        let h = Header::decode(&b, KIND_STREAM, &path)?;
        if h.name != name {
            return Err(corrupt(&path, 48, format!("names stream {}", h.name)));
        }
        Ok(RemoteStream {
            dir,
            name: h.name,
            partitions: h.partitions,
            place: place.clone(),
        })
    }

    /// The place the stream is on.
    pub fn place(&self) -> &StreamPlace {
        &self.place
    }

    /// The object index of a stream on an object store (`None` on a
    /// directory).
    pub(crate) fn index(&self) -> Result<Option<ObjectIndex>> {
        match &self.place {
            StreamPlace::Store(s) => objects::index(s, self).map(Some),
            StreamPlace::Dir(_) => Ok(None),
        }
    }

    /// The high watermark (round 0, nothing readable, before the first).
    pub fn watermark(&self) -> Result<Watermark> {
        if let Some(ix) = self.index()? {
            return Ok(Watermark {
                round: ix.round,
                parts: ix.marks(),
            });
        }
        let path = self.dir.join(layout::WATERMARK);
        let wm = match layout::read_small(&path)? {
            Some(b) => Watermark::decode(&b, &path)?,
            None => Watermark {
                round: 0,
                parts: vec![Default::default(); self.partitions as usize],
            },
        };
        self.check_partitions(wm.parts.len(), &path, 24)?;
        Ok(wm)
    }

    /// Each partition's first offset still on the remote: its first
    /// segment's (retention deletes whole segments from the start), 0
    /// before it has one.
    pub fn first_offsets(&self) -> Result<Vec<u64>> {
        if let Some(ix) = self.index()? {
            return Ok(objects::first_offsets(&ix));
        }
        (0..self.partitions)
            .map(|p| {
                Ok(layout::part_segments(&self.dir, p)?
                    .first()
                    .copied()
                    .unwrap_or(0))
            })
            .collect()
    }

    /// Each partition's segment count: its segment files, or on an
    /// object store the objects its index names.
    pub fn segment_counts(&self) -> Result<Vec<usize>> {
        if let Some(ix) = self.index()? {
            return Ok(ix.parts.iter().map(|p| p.objects.len()).collect());
        }
        (0..self.partitions)
            .map(|p| Ok(layout::part_segments(&self.dir, p)?.len()))
            .collect()
    }

    pub(crate) fn trimmed(&self, partition: u32, offset: u64, first: u64) -> StreamError {
        StreamError::Trimmed {
            stream: self.name.clone(),
            partition,
            offset,
            first,
        }
    }

    /// The reader groups and their committed offsets.
    pub fn groups(&self) -> Result<Vec<(String, GroupOffsets)>> {
        let mut out = Vec::new();
        let names = match &self.place {
            StreamPlace::Store(s) => objects::groups(s, self)?,
            StreamPlace::Dir(_) => layout::entries(&self.dir.join(layout::GROUPS))?
                .into_iter()
                .map(|(name, _)| name)
                .collect(),
        };
        for name in names {
            if format::valid_name("group", &name).is_ok() {
                // A group made between the listing and this read has no
                // offsets yet: nothing committed to show.
                if let Some(g) = self.group_offsets(&name)? {
                    out.push((name, g));
                }
            }
        }
        Ok(out)
    }

    pub fn group_offsets(&self, group: &str) -> Result<Option<GroupOffsets>> {
        format::valid_name("group", group)?;
        let (b, path) = match &self.place {
            StreamPlace::Store(s) => match objects::group_offsets(s, self, group)? {
                Some(found) => found,
                None => return Ok(None),
            },
            StreamPlace::Dir(_) => {
                let path = self.dir.join(layout::GROUPS).join(group);
                match layout::read_small(&path)? {
                    Some(b) => (b, path),
                    None => return Ok(None),
                }
            }
        };
        let g = GroupOffsets::decode(&b, &path)?;
        self.check_partitions(g.offsets.len(), &path, 16)?;
        Ok(Some(g))
    }

    /// A record of `path` (its partition count at `offset`) must have as
    /// many partitions as the stream.
    pub(crate) fn check_partitions(&self, n: usize, path: &Path, offset: u64) -> Result<()> {
        if n != self.partitions as usize {
            return Err(corrupt(
                path,
                offset,
                format!("{n} partitions in a stream of {}", self.partitions),
            ));
        }
        Ok(())
    }

    /// Store a group's offsets atomically (temporary, fsync, rename).
    pub fn commit_group(&self, group: &str, offsets: &[u64]) -> Result<()> {
        format::valid_name("group", group)?;
        if let StreamPlace::Store(s) = &self.place {
            return objects::commit_group(s, self, group, offsets);
        }
        let dir = self.dir.join(layout::GROUPS);
        layout::create_dirs(&self.dir, &dir, 0o755)?;
        layout::write_atomic(
            &dir.join(group),
            &GroupOffsets {
                offsets: offsets.to_vec(),
            }
            .encode(),
            0o644,
        )
    }
}
