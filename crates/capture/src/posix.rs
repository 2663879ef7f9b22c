//! The interposed POSIX entry points. Each one: pass through at once unless
//! the descriptor (lock-free check) or the path (prefix check) is captured;
//! otherwise do the work under the state lock. No panic crosses the C
//! boundary: a panic becomes EIO plus one line on stderr.

#![allow(clippy::missing_safety_doc)]

use std::ffi::CStr;
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use libc::{
    aiocb, c_char, c_int, c_ulong, c_void, iovec, mode_t, off64_t, off_t, size_t, ssize_t, timespec,
};

use crate::guard::Guard;
use crate::report;
use crate::settings::Settings;
use crate::state::{self, is_captured, lock, resolve, set_errno, CResult, Mode, State};

/// Run `f` with panics contained; an error becomes `fail` with errno set.
pub(crate) fn contain<T>(what: &str, fail: T, f: impl FnOnce() -> CResult<T>) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_errno(e);
            fail
        }
        Err(_) => {
            report::line(&format!("internal error in {what}; returning EIO"));
            set_errno(libc::EIO);
            fail
        }
    }
}

/// Call the next definition of a symbol, or fail with ENOSYS (with a line
/// on stderr) if there is none: never exit the program.
#[macro_export]
macro_rules! pass {
    ($name:ident ( $($a:expr),* ), $fail:expr) => {
        match $crate::real::$name() {
            Some(f) => f($($a),*),
            None => {
                $crate::report::line(concat!("no next definition of ", stringify!($name)));
                $crate::state::set_errno(libc::ENOSYS);
                $fail
            }
        }
    };
}

// ---- open ---------------------------------------------------------------

enum OpenDecision {
    Pass,
    Fd(c_int),
}

// The variadic entry points. Stable Rust cannot define a C variadic
// function, and the C objects of a cdylib are not exported past rustc's
// version script, so they are defined here with the optional argument as a
// fixed one: on the x86_64 and aarch64 Linux ABIs it travels in the same
// register either way. Like glibc, `mode` is only used when O_CREAT or
// O_TMPFILE says the caller passed it (otherwise it is whatever the
// register held, and ignored), and fcntl's argument is read as a word.

const K_OPEN: c_int = 0;
const K_OPEN64: c_int = 1;
const K_OPENAT: c_int = 2;
const K_OPENAT64: c_int = 3;
const K_OPEN_2: c_int = 4;
const K_OPEN64_2: c_int = 5;
const K_OPENAT_2: c_int = 6;
const K_OPENAT64_2: c_int = 7;
const K_CREAT: c_int = 8;
const K_CREAT64: c_int = 9;

fn mode_if_passed(flags: c_int, mode: mode_t) -> mode_t {
    if flags & libc::O_CREAT != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE {
        mode
    } else {
        0
    }
}

#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    paralog_open_impl(
        libc::AT_FDCWD,
        path,
        flags,
        mode_if_passed(flags, mode),
        K_OPEN,
    )
}

#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    paralog_open_impl(
        libc::AT_FDCWD,
        path,
        flags,
        mode_if_passed(flags, mode),
        K_OPEN64,
    )
}

#[no_mangle]
pub unsafe extern "C" fn openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    paralog_open_impl(dirfd, path, flags, mode_if_passed(flags, mode), K_OPENAT)
}

#[no_mangle]
pub unsafe extern "C" fn openat64(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    paralog_open_impl(dirfd, path, flags, mode_if_passed(flags, mode), K_OPENAT64)
}

/// Fortified variants (_FORTIFY_SOURCE): never called with a mode.
#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    paralog_open_impl(libc::AT_FDCWD, path, flags, 0, K_OPEN_2)
}

#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    paralog_open_impl(libc::AT_FDCWD, path, flags, 0, K_OPEN64_2)
}

#[no_mangle]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    paralog_open_impl(dirfd, path, flags, 0, K_OPENAT_2)
}

#[no_mangle]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    paralog_open_impl(dirfd, path, flags, 0, K_OPENAT64_2)
}

#[no_mangle]
pub unsafe extern "C" fn creat(path: *const c_char, mode: mode_t) -> c_int {
    paralog_open_impl(
        libc::AT_FDCWD,
        path,
        libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
        mode,
        K_CREAT,
    )
}

#[no_mangle]
pub unsafe extern "C" fn creat64(path: *const c_char, mode: mode_t) -> c_int {
    paralog_open_impl(
        libc::AT_FDCWD,
        path,
        libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
        mode,
        K_CREAT64,
    )
}

#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    fcntl_impl(fd, cmd, arg, 0)
}

#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    fcntl_impl(fd, cmd, arg, 1)
}

unsafe fn paralog_open_impl(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
    kind: c_int,
) -> c_int {
    let decision = match Guard::enter() {
        Some(_g) if !path.is_null() => {
            let p = Path::new(std::ffi::OsStr::from_bytes(CStr::from_ptr(path).to_bytes()));
            contain("open", None, || open_captured(dirfd, p, flags).map(Some))
        }
        _ => Some(OpenDecision::Pass),
    };
    match decision {
        Some(OpenDecision::Fd(fd)) => fd,
        None => -1,
        Some(OpenDecision::Pass) => forget_if_stale(match kind {
            K_OPEN => pass!(open(path, flags, mode), -1),
            K_OPEN64 => pass!(open64(path, flags, mode), -1),
            K_OPENAT => pass!(openat(dirfd, path, flags, mode), -1),
            K_OPENAT64 => pass!(openat64(dirfd, path, flags, mode), -1),
            K_OPEN_2 => pass!(__open_2(path, flags), -1),
            K_OPEN64_2 => pass!(__open64_2(path, flags), -1),
            K_OPENAT_2 => pass!(__openat_2(dirfd, path, flags), -1),
            K_OPENAT64_2 => pass!(__openat64_2(dirfd, path, flags), -1),
            K_CREAT => pass!(creat(path, mode), -1),
            _ => pass!(creat64(path, mode), -1),
        }),
    }
}

/// A descriptor the real open returned that the table still lists as
/// captured was closed past the wrappers (glibc's fclose of stdout on an
/// inherited placeholder): it is the program's plain file now.
fn forget_if_stale(fd: c_int) -> c_int {
    if fd >= 0 && is_captured(fd) {
        if let Some(_g) = Guard::enter() {
            let mut slot = lock();
            if let Some(st) = slot.as_mut() {
                st.forget_stale(fd);
            }
        }
    }
    fd
}

/// Is this absolute path under the prefix (and not the prefix itself)?
pub(crate) fn under_prefix(abs: &Path) -> Option<&'static Settings> {
    let s = state::settings();
    let prefix = match s {
        Settings::Off => return None,
        Settings::On(c) => &c.prefix,
        Settings::Invalid {
            prefix: Some(p), ..
        } => p,
        Settings::Invalid { prefix: None, .. } => return None,
    };
    (abs.starts_with(prefix) && abs != prefix && !is_mpi_helper_file(abs)).then_some(s)
}

pub(crate) use paralog_settings::is_mpi_helper_file;

fn report_invalid_once(message: &str) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        report::line(&format!(
            "capture is misconfigured, opens under the prefix fail: {message}"
        ))
    });
}

fn open_captured(dirfd: c_int, path: &Path, flags: c_int) -> CResult<OpenDecision> {
    let Some(abs) = resolve(dirfd, path) else {
        return Ok(OpenDecision::Pass);
    };
    let Some(settings) = under_prefix(&abs) else {
        return Ok(OpenDecision::Pass);
    };
    if let Settings::Invalid { message, .. } = settings {
        report_invalid_once(message);
        return Err(libc::EINVAL);
    }
    let acc = flags & libc::O_ACCMODE;
    let writing = acc != libc::O_RDONLY || flags & (libc::O_CREAT | libc::O_TRUNC) != 0;
    let mut slot = lock();
    let Some(st) = State::get(&mut slot) else {
        return Ok(OpenDecision::Pass);
    };
    let committed = st.committed(&abs)?;
    let exists = committed.exists;
    let id = match st.by_path.get(&abs).copied() {
        Some(id) => {
            // Another open of a file we already capture (ROMIO's create
            // protocol reopens; the program reopens): same log.
            if flags & libc::O_CREAT != 0 && flags & libc::O_EXCL != 0 && exists {
                return Err(libc::EEXIST);
            }
            id
        }
        None if !writing => {
            // Nothing undrained: the real file answers, unless the drained
            // bytes live on a remote other than the prefix (then the prefix
            // holds no copy, and the program reads its output from there).
            let elsewhere = st.cfg.remote_root.as_ref() != Some(&st.cfg.prefix);
            if committed.view.lf.epochs.is_empty() && !(elsewhere && committed.exists) {
                return Ok(OpenDecision::Pass);
            }
            if !committed.exists {
                return Err(libc::ENOENT);
            }
            st.new_readonly_handle(&abs, committed)
        }
        None => {
            if flags & libc::O_CREAT != 0 && flags & libc::O_EXCL != 0 && exists {
                return Err(libc::EEXIST);
            }
            if flags & libc::O_CREAT == 0 && !exists {
                return Err(libc::ENOENT);
            }
            st.new_handle(&abs, Mode::Posix, 0, 1, None, committed)?
        }
    };
    let h = &st.handles[&id];
    if flags & libc::O_CREAT == 0
        && !exists
        && !h.create_allowed
        && !h.committed_any
        && h.mode == Mode::Mpi
    {
        return Err(libc::ENOENT);
    }
    st.attach_fd(id, flags).map(OpenDecision::Fd)
}

// ---- close, dup ----------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if !is_captured(fd) {
        return pass!(close(fd), -1);
    }
    let Some(_g) = Guard::enter() else {
        return pass!(close(fd), -1);
    };
    contain("close", -1, || {
        let mut slot = lock();
        let st = State::get(&mut slot).ok_or(libc::EBADF)?;
        let id = st.detach_fd(fd).ok_or(libc::EBADF)?;
        let rc = pass!(close(fd), -1);
        let mut result = if rc == 0 { Ok(0) } else { Err(state::errno()) };
        let h = st.handles.get(&id).ok_or(libc::EBADF)?;
        let writer = h.log.is_some() || h.lazy;
        if writer
            && h.mode == Mode::Posix
            && h.fds == 0
            && !h.pinned
            && (h.dirty || !h.committed_any)
        {
            if let Err(e) = st.commit_single(id) {
                result = Err(e);
            }
        }
        st.maybe_release(id);
        result
    })
}

unsafe fn dup_common(old: c_int, new_fd: c_int) -> c_int {
    if new_fd >= 0 && is_captured(old) {
        if let Some(_g) = Guard::enter() {
            let mut slot = lock();
            if let Some(st) = State::get(&mut slot) {
                st.dup_fd(old, new_fd);
            }
        }
    }
    new_fd
}

#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    dup_common(fd, pass!(dup(fd), -1))
}

#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if is_captured(new) && old != new {
        close(new);
    }
    dup_common(old, pass!(dup2(old, new), -1))
}

#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if is_captured(new) && old != new {
        close(new);
    }
    dup_common(old, pass!(dup3(old, new, flags), -1))
}

unsafe fn fcntl_impl(fd: c_int, cmd: c_int, arg: c_ulong, kind: c_int) -> c_int {
    let rc = if kind == 0 {
        pass!(fcntl(fd, cmd, arg), -1)
    } else {
        pass!(fcntl64(fd, cmd, arg), -1)
    };
    if cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC {
        return dup_common(fd, rc);
    }
    rc
}

// ---- write ---------------------------------------------------------------

fn do_write(fd: c_int, data: &[u8], at: Option<u64>) -> ssize_t {
    contain("write", -1, || {
        let mut slot = lock();
        let st = State::get(&mut slot).ok_or(libc::EBADF)?;
        st.write(fd, data, at).map(|n| n as ssize_t)
    })
}

unsafe fn slice<'a>(buf: *const c_void, n: size_t) -> &'a [u8] {
    if n == 0 || buf.is_null() {
        &[]
    } else {
        std::slice::from_raw_parts(buf as *const u8, n)
    }
}

unsafe fn slice_mut<'a>(buf: *mut c_void, n: size_t) -> &'a mut [u8] {
    if n == 0 || buf.is_null() {
        &mut []
    } else {
        std::slice::from_raw_parts_mut(buf as *mut u8, n)
    }
}

fn offset(off: i64) -> CResult<u64> {
    u64::try_from(off).map_err(|_| libc::EINVAL)
}

#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    match (is_captured(fd), Guard::enter()) {
        (true, Some(_g)) => do_write(fd, slice(buf, n), None),
        _ => pass!(write(fd, buf, n), -1),
    }
}

#[no_mangle]
pub unsafe extern "C" fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t {
    match (is_captured(fd), Guard::enter()) {
        (true, Some(_g)) => match offset(off) {
            Ok(o) => do_write(fd, slice(buf, n), Some(o)),
            Err(e) => contain("pwrite", -1, || Err(e)),
        },
        _ => pass!(pwrite(fd, buf, n, off), -1),
    }
}

#[no_mangle]
pub unsafe extern "C" fn pwrite64(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    off: off64_t,
) -> ssize_t {
    match (is_captured(fd), Guard::enter()) {
        (true, Some(_g)) => match offset(off) {
            Ok(o) => do_write(fd, slice(buf, n), Some(o)),
            Err(e) => contain("pwrite64", -1, || Err(e)),
        },
        _ => pass!(pwrite64(fd, buf, n, off), -1),
    }
}

unsafe fn do_writev(fd: c_int, iov: *const iovec, cnt: c_int, at: Option<u64>) -> ssize_t {
    contain("writev", -1, || {
        if cnt < 0 || (cnt > 0 && iov.is_null()) {
            return Err(libc::EINVAL);
        }
        let iovs = std::slice::from_raw_parts(iov, cnt as usize);
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

#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    match (is_captured(fd), Guard::enter()) {
        (true, Some(_g)) => do_writev(fd, iov, cnt, None),
        _ => pass!(writev(fd, iov, cnt), -1),
    }
}

#[no_mangle]
pub unsafe extern "C" fn pwritev(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t {
    match (is_captured(fd), Guard::enter()) {
        (true, Some(_g)) => match offset(off) {
            Ok(o) => do_writev(fd, iov, cnt, Some(o)),
            Err(e) => contain("pwritev", -1, || Err(e)),
        },
        _ => pass!(pwritev(fd, iov, cnt, off), -1),
    }
}

#[no_mangle]
pub unsafe extern "C" fn pwritev64(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off64_t,
) -> ssize_t {
    match (is_captured(fd), Guard::enter()) {
        (true, Some(_g)) => match offset(off) {
            Ok(o) => do_writev(fd, iov, cnt, Some(o)),
            Err(e) => contain("pwritev64", -1, || Err(e)),
        },
        _ => pass!(pwritev64(fd, iov, cnt, off), -1),
    }
}

// ---- read ----------------------------------------------------------------

pub(crate) fn do_read(fd: c_int, buf: &mut [u8], at: Option<u64>) -> ssize_t {
    contain("read", -1, || {
        let mut slot = lock();
        let st = State::get(&mut slot).ok_or(libc::EBADF)?;
        st.read(fd, buf, at).map(|n| n as ssize_t)
    })
}

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    match (is_captured(fd), Guard::enter()) {
        (true, Some(_g)) => do_read(fd, slice_mut(buf, n), None),
        _ => pass!(read(fd, buf, n), -1),
    }
}

#[no_mangle]
pub unsafe extern "C" fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t {
    match (is_captured(fd), Guard::enter()) {
        (true, Some(_g)) => match offset(off) {
            Ok(o) => do_read(fd, slice_mut(buf, n), Some(o)),
            Err(e) => contain("pread", -1, || Err(e)),
        },
        _ => pass!(pread(fd, buf, n, off), -1),
    }
}

#[no_mangle]
pub unsafe extern "C" fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) -> ssize_t {
    match (is_captured(fd), Guard::enter()) {
        (true, Some(_g)) => match offset(off) {
            Ok(o) => do_read(fd, slice_mut(buf, n), Some(o)),
            Err(e) => contain("pread64", -1, || Err(e)),
        },
        _ => pass!(pread64(fd, buf, n, off), -1),
    }
}

unsafe fn do_readv(fd: c_int, iov: *const iovec, cnt: c_int, at: Option<u64>) -> ssize_t {
    contain("readv", -1, || {
        if cnt < 0 || (cnt > 0 && iov.is_null()) {
            return Err(libc::EINVAL);
        }
        let iovs = std::slice::from_raw_parts(iov, cnt as usize);
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

#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    match (is_captured(fd), Guard::enter()) {
        (true, Some(_g)) => do_readv(fd, iov, cnt, None),
        _ => pass!(readv(fd, iov, cnt), -1),
    }
}

#[no_mangle]
pub unsafe extern "C" fn preadv(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) -> ssize_t {
    match (is_captured(fd), Guard::enter()) {
        (true, Some(_g)) => match offset(off) {
            Ok(o) => do_readv(fd, iov, cnt, Some(o)),
            Err(e) => contain("preadv", -1, || Err(e)),
        },
        _ => pass!(preadv(fd, iov, cnt, off), -1),
    }
}

#[no_mangle]
pub unsafe extern "C" fn preadv64(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off64_t,
) -> ssize_t {
    match (is_captured(fd), Guard::enter()) {
        (true, Some(_g)) => match offset(off) {
            Ok(o) => do_readv(fd, iov, cnt, Some(o)),
            Err(e) => contain("preadv64", -1, || Err(e)),
        },
        _ => pass!(preadv64(fd, iov, cnt, off), -1),
    }
}

// ---- seek, size, sync ----------------------------------------------------

fn do_lseek(fd: c_int, off: i64, whence: c_int) -> i64 {
    contain("lseek", -1, || {
        let mut slot = lock();
        let st = State::get(&mut slot).ok_or(libc::EBADF)?;
        st.harvest(fd)?;
        let e = st.ofd(fd)?;
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

#[no_mangle]
pub unsafe extern "C" fn lseek(fd: c_int, off: off_t, whence: c_int) -> off_t {
    match (is_captured(fd), Guard::enter()) {
        (true, Some(_g)) => do_lseek(fd, off, whence),
        _ => pass!(lseek(fd, off, whence), -1),
    }
}

#[no_mangle]
pub unsafe extern "C" fn lseek64(fd: c_int, off: off64_t, whence: c_int) -> off64_t {
    match (is_captured(fd), Guard::enter()) {
        (true, Some(_g)) => do_lseek(fd, off, whence),
        _ => pass!(lseek64(fd, off, whence), -1),
    }
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

#[no_mangle]
pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    match (is_captured(fd), Guard::enter()) {
        (true, Some(_g)) => do_sync(fd),
        _ => pass!(fsync(fd), -1),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    match (is_captured(fd), Guard::enter()) {
        (true, Some(_g)) => do_sync(fd),
        _ => pass!(fdatasync(fd), -1),
    }
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

#[no_mangle]
pub unsafe extern "C" fn ftruncate(fd: c_int, len: off_t) -> c_int {
    match (is_captured(fd), Guard::enter()) {
        (true, Some(_g)) => do_ftruncate(fd, len),
        _ => pass!(ftruncate(fd, len), -1),
    }
}

#[no_mangle]
pub unsafe extern "C" fn ftruncate64(fd: c_int, len: off64_t) -> c_int {
    match (is_captured(fd), Guard::enter()) {
        (true, Some(_g)) => do_ftruncate(fd, len),
        _ => pass!(ftruncate64(fd, len), -1),
    }
}

/// The handle of a path this process currently captures, if any.
/// A path under the prefix while capture is on: the guard, the absolute
/// path, and the handle that has it open in this process (if any).
pub(crate) unsafe fn prefix_path(
    path: *const c_char,
) -> Option<(Guard, std::path::PathBuf, Option<u64>)> {
    if path.is_null() {
        return None;
    }
    let g = Guard::enter()?;
    let p = Path::new(std::ffi::OsStr::from_bytes(CStr::from_ptr(path).to_bytes()));
    let abs = resolve(libc::AT_FDCWD, p)?;
    if !matches!(under_prefix(&abs)?, Settings::On(_)) {
        return None;
    }
    let mut slot = lock();
    let id = State::get(&mut slot)?.by_path.get(&abs).copied();
    Some((g, abs, id))
}

/// Whether the node-local log knows this path (then it, not the real file,
/// says whether the file exists); `None`: ask the real file system.
pub(crate) fn logged_state(abs: &Path) -> CResult<Option<(bool, u64)>> {
    let mut slot = lock();
    let st = State::get(&mut slot).ok_or(libc::EINVAL)?;
    let c = st.committed(abs)?;
    let elsewhere = st.cfg.remote_root.as_ref() != Some(&st.cfg.prefix);
    let known = !c.view.lf.epochs.is_empty() || (elsewhere && c.exists);
    Ok(known.then_some((c.exists, c.size)))
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

#[no_mangle]
pub unsafe extern "C" fn truncate(path: *const c_char, len: off_t) -> c_int {
    match prefix_path(path) {
        Some((_g, abs, id)) => truncate_path(&abs, id, len),
        None => pass!(truncate(path, len), -1),
    }
}

#[no_mangle]
pub unsafe extern "C" fn truncate64(path: *const c_char, len: off64_t) -> c_int {
    match prefix_path(path) {
        Some((_g, abs, id)) => truncate_path(&abs, id, len),
        None => pass!(truncate64(path, len), -1),
    }
}

#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    let Some((_g, abs, id)) = prefix_path(path) else {
        return pass!(access(path, mode), -1);
    };
    if id.is_some() {
        // Open under capture: it exists, and it is ours.
        return 0;
    }
    contain("access", -1, || match logged_state(&abs)? {
        Some((true, _)) => Ok(0),
        Some((false, _)) => Err(libc::ENOENT),
        None => {
            drop(_g);
            let rc = pass!(access(path, mode), -1);
            if rc == 0 {
                Ok(0)
            } else {
                Err(state::errno())
            }
        }
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

#[no_mangle]
pub unsafe extern "C" fn fallocate(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int {
    match (is_captured(fd), Guard::enter()) {
        (true, Some(_g)) => contain("fallocate", -1, || {
            do_fallocate(fd, mode, off, len).map(|_| 0)
        }),
        _ => pass!(fallocate(fd, mode, off, len), -1),
    }
}

#[no_mangle]
pub unsafe extern "C" fn fallocate64(fd: c_int, mode: c_int, off: off64_t, len: off64_t) -> c_int {
    match (is_captured(fd), Guard::enter()) {
        (true, Some(_g)) => contain("fallocate64", -1, || {
            do_fallocate(fd, mode, off, len).map(|_| 0)
        }),
        _ => pass!(fallocate64(fd, mode, off, len), -1),
    }
}

/// posix_fallocate returns the error number instead of setting errno.
#[no_mangle]
pub unsafe extern "C" fn posix_fallocate(fd: c_int, off: off_t, len: off_t) -> c_int {
    match (is_captured(fd), Guard::enter()) {
        (true, Some(_g)) => match catch_unwind(|| do_fallocate(fd, 0, off, len)) {
            Ok(Ok(())) => 0,
            Ok(Err(e)) => e,
            Err(_) => libc::EIO,
        },
        _ => pass!(posix_fallocate(fd, off, len), libc::ENOSYS),
    }
}

#[no_mangle]
pub unsafe extern "C" fn posix_fallocate64(fd: c_int, off: off64_t, len: off64_t) -> c_int {
    match (is_captured(fd), Guard::enter()) {
        (true, Some(_g)) => match catch_unwind(|| do_fallocate(fd, 0, off, len)) {
            Ok(Ok(())) => 0,
            Ok(Err(e)) => e,
            Err(_) => libc::EIO,
        },
        _ => pass!(posix_fallocate64(fd, off, len), libc::ENOSYS),
    }
}

// ---- POSIX AIO -----------------------------------------------------------
//
// glibc's AIO thread calls pwrite64 internally, past any wrapper; so a
// request on a captured descriptor is done at once, synchronously, and its
// result kept until aio_return asks for it.

unsafe fn aio_submit(cb: *mut aiocb, write: bool) -> Option<c_int> {
    if cb.is_null() || !is_captured((*cb).aio_fildes) {
        return None;
    }
    let _g = Guard::enter()?;
    let fd = (*cb).aio_fildes;
    let off = (*cb).aio_offset;
    let n = (*cb).aio_nbytes;
    let buf = (*cb).aio_buf;
    let (ret, err) = {
        let r = if write {
            do_write(fd, slice(buf, n), u64::try_from(off).ok())
        } else {
            do_read(fd, slice_mut(buf, n), u64::try_from(off).ok())
        };
        (r, if r < 0 { state::errno() } else { 0 })
    };
    let mut slot = lock();
    if let Some(st) = State::get(&mut slot) {
        st.aio.insert(cb as usize, (ret, err));
    }
    Some(0)
}

fn aio_result(cb: *const aiocb, take: bool) -> Option<(isize, c_int)> {
    let mut slot = lock();
    let st = slot.as_mut()?;
    if take {
        st.aio.remove(&(cb as usize))
    } else {
        st.aio.get(&(cb as usize)).copied()
    }
}

#[no_mangle]
pub unsafe extern "C" fn aio_write(cb: *mut aiocb) -> c_int {
    aio_submit(cb, true).unwrap_or_else(|| pass!(aio_write(cb), -1))
}

#[no_mangle]
pub unsafe extern "C" fn aio_write64(cb: *mut aiocb) -> c_int {
    aio_submit(cb, true).unwrap_or_else(|| pass!(aio_write64(cb), -1))
}

#[no_mangle]
pub unsafe extern "C" fn aio_read(cb: *mut aiocb) -> c_int {
    aio_submit(cb, false).unwrap_or_else(|| pass!(aio_read(cb), -1))
}

#[no_mangle]
pub unsafe extern "C" fn aio_read64(cb: *mut aiocb) -> c_int {
    aio_submit(cb, false).unwrap_or_else(|| pass!(aio_read64(cb), -1))
}

#[no_mangle]
pub unsafe extern "C" fn aio_error(cb: *const aiocb) -> c_int {
    match aio_result(cb, false) {
        Some((_, err)) => err,
        None => pass!(aio_error(cb), libc::ENOSYS),
    }
}

#[no_mangle]
pub unsafe extern "C" fn aio_error64(cb: *const aiocb) -> c_int {
    match aio_result(cb, false) {
        Some((_, err)) => err,
        None => pass!(aio_error64(cb), libc::ENOSYS),
    }
}

#[no_mangle]
pub unsafe extern "C" fn aio_return(cb: *mut aiocb) -> ssize_t {
    match aio_result(cb, true) {
        Some((ret, err)) => {
            if ret < 0 {
                set_errno(err);
            }
            ret
        }
        None => pass!(aio_return(cb), -1),
    }
}

#[no_mangle]
pub unsafe extern "C" fn aio_return64(cb: *mut aiocb) -> ssize_t {
    match aio_result(cb, true) {
        Some((ret, err)) => {
            if ret < 0 {
                set_errno(err);
            }
            ret
        }
        None => pass!(aio_return64(cb), -1),
    }
}

unsafe fn any_ours(list: *const *const aiocb, n: c_int) -> bool {
    if list.is_null() || n <= 0 {
        return false;
    }
    std::slice::from_raw_parts(list, n as usize)
        .iter()
        .any(|&cb| !cb.is_null() && aio_result(cb, false).is_some())
}

/// A captured request is complete on submission, so suspend returns at once.
#[no_mangle]
pub unsafe extern "C" fn aio_suspend(
    list: *const *const aiocb,
    n: c_int,
    t: *const timespec,
) -> c_int {
    if any_ours(list, n) {
        return 0;
    }
    pass!(aio_suspend(list, n, t), -1)
}

#[no_mangle]
pub unsafe extern "C" fn aio_suspend64(
    list: *const *const aiocb,
    n: c_int,
    t: *const timespec,
) -> c_int {
    if any_ours(list, n) {
        return 0;
    }
    pass!(aio_suspend64(list, n, t), -1)
}

#[no_mangle]
pub unsafe extern "C" fn aio_cancel(fd: c_int, cb: *mut aiocb) -> c_int {
    if is_captured(fd) {
        return libc::AIO_ALLDONE;
    }
    pass!(aio_cancel(fd, cb), -1)
}

#[no_mangle]
pub unsafe extern "C" fn aio_cancel64(fd: c_int, cb: *mut aiocb) -> c_int {
    if is_captured(fd) {
        return libc::AIO_ALLDONE;
    }
    pass!(aio_cancel64(fd, cb), -1)
}
