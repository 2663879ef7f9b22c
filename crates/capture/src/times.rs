//! File times on captured files (`utimensat`, `futimens`, `utimes`,
//! `lutimes`, `futimes`, `futimesat`, `utime`): rsync, tar, cp -p and unzip
//! set them on files that exist only in capture's view. They are recorded
//! in the file's log (a times operation, manifest version 4), so that they
//! reach a POSIX remote in order with the bytes, and stat answers them in
//! this process at once. A later change of the file drops them, as a write
//! makes the kernel move the modification time.

#![allow(clippy::missing_safety_doc)]

use std::path::Path;

use libc::{c_char, c_int, timespec, timeval};
use paralog_log::format::Times;

use crate::guard::Guard;
use crate::namespace::at_path;
use crate::pass;
use crate::posix::{answers_for, contain, prefix_path};
use crate::state::{self, lock, CResult, State};

/// Now, in nanoseconds since the Unix epoch.
pub(crate) fn now_ns() -> i64 {
    let mut ts = timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// The times a `timespec[2]` asks for (NULL: both now).
unsafe fn from_timespecs(ts: *const timespec) -> CResult<Times> {
    if ts.is_null() {
        let now = now_ns();
        return Ok(Times {
            atime: Some(now),
            mtime: Some(now),
        });
    }
    let one = |t: &timespec| -> CResult<Option<i64>> {
        match t.tv_nsec {
            libc::UTIME_OMIT => Ok(None),
            libc::UTIME_NOW => Ok(Some(now_ns())),
            n if (0..1_000_000_000).contains(&n) => t
                .tv_sec
                .checked_mul(1_000_000_000)
                .and_then(|s| s.checked_add(n))
                .map(Some)
                .ok_or(libc::EOVERFLOW),
            _ => Err(libc::EINVAL),
        }
    };
    Ok(Times {
        atime: one(&*ts)?,
        mtime: one(&*ts.add(1))?,
    })
}

/// The times a `timeval[2]` asks for (NULL: both now).
unsafe fn from_timevals(tv: *const timeval) -> CResult<Times> {
    if tv.is_null() {
        return from_timespecs(std::ptr::null());
    }
    let spec = |t: &timeval| -> CResult<timespec> {
        if !(0..1_000_000).contains(&t.tv_usec) {
            return Err(libc::EINVAL);
        }
        Ok(timespec {
            tv_sec: t.tv_sec,
            tv_nsec: t.tv_usec * 1000,
        })
    };
    let ts = [spec(&*tv)?, spec(&*tv.add(1))?];
    from_timespecs(ts.as_ptr())
}

/// Set the times of a captured path. `Ok(None)`: not a file capture
/// answers for, the real call does.
fn set_path(abs: &Path, times: Times) -> CResult<Option<c_int>> {
    let mut slot = lock();
    let st = State::get(&mut slot).ok_or(libc::EINVAL)?;
    if let Some(&id) = st.by_path.get(abs) {
        st.set_times(id, times)?;
        return Ok(Some(0));
    }
    let c = st.committed(abs)?;
    if !answers_for(st, abs, &c) {
        return Ok(None);
    }
    if !c.exists {
        return Err(libc::ENOENT);
    }
    st.path_op_with(abs, c, |st, id| st.set_times(id, times))?;
    Ok(Some(0))
}

/// Set the times of the file a captured descriptor has open.
fn set_fd(fd: c_int, times: Times) -> CResult<c_int> {
    let mut slot = lock();
    let st = State::get(&mut slot).ok_or(libc::EINVAL)?;
    let id = st.fds.get(&fd).ok_or(libc::EBADF)?.handle;
    st.set_times(id, times)?;
    Ok(0)
}

unsafe fn by_fd(fd: c_int, times: impl FnOnce() -> CResult<Times>) -> Option<c_int> {
    if !state::is_captured(fd) {
        return None;
    }
    let _g = Guard::enter()?;
    Some(contain("futimens", -1, || set_fd(fd, times()?)))
}

unsafe fn by_path(abs: &Path, what: &str, times: impl FnOnce() -> CResult<Times>) -> Option<c_int> {
    contain(what, Some(-1), || match times() {
        Ok(t) => set_path(abs, t),
        Err(e) => Err(e),
    })
}

#[no_mangle]
pub unsafe extern "C" fn utimensat(
    dirfd: c_int,
    path: *const c_char,
    ts: *const timespec,
    flags: c_int,
) -> c_int {
    // Linux's utimensat(fd, NULL, ...) is futimens(fd, ...).
    if path.is_null() {
        return by_fd(dirfd, || from_timespecs(ts))
            .unwrap_or_else(|| pass!(utimensat(dirfd, path, ts, flags), -1));
    }
    let Some((_g, abs)) = at_path(dirfd, path) else {
        return pass!(utimensat(dirfd, path, ts, flags), -1);
    };
    by_path(&abs, "utimensat", || from_timespecs(ts))
        .unwrap_or_else(|| pass!(utimensat(dirfd, path, ts, flags), -1))
}

#[no_mangle]
pub unsafe extern "C" fn futimens(fd: c_int, ts: *const timespec) -> c_int {
    by_fd(fd, || from_timespecs(ts)).unwrap_or_else(|| pass!(futimens(fd, ts), -1))
}

#[no_mangle]
pub unsafe extern "C" fn futimes(fd: c_int, tv: *const timeval) -> c_int {
    by_fd(fd, || from_timevals(tv)).unwrap_or_else(|| pass!(futimes(fd, tv), -1))
}

#[no_mangle]
pub unsafe extern "C" fn futimesat(dirfd: c_int, path: *const c_char, tv: *const timeval) -> c_int {
    let Some((_g, abs)) = at_path(dirfd, path) else {
        return pass!(futimesat(dirfd, path, tv), -1);
    };
    by_path(&abs, "futimesat", || from_timevals(tv))
        .unwrap_or_else(|| pass!(futimesat(dirfd, path, tv), -1))
}

// A captured file is never a symbolic link: lutimes and utimes agree on it.
#[no_mangle]
pub unsafe extern "C" fn utimes(path: *const c_char, tv: *const timeval) -> c_int {
    let Some((_g, abs, _)) = prefix_path(path) else {
        return pass!(utimes(path, tv), -1);
    };
    by_path(&abs, "utimes", || from_timevals(tv)).unwrap_or_else(|| pass!(utimes(path, tv), -1))
}

#[no_mangle]
pub unsafe extern "C" fn lutimes(path: *const c_char, tv: *const timeval) -> c_int {
    let Some((_g, abs, _)) = prefix_path(path) else {
        return pass!(lutimes(path, tv), -1);
    };
    by_path(&abs, "lutimes", || from_timevals(tv)).unwrap_or_else(|| pass!(lutimes(path, tv), -1))
}

#[no_mangle]
pub unsafe extern "C" fn utime(path: *const c_char, buf: *const libc::utimbuf) -> c_int {
    let Some((_g, abs, _)) = prefix_path(path) else {
        return pass!(utime(path, buf), -1);
    };
    let times = || {
        if buf.is_null() {
            return from_timespecs(std::ptr::null());
        }
        let b = &*buf;
        let ts = [
            timespec {
                tv_sec: b.actime,
                tv_nsec: 0,
            },
            timespec {
                tv_sec: b.modtime,
                tv_nsec: 0,
            },
        ];
        from_timespecs(ts.as_ptr())
    };
    by_path(&abs, "utime", times).unwrap_or_else(|| pass!(utime(path, buf), -1))
}
