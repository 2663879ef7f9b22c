//! Extended attributes of a captured file by path (`ls -l` asks for its
//! security label and ACL of every entry): the log keeps none, so a file
//! that exists in capture's view and not (yet) in the prefix has none,
//! instead of the prefix's ENOENT. A file the prefix holds answers as the
//! kernel does; descriptors (the placeholder memfd has none) too. Setting
//! or removing one on such a file fails with ENOTSUP, as on a file system
//! without extended attributes (`cp -a`, `rsync -X` and `setfattr` report
//! or ignore that; ENOENT would contradict `stat`). The same for a
//! directory only the remote has (`remotedir`).

#![allow(clippy::missing_safety_doc)]

use libc::{c_char, c_int, c_void, size_t, ssize_t};

use crate::posix::{logged_state, prefix_path};
use crate::state::set_errno;

/// Whether `path` names a file of capture's view the prefix does not hold:
/// `Some(true)`; `Some(false)`: capture says it does not exist; `None`:
/// the real call answers.
unsafe fn view_only(path: *const c_char) -> Option<bool> {
    let (_g, abs, id) = prefix_path(path)?;
    if std::fs::symlink_metadata(&abs).is_ok() {
        return None;
    }
    if id.is_some() {
        return Some(true);
    }
    match logged_state(&abs) {
        Ok(Some((exists, _))) => Some(exists),
        // A directory only the remote has (a fresh prefix): it exists,
        // and capture gives it no attributes either.
        Ok(None) => crate::remotedir::for_missing(&abs).map(|_| true),
        Err(_) => None,
    }
}

unsafe fn answer(path: *const c_char, none: ssize_t, errno: libc::c_int) -> Option<ssize_t> {
    let exists = view_only(path)?;
    set_errno(if exists { errno } else { libc::ENOENT });
    Some(if exists && none >= 0 { none } else { -1 })
}

crate::twins! {
    getxattr, lgetxattr => fn(
        path: *const c_char,
        name: *const c_char,
        value: *mut c_void,
        size: size_t,
    ) -> ssize_t, -1, |real| {
        answer(path, -1, libc::ENODATA).unwrap_or_else(|| real(path, name, value, size))
    }
}

crate::twins! {
    listxattr, llistxattr => fn(path: *const c_char, list: *mut c_char, size: size_t) -> ssize_t, -1, |real| {
        answer(path, 0, 0).unwrap_or_else(|| real(path, list, size))
    }
}

crate::twins! {
    setxattr, lsetxattr => fn(
        path: *const c_char,
        name: *const c_char,
        value: *const c_void,
        size: size_t,
        flags: c_int,
    ) -> c_int, -1, |real| {
        answer(path, -1, libc::ENOTSUP).map_or_else(|| real(path, name, value, size, flags), |r| r as c_int)
    }
}

crate::twins! {
    removexattr, lremovexattr => fn(path: *const c_char, name: *const c_char) -> c_int, -1, |real| {
        answer(path, -1, libc::ENOTSUP).map_or_else(|| real(path, name), |r| r as c_int)
    }
}

/// Setting or removing an attribute through a descriptor of a captured
/// file: the placeholder memfd would take it (a POSIX ACL there even sets
/// the placeholder's mode, which nothing drains) and the log keeps none:
/// ENOTSUP, as by path. `cp -p` and `tar -x` set a file's mode as an ACL
/// and fall back to `fchmod`, which capture records, on ENOTSUP.
#[no_mangle]
pub unsafe extern "C" fn fsetxattr(
    fd: c_int,
    name: *const c_char,
    value: *const c_void,
    size: size_t,
    flags: c_int,
) -> c_int {
    if crate::state::is_captured(fd) {
        set_errno(libc::ENOTSUP);
        return -1;
    }
    crate::pass!(fsetxattr(fd, name, value, size, flags), -1)
}

#[no_mangle]
pub unsafe extern "C" fn fremovexattr(fd: c_int, name: *const c_char) -> c_int {
    if crate::state::is_captured(fd) {
        set_errno(libc::ENOTSUP);
        return -1;
    }
    crate::pass!(fremovexattr(fd, name), -1)
}
