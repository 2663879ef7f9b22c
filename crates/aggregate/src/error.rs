//! `AggError`: every failure names the file, and damage names the byte
//! offset too. `errno` is what the capture library gives the program.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum AggError {
    #[error("{}: {op}: {error}", path.display())]
    Io {
        path: PathBuf,
        op: &'static str,
        error: std::io::Error,
    },
    /// A set record or container that fails its checks: never used.
    #[error("{} at offset {offset}: {what}", path.display())]
    Corrupt {
        path: PathBuf,
        offset: u64,
        what: String,
    },
    /// Input the writer refuses (a member path that would escape its set,
    /// twice the same member, a size its bytes do not have).
    #[error("{}: {what}", path.display())]
    Invalid { path: PathBuf, what: String },
}

pub type Result<T> = std::result::Result<T, AggError>;

impl AggError {
    pub fn io<'a>(
        path: &'a Path,
        op: &'static str,
    ) -> impl FnOnce(std::io::Error) -> AggError + 'a {
        move |error| AggError::Io {
            path: path.to_path_buf(),
            op,
            error,
        }
    }

    pub fn corrupt(path: &Path, offset: u64, what: impl Into<String>) -> AggError {
        AggError::Corrupt {
            path: path.to_path_buf(),
            offset,
            what: what.into(),
        }
    }

    /// The errno a reading program gets: EIO for damage (never wrong
    /// bytes), the system's own for I/O errors.
    pub fn errno(&self) -> i32 {
        match self {
            AggError::Io { error, .. } => error.raw_os_error().unwrap_or(libc::EIO),
            AggError::Corrupt { .. } => libc::EIO,
            AggError::Invalid { .. } => libc::EINVAL,
        }
    }

    /// A file that is not there (a set record or container removed while
    /// it was being read: a newer version replaced it).
    pub fn is_not_found(&self) -> bool {
        matches!(self, AggError::Io { error, .. } if error.kind() == std::io::ErrorKind::NotFound)
    }
}
