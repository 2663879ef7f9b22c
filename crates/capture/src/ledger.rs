//! The accounted end of a shared placeholder: the offset up to which the
//! bytes written through it are in some process's log. Every process that
//! shares the placeholder (a shell and its commands, `make -j` children
//! writing to one redirected stdout) moves the shared file offset, through
//! capture (its writes go to its log and leave no byte in the memfd) or
//! past it (glibc's stdio: the bytes land in the memfd). A process alone
//! cannot tell where the bytes past capture begin: the one it knew may be
//! stale, and harvesting from it would log another process's range as
//! zeros. So the accounted end is kept where all of them find it: a file
//! named by the memfd's inode in `<local>/.paralog-shared-<job>`, read and
//! moved under a POSIX record lock (per process, unlike `flock` and OFD
//! locks, which the sharing processes would hold in common).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;

use paralog_settings::Config;

/// The directory of a job's ledgers under the node-local root (removed by
/// `paralog run` at the end of the job).
pub fn dir(cfg: &Config) -> PathBuf {
    paralog_log::layout::shared_ledgers(&cfg.local, &cfg.job)
}

/// A ledger, locked for as long as it is held.
pub struct Ledger {
    file: File,
}

impl Ledger {
    /// The ledger of the placeholder whose memfd has inode `ino`, locked;
    /// `None` if it cannot be made (the caller then goes by what it knew).
    pub fn lock(cfg: &Config, ino: u64) -> Option<Ledger> {
        let dir = dir(cfg);
        let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(dir.join(ino.to_string()))
            .ok()?;
        // SAFETY: a zeroed flock filled in below; F_SETLKW on our own file.
        let ok = unsafe {
            let mut l: libc::flock = std::mem::zeroed();
            l.l_type = libc::F_WRLCK as i16;
            l.l_whence = libc::SEEK_SET as i16;
            loop {
                let r = libc::fcntl(file.as_raw_fd(), libc::F_SETLKW, &l);
                if r == 0 || crate::state::errno() != libc::EINTR {
                    break r == 0;
                }
            }
        };
        ok.then_some(Ledger { file })
    }

    /// The accounted end; `None` for a new ledger.
    pub fn get(&self) -> Option<u64> {
        let mut b = [0u8; 8];
        self.file.read_exact_at(&mut b, 0).ok()?;
        Some(u64::from_le_bytes(b))
    }

    pub fn set(&self, end: u64) {
        let _ = self.file.write_all_at(&end.to_le_bytes(), 0);
    }
}
// Closing the file releases the lock.
