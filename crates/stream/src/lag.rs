//! How much of a stream the node holds and how much of it the drain has
//! taken (`paralog stream lag`, `paralog status`): a snapshot read from
//! the producers' segments and the cut log, with no lock.

use std::path::Path;

use crate::error::Result;
use crate::layout;
use crate::local;

/// What a stream holds on this node and how much of it the drain took.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalLag {
    pub stream: String,
    pub partitions: Option<u32>,
    /// Producer segments (one per process that opened the stream).
    pub segments: usize,
    /// Their bytes past their headers.
    pub bytes: u64,
    /// Of those, the bytes that cuts took (drained, or recorded and about
    /// to be): what local retention releases once their producers ended.
    pub drained: u64,
    /// The segment files' bytes, headers included: what the stream's
    /// segments take on the node's disk (its cut log aside).
    pub held: u64,
    /// Drain rounds recorded in the cut log.
    pub rounds: u64,
}

/// The lag of a stream under the node-local root: what is not drained yet
/// (`bytes - drained`). Reads the cut log; takes no lock (a snapshot).
pub fn local_lag(local: &Path, stream: &str) -> Result<LocalLag> {
    let dir = layout::existing_local_stream(local, stream)?;
    let (segs, parts) = local::segments(&dir, stream)?;
    let log = local::read_log(&dir.join(layout::CUTS))?;
    let taken = log.taken();
    let mut lag = LocalLag {
        stream: stream.into(),
        partitions: parts.or_else(|| log.partitions()),
        segments: segs.len(),
        rounds: log.rounds(),
        ..Default::default()
    };
    for (id, s) in &segs {
        lag.bytes += s.len - s.header_len;
        lag.held += s.len;
        lag.drained += taken.get(id).map_or(0, |t| t - s.header_len);
    }
    Ok(lag)
}
