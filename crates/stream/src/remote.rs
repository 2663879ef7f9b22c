//! Where the drain puts a stream: the three remote steps of a round,
//! behind one trait so that an object remote (S3, the object layout;
//! docs/streams.md "Object remotes") can take the place of a POSIX
//! directory while the cut log, the plan and their checks stay the same.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::Result;
use crate::format::{Cut, PartMark, Watermark};
use crate::layout;
use crate::object_remote::{ObjectRemote, ObjectStore};
use crate::publish;
use crate::retention::Trimmed;

pub trait StreamRemote {
    /// The stream's place on the remote: named in messages, and what the
    /// drainer's remembered state is tied to.
    fn stream_dir(&self, stream: &str) -> PathBuf;

    /// The segment size at which the drain starts a new one, given the
    /// one asked for: an object remote writes each round's batch of a
    /// partition as its own object, so it rolls every round (0).
    fn roll_bytes(&self, asked: u64) -> u64 {
        asked
    }

    /// Check the stream's description, writing it the first time.
    fn ensure(&self, stream: &str, partitions: u32) -> Result<()>;

    /// The published high watermark (round 0, nothing readable, if none).
    fn watermark(&self, stream: &str, partitions: u32) -> Result<Watermark>;

    /// Write a cut's partition batches, then publish the watermark
    /// `after`. Applying a cut twice writes the same bytes.
    fn apply(&self, stream: &str, partitions: u32, round: RoundWrite<'_>) -> Result<()>;

    /// Work the drain does after each round, new data or not, under the
    /// node's drain lock: on an object remote, a pending trim request
    /// applied (what it deleted per partition). A directory is trimmed
    /// by `paralog stream trim` itself.
    fn after_round(&self, _stream: &str, _partitions: u32) -> Result<Vec<Trimmed>> {
        Ok(Vec::new())
    }

    /// Whether [`StreamRemote::after_round`] can do anything: a round of
    /// an idle stream (`Drainer`'s, with nothing new and nothing to
    /// release) takes the drain lock to call it only then.
    fn works_after_rounds(&self) -> bool {
        false
    }
}

/// What one round puts on a remote: its cut, each partition's encoded
/// batch (in partition order), and the watermark published after them.
/// One value, so that every remote's `apply` takes the same three.
#[derive(Debug, Clone, Copy)]
pub struct RoundWrite<'a> {
    pub cut: &'a Cut,
    pub bytes: &'a [Vec<u8>],
    pub after: &'a [PartMark],
}

/// A POSIX directory (a parallel file system, NFS, a local disk).
#[derive(Debug, Clone, Copy)]
pub struct PosixRemote<'a>(pub &'a Path);

impl StreamRemote for PosixRemote<'_> {
    fn stream_dir(&self, stream: &str) -> PathBuf {
        layout::stream_dir(self.0, stream)
    }

    fn ensure(&self, stream: &str, partitions: u32) -> Result<()> {
        let dir = self.stream_dir(stream);
        // A drain killed while publishing its watermark left a temporary
        // (checked once a round, here, before this round publishes).
        layout::remove_dead_temporaries(&dir.join(layout::WATERMARK));
        publish::ensure_remote(self.0, &dir, stream, partitions)
    }

    fn watermark(&self, stream: &str, partitions: u32) -> Result<Watermark> {
        publish::read_watermark(&self.stream_dir(stream), partitions)
    }

    fn apply(&self, stream: &str, partitions: u32, round: RoundWrite<'_>) -> Result<()> {
        publish::apply(&self.stream_dir(stream), stream, partitions, round)
    }
}

/// A remote of streams, owned and cheap to clone: what the CLI and the
/// server hand to the drain ([`StreamPlace::remote`]) and to the readers
/// (`RemoteStream::open_at`). Made from a URL outside this crate (the
/// object stores' clients are not linked here).
#[derive(Clone)]
pub enum StreamPlace {
    /// A POSIX directory (`file:///path`, `/path`).
    Dir(PathBuf),
    /// An object store (S3, the object layout).
    Store(Arc<dyn ObjectStore>),
}

impl StreamPlace {
    /// The drain's remote steps on this place.
    pub fn remote(&self) -> Box<dyn StreamRemote + '_> {
        match self {
            StreamPlace::Dir(d) => Box::new(PosixRemote(d)),
            StreamPlace::Store(s) => Box::new(ObjectRemote::new(s.clone())),
        }
    }

    /// How the place is named in messages.
    pub fn describe(&self) -> String {
        match self {
            StreamPlace::Dir(d) => d.display().to_string(),
            StreamPlace::Store(s) => s.describe(""),
        }
    }
}

impl std::fmt::Debug for StreamPlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}
