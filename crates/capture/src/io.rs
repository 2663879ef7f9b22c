//! The interposed data and size calls on captured descriptors and paths:
//! write and read families, seek, sync (a POSIX consistency point),
//! truncate, fallocate, access. Each passes through at once unless the
//! descriptor (lock-free check) or the path is captured.

#![allow(clippy::missing_safety_doc)]

use std::panic::catch_unwind;
use std::path::Path;

use libc::{c_char, c_int, c_void, iovec, off64_t, off_t, size_t, ssize_t};

use crate::guard::Guard;
use crate::posix::{contain, logged_state, prefix_path};
use crate::report;
use crate::state::{self, lock, CResult, Mode, State};
use crate::{entry_points, fd_entry_points, pass, twins};

// ---- write ---------------------------------------------------------------

pub(crate) fn do_write(fd: c_int, data: &[u8], at: Option<u64>) -> ssize_t {
    contain("write", -1, || {
        let mut slot = lock();
        let st = State::get(&mut slot).ok_or(libc::EBADF)?;
        st.write(fd, data, at).map(|n| n as ssize_t)
    })
}

pub(crate) unsafe fn slice<'a>(buf: *const c_void, n: size_t) -> &'a [u8] {
    if n == 0 || buf.is_null() {
        &[]
    } else {
        std::slice::from_raw_parts(buf as *const u8, n)
    }
}

pub(crate) unsafe fn slice_mut<'a>(buf: *mut c_void, n: size_t) -> &'a mut [u8] {
    if n == 0 || buf.is_null() {
        &mut []
    } else {
        std::slice::from_raw_parts_mut(buf as *mut u8, n)
    }
}

fn offset(off: i64) -> CResult<u64> {
    u64::try_from(off).map_err(|_| libc::EINVAL)
}

/// `f` at the offset `off`; a negative one fails with EINVAL.
fn at_offset(off: i64, f: impl FnOnce(u64) -> ssize_t) -> ssize_t {
    match offset(off) {
        Ok(o) => f(o),
        Err(e) => {
            state::set_errno(e);
            -1
        }
    }
}

fd_entry_points! {
    fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
        do_write(fd, slice(buf, n), None)
    } else -1;
    fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t)
    | fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off64_t) -> ssize_t {
        at_offset(off, |o| do_write(fd, slice(buf, n), Some(o)))
    } else -1;
}

/// The vector of a readv/writev call (EINVAL for a negative count).
unsafe fn iovecs<'a>(iov: *const iovec, cnt: c_int) -> CResult<&'a [iovec]> {
    if cnt < 0 || (cnt > 0 && iov.is_null()) {
        return Err(libc::EINVAL);
    }
    if cnt == 0 {
        return Ok(&[]);
    }
    Ok(std::slice::from_raw_parts(iov, cnt as usize))
}

unsafe fn do_writev(fd: c_int, iov: *const iovec, cnt: c_int, at: Option<u64>) -> ssize_t {
    contain("writev", -1, || {
        let iovs = iovecs(iov, cnt)?;
        let mut slot = lock();
        let st = State::get(&mut slot).ok_or(libc::EBADF)?;
        let mut total = 0u64;
        for v in iovs {
            let data = slice(v.iov_base, v.iov_len);
            st.write(fd, data, at.map(|a| a + total))?;
            total += data.len() as u64;
        }
        Ok(total as ssize_t)
    })
}

fd_entry_points! {
    fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
        do_writev(fd, iov, cnt, None)
    } else -1;
    fn pwritev(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t)
    | fn pwritev64(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t) -> ssize_t {
        at_offset(off, |o| do_writev(fd, iov, cnt, Some(o)))
    } else -1;
}

// ---- read ----------------------------------------------------------------

pub(crate) fn do_read(fd: c_int, buf: &mut [u8], at: Option<u64>) -> ssize_t {
    contain("read", -1, || {
        let mut slot = lock();
        let st = State::get(&mut slot).ok_or(libc::EBADF)?;
        st.read(fd, buf, at).map(|n| n as ssize_t)
    })
}

fd_entry_points! {
    fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
        do_read(fd, slice_mut(buf, n), None)
    } else -1;
    fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: off_t)
    | fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) -> ssize_t {
        at_offset(off, |o| do_read(fd, slice_mut(buf, n), Some(o)))
    } else -1;
}

unsafe fn do_readv(fd: c_int, iov: *const iovec, cnt: c_int, at: Option<u64>) -> ssize_t {
    contain("readv", -1, || {
        let iovs = iovecs(iov, cnt)?;
        let mut slot = lock();
        let st = State::get(&mut slot).ok_or(libc::EBADF)?;
        let mut total = 0u64;
        for v in iovs {
            let buf = slice_mut(v.iov_base, v.iov_len);
            let want = buf.len();
            let n = st.read(fd, buf, at.map(|a| a + total))?;
            total += n as u64;
            if n < want {
                break;
            }
        }
        Ok(total as ssize_t)
    })
}

fd_entry_points! {
    fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
        do_readv(fd, iov, cnt, None)
    } else -1;
    fn preadv(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t)
    | fn preadv64(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t) -> ssize_t {
        at_offset(off, |o| do_readv(fd, iov, cnt, Some(o)))
    } else -1;
}

// ---- seek, size, sync ----------------------------------------------------

fn do_lseek(fd: c_int, off: i64, whence: c_int) -> i64 {
    contain("lseek", -1, || {
        let mut slot = lock();
        let st = State::get(&mut slot).ok_or(libc::EBADF)?;
        st.harvest(fd)?;
        let e = st.ofd(fd)?;
        if whence == libc::SEEK_CUR && off == 0 {
            // A question (`tell`), not a move: on a shared description
            // another process may write past this offset at any moment,
            // and setting it would move the shared offset back.
            return Ok(e.offset as i64);
        }
        let size = st.handles.get(&e.handle).ok_or(libc::EBADF)?.size as i64;
        let base = match whence {
            libc::SEEK_SET => 0,
            libc::SEEK_CUR => e.offset as i64,
            libc::SEEK_END => size,
            libc::SEEK_DATA => {
                if off >= size {
                    return Err(libc::ENXIO);
                }
                0
            }
            libc::SEEK_HOLE => {
                if off >= size {
                    return Err(libc::ENXIO);
                }
                return set_offset(st, fd, size);
            }
            _ => return Err(libc::EINVAL),
        };
        let new = base
            .checked_add(off)
            .filter(|&n| n >= 0)
            .ok_or(libc::EINVAL)?;
        set_offset(st, fd, new)
    })
}

fn set_offset(st: &mut State, fd: c_int, to: i64) -> CResult<i64> {
    st.set_offset(fd, to as u64)?;
    Ok(to)
}

fd_entry_points! {
    fn lseek(fd: c_int, off: off_t, whence: c_int)
    | fn lseek64(fd: c_int, off: off64_t, whence: c_int) -> off64_t {
        do_lseek(fd, off, whence)
    } else -1;
}

/// fsync/fdatasync: the consistency point of a POSIX open. Under MPI the
/// shim's MPI_File_sync does the commit and the agreement, so here it is a
/// successful no-op (MPICH calls it on the ranks that wrote).
fn do_sync(fd: c_int) -> c_int {
    contain("fsync", -1, || {
        let mut slot = lock();
        let st = State::get(&mut slot).ok_or(libc::EBADF)?;
        let id = st.handle_of(fd)?;
        if st.handles[&id].mode == Mode::Posix {
            st.commit_single(id)?;
        }
        Ok(0)
    })
}

fd_entry_points! {
    fn fsync(fd: c_int) | fn fdatasync(fd: c_int) -> c_int { do_sync(fd) } else -1;
}

fn do_ftruncate(fd: c_int, len: i64) -> c_int {
    contain("ftruncate", -1, || {
        let len = offset(len)?;
        let mut slot = lock();
        let st = State::get(&mut slot).ok_or(libc::EBADF)?;
        let id = st.handle_of(fd)?;
        st.set_size(id, len).map(|_| 0)
    })
}

fd_entry_points! {
    fn ftruncate(fd: c_int, len: off_t) | fn ftruncate64(fd: c_int, len: off64_t) -> c_int {
        do_ftruncate(fd, len)
    } else -1;
}

unsafe fn do_truncate_path(id: u64, len: i64) -> c_int {
    contain("truncate", -1, || {
        let len = offset(len)?;
        let mut slot = lock();
        let st = State::get(&mut slot).ok_or(libc::EBADF)?;
        st.set_size(id, len).map(|_| 0)
    })
}

/// truncate by path (PnetCDF truncates an existing file outside MPI-IO):
/// recorded like an ftruncate, in a one-epoch open when none is open.
unsafe fn truncate_path(abs: &Path, id: Option<u64>, len: i64) -> c_int {
    match id {
        Some(id) => do_truncate_path(id, len),
        None => contain("truncate", -1, || {
            let len = offset(len)?;
            let mut slot = lock();
            let st = State::get(&mut slot).ok_or(libc::EINVAL)?;
            if !st.committed(abs)?.exists {
                return Err(libc::ENOENT);
            }
            st.path_op(abs, |st, id| st.set_size(id, len)).map(|_| 0)
        }),
    }
}

entry_points! {
    fn truncate(path: *const c_char, len: off_t)
    | fn truncate64(path: *const c_char, len: off64_t) -> c_int {
        prefix_path(path).map(|(_g, abs, id)| truncate_path(&abs, id, len))
    } else -1;
}

/// access/faccessat of a captured path: the log, then the real file. The
/// guard is held while the log is read (its own stats must pass through)
/// and dropped for the real call.
unsafe fn access_common(g: Guard, abs: &Path, open: bool, real: impl FnOnce() -> c_int) -> c_int {
    if open {
        // Open under capture: it exists, and it is ours.
        return 0;
    }
    contain("access", -1, || match logged_state(abs)? {
        Some((true, _)) => Ok(0),
        Some((false, _)) => Err(libc::ENOENT),
        None => {
            drop(g);
            let rc = real();
            if rc == 0 {
                Ok(0)
            } else {
                Err(state::errno())
            }
        }
    })
}

// access and euidaccess (with its alias eaccess: glibc's calls its
// internal `access`, past the wrapper; GNU sort checks every input with
// it) of a path: the log's answer for a captured one.
twins! {
    access, euidaccess, eaccess => fn(path: *const c_char, mode: c_int) -> c_int, -1, |real| {
        let Some((g, abs, id)) = prefix_path(path) else {
            return real(path, mode);
        };
        access_common(g, &abs, id.is_some(), || real(path, mode))
    }
}

#[no_mangle]
pub unsafe extern "C" fn faccessat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    let Some((g, abs)) = crate::namespace::at_path(dirfd, path) else {
        return pass!(faccessat(dirfd, path, mode, flags), -1);
    };
    let open = {
        let mut slot = lock();
        State::get(&mut slot).is_some_and(|st| st.by_path.contains_key(&abs))
    };
    access_common(g, &abs, open, || {
        pass!(faccessat(dirfd, path, mode, flags), -1)
    })
}

fn do_fallocate(fd: c_int, mode: c_int, off: i64, len: i64) -> CResult<()> {
    let end = offset(off)?.checked_add(offset(len)?).ok_or(libc::EFBIG)?;
    if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
        // Punching holes, zeroing or collapsing ranges are not recorded.
        report::line(
            "fallocate with a mode other than 0 or KEEP_SIZE on a captured file is not supported",
        );
        return Err(libc::EOPNOTSUPP);
    }
    if mode & libc::FALLOC_FL_KEEP_SIZE != 0 {
        return Ok(());
    }
    let mut slot = lock();
    let st = State::get(&mut slot).ok_or(libc::EBADF)?;
    let id = st.handle_of(fd)?;
    st.preallocate(id, end)
}

fd_entry_points! {
    fn fallocate(fd: c_int, mode: c_int, off: off_t, len: off_t)
    | fn fallocate64(fd: c_int, mode: c_int, off: off64_t, len: off64_t) -> c_int {
        contain("fallocate", -1, || do_fallocate(fd, mode, off, len).map(|_| 0))
    } else -1;
    // posix_fallocate returns the error number instead of setting errno.
    fn posix_fallocate(fd: c_int, off: off_t, len: off_t)
    | fn posix_fallocate64(fd: c_int, off: off64_t, len: off64_t) -> c_int {
        match catch_unwind(|| do_fallocate(fd, 0, off, len)) {
            Ok(Ok(())) => 0,
            Ok(Err(e)) => e,
            Err(_) => libc::EIO,
        }
    } else libc::ENOSYS;
}

// ---- the v2 vector calls, and the other sync calls --------------------------

/// pwritev2/preadv2: offset -1 is the file offset; RWF_DSYNC/RWF_SYNC make
/// the write a consistency point (as fdatasync after it); RWF_APPEND is
/// refused (EOPNOTSUPP) rather than placed wrongly.
unsafe fn v2(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: i64,
    flags: c_int,
    write: bool,
) -> ssize_t {
    if flags & libc::RWF_APPEND != 0 {
        return contain("pwritev2", -1, || {
            report::line("pwritev2 with RWF_APPEND on a captured file is not supported");
            Err(libc::EOPNOTSUPP)
        });
    }
    let at = match off {
        -1 => None,
        o => match offset(o) {
            Ok(o) => Some(o),
            Err(e) => return contain("pwritev2", -1, || Err(e)),
        },
    };
    if !write {
        return do_readv(fd, iov, cnt, at);
    }
    let n = do_writev(fd, iov, cnt, at);
    if n >= 0 && flags & (libc::RWF_DSYNC | libc::RWF_SYNC) != 0 && do_sync(fd) != 0 {
        return -1;
    }
    n
}

fd_entry_points! {
    fn pwritev2(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t, flags: c_int)
    | fn pwritev64v2(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t, flags: c_int) -> ssize_t {
        v2(fd, iov, cnt, off, flags, true)
    } else -1;
    fn preadv2(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t, flags: c_int)
    | fn preadv64v2(fd: c_int, iov: *const iovec, cnt: c_int, off: off64_t, flags: c_int) -> ssize_t {
        v2(fd, iov, cnt, off, flags, false)
    } else -1;
}

fd_entry_points! {
    // syncfs and sync_file_range on a captured descriptor ask for its data
    // to be written out: a consistency point, as fdatasync.
    fn syncfs(fd: c_int)
    | fn sync_file_range(fd: c_int, off: off64_t, n: off64_t, flags: libc::c_uint) -> c_int {
        do_sync(fd)
    } else -1;
}
