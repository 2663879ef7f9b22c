//! Where a rank's manifest of an epoch is, in either format, and the one
//! way to read it: format 1 keeps it in the file `e<N>.manifest`, format 2
//! in the data log's commit record (`format/commit.rs`), which the scan
//! finds with a read of the data log's header and of its tail. Everything
//! that reads manifests (the inventory, the cluster summary that ships their
//! bytes, inspect) goes through [`read_rank_manifest`].

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::cache::ScanCache;
use crate::error::{IoContext, LogError, Result};
use crate::format::{
    decode_committed_manifest, CommitTrailer, DataHeader, Manifest, DATA_HEADER_USED, FORMAT_V1,
    FORMAT_VERSION, TRAILER_LEN,
};
use crate::layout::{self, EpochFileKind};

/// Where one rank's manifest of one epoch is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManifestAt {
    /// Format 1: the file `e<N>.manifest`.
    File,
    /// Format 2: the commit record at the end of the data log `e<N>.data`.
    Log { offset: u64, len: u32 },
}

/// Where a manifest was read from: the file holding it (the manifest file,
/// or the data log), its offset there and its format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestLoc {
    pub path: PathBuf,
    pub offset: u64,
    pub version: u16,
}

impl ManifestLoc {
    /// Where the manifest of `epoch` in `rank_dir` is, for each format.
    pub fn new(rank_dir: &Path, epoch: u64, at: ManifestAt) -> ManifestLoc {
        match at {
            ManifestAt::File => ManifestLoc {
                path: rank_dir.join(layout::epoch_file_name(epoch, EpochFileKind::Manifest)),
                offset: 0,
                version: FORMAT_V1,
            },
            ManifestAt::Log { offset, .. } => ManifestLoc {
                path: rank_dir.join(layout::epoch_file_name(epoch, EpochFileKind::Data)),
                offset,
                version: FORMAT_VERSION,
            },
        }
    }

    /// Decode manifest bytes read from here: a manifest file must be of
    /// format 1, a commit record's manifest of format 2 with its data
    /// ending where the record begins. Errors name the file and the offset
    /// in it.
    pub fn decode(&self, bytes: &[u8]) -> Result<Manifest> {
        if self.version == FORMAT_V1 {
            let (m, version) = Manifest::decode_version(bytes, &self.path)?;
            if version != FORMAT_V1 {
                return Err(LogError::Corrupt {
                    path: self.path.clone(),
                    offset: 8,
                    what: format!(
                        "a manifest file of format {version} (format 2 keeps manifests in the data log)"
                    ),
                });
            }
            return Ok(m);
        }
        decode_committed_manifest(bytes, self.offset, &self.path)
    }
}

/// What a data log says about its local commit.
#[derive(Debug)]
pub(crate) enum Probe {
    /// A format-1 data log: its manifest, if any, is a file of its own.
    V1,
    /// The header cannot be read (a log being created, or a torn or
    /// damaged one): a manifest file, if any, decides (format 1); without
    /// one the epoch was not committed here.
    NoHeader(LogError),
    /// Format 2 with a valid commit record.
    Committed {
        header: DataHeader,
        offset: u64,
        manifest: Vec<u8>,
    },
    /// Format 2 without a valid commit record: its commit did not finish
    /// (or the record was damaged). The error names the offset.
    Torn(LogError),
}

impl Probe {
    /// A copy, for the outcomes that are not errors (the scan cache keeps
    /// only those).
    pub(crate) fn try_clone(&self) -> Option<Probe> {
        match self {
            Probe::V1 => Some(Probe::V1),
            Probe::Committed {
                header,
                offset,
                manifest,
            } => Some(Probe::Committed {
                header: *header,
                offset: *offset,
                manifest: manifest.clone(),
            }),
            Probe::NoHeader(_) | Probe::Torn(_) => None,
        }
    }
}

/// A data log this small is read whole in one `pread` (header and commit
/// record together); a larger one in two (the header, the tail).
const READ_WHOLE: u64 = 16 << 10;
/// How much of a large data log's tail is read at once: the trailer and,
/// usually, the manifest before it.
const TAIL_READ: u64 = 8 << 10;

/// Read a data log's header and, for format 2, its commit record. `None`:
/// the data log does not exist (any more). I/O errors other than a short
/// file are errors; what the bytes say is in the [`Probe`].
pub(crate) fn probe_data_log(path: &Path) -> Result<Option<(u64, Probe)>> {
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).ctx("open data log", path),
    };
    let len = f.metadata().ctx("stat", path)?.len();
    let probe = probe_open(&f, len, path)?;
    Ok(Some((len, probe)))
}

fn probe_open(f: &File, len: u64, path: &Path) -> Result<Probe> {
    // The whole log, or its head and its tail (starting at `tail_at`).
    let mut head = Vec::new();
    let (tail, tail_at) = if len <= READ_WHOLE {
        let mut all = vec![0u8; len as usize];
        if !read_at(f, &mut all, 0, path)? {
            return Ok(Probe::NoHeader(short(path, 0)));
        }
        (all, 0)
    } else {
        head.resize(DATA_HEADER_USED, 0);
        let tail_at = len - TAIL_READ.min(len - DATA_HEADER_USED as u64);
        let mut tail = vec![0u8; (len - tail_at) as usize];
        if !read_at(f, &mut head, 0, path)? || !read_at(f, &mut tail, tail_at, path)? {
            return Ok(Probe::NoHeader(short(path, 0)));
        }
        (tail, tail_at)
    };
    let head: &[u8] = if tail_at == 0 { &tail } else { &head };
    let header_bytes = &head[..head.len().min(DATA_HEADER_USED)];
    let (header, version) = match DataHeader::decode_version(header_bytes, path) {
        Ok(h) => h,
        Err(e) => return Ok(Probe::NoHeader(e)),
    };
    if version == FORMAT_V1 {
        return Ok(Probe::V1);
    }
    let trailer = &tail[tail.len().saturating_sub(TRAILER_LEN)..];
    let t = match CommitTrailer::decode(trailer, len, path) {
        Ok(t) => t,
        Err(e) => return Ok(Probe::Torn(e)),
    };
    let manifest = if t.manifest_off >= tail_at {
        let from = (t.manifest_off - tail_at) as usize;
        tail[from..from + t.manifest_len as usize].to_vec()
    } else {
        let mut m = vec![0u8; t.manifest_len as usize];
        if !read_at(f, &mut m, t.manifest_off, path)? {
            return Ok(Probe::Torn(short(path, t.manifest_off)));
        }
        m
    };
    if let Err(e) = t.check(header_bytes, &manifest, trailer, path) {
        return Ok(Probe::Torn(e));
    }
    Ok(Probe::Committed {
        header,
        offset: t.manifest_off,
        manifest,
    })
}

/// `pread` exactly; `false` if the file ended first (it shrank meanwhile).
fn read_at(f: &File, buf: &mut [u8], off: u64, path: &Path) -> Result<bool> {
    match f.read_exact_at(buf, off) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e).ctx("read data log", path),
    }
}

fn short(path: &Path, offset: u64) -> LogError {
    LogError::Corrupt {
        path: path.to_path_buf(),
        offset,
        what: "data log ended while its header or commit record was read".into(),
    }
}

/// One rank's record of one epoch, as [`read_rank_manifest`] found it.
#[derive(Debug)]
pub enum RankRecord {
    /// The manifest's bytes and where they are.
    Found { bytes: Vec<u8>, loc: ManifestLoc },
    /// A data log without a valid commit record (format 2), or whose header
    /// cannot be read, and no manifest file: not committed here, unless
    /// something else proves it was (then this is damage).
    Torn(LogError),
    /// No manifest and no data log.
    Missing,
}

/// Read the manifest of `epoch` in the rank directory `rank_dir`, in
/// whichever format it was written: the data log's commit record if the
/// data log is of format 2 (a manifest file beside it is not read), else
/// the manifest file.
pub fn read_rank_manifest(rank_dir: &Path, epoch: u64) -> Result<RankRecord> {
    read_rank_manifest_cached(rank_dir, epoch, &mut ScanCache::off())
}

/// [`read_rank_manifest`] through a scan cache: a data log or manifest
/// file unchanged since the cache read it is not read again.
pub fn read_rank_manifest_cached(
    rank_dir: &Path,
    epoch: u64,
    cache: &mut ScanCache,
) -> Result<RankRecord> {
    let data = rank_dir.join(layout::epoch_file_name(epoch, EpochFileKind::Data));
    let no_header = match cache.probe(&data)? {
        Some((
            _,
            Probe::Committed {
                offset, manifest, ..
            },
        )) => {
            return Ok(RankRecord::Found {
                bytes: manifest,
                loc: ManifestLoc {
                    path: data,
                    offset,
                    version: FORMAT_VERSION,
                },
            })
        }
        Some((_, Probe::Torn(e))) => return Ok(RankRecord::Torn(e)),
        Some((_, Probe::NoHeader(e))) => Some(e),
        Some((_, Probe::V1)) | None => None,
    };
    let loc = ManifestLoc::new(rank_dir, epoch, ManifestAt::File);
    match cache.read(&loc.path) {
        Ok(bytes) => Ok(RankRecord::Found { bytes, loc }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(match no_header {
            Some(e) => RankRecord::Torn(e),
            None => RankRecord::Missing,
        }),
        Err(e) => Err(e).ctx("read manifest", &loc.path),
    }
}
