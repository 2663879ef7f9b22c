//! stdio on captured files. glibc's `fopen` opens and writes inside libc,
//! past every wrapper, so a stream on a captured path is built here instead:
//! the descriptor comes from capture's own open, and the `FILE*` is a
//! `fopencookie` stream whose read, write, seek and close are capture's.
//! glibc's buffering is kept. libstdc++'s file streams open with `fopen`
//! and then write to `fileno(f)` with `write`, so `fileno` answers the
//! captured descriptor of such a stream.

#![allow(clippy::missing_safety_doc)]

use std::collections::HashMap;
use std::ffi::CStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use libc::{c_char, c_int, c_void, off64_t, size_t, ssize_t, FILE};

use crate::guard::Guard;
use crate::pass;
use crate::report;
use crate::state::{self, is_captured, resolve, set_errno};

#[repr(C)]
struct CookieIo {
    read: Option<unsafe extern "C" fn(*mut c_void, *mut c_char, size_t) -> ssize_t>,
    write: Option<unsafe extern "C" fn(*mut c_void, *const c_char, size_t) -> ssize_t>,
    seek: Option<unsafe extern "C" fn(*mut c_void, *mut off64_t, c_int) -> c_int>,
    close: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
}

extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, io: CookieIo) -> *mut FILE;
}

/// Captured streams: `FILE*` address -> descriptor (for `fileno`).
static STREAMS: Mutex<Option<HashMap<usize, c_int>>> = Mutex::new(None);
static N_STREAMS: AtomicUsize = AtomicUsize::new(0);

fn streams() -> std::sync::MutexGuard<'static, Option<HashMap<usize, c_int>>> {
    STREAMS.lock().unwrap_or_else(|p| p.into_inner())
}

fn fd_of(cookie: *mut c_void) -> c_int {
    cookie as usize as c_int
}

unsafe extern "C" fn cookie_read(cookie: *mut c_void, buf: *mut c_char, n: size_t) -> ssize_t {
    crate::io::read(fd_of(cookie), buf as *mut c_void, n)
}

unsafe extern "C" fn cookie_write(cookie: *mut c_void, buf: *const c_char, n: size_t) -> ssize_t {
    // glibc wants the count written, or 0 on error (never negative).
    let mut done = 0usize;
    while done < n {
        let r = crate::io::write(fd_of(cookie), buf.add(done) as *const c_void, n - done);
        if r <= 0 {
            return done as ssize_t;
        }
        done += r as usize;
    }
    done as ssize_t
}

unsafe extern "C" fn cookie_seek(cookie: *mut c_void, off: *mut off64_t, whence: c_int) -> c_int {
    let r = crate::io::lseek64(fd_of(cookie), *off, whence);
    if r < 0 {
        return -1;
    }
    *off = r;
    0
}

unsafe extern "C" fn cookie_close(cookie: *mut c_void) -> c_int {
    let fd = fd_of(cookie);
    if let Some(m) = streams().as_mut() {
        let before = m.len();
        m.retain(|_, &mut f| f != fd);
        N_STREAMS.fetch_sub(before - m.len(), Ordering::Relaxed);
    }
    crate::posix::close(fd)
}

/// open(2) flags of an fopen mode string ("r", "w+", "ab", "wxe", ...).
fn open_flags(mode: &[u8]) -> Option<c_int> {
    let (mut flags, rest) = match mode.split_first()? {
        (b'r', r) => (libc::O_RDONLY, r),
        (b'w', r) => (libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC, r),
        (b'a', r) => (libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND, r),
        _ => return None,
    };
    for &c in rest.iter().take_while(|&&c| c != b',') {
        match c {
            b'+' => flags = (flags & !libc::O_ACCMODE) | libc::O_RDWR,
            b'x' => flags |= libc::O_EXCL,
            b'e' => flags |= libc::O_CLOEXEC,
            _ => {}
        }
    }
    Some(flags)
}

/// A stream over a captured descriptor; closes `fd` if none can be made.
unsafe fn cookie_stream(fd: c_int, mode: *const c_char) -> *mut FILE {
    let io = CookieIo {
        read: Some(cookie_read),
        write: Some(cookie_write),
        seek: Some(cookie_seek),
        close: Some(cookie_close),
    };
    let f = fopencookie(fd as usize as *mut c_void, mode, io);
    if f.is_null() {
        let e = state::errno();
        crate::posix::close(fd);
        set_errno(e);
        return f;
    }
    streams()
        .get_or_insert_with(HashMap::new)
        .insert(f as usize, fd);
    N_STREAMS.fetch_add(1, Ordering::Relaxed);
    f
}

/// Is this path one capture may take (under the prefix, capture on or
/// misconfigured)? Decided without the state lock.
unsafe fn maybe_captured(path: *const c_char) -> bool {
    if path.is_null() {
        return false;
    }
    let Some(_g) = Guard::enter() else {
        return false;
    };
    let p = Path::new(std::ffi::OsStr::from_bytes(CStr::from_ptr(path).to_bytes()));
    resolve(libc::AT_FDCWD, p).is_some_and(|abs| crate::posix::under_prefix(&abs).is_some())
}

unsafe fn fopen_common(path: *const c_char, mode: *const c_char) -> Option<*mut FILE> {
    if mode.is_null() || !maybe_captured(path) {
        return None;
    }
    let Some(flags) = open_flags(CStr::from_ptr(mode).to_bytes()) else {
        set_errno(libc::EINVAL);
        return Some(std::ptr::null_mut());
    };
    let fd = crate::posix::open(path, flags, 0o666);
    if fd < 0 {
        return Some(std::ptr::null_mut());
    }
    if is_captured(fd) {
        return Some(cookie_stream(fd, mode));
    }
    // Not taken by capture (e.g. a read of a drained file): a plain stream.
    let f = pass!(fdopen(fd, mode), std::ptr::null_mut());
    if f.is_null() {
        let e = state::errno();
        crate::posix::close(fd);
        set_errno(e);
    }
    Some(f)
}

#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut FILE {
    fopen_common(path, mode).unwrap_or_else(|| pass!(fopen(path, mode), std::ptr::null_mut()))
}

#[no_mangle]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut FILE {
    fopen_common(path, mode).unwrap_or_else(|| pass!(fopen64(path, mode), std::ptr::null_mut()))
}

/// `fdopen` of a captured descriptor: a captured stream over it.
#[no_mangle]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut FILE {
    if is_captured(fd) && !mode.is_null() {
        return cookie_stream(fd, mode);
    }
    pass!(fdopen(fd, mode), std::ptr::null_mut())
}

/// `freopen` keeps the caller's `FILE*`, whose writes glibc makes itself:
/// onto a captured path it cannot be captured, so it is refused loudly.
unsafe fn freopen_refused(path: *const c_char) -> bool {
    if !maybe_captured(path) {
        return false;
    }
    let p = CStr::from_ptr(path).to_string_lossy();
    report::line(&format!(
        "freopen of {p}: a reopened stream cannot be captured (glibc writes it past every wrapper); \
         use fopen (docs/capture.md)"
    ));
    set_errno(libc::ENOTSUP);
    true
}

#[no_mangle]
pub unsafe extern "C" fn freopen(
    path: *const c_char,
    mode: *const c_char,
    stream: *mut FILE,
) -> *mut FILE {
    if freopen_refused(path) {
        return std::ptr::null_mut();
    }
    pass!(freopen(path, mode, stream), std::ptr::null_mut())
}

#[no_mangle]
pub unsafe extern "C" fn freopen64(
    path: *const c_char,
    mode: *const c_char,
    stream: *mut FILE,
) -> *mut FILE {
    if freopen_refused(path) {
        return std::ptr::null_mut();
    }
    pass!(freopen64(path, mode, stream), std::ptr::null_mut())
}

fn stream_fd(f: *mut FILE) -> Option<c_int> {
    if N_STREAMS.load(Ordering::Relaxed) == 0 {
        return None;
    }
    streams().as_ref()?.get(&(f as usize)).copied()
}

#[no_mangle]
pub unsafe extern "C" fn fileno(f: *mut FILE) -> c_int {
    stream_fd(f).unwrap_or_else(|| pass!(fileno(f), -1))
}

#[no_mangle]
pub unsafe extern "C" fn fileno_unlocked(f: *mut FILE) -> c_int {
    stream_fd(f).unwrap_or_else(|| pass!(fileno_unlocked(f), -1))
}

#[cfg(test)]
mod tests {
    use super::open_flags;

    #[test]
    fn fopen_modes() {
        assert_eq!(open_flags(b"r"), Some(libc::O_RDONLY));
        assert_eq!(
            open_flags(b"wb"),
            Some(libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC)
        );
        assert_eq!(
            open_flags(b"a+"),
            Some(libc::O_RDWR | libc::O_CREAT | libc::O_APPEND)
        );
        assert_eq!(
            open_flags(b"wxe,ccs=UTF-8"),
            Some(libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_EXCL | libc::O_CLOEXEC)
        );
        assert_eq!(open_flags(b"q"), None);
    }
}
