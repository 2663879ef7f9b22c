//! Typed errors of the log core. Every variant that concerns a file names it,
//! and every corruption names the byte offset where the check failed, so that
//! a user (or the server's report) can point at the exact damage.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The OS error is part of the message (not a `source()`), so that
    /// reports with cause chains do not print it twice.
    #[error("{path}: {op}: {error}")]
    Io {
        path: PathBuf,
        op: &'static str,
        error: io::Error,
    },

    #[error("{path}: corrupt at offset {offset}: {what}")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        what: String,
    },

    #[error("{path}: format version {found} is not supported (this build reads {supported})")]
    UnsupportedVersion {
        path: PathBuf,
        found: u16,
        /// "version 1", "versions 1 and 2".
        supported: &'static str,
    },

    #[error("{path}: checksum mismatch at offset {offset} (length {len}): expected {expected:#010x}, found {found:#010x}")]
    Checksum {
        path: PathBuf,
        offset: u64,
        len: u64,
        expected: u32,
        found: u32,
    },

    #[error("invalid {what} {value:?}: {why}")]
    InvalidName {
        what: &'static str,
        value: String,
        why: &'static str,
    },

    #[error("{path}: epochs of one file disagree: {what}")]
    Inconsistent { path: PathBuf, what: String },

    #[error("{what}")]
    NotFound { what: String },
}

pub type Result<T, E = LogError> = std::result::Result<T, E>;

/// Attach a path and the failing operation to an `io::Error`.
pub(crate) trait IoContext<T> {
    fn ctx(self, op: &'static str, path: &std::path::Path) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx(self, op: &'static str, path: &std::path::Path) -> Result<T> {
        self.map_err(|error| LogError::Io {
            path: path.to_path_buf(),
            op,
            error,
        })
    }
}

impl LogError {
    /// The underlying OS error number, if this error came from the OS; the
    /// capture library hands it to the application as `errno`.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            LogError::Io { error, .. } => error.raw_os_error(),
            _ => None,
        }
    }
}
