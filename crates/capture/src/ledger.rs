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
//!
//! A process opens the ledger once per shared description and keeps it
//! (a private descriptor, `Keep`, checked before each use like the
//! placeholder's), so a captured write costs a lock and an unlock, not an
//! open and a close. POSIX record locks do not nest, and closing any
//! descriptor of the file drops them: a lock is held only inside one call
//! of capture's (under the state's mutex), and a ledger descriptor is
//! closed only with its description, never while one of its locks is held.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;

use libc::c_int;
use paralog_settings::Config;

use crate::inherit::Keep;

/// The directory of a job's ledgers under the node-local root (removed by
/// `paralog run` at the end of the job).
pub fn dir(cfg: &Config) -> PathBuf {
    paralog_log::layout::shared_ledgers(&cfg.local, &cfg.job)
}

/// Open (creating it) the ledger of the placeholder whose memfd has inode
/// `ino`, as a private descriptor; `None` if it cannot be made (the caller
/// then goes by what it knew).
pub fn open(cfg: &Config, ino: u64) -> Option<Keep> {
    open_named(cfg, &ino.to_string(), true)
}

/// Open the ledger `name` of the job's ledger directory (creating it if
/// `create`) as a private descriptor; `None` if it does not exist or
/// cannot be made.
pub fn open_named(cfg: &Config, name: &str, create: bool) -> Option<Keep> {
    let fd = open_file(cfg, name, create)?;
    let keep = Keep::of(fd);
    // SAFETY: the raw system call (never our wrapper) on the descriptor
    // opened above, now duplicated.
    unsafe {
        libc::syscall(libc::SYS_close, fd);
    }
    keep.fd().map(|_| keep)
}

/// The file `name` of the job's ledger directory (created 0600, and its
/// directory 0700, if `create`), opened read-write with the raw system
/// call (never our wrapper); the caller closes it.
pub fn open_file(cfg: &Config, name: &str, create: bool) -> Option<c_int> {
    let dir = dir(cfg);
    if create {
        let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
    }
    let path = CString::new(dir.join(name).as_os_str().as_bytes()).ok()?;
    let flags = libc::O_RDWR | libc::O_CLOEXEC | if create { libc::O_CREAT } else { 0 };
    // SAFETY: a raw system call with a NUL-terminated path.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            path.as_ptr(),
            flags,
            0o600,
        ) as c_int
    };
    (fd >= 0).then_some(fd)
}

/// A ledger, locked for as long as it is held (dropping it unlocks).
pub struct Ledger {
    keep: Keep,
}

impl Ledger {
    /// Lock the ledger kept in `keep`; `None` if it is not open (or no
    /// longer the ledger) or cannot be locked.
    pub fn lock(keep: Keep) -> Option<Ledger> {
        let fd = keep.fd()?;
        lock_op(fd, libc::F_WRLCK).then_some(Ledger { keep })
    }

    /// The accounted end; `None` for a new ledger.
    pub fn get(&self) -> Option<u64> {
        let fd = self.keep.fd()?;
        let mut b = [0u8; 8];
        // SAFETY: an 8-byte buffer; raw syscall on our own descriptor.
        let r = unsafe { libc::syscall(libc::SYS_pread64, fd, b.as_mut_ptr(), 8usize, 0i64) };
        (r == 8).then(|| u64::from_le_bytes(b))
    }

    pub fn set(&self, end: u64) {
        if let Some(fd) = self.keep.fd() {
            let b = end.to_le_bytes();
            // SAFETY: as above.
            unsafe {
                libc::syscall(libc::SYS_pwrite64, fd, b.as_ptr(), 8usize, 0i64);
            }
        }
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        // Only if the number is still the ledger: an unlock of another file
        // would drop a lock of the program's.
        if let Some(fd) = self.keep.fd() {
            lock_op(fd, libc::F_UNLCK);
        }
    }
}

/// A whole-file POSIX record lock operation, waiting for the lock.
fn lock_op(fd: c_int, kind: c_int) -> bool {
    // SAFETY: a zeroed flock filled in below; F_SETLKW on our own file.
    unsafe {
        let mut l: libc::flock = std::mem::zeroed();
        l.l_type = kind as i16;
        l.l_whence = libc::SEEK_SET as i16;
        loop {
            let r = libc::syscall(libc::SYS_fcntl, fd, libc::F_SETLKW, &l);
            if r == 0 || crate::state::errno() != libc::EINTR {
                return r == 0;
            }
        }
    }
}
