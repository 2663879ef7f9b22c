//! Remote storage behind one narrow interface. A backend knows nothing of
//! epochs or ranks: the drain hands it, per file, the operations of one
//! epoch in order, and then asks it to make them durable. Errors say whether
//! retrying can help.

use std::fmt;

pub use paralog_log::format::Times;
pub use paralog_log::reader::SizeState;
pub use paralog_log::EpochId;

pub mod objstore;
pub mod parted;
pub mod posix;
pub mod url;

pub use parted::{PartDone, PartUploader, PartedBackend, PartedVersion};
pub use url::{ObjStoreUrl, RemoteUrl, S3Upload, S3Url, UrlError};

/// One operation of an epoch, in the order the drain applies them.
#[derive(Debug)]
pub enum RemoteOp<'a> {
    Write {
        off: u64,
        data: &'a [u8],
    },
    /// The file becomes exactly this long.
    SetSize(u64),
    /// The file becomes at least this long.
    Preallocate(u64),
    /// The file stops existing.
    Delete,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Worth retrying later (unreachable, full, read-only, throttled): keep
    /// every local byte and try again.
    Retryable,
    /// Retrying the same request will not help (a path that cannot exist).
    Permanent,
}

#[derive(Debug, thiserror::Error)]
#[error("{target}: {op}: {message}")]
pub struct BackendError {
    pub kind: ErrorKind,
    pub target: String,
    pub op: &'static str,
    pub message: String,
}

impl BackendError {
    pub fn retryable(&self) -> bool {
        self.kind == ErrorKind::Retryable
    }
}

/// Applies the operations of one epoch of one file. Nothing is promised
/// durable until `commit` returns. A failed or dropped sink may have applied
/// some operations: the drain re-applies the whole epoch, which is
/// idempotent (the same writes, then the same size operations).
pub trait EpochSink {
    fn apply(&mut self, op: RemoteOp<'_>) -> Result<(), BackendError>;
    /// Write `len` bytes of the local file `src` at `src_off` to `off`
    /// without passing them through user space, where the backend can
    /// (`copy_file_range` into a POSIX remote). `Ok(false)`: it cannot here;
    /// nothing was written and the caller uses [`RemoteOp::Write`].
    fn copy_from(
        &mut self,
        _src: &std::fs::File,
        _src_off: u64,
        _len: u64,
        _off: u64,
    ) -> Result<bool, BackendError> {
        Ok(false)
    }
    /// Add bytes that other servers already stored for this version (the
    /// encoded pieces their [`ChunkSink`]s returned), in place of the
    /// bytes they cover; only where the backend is [`Backend::chunked`].
    fn place(&mut self, _pieces: &[u8]) -> Result<(), BackendError> {
        Err(BackendError {
            kind: ErrorKind::Permanent,
            target: "remote".into(),
            op: "place pieces",
            message: "this remote stores no pieces written by other servers".into(),
        })
    }
    /// Make everything applied durable (fsync, completed upload).
    fn commit(self: Box<Self>) -> Result<(), BackendError>;
}

/// A remote where several servers store the bytes of one new version side
/// by side and one of them publishes it (the object layout's chunked PUT):
/// no byte of the version travels between servers, only where it lies.
pub trait ChunkedBackend: Send + Sync {
    fn chunk_writer(&self) -> Result<Box<dyn ChunkSink + '_>, BackendError>;
}

/// One server's bytes of a version being built by several.
pub trait ChunkSink {
    fn write(&mut self, off: u64, data: &[u8]) -> Result<(), BackendError>;
    /// Make the bytes durable; what the publishing server passes to
    /// [`EpochSink::place`].
    fn finish(self: Box<Self>) -> Result<Vec<u8>, BackendError>;
}

/// What an epoch does to a file's size, known before its bytes are sent: a
/// backend that writes whole objects (S3, the object layout) needs the final
/// size and which bytes of the previous version survive up front.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochShape {
    /// The epoch's open, and the epoch: recorded by object backends.
    pub epoch: EpochId,
    /// Which log the epoch came from (`paralog_log` `FileInventory::origin`:
    /// the job and when its node-local directory was made), so that an
    /// object backend tells its own earlier publish of this epoch (a drain
    /// that crashed before its progress record) from another run's epoch
    /// of the same number. Zero: unknown.
    pub origin: [u8; 16],
    /// The file is deleted at the end of the epoch.
    pub deleted: bool,
    /// What the epochs do to the file's size: the log's own rule
    /// (`SizeState::final_size`, `base_visible`), given the previous
    /// version's length.
    pub size: SizeState,
    /// Nothing of this file was drained yet in this job.
    pub fresh: bool,
    /// The version replaces the file whole (a rename onto it): nothing of
    /// the previous version survives, and the remote never shows it half
    /// written (POSIX: a hidden temporary renamed onto the name at
    /// `commit`; object remotes publish every version whole anyway).
    pub replace: bool,
    /// The permission bits the program created the file with, if known:
    /// a POSIX remote creates the file with them (less the server's
    /// umask: never wider); an existing file keeps its own. `None`: 0644.
    pub mode: Option<u32>,
    /// The times the program set last (`utimensat`): a POSIX remote gives
    /// them to the file; what they leave alone, and every time of a file
    /// without them, is the drain's own. Object remotes keep no times.
    pub times: Option<Times>,
}

/// A drained file read back from the remote (the source of a rename,
/// whose drained bytes the new name needs: docs/format.md, "Namespace
/// operations").
pub trait ReadBack {
    fn size(&self) -> u64;
    /// Exactly `buf.len()` bytes at `off`, which lie inside `len`.
    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<(), BackendError>;
    /// Its permission bits, where the remote keeps them (a rename keeps
    /// its source's).
    fn mode(&self) -> Option<u32> {
        None
    }
    /// Its access and modification times, where the remote keeps them (a
    /// rename keeps its source's).
    fn times(&self) -> Option<Times> {
        None
    }
}

/// A drained file in a file system this process reads.
struct FileBack(std::path::PathBuf, std::fs::File, u64);

impl ReadBack for FileBack {
    fn mode(&self) -> Option<u32> {
        use std::os::unix::fs::PermissionsExt;
        self.1
            .metadata()
            .ok()
            .map(|m| m.permissions().mode() & 0o7777)
    }

    fn times(&self) -> Option<Times> {
        use std::os::unix::fs::MetadataExt;
        let m = self.1.metadata().ok()?;
        let ns = |s: i64, n: i64| s.checked_mul(1_000_000_000)?.checked_add(n);
        Some(Times {
            atime: ns(m.atime(), m.atime_nsec()),
            mtime: ns(m.mtime(), m.mtime_nsec()),
        })
    }

    fn size(&self) -> u64 {
        self.2
    }

    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<(), BackendError> {
        use std::os::unix::fs::FileExt;
        self.1.read_exact_at(buf, off).map_err(|e| BackendError {
            kind: ErrorKind::Retryable,
            target: self.0.display().to_string(),
            op: "read back",
            message: e.to_string(),
        })
    }
}

pub trait Backend: Send + Sync + fmt::Debug {
    /// Start applying an epoch to the remote file at `rel` (relative to the
    /// remote root, already validated: no `..`, not absolute). The
    /// operations that follow are: a cut (`SetSize`) if `shape.size.base_cut`,
    /// the writes in offset order, then the final size operation; or
    /// `Delete`.
    fn begin(
        &self,
        rel: &[u8],
        shape: &EpochShape,
    ) -> Result<Box<dyn EpochSink + Send + '_>, BackendError>;
    /// Where `rel` lives, for messages.
    fn describe(&self, rel: &[u8]) -> String;
    /// The local path of `rel`, when the remote is a file system the
    /// capture library can read (for reads of drained data).
    fn local_path(&self, rel: &[u8]) -> Option<std::path::PathBuf>;
    /// The directory the remote keeps its files in, where it is a file
    /// system this process can reach (POSIX, the object layout's root); for
    /// `paralog doctor`'s write test. `None` for S3.
    fn root_dir(&self) -> Option<&std::path::Path> {
        None
    }
    /// The backend would rather receive the epochs of one open of a file
    /// together, as one new version, once the open ended (S3's default
    /// upload policy: one upload per close instead of one per sync).
    fn whole_opens(&self) -> bool {
        false
    }
    /// Whether several servers may write disjoint bytes of one file at
    /// once, and one of them its size (a POSIX file system: the nodes of a
    /// job drain their own bytes). Otherwise one server makes each new
    /// version from bytes gathered from the others.
    fn concurrent_writers(&self) -> bool {
        false
    }
    /// Whether the capture library can read what was drained (a POSIX
    /// remote, the object layout: plain files). When it cannot (S3: no
    /// network in the program), the server keeps the local records of
    /// drained epochs until the job ends, so that the program can reopen
    /// and read its file, and the first upload of a file in a job starts
    /// from an empty object, as the program saw it.
    fn readable_by_capture(&self) -> bool {
        true
    }
    /// Whether the remote can work as given, asked once before a run (an
    /// object layout whose root is missing): an error to stop at once with,
    /// rather than a drain that retries forever.
    fn check(&self) -> Result<(), BackendError> {
        Ok(())
    }
    /// Remove what crashed drains left on the remote that nothing refers
    /// to (the object layout's unreferenced chunks): `recover --gc`.
    /// Returns how many things were removed.
    fn collect_garbage(&self) -> Result<usize, BackendError> {
        Ok(0)
    }
    /// A round trip to the remote, for `paralog doctor` (S3: the bucket
    /// answers to the credentials found); by default, `check`.
    fn probe(&self) -> Result<(), BackendError> {
        self.check()
    }
    /// Clean up what an interrupted drain of `rel` left on the remote that
    /// the next drain would not replace (S3: its unfinished multipart
    /// uploads). Returns how many things were removed.
    fn abort_stale(&self, _rel: &[u8]) -> Result<usize, BackendError> {
        Ok(0)
    }
    /// The drained file `rel` read back; `Ok(None)`: it does not exist. By
    /// default through [`Backend::local_path`]; a remote without a way to
    /// read back refuses (S3: the server keeps a running job's drained
    /// records instead).
    fn read_back(&self, rel: &[u8]) -> Result<Option<Box<dyn ReadBack + '_>>, BackendError> {
        let refuse = |kind, message: String| BackendError {
            kind,
            target: self.describe(rel),
            op: "read back",
            message,
        };
        let Some(p) = self.local_path(rel) else {
            return Err(refuse(
                ErrorKind::Permanent,
                "this remote's drained files cannot be read back by the server".into(),
            ));
        };
        match std::fs::File::open(&p).and_then(|f| Ok((f.metadata()?.len(), f))) {
            Ok((len, f)) => Ok(Some(Box::new(FileBack(p, f, len)))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(refuse(ErrorKind::Retryable, e.to_string())),
        }
    }
    /// Where several servers can upload the parts of one new version
    /// (S3), the interface for it; otherwise one server makes each version.
    fn parted(&self) -> Option<&dyn PartedBackend> {
        None
    }
    /// Where several servers can store the bytes of one new version and
    /// one publish it (the object layout), the interface for it.
    fn chunked(&self) -> Option<&dyn ChunkedBackend> {
        None
    }
    /// The object layout itself, where this remote is one (its checkpoint
    /// sets are found through it: a drained file may be a set's member).
    fn objstore(&self) -> Option<&objstore::ObjStore> {
        None
    }
}
