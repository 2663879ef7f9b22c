//! Descriptors and the working directory of directories only the remote
//! has (`remotedir`: a new job on a fresh prefix). The `fts` walks of
//! `find`, `du` and `rm -r`, GNU tar, Python's `os.fwalk` and
//! `shutil.rmtree` open each directory (`open(O_DIRECTORY)`), list it with
//! `fdopendir` and name its entries relative to that descriptor (`openat`,
//! `fstatat`, `unlinkat`); a shell's `cd` makes it the working directory
//! and the commands it runs then use relative names.
//!
//! Such a directory gets a descriptor of a **dead directory**: an empty
//! directory made in the node-local directory, opened and removed at once.
//! The kernel finds nothing in it and creates nothing in it (ENOENT), so a
//! call that reaches the kernel with a name relative to it can neither
//! read nor change the remote behind capture's back (a descriptor of the
//! remote's own directory could: its `unlinkat` would remove a drained file
//! past the log). Capture remembers which view directory each such
//! descriptor stands for, checked against the descriptor's device and
//! inode (a descriptor closed past the wrappers and reused is forgotten),
//! and resolves names relative to it (`state::resolve`) as under that
//! directory of the prefix. `chdir`/`fchdir` into one make a dead directory
//! the working directory and capture's working directory the view's
//! (`getcwd` answers it); `PWD` is set to it, so that a program this
//! process starts (whose working directory is that dead directory) takes
//! it over when its own capture loads.

#![allow(clippy::missing_safety_doc)]

use std::collections::BTreeMap;
use std::ffi::{CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use libc::{c_char, c_int};

use crate::state::{CResult, State};

/// The view directory a dead directory stands for, and the dead
/// directory's identity.
#[derive(Clone)]
struct Entry {
    abs: PathBuf,
    dev: u64,
    ino: u64,
    /// Where the next `getdents64` goes on in the listing.
    pos: usize,
}

static FDS: Mutex<BTreeMap<c_int, Entry>> = Mutex::new(BTreeMap::new());
static N_FDS: AtomicUsize = AtomicUsize::new(0);
static CWD: Mutex<Option<Entry>> = Mutex::new(None);
static IN_CWD: AtomicBool = AtomicBool::new(false);

/// The name dead directories are made under in the node-local directory
/// (".paralog-" names there are reserved for paralog's own files).
const DEAD: &str = ".paralog-dead-";

fn identity_of(fd: c_int) -> Option<(u64, u64)> {
    // SAFETY: a zeroed stat buffer filled by the kernel.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        (libc::syscall(libc::SYS_fstat, fd, &mut st) == 0).then_some((st.st_dev, st.st_ino))
    }
}

fn identity_of_cwd() -> Option<(u64, u64)> {
    // SAFETY: a NUL-terminated path and a zeroed stat buffer.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        let dot = c".";
        (libc::syscall(
            libc::SYS_newfstatat,
            libc::AT_FDCWD,
            dot.as_ptr(),
            &mut st,
            0,
        ) == 0)
            .then_some((st.st_dev, st.st_ino))
    }
}

/// A new dead directory's descriptor (`O_RDONLY|O_DIRECTORY`, and
/// `O_CLOEXEC` when asked), made with raw system calls (no wrapper).
fn dead_dir(st: &State, cloexec: bool) -> CResult<c_int> {
    static N: AtomicU64 = AtomicU64::new(0);
    let name = st.cfg.local.join(format!(
        "{DEAD}{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let c = CString::new(name.as_os_str().as_bytes()).map_err(|_| libc::EINVAL)?;
    let errno = || {
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    };
    // SAFETY: NUL-terminated paths; the descriptor is returned or closed.
    unsafe {
        if libc::syscall(libc::SYS_mkdirat, libc::AT_FDCWD, c.as_ptr(), 0o700) != 0 {
            return Err(errno());
        }
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | if cloexec { libc::O_CLOEXEC } else { 0 };
        let fd = libc::syscall(libc::SYS_openat, libc::AT_FDCWD, c.as_ptr(), flags, 0) as c_int;
        let e = errno();
        libc::syscall(
            libc::SYS_unlinkat,
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::AT_REMOVEDIR,
        );
        if fd < 0 {
            return Err(e);
        }
        Ok(fd)
    }
}

/// Whether `abs` is a directory only the remote has: the prefix lacks the
/// name and the remote has a directory standing in for it.
pub fn remote_only(st: &State, abs: &Path) -> bool {
    std::fs::symlink_metadata(abs).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        && crate::remotedir::stand_in(st, abs).is_some()
}

/// A descriptor standing for `abs` if it is a directory only the remote
/// has (`None`: it is not one).
pub fn open(st: &State, abs: &Path, flags: c_int) -> CResult<Option<c_int>> {
    if !remote_only(st, abs) {
        return Ok(None);
    }
    let fd = dead_dir(st, flags & libc::O_CLOEXEC != 0)?;
    remember(fd, abs);
    Ok(Some(fd))
}

fn remember(fd: c_int, abs: &Path) {
    let Some((dev, ino)) = identity_of(fd) else {
        return;
    };
    let e = Entry {
        abs: abs.to_path_buf(),
        dev,
        ino,
        pos: 0,
    };
    let mut fds = FDS.lock().unwrap_or_else(|p| p.into_inner());
    fds.insert(fd, e);
    N_FDS.store(fds.len(), Ordering::Relaxed);
}

/// The view directory `fd` stands for, if it is one of these descriptors.
pub fn path_of(fd: c_int) -> Option<PathBuf> {
    if N_FDS.load(Ordering::Relaxed) == 0 || fd < 0 {
        return None;
    }
    let e = FDS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&fd)
        .cloned()?;
    if identity_of(fd) == Some((e.dev, e.ino)) {
        return Some(e.abs);
    }
    forget(fd);
    None
}

/// Where `getdents64` of `fd` goes on.
pub fn cursor(fd: c_int) -> usize {
    FDS.lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&fd)
        .map_or(0, |e| e.pos)
}

pub fn set_cursor(fd: c_int, pos: usize) {
    if let Some(e) = FDS.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&fd) {
        e.pos = pos;
    }
}

/// `fd` is closed (or reused): it stands for nothing any more.
pub fn forget(fd: c_int) {
    if N_FDS.load(Ordering::Relaxed) == 0 {
        return;
    }
    let mut fds = FDS.lock().unwrap_or_else(|p| p.into_inner());
    fds.remove(&fd);
    N_FDS.store(fds.len(), Ordering::Relaxed);
}

/// `new` is a duplicate of `old` (`dup`, `dup2`, `F_DUPFD`).
pub fn dup(old: c_int, new: c_int) {
    if new < 0 || old == new {
        return;
    }
    forget(new);
    if let Some(abs) = path_of(old) {
        remember(new, &abs);
    }
}

/// The view directory that is the working directory, if it is one only
/// the remote has (checked against the real working directory: a
/// `chdir` past the wrappers ends it).
pub fn cwd() -> Option<PathBuf> {
    if !IN_CWD.load(Ordering::Relaxed) {
        return None;
    }
    let e = CWD.lock().unwrap_or_else(|p| p.into_inner()).clone()?;
    if identity_of_cwd() == Some((e.dev, e.ino)) {
        return Some(e.abs);
    }
    leave_cwd();
    None
}

/// The working directory is a real one again.
pub fn leave_cwd() {
    if IN_CWD.swap(false, Ordering::Relaxed) {
        *CWD.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// The working directory this process started in, when it is a dead
/// directory its parent made (`getcwd` fails there with ENOENT): the
/// parent set `PWD` to the view directory it stands for. Taken over when
/// the library loads (`inherit::at_load`: one `readlink` per process).
pub fn inherited_cwd() -> Option<PathBuf> {
    let crate::settings::Settings::On(c) = crate::state::settings() else {
        return None;
    };
    let link = std::fs::read_link("/proc/self/cwd").ok()?;
    let link = link.as_os_str().as_bytes();
    let dead = c.local.join(DEAD);
    if !(link.starts_with(dead.as_os_str().as_bytes()) && link.ends_with(b" (deleted)")) {
        return None;
    }
    let pwd = PathBuf::from(std::env::var_os("PWD")?);
    if !pwd.is_absolute() {
        return None;
    }
    // Never a directory outside the prefix (`..` in PWD).
    let pwd = crate::settings::normalize(&pwd);
    if !pwd.starts_with(&c.prefix) {
        return None;
    }
    let (dev, ino) = identity_of_cwd()?;
    enter_cwd(&pwd, dev, ino);
    Some(pwd)
}

fn enter_cwd(abs: &Path, dev: u64, ino: u64) {
    *CWD.lock().unwrap_or_else(|p| p.into_inner()) = Some(Entry {
        abs: abs.to_path_buf(),
        dev,
        ino,
        pos: 0,
    });
    IN_CWD.store(true, Ordering::Relaxed);
}

/// Make the dead directory `fd` (standing for `abs`) the working
/// directory.
fn change_to(fd: c_int, abs: &Path) -> CResult<c_int> {
    // SAFETY: a descriptor of ours.
    if unsafe { libc::syscall(libc::SYS_fchdir, fd) } != 0 {
        return Err(crate::state::errno());
    }
    let (dev, ino) = identity_of(fd).ok_or(libc::EIO)?;
    enter_cwd(abs, dev, ino);
    // What a shell does on `cd`, and what a program started from here
    // reads to know where it is (`inherited_cwd`).
    std::env::set_var("PWD", abs);
    Ok(0)
}

/// A path relative to a descriptor of ours, or to a working directory of
/// ours, as an absolute path of the view: the kernel must never see the
/// relative name, which it would look up in the dead directory (and `..`
/// would lead into the node-local directory).
pub unsafe fn absolute(dirfd: c_int, path: *const c_char) -> Option<CString> {
    if path.is_null() || (N_FDS.load(Ordering::Relaxed) == 0 && !IN_CWD.load(Ordering::Relaxed)) {
        return None;
    }
    let p = CStr::from_ptr(path).to_bytes();
    if p.first() == Some(&b'/') {
        return None;
    }
    let base = if dirfd == libc::AT_FDCWD {
        cwd()?
    } else {
        path_of(dirfd)?
    };
    let abs = crate::settings::normalize(&base.join(OsStr::from_bytes(p)));
    CString::new(abs.as_os_str().as_bytes()).ok()
}

#[no_mangle]
pub unsafe extern "C" fn chdir(path: *const c_char) -> c_int {
    let rewritten = absolute(libc::AT_FDCWD, path);
    let path = rewritten.as_ref().map_or(path, |c| c.as_ptr());
    if let Some((_g, abs, _)) = crate::posix::prefix_path(path) {
        let fd = crate::posix::contain("chdir", Some(-1), || {
            let mut slot = crate::state::lock();
            let st = State::get(&mut slot).ok_or(libc::EINVAL)?;
            match remote_only(st, &abs) {
                true => dead_dir(st, true).map(Some),
                false => Ok(None),
            }
        });
        match fd {
            Some(-1) => return -1,
            Some(fd) => {
                let r = crate::posix::contain("chdir", -1, || change_to(fd, &abs));
                libc::syscall(libc::SYS_close, fd);
                return r;
            }
            None => {}
        }
    }
    let rc = crate::pass!(chdir(path), -1);
    if rc == 0 {
        leave_cwd();
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn fchdir(fd: c_int) -> c_int {
    if let Some(abs) = path_of(fd) {
        if let Some(_g) = crate::guard::Guard::enter() {
            return crate::posix::contain("fchdir", -1, || change_to(fd, &abs));
        }
    }
    let rc = crate::pass!(fchdir(fd), -1);
    if rc == 0 {
        leave_cwd();
    }
    rc
}

/// `getcwd` in a directory only the remote has: the view's path (the
/// kernel's fails there with ENOENT, the directory being dead).
#[no_mangle]
pub unsafe extern "C" fn getcwd(buf: *mut c_char, size: libc::size_t) -> *mut c_char {
    let abs = match cwd() {
        Some(abs) => abs,
        None => {
            let r = crate::pass!(getcwd(buf, size), std::ptr::null_mut());
            if !r.is_null() || crate::state::errno() != libc::ENOENT {
                return r;
            }
            // Started in a dead directory (a parent's `cd`).
            match crate::guard::Guard::enter().and_then(|_g| inherited_cwd()) {
                Some(abs) => abs,
                None => {
                    crate::state::set_errno(libc::ENOENT);
                    return r;
                }
            }
        }
    };
    let bytes = abs.as_os_str().as_bytes();
    let need = bytes.len() + 1;
    let out = if buf.is_null() {
        let n = if size == 0 { need } else { size };
        if n < need {
            crate::state::set_errno(libc::ERANGE);
            return std::ptr::null_mut();
        }
        let p = libc::malloc(n) as *mut c_char;
        if p.is_null() {
            crate::state::set_errno(libc::ENOMEM);
            return p;
        }
        p
    } else {
        if size < need {
            crate::state::set_errno(if size == 0 {
                libc::EINVAL
            } else {
                libc::ERANGE
            });
            return std::ptr::null_mut();
        }
        buf
    };
    std::ptr::copy_nonoverlapping(bytes.as_ptr(), out as *mut u8, bytes.len());
    *out.add(bytes.len()) = 0;
    out
}
