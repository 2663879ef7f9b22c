//! `StreamError`: every failure names the file, and damage names the byte
//! offset in it, so that a person can look (the log's rule, docs/format.md).

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("{}: {op}: {error}", path.display())]
    Io {
        path: PathBuf,
        op: &'static str,
        error: std::io::Error,
    },
    /// Bytes that a committed record promised and that do not check out.
    #[error("{}: corrupt at offset {offset}: {what}", path.display())]
    Corrupt {
        path: PathBuf,
        offset: u64,
        what: String,
    },
    #[error("invalid {what} {value:?}: {why}")]
    InvalidName {
        what: &'static str,
        value: String,
        why: &'static str,
    },
    #[error("stream {stream}: has {existing} partitions, not {asked}")]
    PartitionMismatch {
        stream: String,
        existing: u32,
        asked: u32,
    },
    #[error("event of {size} bytes is larger than the limit of {limit} bytes")]
    TooLarge { size: u64, limit: u64 },
    #[error("no stream {stream} under {}", root.display())]
    UnknownStream { stream: String, root: PathBuf },
    /// Backpressure: the node holds too many bytes of the stream that the
    /// drain has not taken yet (docs/streams.md, "Backpressure").
    #[error("stream {stream}: {undrained} bytes not drained yet on this node, past its quota of {quota} bytes ({waited})")]
    QuotaFull {
        stream: String,
        undrained: u64,
        quota: u64,
        waited: String,
    },
    /// Retention deleted the offsets a reader asked for.
    #[error("stream {stream}: partition {partition}: offset {offset} was trimmed (retention); the partition starts at offset {first} now (read from earliest, or commit the group past it)")]
    Trimmed {
        stream: String,
        partition: u32,
        offset: u64,
        first: u64,
    },
    /// An object store refused or failed a request (the key named, never
    /// a credential).
    #[error("{object}: {op}: {error}")]
    Store {
        object: String,
        op: &'static str,
        error: String,
    },
    #[error("{what}")]
    Invalid { what: String },
}

pub type Result<T, E = StreamError> = std::result::Result<T, E>;

/// `.ctx("op", path)` on io results: the error names the file.
pub(crate) trait IoContext<T> {
    fn ctx(self, op: &'static str, path: &Path) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, op: &'static str, path: &Path) -> Result<T> {
        self.map_err(|error| StreamError::Io {
            path: path.to_path_buf(),
            op,
            error,
        })
    }
}

pub(crate) fn corrupt(path: &Path, offset: u64, what: impl Into<String>) -> StreamError {
    StreamError::Corrupt {
        path: path.to_path_buf(),
        offset,
        what: what.into(),
    }
}
