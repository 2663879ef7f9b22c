//! One rank's log of one open file: appends writes to the current epoch's
//! data log (small ones through the coalescing buffer), keeps the epoch's
//! extent map and size operations, and reads back the rank's own bytes.
//! Epochs are committed atomically by the protocol in `writer/commit.rs`
//! (format 2: one fdatasync of the data log per commit).
//!
//! Directories and the path record are created without fsyncs of their
//! own. On a journaling file system (ext4, xfs; tmpfs keeps nothing over a
//! crash anyway) the commit's fdatasync commits the journal transactions
//! that hold them too; elsewhere the writer remembers the directories that
//! changed and fsyncs them at the next commit ([`CommitSync`],
//! docs/format.md "What one fdatasync covers").

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use crate::durable;
use crate::error::{LogError, Result};
use crate::extent_map::{ExtentMap, Piece};
use crate::format::{FileIdent, Op, DATA_HEADER_LEN};
use crate::layout::{EpochFileKind, RankPaths};

mod commit;
mod data_log;
mod generation;
mod own_reads;
mod run;

pub use generation::next_generation;
pub(crate) use generation::next_generation_in;
use generation::{record_path, record_path_new, validate};
use own_reads::OwnPiece;
pub use own_reads::{ReadRange, ReadSource};

/// Tuning of the writer. The defaults suit HPC output: small writes are
/// gathered into 4 MiB log writes, larger ones go straight to the log.
#[derive(Debug, Clone, Copy)]
pub struct WriterConfig {
    /// Size of the coalescing buffer (bytes). 0 disables coalescing.
    pub coalesce_bytes: usize,
    /// Writes shorter than this are copied into the buffer.
    pub small_write: usize,
    /// How a commit is made durable (default: decided by the file system of
    /// the node-local root).
    pub commit_sync: CommitSync,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            coalesce_bytes: 4 << 20,
            small_write: 256 << 10,
            commit_sync: CommitSync::Auto,
        }
    }
}

/// How a local commit is made durable (docs/format.md, "What one
/// fdatasync covers").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitSync {
    /// [`CommitSync::Journal`] on ext2/3/4 (one magic number), xfs and
    /// tmpfs, [`CommitSync::Explicit`] on any other file system, by the
    /// `statfs` type of the node-local root when the log is created.
    Auto,
    /// One `fdatasync` of the data log after its commit record: the
    /// journal commits in order, so the directories created, the data log's
    /// name and the data are durable with the record.
    Journal,
    /// Correct on any file system: `fdatasync` of the data, then the commit
    /// record and a second `fdatasync`, then an fsync of every directory
    /// that gained an entry since the last commit.
    Explicit,
}

impl CommitSync {
    /// The policy for a node-local root at `root`, asked of the kernel once
    /// per root and process (a process creates a log per file it opens).
    pub fn for_root(root: &Path) -> CommitSync {
        static KNOWN: std::sync::Mutex<Vec<(std::path::PathBuf, CommitSync)>> =
            std::sync::Mutex::new(Vec::new());
        let mut known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, sync)) = known.iter().find(|(r, _)| r == root) {
            return *sync;
        }
        let sync = Self::of_file_system(root);
        known.push((root.to_path_buf(), sync));
        sync
    }

    fn of_file_system(root: &Path) -> CommitSync {
        const EXT_MAGIC: i64 = 0xEF53;
        const XFS_MAGIC: i64 = 0x5846_5342;
        const TMPFS_MAGIC: i64 = 0x0102_1994;
        let Ok(c) = std::ffi::CString::new(root.as_os_str().as_encoded_bytes()) else {
            return CommitSync::Explicit;
        };
        // SAFETY: statfs fills the struct it is given, from a NUL-terminated path.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
            return CommitSync::Explicit;
        }
        #[allow(clippy::unnecessary_cast)]
        match st.f_type as i64 {
            EXT_MAGIC | XFS_MAGIC | TMPFS_MAGIC => CommitSync::Journal,
            _ => CommitSync::Explicit,
        }
    }
}

/// Where a range of the current epoch's bytes lives in its data log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LogPiece {
    log_pos: u64,
    /// CRC-32C of exactly this range, when known without reading it back
    /// (a range cut out of a write has none until commit computes it).
    crc: Option<u32>,
    /// The phase the write was made in (see `EpochState::phase`).
    phase: u32,
    /// For a new write that continues its left neighbour in the file and in
    /// the log: the CRC of both together, computed by continuing the
    /// neighbour's CRC over the new bytes (cheap) rather than combining two
    /// CRCs (a few microseconds each: most of a 4 KiB append's cost).
    joined_crc: Option<u32>,
}

impl Piece for LogPiece {
    fn slice(&self, skip: u64, len: u64, full: u64) -> Self {
        LogPiece {
            log_pos: self.log_pos + skip,
            crc: if skip == 0 && len == full {
                self.crc
            } else {
                None
            },
            phase: self.phase,
            joined_crc: None,
        }
    }

    fn join(&self, len: u64, next: &Self, next_len: u64) -> Option<Self> {
        (self.phase == next.phase && self.log_pos + len == next.log_pos).then(|| LogPiece {
            log_pos: self.log_pos,
            crc: match (next.joined_crc, self.crc, next.crc) {
                (Some(j), Some(_), _) => Some(j),
                (_, Some(a), Some(b)) => Some(paralog_checksum::crc32c_combine(a, b, next_len)),
                _ => None,
            },
            phase: self.phase,
            joined_crc: None,
        })
    }
}

/// The result of a local commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalCommit {
    pub epoch: u64,
    pub extents: usize,
    pub data_bytes: u64,
}

#[derive(Default)]
struct EpochState {
    /// The data log, while open (it is closed after each local commit).
    data: Option<File>,
    /// The data log exists on disk.
    created: bool,
    /// Bytes of commit records in the data log (an epoch committed again
    /// after a failed agreement has its earlier records among its data).
    records: u64,
    /// Bytes of the holes that place large writes as in the file
    /// (`folio_aligned`): in the log's length, not data.
    holes: u64,
    /// A failed write may have left bytes after the log's end that could
    /// not be cut off: the commit cuts them before its record.
    tail_unknown: bool,
    /// Next free log position (buffered bytes included).
    log_end: u64,
    buf: Vec<u8>,
    map: ExtentMap<LogPiece>,
    /// Size operations with the phase each ends.
    size_ops: Vec<(u32, Op)>,
    /// The current phase: how many synchronizing points (collective calls
    /// that every rank of the file takes part in, size operations) this
    /// rank has passed in the epoch. Every rank counts the same points, so
    /// equal numbers mean the same moment of the program.
    phase: u32,
    /// Times the program set since its last change in the epoch.
    times: Option<crate::format::Times>,
    /// Small writes in the buffer or the log that are not yet in `map`
    /// and the own-bytes map (`writer/run.rs`).
    run: Option<run::Run>,
}

impl EpochState {
    fn buf_pos(&self) -> u64 {
        self.log_end - self.buf.len() as u64
    }

    /// The CRC of the range the map will glue a write at file offset `off`
    /// (log position `pos`, this phase) to, if it continues it: continued
    /// over the new bytes, not combined.
    fn continued_crc(&self, off: u64, pos: u64) -> Option<u32> {
        self.extended(off, pos).and_then(|l| l.crc)
    }

    /// The range of this phase that a write at file offset `off`, log
    /// position `pos`, would extend in both.
    fn extended(&self, off: u64, pos: u64) -> Option<&LogPiece> {
        self.map
            .ending_at(off)
            .filter(|(_, l_len, l)| l.phase == self.phase && l.log_pos + l_len == pos)
            .map(|(_, _, l)| l)
    }
}

/// The largest page-cache folio a large write is placed for (the PMD size
/// of x86-64 and of arm64 with 4 KiB pages).
const FOLIO_MAX: u64 = 2 << 20;

/// The piece a large write is checksummed and written in: the largest
/// folio (`folio_aligned`), half of these CPUs' L2. Measured side by side
/// with one `pwrite` of the whole (bench/append_phases.py --before, 28 Nov,
/// docs/benchmarks.md §7): 16 MiB writes on tmpfs took 1.3-1.6 ms less per
/// 64 MiB (the buffer no longer read twice from memory); 4 MiB writes, and
/// the disk, where the fsync's spread hides it, within the noise; 512 KiB
/// pieces cost more than one `pwrite` (more calls).
const LARGE_WRITE_PIECE: usize = FOLIO_MAX as usize;

/// Where a large write of `len` bytes at file offset `off` that extends no
/// range goes in a data log that ends at `end`: at the end, or past a hole
/// (never read: no extent points into it) that gives it the place it has
/// in the file modulo the largest folio it could fill, a power of two up
/// to `len` and 2 MiB. Why: the page cache of ext4 (Linux 6.16 and later)
/// and xfs builds folios as large as a write's alignment allows; 1 MiB
/// writes 4 KiB past a 1 MiB boundary (after the header) cost 12% more
/// CPU than the same writes on the boundary, and the log ran at 0.93x of
/// raw `pwrite` on ext4 (docs/benchmarks.md §1). The hole is shorter than
/// `len` and takes no block on a file system with sparse files.
fn folio_aligned(end: u64, off: u64, len: u64) -> u64 {
    let folio = FOLIO_MAX.min(1 << (63 - len.leading_zeros()));
    end + (off.wrapping_sub(end) & (folio - 1))
}

/// One rank's log of one open (generation) of one file.
pub struct RankLog {
    ident: FileIdent,
    rank: u32,
    comm_size: u32,
    cfg: WriterConfig,
    paths: RankPaths,
    epoch: u64,
    cur: EpochState,
    own: ExtentMap<OwnPiece>,
    /// A communicator of one whose every commit is a generation of its own
    /// (`single.rs`); the rank directory of its last commit.
    staged: Option<Option<PathBuf>>,
    /// [`CommitSync::Journal`] or [`CommitSync::Explicit`].
    sync: CommitSync,
    /// Explicit policy: directories that gained an entry since the last
    /// commit (fsynced at the commit, after the data).
    unsynced_dirs: Vec<PathBuf>,
    /// The rank directory exists (a one-process writer's next staging
    /// place is made when its next epoch first needs it).
    dirs_ready: bool,
    /// The mode the program created the file with: in every manifest of
    /// this log (the drain applies it only where it creates the file).
    create_mode: Option<u32>,
}

impl RankLog {
    /// Open the log of `ident` for `rank` under `root` at epoch 1, creating
    /// directories durably. The generation must be fresh for this rank: an
    /// existing data log or manifest of it is never overwritten.
    pub fn create(
        root: &Path,
        ident: FileIdent,
        rank: u32,
        comm_size: u32,
        cfg: WriterConfig,
    ) -> Result<RankLog> {
        validate(root, &ident, rank, comm_size)?;
        let paths = RankPaths::new(root, &ident.job, &ident.rel, ident.gen, rank);
        Self::create_at(root, ident, rank, comm_size, cfg, paths, false)
    }

    /// The log of a writer that agrees with nobody (a POSIX process): it
    /// writes into a staging directory, and each commit becomes the next
    /// generation of the file (`single.rs`). `ident.gen` is ignored.
    pub fn create_single(root: &Path, mut ident: FileIdent, cfg: WriterConfig) -> Result<RankLog> {
        ident.gen = crate::single::STAGED_GEN;
        validate(root, &ident, 0, 1)?;
        let named = RankPaths::new(root, &ident.job, &ident.rel, ident.gen, 0);
        let paths = crate::single::staging_paths(&named.file_dir, &named.job_dir);
        Self::create_at(root, ident, 0, 1, cfg, paths, true)
    }

    fn create_at(
        root: &Path,
        ident: FileIdent,
        rank: u32,
        comm_size: u32,
        cfg: WriterConfig,
        paths: RankPaths,
        staged: bool,
    ) -> Result<RankLog> {
        let sync = match cfg.commit_sync {
            CommitSync::Auto => CommitSync::for_root(root),
            other => other,
        };
        let mut log = RankLog {
            ident,
            rank,
            comm_size,
            cfg,
            paths,
            epoch: 1,
            cur: EpochState::default(),
            own: ExtentMap::new(),
            staged: staged.then_some(None),
            sync,
            unsynced_dirs: Vec::new(),
            dirs_ready: true,
            create_mode: None,
        };
        let file_dir = log.paths.file_dir.clone();
        let new_file_dir = log.create_dirs(root, &file_dir)?;
        if new_file_dir {
            // Made just now, by this process: no record to read yet.
            record_path_new(&file_dir, &log.ident, rank)?;
        } else {
            record_path(&file_dir, &log.ident, rank)?;
        }
        let rank_dir = log.paths.rank_dir.clone();
        if log.create_dirs(&file_dir, &rank_dir)? {
            // A directory made just now holds no records.
            return Ok(log);
        }
        for kind in [EpochFileKind::Data, EpochFileKind::Manifest] {
            let p = log.paths.epoch_file(1, kind);
            if p.exists() {
                return Err(LogError::Inconsistent {
                    path: p,
                    what: format!(
                        "generation {} of this file already has records; it is not fresh",
                        log.ident.gen
                    ),
                });
            }
        }
        Ok(log)
    }

    pub fn ident(&self) -> &FileIdent {
        &self.ident
    }

    pub fn rank(&self) -> u32 {
        self.rank
    }

    pub fn comm_size(&self) -> u32 {
        self.comm_size
    }

    /// The epoch currently being written (not yet globally committed).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn rank_dir(&self) -> &Path {
        &self.paths.rank_dir
    }

    /// Bytes of data written in the current epoch so far (including
    /// overwritten ones: the log is append-only).
    pub fn epoch_data_bytes(&self) -> u64 {
        self.cur
            .log_end
            .saturating_sub(DATA_HEADER_LEN + self.cur.records + self.cur.holes)
    }

    /// How this log's commits are made durable.
    pub fn commit_sync(&self) -> CommitSync {
        self.sync
    }

    /// Create `dir` and its missing parents below `base`; under the
    /// explicit policy remember the parents that gained an entry, to fsync
    /// them at the next commit. True if `dir` itself was made now.
    fn create_dirs(&mut self, base: &Path, dir: &Path) -> Result<bool> {
        let changed = durable::create_dirs(base, dir)?;
        let made = changed
            .last()
            .is_some_and(|p| Some(p.as_path()) == dir.parent());
        if self.sync == CommitSync::Explicit {
            self.unsynced_dirs.extend(changed);
        }
        Ok(made)
    }

    /// Record a write of `data` at file offset `off`. On error nothing of this
    /// write is recorded and earlier writes are kept.
    pub fn write_at(&mut self, off: u64, data: &[u8]) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let len = data.len() as u64;
        if off.checked_add(len).is_none_or(|end| end > i64::MAX as u64) {
            return Err(LogError::Io {
                path: self.paths.rank_dir.clone(),
                op: "write beyond the largest file offset",
                error: io::Error::from_raw_os_error(libc::EFBIG),
            });
        }
        self.ensure_data()?;
        self.cur.times = None;
        if data.len() < self.cfg.small_write && data.len() <= self.cfg.coalesce_bytes {
            if self.cur.buf.len() + data.len() > self.cfg.coalesce_bytes {
                self.flush()?;
            }
            if self.cur.buf.capacity() == 0 {
                self.cur.buf.reserve_exact(self.cfg.coalesce_bytes);
            }
            self.buffer_write(off, data);
            return Ok(());
        }
        // A large write goes from the caller's buffer to the log, after the
        // buffered bytes (the log's order) and the run (the maps' order).
        self.settle();
        self.flush()?;
        let end = self.cur.log_end;
        // A write that extends a range in both file and log stays with it
        // (one extent, its CRC continued); any other is placed as in the
        // file, where nothing ends.
        let (pos, seed) = match self.cur.extended(off, end) {
            Some(l) => (end, l.crc),
            None => (folio_aligned(end, off, len), None),
        };
        let phase = self.cur.phase;
        // Checksummed and written a piece at a time, so that the copy into
        // the page cache reads each piece from the cache the checksum just
        // brought it into: one pass over the program's buffer from memory,
        // not two (docs/benchmarks.md §7, "Where large appends' time
        // goes"). Pieces of the largest folio: each fills one when the
        // write is placed as in the file (`LARGE_WRITE_PIECE`).
        let mut crc = seed.unwrap_or(0);
        let mut at = pos;
        for piece in data.chunks(LARGE_WRITE_PIECE) {
            crc = paralog_checksum::crc32c_append(crc, piece);
            self.write_log(piece, at, end)?;
            at += piece.len() as u64;
        }
        self.cur.holes += pos - end;
        self.cur.log_end = pos + len;
        let (crc, joined_crc) = match seed {
            Some(_) => (None, Some(crc)),
            None => (Some(crc), None),
        };
        self.cur.map.insert(
            off,
            len,
            LogPiece {
                log_pos: pos,
                crc,
                phase,
                joined_crc,
            },
        );
        self.own.insert(
            off,
            len,
            OwnPiece {
                epoch: self.epoch,
                log_pos: pos,
            },
        );
        Ok(())
    }

    /// `ftruncate` / `MPI_File_set_size`: the file becomes exactly `size` long.
    pub fn set_size(&mut self, size: u64) {
        self.settle();
        self.cur.map.truncate(size);
        self.own.truncate(size);
        self.size_op(Op::SetSize(size));
    }

    /// `MPI_File_preallocate`, `fallocate`: the file becomes at least `size`
    /// long.
    pub fn preallocate(&mut self, size: u64) {
        self.size_op(Op::Preallocate(size));
    }

    /// `unlink`: the file stops existing. Later writes in the same epoch
    /// (which only a program holding the file open could make) recreate it.
    pub fn delete(&mut self) {
        self.settle();
        self.cur.map.truncate(0);
        self.own.truncate(0);
        self.size_op(Op::Delete);
    }

    /// `rename(source, this)`: the file becomes the source's content at
    /// the epoch `r` names; nothing written before in the epoch survives.
    pub fn rename_from(&mut self, r: crate::format::RenameRef) {
        self.settle();
        self.cur.map.truncate(0);
        self.own.truncate(0);
        self.size_op(Op::RenameFrom(r));
    }

    /// `rename(this, target)`: the file stops existing under this name
    /// (as `delete`), its content having gone to the target.
    pub fn renamed_to(&mut self, r: crate::format::RenameRef) {
        self.settle();
        self.cur.map.truncate(0);
        self.own.truncate(0);
        self.size_op(Op::RenamedTo(r));
    }

    /// The permission bits the program created the file with (its mode
    /// less its umask).
    pub fn set_create_mode(&mut self, mode: u32) {
        self.create_mode = Some(mode & 0o7777);
    }

    /// `utimensat` and its family: the file's times, unless it changes
    /// again in this epoch (then it is as new as its drain).
    pub fn set_times(&mut self, times: crate::format::Times) {
        self.cur.times = Some(self.cur.times.unwrap_or_default().then(times));
    }

    /// A size operation ends the current phase (it is collective in MPI).
    fn size_op(&mut self, op: Op) {
        self.cur.times = None;
        self.cur.size_ops.push((self.cur.phase, op));
        self.cur.phase = self.cur.phase.saturating_add(1);
    }

    /// A synchronizing point of the program that every rank of the file's
    /// communicator passes (a collective I/O call, a barrier, another
    /// collective over a communicator holding all of them): writes after it
    /// are ordered after every rank's writes before it.
    pub fn sync_point(&mut self) {
        self.cur.phase = self.cur.phase.saturating_add(1);
    }
}
