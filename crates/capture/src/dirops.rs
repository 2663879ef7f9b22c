//! `mkdir` and `rmdir` under the prefix. They act on the prefix, and on a
//! POSIX remote other than the prefix too, since no directory reaches it
//! otherwise; `rmdir` first waits until every delete under the directory
//! is drained, so that the directory is empty on the remote as in the
//! program's view. A directory only the remote has (a fresh prefix,
//! remotedir.rs) holds a new one once its chain is made in the prefix, and
//! goes from the remote alone.

#![allow(clippy::missing_safety_doc)]

use std::path::Path;

use libc::{c_char, c_int, mode_t};

use crate::namespace::{at_path, c_path, remote_dir, until_drained};
use crate::pass;
use crate::posix::{contain, prefix_path};
use crate::report;
use crate::state::{self, lock, CResult, State};

unsafe fn mkdir_captured(abs: &Path, mode: mode_t, real: impl FnOnce() -> c_int) -> CResult<c_int> {
    if real() != 0 {
        let e = state::errno();
        // In a directory only the remote has (a fresh prefix): its chain is
        // made in the prefix first (and the name given whole: relative to
        // a dead directory the kernel finds nothing).
        if !(e == libc::ENOENT && crate::remotedir::make_parent(abs)) {
            return Err(e);
        }
        let c = c_path(abs)?;
        if pass!(mkdir(c.as_ptr(), mode), -1) != 0 {
            return Err(state::errno());
        }
    }
    let remote = {
        let mut slot = lock();
        State::get(&mut slot).and_then(|st| remote_dir(st, abs))
    };
    if let Some(r) = remote {
        let c = c_path(&r)?;
        if let Some(f) = crate::real::mkdir() {
            if f(c.as_ptr(), mode) != 0 && state::errno() != libc::EEXIST {
                report::line(&format!(
                    "mkdir {} on the remote: {}",
                    r.display(),
                    std::io::Error::last_os_error()
                ));
            }
        }
    }
    Ok(0)
}

#[no_mangle]
pub unsafe extern "C" fn mkdir(path: *const c_char, mode: mode_t) -> c_int {
    let Some((_g, abs, _)) = prefix_path(path) else {
        return pass!(mkdir(path, mode), -1);
    };
    contain("mkdir", -1, || {
        mkdir_captured(&abs, mode, || pass!(mkdir(path, mode), -1))
    })
}

#[no_mangle]
pub unsafe extern "C" fn mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    let Some((_g, abs)) = at_path(dirfd, path) else {
        return pass!(mkdirat(dirfd, path, mode), -1);
    };
    contain("mkdirat", -1, || {
        mkdir_captured(&abs, mode, || pass!(mkdirat(dirfd, path, mode), -1))
    })
}

/// rmdir under the prefix: empty in the program's view (no captured file
/// exists under it), and once every delete under it is drained, removed
/// from the prefix and from a POSIX remote other than it.
pub(crate) fn rmdir_captured(abs: &Path) -> CResult<c_int> {
    let in_obj = crate::remotedir::obj_directory(abs, false);
    until_drained(
        || {
            let mut slot = lock();
            let st = State::get(&mut slot).ok_or(libc::EINVAL)?;
            let under = crate::dirlist::logged(st, abs, true)?;
            if under.iter().any(|f| f.exists) {
                return Err(libc::ENOTEMPTY);
            }
            Ok(under.iter().any(|f| f.pending))
        },
        || format!("rmdir {}: the deletes under it", abs.display()),
    )?;
    let remote = {
        let mut slot = lock();
        State::get(&mut slot).and_then(|st| remote_dir(st, abs))
    };
    let c = c_path(abs)?;
    // SAFETY: a NUL-terminated path.
    let rc = unsafe { pass!(rmdir(c.as_ptr()), -1) };
    if rc != 0 {
        let e = state::errno();
        // Only an object layout had it: gone with the last object below.
        if e == libc::ENOENT && in_obj {
            return if crate::remotedir::obj_directory(abs, true) {
                Err(libc::ENOTEMPTY)
            } else {
                Ok(0)
            };
        }
        if !(e == libc::ENOENT && remote.is_some()) {
            return Err(e);
        }
    }
    if let Some(r) = remote {
        let c = c_path(&r)?;
        // SAFETY: a NUL-terminated path.
        if unsafe { pass!(rmdir(c.as_ptr()), -1) } != 0 {
            let e = state::errno();
            if e != libc::ENOENT {
                report::line(&format!(
                    "rmdir {} on the remote: {}",
                    r.display(),
                    std::io::Error::from_raw_os_error(e)
                ));
                return Err(e);
            }
        }
    }
    Ok(0)
}

#[no_mangle]
pub unsafe extern "C" fn rmdir(path: *const c_char) -> c_int {
    let Some((_g, abs, _)) = prefix_path(path) else {
        return pass!(rmdir(path), -1);
    };
    contain("rmdir", -1, || rmdir_captured(&abs))
}
