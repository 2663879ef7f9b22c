//! One error type; every variant says which object (and version, and
//! chunk) it is about, so a message alone tells the user what to look at.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A URL that names no usable store, or a remote kind not supported yet.
    #[error("{url}: {why}")]
    Url { url: String, why: String },
    /// A name that is not a path inside the store's namespace.
    #[error("object name {name:?}: {why}")]
    BadName { name: String, why: String },
    /// Metadata or a buffer that does not fit (dtype, shape, chunk grid,
    /// a chunk outside the grid, a hyperslab outside the array).
    #[error("{name}: {why}")]
    Invalid { name: String, why: String },
    #[error("{name}: {why}")]
    NotFound { name: String, why: String },
    /// A chunk that cannot be read as the version says: missing, truncated,
    /// or failing its checksum.
    #[error("{name} version {version}: chunk {chunk:?}: {why}")]
    Chunk {
        name: String,
        version: u64,
        chunk: Vec<u64>,
        why: String,
    },
    /// Two writers of one chunked PUT wrote the same chunk.
    #[error("{name}: put {id}: chunk {chunk:?} was already written by another writer (overlapping writes are refused)")]
    Overlap {
        name: String,
        id: String,
        chunk: Vec<u64>,
    },
    /// Two writers of one chunked PUT wrote parts of one chunk that share
    /// elements (found by the commit, which publishes nothing).
    /// `what`: the chunk and the two writers.
    #[error("{name}: put {id}: {what} (overlapping writes are refused); nothing was published")]
    PartsOverlap {
        name: String,
        id: String,
        what: String,
    },
    /// A chunked PUT that cannot be committed (incomplete, unknown, a writer
    /// that did not finish); nothing was published.
    #[error("{name}: put {id}: {why}")]
    Put {
        name: String,
        id: String,
        why: String,
    },
    /// A record (array record, claim, begin) that does not decode.
    #[error("{path}: damaged at byte {offset}: {what}")]
    Damaged {
        path: PathBuf,
        offset: u64,
        what: String,
    },
    #[error("{path}: {op}: {error}")]
    Io {
        path: PathBuf,
        op: &'static str,
        error: std::io::Error,
    },
    /// The object layout underneath (its own path and offset in the text).
    #[error(transparent)]
    Store(#[from] paralog_backend::objstore::ObjError),
}

pub type Result<T> = std::result::Result<T, Error>;

pub(crate) fn io_err<'a>(
    path: &'a std::path::Path,
    op: &'static str,
) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |error| Error::Io {
        path: path.to_path_buf(),
        op,
        error,
    }
}
