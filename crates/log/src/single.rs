//! Writers that are a communicator of one: a plain POSIX process, or an MPI
//! rank writing a shared file through `open`/`pwrite`. Several of them may
//! write one file at once, and none agrees with the others, so each commit
//! (`fsync`, the last `close`) is an epoch of its own, ordered among the
//! file's epochs by the moment it became durable on this node.
//!
//! How: the writer logs into a private staging directory
//! (`<file>/.stage-<pid>-<ns>-<n>/r0000000`), named so that no scan takes it
//! for an open. Its commit takes the file's commit lock, reserves the next
//! generation (`mkdir g<G>`), stamps G into the data log's header, appends
//! the commit record and `fdatasync`s the data log (which makes `g<G>`
//! durable too on a journaling file system), and renames the rank directory
//! into `g<G>` without fsync: the epoch appears whole, as generation G's
//! only epoch, after every generation committed before it. The lock spans
//! reservation and rename, so no later generation can be committed while
//! an earlier one is still empty: the rule that an open with committed
//! successors ended in a crash holds.
//!
//! A crash after the fdatasync and before the rename is durable leaves the
//! committed epoch in its staging directory and `g<G>` empty. Readers take
//! such a staging directory (a valid commit record naming G, no rank 0 in
//! G, no commit in progress) as G's rank 0 and read it in place
//! (`reader/inventory/`); the server and `recover` finish the rename
//! ([`finish_publishes`]); gc keeps it.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::durable::{self, FILE_MODE};
use crate::error::{IoContext, Result};
use crate::format::DataHeader;
use crate::layout::{self, RankPaths};

/// The generation a staged log carries until its commit names the real one.
pub const STAGED_GEN: u64 = u64::MAX >> 1;

pub const LOCK_FILE: &str = "commit.lock";
const STAGE_PREFIX: &str = ".stage-";

/// Whether a name in a file directory is a staging directory.
pub fn is_staging_name(name: &str) -> bool {
    name.starts_with(STAGE_PREFIX)
}

/// A fresh staging place for one writer's next epoch.
pub fn staging_paths(file_dir: &Path, job_dir: &Path) -> RankPaths {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let gen_dir = file_dir.join(format!("{STAGE_PREFIX}{}-{nanos}-{n}", std::process::id()));
    RankPaths {
        job_dir: job_dir.to_path_buf(),
        file_dir: file_dir.to_path_buf(),
        rank_dir: gen_dir.join(layout::rank_dir_name(0)),
        gen_dir,
    }
}

/// The file's commit lock, held until dropped (flock: released by the
/// kernel if the process dies holding it).
pub struct CommitLock(#[allow(dead_code)] File);

pub fn lock(file_dir: &Path) -> Result<CommitLock> {
    let path = file_dir.join(LOCK_FILE);
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(FILE_MODE)
        .open(&path)
        .ctx("open commit lock", &path)?;
    loop {
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(CommitLock(f));
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e).ctx("lock", &path);
        }
    }
}

/// Reserve the next generation of a file: `mkdir g<G>` for the first G
/// above every existing one. Under the commit lock, so that a generation
/// reserved by one writer is filled before a later one is committed.
pub fn reserve_generation(file_dir: &Path) -> Result<u64> {
    let mut gen = crate::writer::next_generation_in(file_dir)?;
    loop {
        let dir = file_dir.join(layout::gen_dir_name(gen));
        match std::fs::DirBuilder::new()
            .mode(durable::DIR_MODE)
            .create(&dir)
        {
            Ok(()) => return Ok(gen),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => gen += 1,
            Err(e) => return Err(e).ctx("create directory", &dir),
        }
    }
}

/// Stamp the committed generation into a staged data log's header.
pub fn stamp_header(f: &File, path: &Path, header: DataHeader) -> Result<()> {
    durable::pwrite_all(f, &header.encode(), 0, path)
}

/// Move a committed staging rank directory into its generation (no fsync:
/// its commit is durable in the staging directory already, which readers
/// take for the generation's until the rename is), and remove the emptied
/// staging directory. Returns the new paths.
pub fn publish(staged: &RankPaths, gen: u64) -> Result<RankPaths> {
    let gen_dir = staged.file_dir.join(layout::gen_dir_name(gen));
    let rank_dir = gen_dir.join(layout::rank_dir_name(0));
    std::fs::rename(&staged.rank_dir, &rank_dir).ctx("rename into its generation", &rank_dir)?;
    remove_staging(&staged.gen_dir);
    Ok(RankPaths {
        job_dir: staged.job_dir.clone(),
        file_dir: staged.file_dir.clone(),
        gen_dir,
        rank_dir,
    })
}

/// Remove a staging directory and what it holds (only once nothing
/// committed is in it: a commit moves its records out).
pub fn remove_staging(gen_dir: &Path) {
    if gen_dir
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(is_staging_name)
    {
        // After a commit moved its rank directory out the staging directory
        // is empty: one rmdir, not a listing and a walk (a new file per
        // write pays this at every close).
        if std::fs::remove_dir(gen_dir).is_err() {
            let _ = std::fs::remove_dir_all(gen_dir);
        }
    }
}

/// Staging directories of a file directory (for gc and inspect).
pub fn staging_dirs(file_dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(file_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e).ctx("list", file_dir),
    };
    for entry in entries {
        let entry = entry.ctx("list", file_dir)?;
        if entry.file_name().to_str().is_some_and(is_staging_name) {
            out.push(entry.path());
        }
    }
    Ok(out)
}

/// Whether a one-process writer holds the file's commit lock (a commit is
/// in progress: a staging directory with a valid commit record is about to
/// be renamed). A lock that cannot be tried counts as free.
pub fn commit_in_progress(file_dir: &Path) -> bool {
    let Ok(f) = File::open(file_dir.join(LOCK_FILE)) else {
        return false;
    };
    // SAFETY: flock on a descriptor we own; closing it releases the lock.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
    rc != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EWOULDBLOCK)
}

/// Finish the publication of every committed epoch the scan found in a
/// staging directory (a writer stopped between its commit and its rename):
/// under the commit lock, check it again and rename it into its
/// generation, durably this time (fsync of the generation and file
/// directories). Returns how many were moved; the caller scans again.
/// For the server and `recover`, never while the writer could still
/// rename it itself (the lock says).
pub fn finish_publishes(file: &crate::FileInventory) -> Result<usize> {
    let mut moved = 0;
    for (&gen, g) in &file.gens {
        let Some(r) = g.ranks.get(&0).filter(|r| r.staged) else {
            continue;
        };
        let _lock = lock(&file.dir)?;
        let stage = r
            .dir
            .parent()
            .expect("a staging rank directory has a parent");
        let data = r
            .dir
            .join(layout::epoch_file_name(1, layout::EpochFileKind::Data));
        // Again, under the lock: still there, still committed, still G's.
        let still = matches!(
            crate::reader::probe_data_log(&data)?,
            Some((_, crate::reader::Probe::Committed { header, .. })) if header.gen == gen
        );
        let taken = file
            .dir
            .join(layout::gen_dir_name(gen))
            .join(layout::rank_dir_name(0))
            .exists();
        if !still || taken {
            continue;
        }
        let gen_dir = file.dir.join(layout::gen_dir_name(gen));
        match std::fs::DirBuilder::new()
            .mode(durable::DIR_MODE)
            .create(&gen_dir)
        {
            Ok(()) => durable::sync_dir(&file.dir)?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e).ctx("create directory", &gen_dir),
        }
        let rank_dir = gen_dir.join(layout::rank_dir_name(0));
        std::fs::rename(&r.dir, &rank_dir).ctx("rename into its generation", &rank_dir)?;
        durable::sync_dir(&gen_dir)?;
        durable::sync_dir(stage)?;
        remove_staging(stage);
        durable::sync_dir(&file.dir)?;
        moved += 1;
    }
    Ok(moved)
}
