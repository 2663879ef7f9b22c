//! The stat family on captured files: the placeholder descriptor is an empty
//! memfd, so sizes are answered from what capture knows (HDF5 compares the
//! file size with its own bookkeeping; MPI_File_get_size asks lseek/fstat).

#![allow(clippy::missing_safety_doc)]

use std::ffi::CStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use libc::{c_char, c_int, c_uint};

use crate::guard::Guard;
use paralog_log::format::Times;

use crate::posix::{logged_stat, prefix_path};
use crate::state::{is_captured, lock, resolve, set_errno};
use crate::{entry_points, pass};

/// (size, an open placeholder to take the rest of the answer from, path,
/// its times (now if this process changed it in the current epoch, else the
/// committed view's), its permission bits in the committed view).
type Known = (
    u64,
    Option<c_int>,
    std::path::PathBuf,
    Option<Times>,
    Option<u32>,
);

fn known(fd: Option<c_int>, id: Option<u64>) -> Option<Known> {
    let slot = lock();
    let st = slot.as_ref()?;
    let id = match (fd, id) {
        (Some(fd), _) => st.fds.get(&fd)?.handle,
        (None, Some(id)) => id,
        (None, None) => return None,
    };
    let h = st.handles.get(&id)?;
    let any_fd = fd.or_else(|| st.fds.iter().find(|(_, e)| e.handle == id).map(|(&f, _)| f));
    // Written here in this epoch: now. Otherwise the committed view's times
    // (those another process set or its bytes reached the log at, or the
    // drained file's), never the placeholder's own (its creation: now), which
    // `gzip`, `tar` and `make` would copy or compare.
    let times = match h.dirty {
        true => {
            let now = crate::times::now_ns();
            Some(Times {
                atime: Some(now),
                mtime: Some(now),
            })
        }
        false => match &h.view {
            Some(v) => v.times(),
            // Dropped at the last commit: rebuilt from the log.
            None => st.committed(&h.path).ok().and_then(|c| c.view.times()),
        },
    };
    let mode = h.view.as_ref().and_then(|v| v.mode());
    Some((h.size, any_fd, h.path.clone(), times, mode))
}

/// Permission bits of a captured file: what this process created it with
/// or `chmod` set, else the committed view's (`logged`: the creation mode
/// another process recorded, or the drained file's), else 0644.
fn mode_of(path: &Path, logged: Option<u32>) -> u32 {
    lock()
        .as_ref()
        .and_then(|st| st.modes.get(path).copied())
        .or(logged)
        .unwrap_or(0o644)
}

/// The identity of a captured file: one `st_dev`/`st_ino` per path for as
/// long as capture answers for it, whichever open or call asks (HDF5 finds
/// a file it already has open by comparing them). The device is the
/// prefix's; the inode a hash of the path with the top bit set, a range
/// that real inode numbers do not reach.
fn identity(path: &Path) -> (u64, u64) {
    // Taken once, whatever the answer: a file's device must not change
    // while capture answers for it.
    static DEV: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let dev = *DEV.get_or_init(|| prefix_stat().map_or(0, |st| st.st_dev));
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in path.as_os_str().as_bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    (dev, h | 1 << 63)
}

/// The prefix directory's stat, taken once per process: it fills what
/// capture does not know of a captured file that has no placeholder open
/// (owner, block size) and gives every captured file its device. Asked
/// once because on sshfs or NFS each ask is a round trip, and ROMIO
/// `lstat`s every file at `MPI_File_open` before it opens it.
fn prefix_stat() -> Option<libc::stat> {
    static PREFIX: std::sync::OnceLock<libc::stat> = std::sync::OnceLock::new();
    if let Some(st) = PREFIX.get() {
        return Some(*st);
    }
    // Kept only once it exists: a program may make its prefix after it
    // started (then the next ask tries again).
    let crate::settings::Settings::On(c) = crate::state::settings() else {
        return None;
    };
    let p = std::ffi::CString::new(c.prefix.as_os_str().as_bytes()).ok()?;
    // SAFETY: a zeroed stat buffer filled by the kernel.
    let st = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        let rc = libc::syscall(libc::SYS_newfstatat, libc::AT_FDCWD, p.as_ptr(), &mut st, 0);
        (rc == 0).then_some(st)?
    };
    Some(*PREFIX.get_or_init(|| st))
}

/// The times stat answers: those the program set in this process, on top
/// of what the log knows.
fn times_of(path: &Path, known: Option<Times>) -> Option<Times> {
    let set = lock().as_ref().and_then(|st| st.times.get(path).copied());
    Times::layered(known, set)
}

macro_rules! patch {
    ($buf:expr, $size:expr, $path:expr, $times:expr, $mode:expr) => {{
        let b = &mut *$buf;
        if let Some(t) = times_of($path, $times) {
            if let Some(a) = t.atime {
                b.st_atime = a.div_euclid(1_000_000_000) as _;
                b.st_atime_nsec = a.rem_euclid(1_000_000_000) as _;
            }
            if let Some(m) = t.mtime {
                b.st_mtime = m.div_euclid(1_000_000_000) as _;
                b.st_mtime_nsec = m.rem_euclid(1_000_000_000) as _;
                b.st_ctime = b.st_mtime;
                b.st_ctime_nsec = b.st_mtime_nsec;
            }
        }
        let (dev, ino) = identity($path);
        b.st_dev = dev as _;
        b.st_ino = ino as _;
        b.st_size = $size as _;
        b.st_blocks = ($size as u64).div_ceil(512) as _;
        b.st_mode = libc::S_IFREG | mode_of($path, $mode);
        b.st_nlink = 1;
    }};
}

/// Fill `buf` for a captured file: kernel answer for the placeholder (or the
/// prefix directory when no placeholder is open), then our size and type.
unsafe fn fill_stat(
    (size, fd, path, times, mode): (u64, Option<c_int>, &Path, Option<Times>, Option<u32>),
    buf: *mut libc::stat,
) -> c_int {
    let rc = match fd {
        Some(fd) => libc::syscall(libc::SYS_fstat, fd, buf) as c_int,
        None => match prefix_stat() {
            Some(st) => {
                *buf = st;
                0
            }
            None => -1,
        },
    };
    if rc != 0 {
        set_errno(libc::EIO);
        return -1;
    }
    patch!(buf, size, path, times, mode);
    0
}

unsafe fn by_fd(fd: c_int, buf: *mut libc::stat) -> Option<c_int> {
    if !is_captured(fd) {
        // A dead directory standing for one only the remote has: that one.
        let abs = crate::remotefd::path_of(fd)?;
        let _g = Guard::enter()?;
        return stand_in_stat(&abs, buf).or_else(|| {
            set_errno(libc::ENOENT);
            Some(-1)
        });
    }
    let _g = Guard::enter()?;
    let (size, fd, path, times, mode) = known(Some(fd), None)?;
    Some(fill_stat((size, fd, &path, times, mode), buf))
}

/// Where a symbolic link in the prefix leads (links of links followed, as
/// the kernel would, up to its limit of 40).
fn link_target(abs: &Path) -> Option<std::path::PathBuf> {
    let mut at = abs.to_path_buf();
    for _ in 0..40 {
        if !crate::posix::real_link(&at) {
            return Some(at);
        }
        let to = std::fs::read_link(&at).ok()?;
        at = resolve(libc::AT_FDCWD, &at.parent()?.join(to))?;
    }
    None
}

/// stat (`follow`) or lstat of a path.
unsafe fn by_path(path: *const c_char, buf: *mut libc::stat, follow: bool) -> Option<c_int> {
    // A name relative to a dead directory (remotefd.rs): by its path.
    if let Some(c) = crate::remotefd::absolute(libc::AT_FDCWD, path) {
        return Some(
            by_path(c.as_ptr(), buf, follow).unwrap_or_else(|| real_stat(&c, buf, follow)),
        );
    }
    let (_g, abs, id) = prefix_path(path)?;
    // A symbolic link in the prefix: lstat answers the link itself (the
    // real one), stat the file it leads to, which may be capture's.
    if id.is_none() && crate::posix::real_link(&abs) {
        if !follow {
            return None;
        }
        let to = std::ffi::CString::new(link_target(&abs)?.as_os_str().as_bytes()).ok()?;
        drop(_g);
        return by_path(to.as_ptr(), buf, true);
    }
    if let Some(id) = id {
        let (size, fd, path, times, mode) = known(None, Some(id))?;
        return Some(fill_stat((size, fd, &path, times, mode), buf));
    }
    // Closed, but committed epochs not yet drained: the log answers.
    match logged_stat(&abs) {
        Ok(None) => stand_in_stat(&abs, buf),
        Ok(Some((true, size, times, mode))) => {
            Some(fill_stat((size, None, &abs, times, mode), buf))
        }
        Ok(Some((false, ..))) => {
            set_errno(libc::ENOENT);
            Some(-1)
        }
        Err(e) => {
            set_errno(e);
            Some(-1)
        }
    }
}

/// A directory only the remote holds (a new job on a fresh prefix,
/// `remotedir`): the remote's directory answers; `None` (the real file
/// system answers) when the prefix has the name or the remote has no
/// directory there.
/// Its identity is its own (`identity`), whatever stands in for it: the
/// directory of members `set/node0` is answered from its set directory,
/// and walks (`fts`) take two directories with one identity for a loop;
/// its device is the prefix's, so that `find -xdev` and `du -x` do not
/// stop at it.
unsafe fn stand_in_stat(abs: &Path, buf: *mut libc::stat) -> Option<c_int> {
    let dir = crate::remotedir::for_missing(abs)?;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let rc = libc::syscall(libc::SYS_newfstatat, libc::AT_FDCWD, c.as_ptr(), buf, 0) as c_int;
    if rc != 0 {
        return None;
    }
    let (dev, ino) = identity(abs);
    (*buf).st_dev = dev as _;
    (*buf).st_ino = ino as _;
    Some(0)
}

unsafe fn by_at(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    buf: *mut libc::stat,
) -> Option<c_int> {
    if path.is_null() {
        return None;
    }
    let p = CStr::from_ptr(path).to_bytes();
    if p.is_empty() && flags & libc::AT_EMPTY_PATH != 0 {
        return by_fd(dirfd, buf);
    }
    let follow = flags & libc::AT_SYMLINK_NOFOLLOW == 0;
    if dirfd == libc::AT_FDCWD || p.first() == Some(&b'/') {
        return by_path(path, buf, follow);
    }
    let _g = Guard::enter()?;
    let abs = resolve(dirfd, Path::new(std::ffi::OsStr::from_bytes(p)))?;
    let c = std::ffi::CString::new(abs.as_os_str().as_bytes()).ok()?;
    drop(_g);
    let ours = by_path(c.as_ptr(), buf, follow);
    // Relative to a dead directory (remotefd.rs), the kernel must not see
    // the relative name.
    match crate::remotefd::path_of(dirfd) {
        Some(_) => Some(ours.unwrap_or_else(|| real_stat(&c, buf, follow))),
        None => ours,
    }
}

/// The kernel's answer for an absolute path.
unsafe fn real_stat(c: &std::ffi::CStr, buf: *mut libc::stat, follow: bool) -> c_int {
    let flags = if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW };
    libc::syscall(libc::SYS_newfstatat, libc::AT_FDCWD, c.as_ptr(), buf, flags) as c_int
}

// The stat family: `*64` twins fill the same layout on the 64-bit ABIs.
entry_points! {
    fn stat(path: *const c_char, buf: *mut libc::stat)
    | fn stat64(path: *const c_char, buf: *mut libc::stat64) -> c_int {
        by_path(path, buf.cast(), true)
    } else -1;
    fn lstat(path: *const c_char, buf: *mut libc::stat)
    | fn lstat64(path: *const c_char, buf: *mut libc::stat64) -> c_int {
        by_path(path, buf.cast(), false)
    } else -1;
    fn fstat(fd: c_int, buf: *mut libc::stat)
    | fn fstat64(fd: c_int, buf: *mut libc::stat64) -> c_int {
        by_fd(fd, buf.cast())
    } else -1;
    fn fstatat(dirfd: c_int, path: *const c_char, buf: *mut libc::stat, flags: c_int)
    | fn fstatat64(dirfd: c_int, path: *const c_char, buf: *mut libc::stat64, flags: c_int) -> c_int {
        by_at(dirfd, path, flags, buf.cast())
    } else -1;
    fn __xstat(ver: c_int, path: *const c_char, buf: *mut libc::stat)
    | fn __xstat64(ver: c_int, path: *const c_char, buf: *mut libc::stat64) -> c_int {
        by_path(path, buf.cast(), true)
    } else -1;
    fn __lxstat(ver: c_int, path: *const c_char, buf: *mut libc::stat)
    | fn __lxstat64(ver: c_int, path: *const c_char, buf: *mut libc::stat64) -> c_int {
        by_path(path, buf.cast(), false)
    } else -1;
    fn __fxstat(ver: c_int, fd: c_int, buf: *mut libc::stat)
    | fn __fxstat64(ver: c_int, fd: c_int, buf: *mut libc::stat64) -> c_int {
        by_fd(fd, buf.cast())
    } else -1;
    fn __fxstatat(ver: c_int, dirfd: c_int, path: *const c_char, buf: *mut libc::stat, flags: c_int)
    | fn __fxstatat64(
        ver: c_int,
        dirfd: c_int,
        path: *const c_char,
        buf: *mut libc::stat64,
        flags: c_int,
    ) -> c_int {
        by_at(dirfd, path, flags, buf.cast())
    } else -1;
}

#[no_mangle]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    buf: *mut libc::statx,
) -> c_int {
    let mut st: libc::stat = std::mem::zeroed();
    let Some(rc) = by_at(dirfd, path, flags, &mut st) else {
        return pass!(statx(dirfd, path, flags, mask, buf), -1);
    };
    if rc == 0 {
        let real_rc = pass!(statx(dirfd, path, flags, mask, buf), -1);
        let b = &mut *buf;
        if real_rc != 0 {
            *b = std::mem::zeroed();
            b.stx_mask = libc::STATX_BASIC_STATS;
            b.stx_uid = st.st_uid;
            b.stx_gid = st.st_gid;
            b.stx_blksize = st.st_blksize as u32;
        }
        b.stx_size = st.st_size as u64;
        b.stx_ino = st.st_ino as u64;
        b.stx_dev_major = libc::major(st.st_dev);
        b.stx_dev_minor = libc::minor(st.st_dev);
        b.stx_blocks = st.st_blocks as u64;
        b.stx_mode = st.st_mode as u16;
        b.stx_nlink = st.st_nlink as u32;
        let ts = |sec: i64, nsec: i64| {
            // SAFETY: a plain C struct, all zeros is valid.
            let mut t: libc::statx_timestamp = std::mem::zeroed();
            t.tv_sec = sec;
            t.tv_nsec = nsec as u32;
            t
        };
        b.stx_atime = ts(st.st_atime, st.st_atime_nsec);
        b.stx_mtime = ts(st.st_mtime, st.st_mtime_nsec);
        b.stx_ctime = ts(st.st_ctime, st.st_ctime_nsec);
    }
    rc
}
