//! stdio on captured files. glibc's `fopen` opens and writes inside libc,
//! past every wrapper, so a stream on a captured path is built here instead:
//! the descriptor comes from capture's own open, and the `FILE*` is a
//! `fopencookie` stream whose read, write, seek and close are capture's.
//! glibc's buffering is kept. libstdc++'s file streams open with `fopen`
//! and then write to `fileno(f)` with `write`, so `fileno` answers the
//! captured descriptor of such a stream.

#![allow(clippy::missing_safety_doc)]

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::Mutex;

use libc::{c_char, c_int, c_void, off64_t, size_t, ssize_t, FILE};

use crate::guard::Guard;
use crate::pass;
use crate::report;
use crate::state::{self, is_captured, resolve, set_errno, State};

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

/// The cookie of a captured stream: the descriptor its reads, writes and
/// seeks go to. `freopen` puts another file under the same stream by
/// replacing it; -1 once the stream is closed (a failed `freopen`).
struct Cookie {
    fd: AtomicI32,
}

/// Captured streams: `FILE*` address -> its `Cookie` (for `fileno` and
/// `freopen`).
static STREAMS: Mutex<Option<HashMap<usize, usize>>> = Mutex::new(None);
static N_STREAMS: AtomicUsize = AtomicUsize::new(0);

fn streams() -> std::sync::MutexGuard<'static, Option<HashMap<usize, usize>>> {
    STREAMS.lock().unwrap_or_else(|p| p.into_inner())
}

unsafe fn fd_of(cookie: *mut c_void) -> c_int {
    (*(cookie as *const Cookie)).fd.load(Ordering::Acquire)
}

unsafe extern "C" fn cookie_read(cookie: *mut c_void, buf: *mut c_char, n: size_t) -> ssize_t {
    match fd_of(cookie) {
        fd if fd >= 0 => crate::io::read(fd, buf as *mut c_void, n),
        _ => {
            set_errno(libc::EBADF);
            -1
        }
    }
}

unsafe extern "C" fn cookie_write(cookie: *mut c_void, buf: *const c_char, n: size_t) -> ssize_t {
    let fd = fd_of(cookie);
    if fd < 0 {
        set_errno(libc::EBADF);
        return 0;
    }
    // glibc wants the count written, or 0 on error (never negative).
    let mut done = 0usize;
    while done < n {
        let r = crate::io::write(fd, buf.add(done) as *const c_void, n - done);
        if r <= 0 {
            return done as ssize_t;
        }
        done += r as usize;
    }
    done as ssize_t
}

unsafe extern "C" fn cookie_seek(cookie: *mut c_void, off: *mut off64_t, whence: c_int) -> c_int {
    let fd = fd_of(cookie);
    if fd < 0 {
        set_errno(libc::EBADF);
        return -1;
    }
    let r = crate::io::lseek64(fd, *off, whence);
    if r < 0 {
        return -1;
    }
    *off = r;
    0
}

unsafe extern "C" fn cookie_close(cookie: *mut c_void) -> c_int {
    if let Some(m) = streams().as_mut() {
        let before = m.len();
        m.retain(|_, &mut c| c != cookie as usize);
        N_STREAMS.fetch_sub(before - m.len(), Ordering::Relaxed);
    }
    let fd = Box::from_raw(cookie as *mut Cookie).fd.into_inner();
    if fd < 0 {
        return 0;
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
    let cookie = Box::into_raw(Box::new(Cookie {
        fd: AtomicI32::new(fd),
    }));
    let f = fopencookie(cookie as *mut c_void, mode, io);
    if f.is_null() {
        let e = state::errno();
        drop(Box::from_raw(cookie));
        crate::posix::close(fd);
        set_errno(e);
        return f;
    }
    streams()
        .get_or_insert_with(HashMap::new)
        .insert(f as usize, cookie as usize);
    N_STREAMS.fetch_add(1, Ordering::Relaxed);
    f
}

/// Is this path one capture may take (under the prefix, capture on or
/// misconfigured)? Decided without the state lock.
pub(crate) unsafe fn maybe_captured(path: *const c_char) -> bool {
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

/// The cookie of a captured stream.
fn cookie_of(f: *mut FILE) -> Option<&'static Cookie> {
    if N_STREAMS.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let c = streams().as_ref()?.get(&(f as usize)).copied()?;
    // SAFETY: a cookie lives until its stream's close, which removes it
    // from the table first.
    Some(unsafe { &*(c as *const Cookie) })
}

fn stream_fd(f: *mut FILE) -> Option<c_int> {
    let fd = cookie_of(f)?.fd.load(Ordering::Acquire);
    if fd < 0 {
        set_errno(libc::EBADF);
    }
    Some(fd)
}

#[no_mangle]
pub unsafe extern "C" fn fileno(f: *mut FILE) -> c_int {
    stream_fd(f).unwrap_or_else(|| pass!(fileno(f), -1))
}

#[no_mangle]
pub unsafe extern "C" fn fileno_unlocked(f: *mut FILE) -> c_int {
    stream_fd(f).unwrap_or_else(|| pass!(fileno_unlocked(f), -1))
}

// ---- freopen ----------------------------------------------------------------
//
// `freopen` must return the stream it was given (`freopen("out.txt", "w",
// stdout)` and then `printf`). Two kinds of stream:
// - capture's own (an `fopen`/`fdopen` of a captured file): a cookie stream.
//   Its old descriptor is closed through capture (a close, so a commit),
//   the new file is opened through capture (or not, outside the prefix),
//   and the same cookie refers to it; glibc's buffer state of the stream is
//   reset as its own freopen does. Everything stays captured.
// - glibc's (stdin, stdout, stderr, a stream of a file outside the prefix):
//   glibc reads and writes it itself, past every wrapper, and a cookie
//   cannot be put into an existing FILE object. glibc's freopen onto
//   /dev/null sets the stream up for the mode; then the captured
//   placeholder is `dup3`'ed onto the stream's descriptor, a shared
//   placeholder whose bytes are harvested into the log (crate::shared), as
//   for a shell's `>`. So only writing modes ("w", "a") are captured, the
//   writes sequential; "r" reads a private copy of the file as capture sees
//   it at the freopen; "r+", "w+", "a+" are refused with ENOTSUP and a line.

extern "C" {
    fn flockfile(f: *mut FILE);
    fn funlockfile(f: *mut FILE);
    fn _IO_free_backup_area(f: *mut FILE);
}

unsafe fn real_freopen(
    large: bool,
    path: *const c_char,
    mode: *const c_char,
    stream: *mut FILE,
) -> *mut FILE {
    if large {
        pass!(freopen64(path, mode, stream), std::ptr::null_mut())
    } else {
        pass!(freopen(path, mode, stream), std::ptr::null_mut())
    }
}

/// The captured path of a descriptor.
fn captured_path(fd: c_int) -> Option<CString> {
    let _g = Guard::enter()?;
    let mut slot = state::lock();
    let st = State::get(&mut slot)?;
    let h = st.handles.get(&st.fds.get(&fd)?.handle)?;
    CString::new(h.path.as_os_str().as_bytes()).ok()
}

unsafe fn freopen_common(
    path: *const c_char,
    mode: *const c_char,
    stream: *mut FILE,
    large: bool,
) -> *mut FILE {
    if stream.is_null() || mode.is_null() {
        return real_freopen(large, path, mode, stream);
    }
    // Held across the steps below, as glibc's freopen holds it (recursive).
    flockfile(stream);
    let r = match cookie_of(stream) {
        Some(cookie) => reopen_cookie(cookie, path, mode, stream),
        None => reopen_glibc(path, mode, stream, large),
    };
    funlockfile(stream);
    r
}

/// `freopen` of a stream glibc does the I/O of.
unsafe fn reopen_glibc(
    path: *const c_char,
    mode: *const c_char,
    stream: *mut FILE,
    large: bool,
) -> *mut FILE {
    let old = pass!(fileno(stream), -1);
    let old_captured = is_captured(old);
    let target = match (path.is_null(), old_captured) {
        (false, _) => CStr::from_ptr(path).to_owned(),
        // A mode change of a captured file: the file capture knows.
        (true, true) => match captured_path(old) {
            Some(p) => p,
            None => return real_freopen(large, path, mode, stream),
        },
        (true, false) => return real_freopen(large, path, mode, stream),
    };
    let into = maybe_captured(target.as_ptr());
    if !into && !old_captured {
        return real_freopen(large, path, mode, stream);
    }
    let flags = open_flags(CStr::from_ptr(mode).to_bytes());
    if into && flags.is_some_and(|f| f & libc::O_ACCMODE == libc::O_RDWR) {
        report::line(&format!(
            "freopen of {} with mode \"{}\" onto a stream glibc reads and writes itself (stdin, stdout, \
             stderr, or a stream of a file outside the prefix): its reads would miss capture; \
             fopen the file instead (docs/capture.md)",
            target.to_string_lossy(),
            CStr::from_ptr(mode).to_string_lossy()
        ));
        set_errno(libc::ENOTSUP);
        return std::ptr::null_mut();
    }
    if old_captured {
        // The old file is closed as fclose would: flushed into the
        // placeholder, then a close through capture (its commit). glibc's
        // freopen would close it past the wrappers.
        libc::fflush(stream);
        crate::posix::close(old);
    }
    let Some(flags) = flags.filter(|_| into) else {
        // Outside the prefix, or a mode glibc refuses (before any open).
        return real_freopen(large, target.as_ptr(), mode, stream);
    };
    // glibc sets the stream up for the mode on /dev/null ("x" dropped:
    // /dev/null exists; capture's open below checks it).
    let plain: Vec<u8> = CStr::from_ptr(mode)
        .to_bytes()
        .iter()
        .copied()
        .filter(|&c| c != b'x')
        .collect();
    let plain = CString::new(plain).unwrap_or_default();
    if real_freopen(large, c"/dev/null".as_ptr(), plain.as_ptr(), stream).is_null() {
        return std::ptr::null_mut();
    }
    let n = pass!(fileno(stream), -1);
    let fd = crate::posix::open(target.as_ptr(), flags, 0o666);
    let fd = if fd >= 0 && flags & libc::O_ACCMODE == libc::O_RDONLY && is_captured(fd) {
        read_copy(fd)
    } else {
        fd
    };
    let cloexec = flags & libc::O_CLOEXEC;
    if fd < 0 || crate::posix::dup3(fd, n, cloexec) < 0 {
        let e = state::errno();
        if fd >= 0 {
            crate::posix::close(fd);
        }
        // Failed: the stream ends closed, as after glibc's failed freopen.
        real_freopen(large, c"".as_ptr(), plain.as_ptr(), stream);
        set_errno(e);
        return std::ptr::null_mut();
    }
    crate::posix::close(fd);
    stream
}

/// A private memfd holding the bytes capture answers for the captured
/// descriptor `fd` (closed here): what a stream glibc reads itself reads.
unsafe fn read_copy(fd: c_int) -> c_int {
    let copy = (|| {
        let _g = Guard::enter()?;
        let m = libc::syscall(
            libc::SYS_memfd_create,
            c"paralog-copy".as_ptr(),
            libc::MFD_CLOEXEC,
        ) as c_int;
        if m < 0 {
            return None;
        }
        let mut buf = vec![0u8; 1 << 20];
        let mut at = 0u64;
        let ok = loop {
            let r = crate::io::do_read(fd, &mut buf, Some(at));
            if r <= 0 {
                break r == 0;
            }
            let mut w = 0usize;
            while w < r as usize {
                let k = libc::syscall(libc::SYS_write, m, buf[w..].as_ptr(), r as usize - w);
                if k <= 0 {
                    break;
                }
                w += k as usize;
            }
            if w < r as usize {
                break false;
            }
            at += r as u64;
        };
        libc::syscall(libc::SYS_lseek, m, 0i64, libc::SEEK_SET);
        if !ok {
            libc::syscall(libc::SYS_close, m);
            return None;
        }
        Some(m)
    })();
    let e = state::errno();
    crate::posix::close(fd);
    match copy {
        // A number the table may still list (closed past the wrappers).
        Some(m) => crate::posix::forget_if_stale(m),
        None => {
            set_errno(if e == 0 { libc::EIO } else { e });
            -1
        }
    }
}

/// `freopen` of a captured (cookie) stream: any mode, any file.
unsafe fn reopen_cookie(
    cookie: &Cookie,
    path: *const c_char,
    mode: *const c_char,
    stream: *mut FILE,
) -> *mut FILE {
    let flags = open_flags(CStr::from_ptr(mode).to_bytes());
    libc::fflush(stream);
    let old = cookie.fd.load(Ordering::Acquire);
    // A mode change (path NULL) reopens the same file: as capture knows
    // it, or (a stream moved outside the prefix) as the kernel does, opened
    // before the old descriptor goes, as glibc does.
    let mut target = None;
    let mut early = None;
    if path.is_null() {
        if old < 0 {
            set_errno(libc::EBADF);
            return std::ptr::null_mut();
        }
        target = captured_path(old);
        if let (None, Some(f)) = (&target, flags) {
            let proc = CString::new(format!("/proc/self/fd/{old}")).unwrap_or_default();
            let fd = crate::posix::open(proc.as_ptr(), f, 0o666);
            early = Some((fd, state::errno()));
        }
    }
    if old >= 0 {
        // The old file's close, as fclose would (through capture: its commit).
        crate::posix::close(old);
    }
    cookie.fd.store(-1, Ordering::Release);
    let Some(flags) = flags else {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    };
    let fd = match early {
        Some((fd, e)) => {
            set_errno(e);
            fd
        }
        None => crate::posix::open(target.as_ref().map_or(path, |t| t.as_ptr()), flags, 0o666),
    };
    if fd < 0 {
        return std::ptr::null_mut();
    }
    cookie.fd.store(fd, Ordering::Release);
    reset_stream(stream, flags);
    stream
}

/// glibc's `struct _IO_FILE` as <bits/types/struct_FILE.h> declares it (the
/// public ABI that getc/putc macros compile against), x86_64 and aarch64.
#[repr(C)]
struct GlibcFile {
    flags: c_int,
    read_ptr: *mut c_char,
    read_end: *mut c_char,
    read_base: *mut c_char,
    write_base: *mut c_char,
    write_ptr: *mut c_char,
    write_end: *mut c_char,
    buf_base: *mut c_char,
    buf_end: *mut c_char,
    save_base: *mut c_char,
    backup_base: *mut c_char,
    save_end: *mut c_char,
    markers: *mut c_void,
    chain: *mut c_void,
    fileno: c_int,
    flags2: c_int,
    old_offset: libc::c_long,
    cur_column: u16,
    vtable_offset: i8,
    shortbuf: [c_char; 1],
    lock: *mut c_void,
    offset: off64_t,
    codecvt: *mut c_void,
    wide_data: *mut c_void,
    freeres_list: *mut c_void,
    freeres_buf: *mut c_void,
    pad5: size_t,
    mode: c_int,
    unused2: [c_char; 20],
}

const _: () = assert!(std::mem::size_of::<GlibcFile>() == 216);

// glibc's internal flag bits (libio.h), unchanged since glibc 2.0.
const IO_NO_READS: c_int = 0x0004;
const IO_NO_WRITES: c_int = 0x0008;
const IO_EOF_SEEN: c_int = 0x0010;
const IO_ERR_SEEN: c_int = 0x0020;
const IO_IN_BACKUP: c_int = 0x0100;
const IO_CURRENTLY_PUTTING: c_int = 0x0800;
const IO_IS_APPENDING: c_int = 0x1000;

/// A flushed cookie stream made as fresh as glibc's freopen leaves its
/// streams: no buffered bytes, no cached offset, no error or end-of-file
/// indicator, the access of the new mode, byte orientation unbound (a
/// wide-oriented stream keeps its orientation).
unsafe fn reset_stream(f: *mut FILE, flags: c_int) {
    let g = f as *mut GlibcFile;
    if !(*g).save_base.is_null() {
        _IO_free_backup_area(f);
    }
    let b = (*g).buf_base;
    (*g).read_ptr = b;
    (*g).read_end = b;
    (*g).read_base = b;
    (*g).write_base = b;
    (*g).write_ptr = b;
    (*g).write_end = b;
    let access = match flags & libc::O_ACCMODE {
        libc::O_RDONLY => IO_NO_WRITES,
        libc::O_WRONLY => IO_NO_READS,
        _ => 0,
    } | if flags & libc::O_APPEND != 0 {
        IO_IS_APPENDING
    } else {
        0
    };
    (*g).flags = (*g).flags
        & !(IO_NO_READS
            | IO_NO_WRITES
            | IO_IS_APPENDING
            | IO_CURRENTLY_PUTTING
            | IO_EOF_SEEN
            | IO_ERR_SEEN
            | IO_IN_BACKUP)
        | access;
    (*g).offset = -1;
    if (*g).mode < 0 {
        (*g).mode = 0;
    }
}

#[no_mangle]
pub unsafe extern "C" fn freopen(
    path: *const c_char,
    mode: *const c_char,
    stream: *mut FILE,
) -> *mut FILE {
    freopen_common(path, mode, stream, false)
}

#[no_mangle]
pub unsafe extern "C" fn freopen64(
    path: *const c_char,
    mode: *const c_char,
    stream: *mut FILE,
) -> *mut FILE {
    freopen_common(path, mode, stream, true)
}

/// `fclose` of a stream glibc writes itself onto a captured descriptor
/// (a reopened stdout, an inherited placeholder): glibc closes the
/// descriptor past the wrappers, so capture closes it after (the harvest
/// of its last bytes and its commit), as `close` would.
#[no_mangle]
pub unsafe extern "C" fn fclose(f: *mut FILE) -> c_int {
    if f.is_null() || cookie_of(f).is_some() {
        return pass!(fclose(f), libc::EOF);
    }
    let n = pass!(fileno(f), -1);
    if !is_captured(n) {
        return pass!(fclose(f), libc::EOF);
    }
    let r = pass!(fclose(f), libc::EOF);
    let e = state::errno();
    let Some(_g) = Guard::enter() else {
        return r;
    };
    let closed = crate::posix::contain("fclose", libc::EOF, || {
        let mut slot = state::lock();
        let st = State::get(&mut slot).ok_or(libc::EBADF)?;
        match st.detach_fd(n) {
            Some(id) => st.after_close(id).map(|()| 0),
            None => Ok(0),
        }
    });
    if closed == libc::EOF {
        return libc::EOF;
    }
    set_errno(e);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mirror of glibc's FILE agrees with glibc on a real stream, and a
    /// reset stream takes the access of its new mode.
    #[test]
    fn glibc_file_layout_and_reset() {
        unsafe {
            let f = libc::tmpfile();
            assert!(!f.is_null());
            let g = f as *mut GlibcFile;
            assert_eq!((*g).fileno, pass!(fileno(f), -1));
            assert_eq!((*g).flags as u32 & 0xffff_0000, 0xfbad_0000, "_IO_MAGIC");
            assert_eq!(libc::fputs(c"abc".as_ptr(), f), 1);
            assert_eq!((*g).write_ptr.offset_from((*g).write_base), 3);
            assert_eq!((*g).mode, -1, "byte oriented after fputs");
            assert_eq!(libc::fflush(f), 0);
            reset_stream(f, libc::O_RDONLY);
            assert_eq!((*g).mode, 0);
            assert_eq!((*g).offset, -1);
            // Read-only now: a write fails at once, as on a stream opened "r".
            assert_eq!(libc::fputc(b'x' as c_int, f), libc::EOF);
            assert_eq!(libc::ferror(f), 1);
            reset_stream(f, libc::O_RDWR);
            assert_eq!(libc::ferror(f), 0);
            assert_eq!(libc::fseek(f, 0, libc::SEEK_SET), 0);
            let mut b = [0u8; 8];
            assert_eq!(libc::fread(b.as_mut_ptr() as *mut c_void, 1, 8, f), 3);
            assert_eq!(&b[..3], b"abc");
            pass!(fclose(f), libc::EOF);
        }
    }

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
