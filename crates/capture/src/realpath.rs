//! Path resolution of captured files: `realpath`, `canonicalize_file_name`,
//! `readlink`, `readlinkat`. A file the program wrote may exist only in
//! capture's view (its bytes are in the node-local log, or drained to a
//! remote other than the prefix), and glibc's `realpath` walks the path
//! with its internal `readlink`, which no wrapper sees: it failed with
//! ENOENT for a file the program had just written. Here the real call
//! answers first; when it says ENOENT for a path capture knows to exist,
//! the answer is capture's: the file is a regular file (readlink: EINVAL),
//! and its real path is its directory's real path (directories are real)
//! joined with its name.

#![allow(clippy::missing_safety_doc)]

use std::ffi::{CStr, CString, OsStr};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use libc::{c_char, c_int, size_t, ssize_t};

use crate::namespace::at_path;
use crate::pass;
use crate::posix::logged_state;
use crate::state::{self, lock, State};

/// The absolute path of `path` (relative to `dirfd`) when it is under the
/// prefix and capture's view holds a file there.
unsafe fn captured_file(dirfd: c_int, path: *const c_char) -> Option<PathBuf> {
    let (_g, abs) = at_path(dirfd, path)?;
    let open = {
        let mut slot = lock();
        State::get(&mut slot)?.by_path.contains_key(&abs)
    };
    (open || matches!(logged_state(&abs), Ok(Some((true, _))))).then_some(abs)
}

/// `realpath` of a file that exists in capture's view only: its parent's
/// real path (the real call resolves the directories and their links)
/// joined with its name.
unsafe fn view_realpath(abs: &Path) -> Option<CString> {
    let parent = CString::new(abs.parent()?.as_os_str().as_bytes()).ok()?;
    let name = abs.file_name()?;
    let dir = pass!(
        realpath(parent.as_ptr(), std::ptr::null_mut()),
        std::ptr::null_mut()
    );
    if dir.is_null() {
        return None;
    }
    let mut joined = PathBuf::from(OsStr::from_bytes(CStr::from_ptr(dir).to_bytes()));
    libc::free(dir.cast());
    joined.push(name);
    CString::new(joined.into_os_string().into_vec()).ok()
}

unsafe fn realpath_common(path: *const c_char, resolved: *mut c_char) -> *mut c_char {
    let r = pass!(realpath(path, resolved), std::ptr::null_mut());
    if !r.is_null() || state::errno() != libc::ENOENT {
        return r;
    }
    let Some(abs) = captured_file(libc::AT_FDCWD, path) else {
        state::set_errno(libc::ENOENT);
        return r;
    };
    let Some(full) = view_realpath(&abs) else {
        state::set_errno(libc::ENOENT);
        return std::ptr::null_mut();
    };
    let bytes = full.as_bytes_with_nul();
    if resolved.is_null() {
        let out = libc::malloc(bytes.len()).cast::<c_char>();
        if out.is_null() {
            state::set_errno(libc::ENOMEM);
            return out;
        }
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast(), out, bytes.len());
        return out;
    }
    if bytes.len() > libc::PATH_MAX as usize {
        state::set_errno(libc::ENAMETOOLONG);
        return std::ptr::null_mut();
    }
    std::ptr::copy_nonoverlapping(bytes.as_ptr().cast(), resolved, bytes.len());
    resolved
}

#[no_mangle]
pub unsafe extern "C" fn realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char {
    realpath_common(path, resolved)
}

#[no_mangle]
pub unsafe extern "C" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    realpath_common(path, std::ptr::null_mut())
}

/// A file of capture's view is a regular file, not a link: EINVAL, as the
/// kernel answers readlink of a regular file.
unsafe fn readlink_common(
    dirfd: c_int,
    path: *const c_char,
    real: impl FnOnce() -> ssize_t,
) -> ssize_t {
    let n = real();
    if n >= 0 || state::errno() != libc::ENOENT {
        return n;
    }
    if captured_file(dirfd, path).is_some() {
        state::set_errno(libc::EINVAL);
    } else {
        state::set_errno(libc::ENOENT);
    }
    -1
}

#[no_mangle]
pub unsafe extern "C" fn readlink(path: *const c_char, buf: *mut c_char, size: size_t) -> ssize_t {
    readlink_common(libc::AT_FDCWD, path, || {
        pass!(readlink(path, buf, size), -1)
    })
}

#[no_mangle]
pub unsafe extern "C" fn readlinkat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    size: size_t,
) -> ssize_t {
    readlink_common(dirfd, path, || {
        pass!(readlinkat(dirfd, path, buf, size), -1)
    })
}
