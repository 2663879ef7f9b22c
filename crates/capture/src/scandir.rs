//! `scandir`, `scandir64`, `scandirat`, `scandirat64` of a directory under
//! the prefix: glibc's walk calls its internal `opendir`/`readdir`, past
//! the wrappers, and would list the real prefix only (not the files that
//! exist in capture's view alone). So the walk is made here on capture's
//! listing (crate::dirlist), as glibc makes it: every entry the filter
//! keeps (all without one) copied into its own `malloc`ed record, the
//! array `malloc`ed, sorted with the caller's comparison (`qsort`), and
//! everything the caller's to `free`. Any other directory goes to glibc.

#![allow(clippy::missing_safety_doc)]

use std::ffi::{CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use libc::{c_char, c_int, c_void, dirent64};

use crate::guard::Guard;

type Filter = unsafe extern "C" fn(*const dirent64) -> c_int;
type Compar = unsafe extern "C" fn(*const c_void, *const c_void) -> c_int;

/// The directory `dirfd`/`path` names, if capture lists it.
unsafe fn listed(dirfd: c_int, path: *const c_char) -> Option<PathBuf> {
    if path.is_null() {
        return None;
    }
    let _g = Guard::enter()?;
    let p = Path::new(OsStr::from_bytes(CStr::from_ptr(path).to_bytes()));
    crate::dirlist::listed_dir(crate::state::resolve(dirfd, p)?)
}

/// glibc's scandir on capture's listing of `dir`.
unsafe fn scan(
    dir: &Path,
    out: *mut *mut *mut dirent64,
    filter: *mut c_void,
    compar: *mut c_void,
) -> c_int {
    let Ok(c) = CString::new(dir.as_os_str().as_bytes()) else {
        crate::state::set_errno(libc::EINVAL);
        return -1;
    };
    let d = crate::dirlist::opendir(c.as_ptr());
    if d.is_null() {
        return -1;
    }
    let filter: Option<Filter> = (!filter.is_null()).then(|| std::mem::transmute(filter));
    let mut v: Vec<*mut dirent64> = Vec::new();
    let size = std::mem::size_of::<dirent64>();
    let mut failed = false;
    loop {
        let e = crate::dirlist::readdir64(d);
        if e.is_null() {
            break;
        }
        if filter.is_some_and(|f| f(e) == 0) {
            continue;
        }
        // A listing's records are whole `dirent64`s.
        let m = libc::malloc(size) as *mut dirent64;
        if m.is_null() {
            failed = true;
            break;
        }
        std::ptr::copy_nonoverlapping(e, m, 1);
        v.push(m);
    }
    crate::dirlist::closedir(d);
    let arr = if failed {
        std::ptr::null_mut()
    } else {
        libc::malloc(v.len().max(1) * std::mem::size_of::<*mut dirent64>()) as *mut *mut dirent64
    };
    if arr.is_null() {
        for m in v {
            libc::free(m as *mut c_void);
        }
        crate::state::set_errno(libc::ENOMEM);
        return -1;
    }
    std::ptr::copy_nonoverlapping(v.as_ptr(), arr, v.len());
    if !compar.is_null() {
        let compar: Compar = std::mem::transmute(compar);
        libc::qsort(
            arr as *mut c_void,
            v.len(),
            std::mem::size_of::<*mut dirent64>(),
            Some(compar),
        );
    }
    *out = arr;
    v.len() as c_int
}

crate::twins! {
    scandir, scandir64 => fn(
        path: *const c_char,
        out: *mut *mut *mut dirent64,
        filter: *mut c_void,
        compar: *mut c_void,
    ) -> c_int, -1, |real| {
        match listed(libc::AT_FDCWD, path) {
            Some(dir) => scan(&dir, out, filter, compar),
            None => real(path, out, filter, compar),
        }
    }
}

crate::twins! {
    scandirat, scandirat64 => fn(
        dirfd: c_int,
        path: *const c_char,
        out: *mut *mut *mut dirent64,
        filter: *mut c_void,
        compar: *mut c_void,
    ) -> c_int, -1, |real| {
        match listed(dirfd, path) {
            Some(dir) => scan(&dir, out, filter, compar),
            None => real(dirfd, path, out, filter, compar),
        }
    }
}
