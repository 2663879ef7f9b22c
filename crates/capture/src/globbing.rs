//! `glob` and `glob64` under capture: glibc's glob lists directories with
//! its own internal `opendir`/`readdir`, past the wrappers, so a pattern
//! would see only the real directories (not a checkpoint set's members,
//! not captured files the drain has not written yet). With capture on,
//! the real glob runs with `GLOB_ALTDIRFUNC` and capture's own directory
//! and stat functions (docs/aggregate.md, "Restart reads"); they pass
//! through for every directory outside the prefix. A caller that brings
//! its own `GLOB_ALTDIRFUNC` functions keeps them.

#![allow(clippy::missing_safety_doc)]

use libc::{c_char, c_int, c_void, size_t, DIR};

use crate::guard::Guard;

/// glibc's `GLOB_ALTDIRFUNC` (`<glob.h>`).
const GLOB_ALTDIRFUNC: c_int = 1 << 9;
/// glibc's `GLOB_NOSPACE`: what a missing real glob reports.
const GLOB_NOSPACE: c_int = 1;

/// glibc's `glob_t` (and `glob64_t`, the same layout on 64-bit Linux),
/// with the directory functions that `GLOB_ALTDIRFUNC` uses.
#[repr(C)]
struct GlobT {
    gl_pathc: size_t,
    gl_pathv: *mut *mut c_char,
    gl_offs: size_t,
    gl_flags: c_int,
    gl_closedir: Option<unsafe extern "C" fn(*mut c_void)>,
    gl_readdir: Option<unsafe extern "C" fn(*mut c_void) -> *mut c_void>,
    gl_opendir: Option<unsafe extern "C" fn(*const c_char) -> *mut c_void>,
    gl_lstat: Option<unsafe extern "C" fn(*const c_char, *mut c_void) -> c_int>,
    gl_stat: Option<unsafe extern "C" fn(*const c_char, *mut c_void) -> c_int>,
}

unsafe extern "C" fn alt_opendir(p: *const c_char) -> *mut c_void {
    crate::dirlist::opendir(p) as *mut c_void
}

unsafe extern "C" fn alt_closedir(d: *mut c_void) {
    crate::dirlist::closedir(d as *mut DIR);
}

unsafe extern "C" fn alt_readdir(d: *mut c_void) -> *mut c_void {
    crate::dirlist::readdir(d as *mut DIR) as *mut c_void
}

unsafe extern "C" fn alt_readdir64(d: *mut c_void) -> *mut c_void {
    crate::dirlist::readdir64(d as *mut DIR) as *mut c_void
}

unsafe extern "C" fn alt_stat(p: *const c_char, b: *mut c_void) -> c_int {
    crate::stat::stat(p, b as *mut libc::stat)
}

unsafe extern "C" fn alt_lstat(p: *const c_char, b: *mut c_void) -> c_int {
    crate::stat::lstat(p, b as *mut libc::stat)
}

unsafe extern "C" fn alt_stat64(p: *const c_char, b: *mut c_void) -> c_int {
    crate::stat::stat64(p, b as *mut libc::stat64)
}

unsafe extern "C" fn alt_lstat64(p: *const c_char, b: *mut c_void) -> c_int {
    crate::stat::lstat64(p, b as *mut libc::stat64)
}

/// Whether this call should list through capture's functions.
unsafe fn ours(pattern: *const c_char, flags: c_int, pglob: *mut c_void) -> bool {
    if pattern.is_null() || pglob.is_null() || flags & GLOB_ALTDIRFUNC != 0 {
        return false;
    }
    // Held while the settings are read: their first reading stats paths,
    // which must not come back into capture.
    let Some(_g) = Guard::enter() else {
        return false;
    };
    matches!(crate::state::settings(), crate::settings::Settings::On(_))
}

type RealGlob = unsafe extern "C" fn(*const c_char, c_int, *mut c_void, *mut c_void) -> c_int;

/// The directory and stat functions of one glob flavour.
struct Alt {
    readdir: unsafe extern "C" fn(*mut c_void) -> *mut c_void,
    stat: unsafe extern "C" fn(*const c_char, *mut c_void) -> c_int,
    lstat: unsafe extern "C" fn(*const c_char, *mut c_void) -> c_int,
}

const ALT: Alt = Alt {
    readdir: alt_readdir,
    stat: alt_stat,
    lstat: alt_lstat,
};

/// glob64's: `dirent64` and `stat64`.
const ALT64: Alt = Alt {
    readdir: alt_readdir64,
    stat: alt_stat64,
    lstat: alt_lstat64,
};

unsafe fn glob_with(
    real: Option<RealGlob>,
    alt: Alt,
    pattern: *const c_char,
    flags: c_int,
    errfunc: *mut c_void,
    pglob: *mut c_void,
) -> c_int {
    let Some(real) = real else {
        crate::report::line("no next definition of glob");
        return GLOB_NOSPACE;
    };
    if !ours(pattern, flags, pglob) {
        return real(pattern, flags, errfunc, pglob);
    }
    let g = &mut *(pglob as *mut GlobT);
    g.gl_opendir = Some(alt_opendir);
    g.gl_closedir = Some(alt_closedir);
    g.gl_readdir = Some(alt.readdir);
    g.gl_stat = Some(alt.stat);
    g.gl_lstat = Some(alt.lstat);
    real(pattern, flags | GLOB_ALTDIRFUNC, errfunc, pglob)
}

#[no_mangle]
pub unsafe extern "C" fn glob(
    pattern: *const c_char,
    flags: c_int,
    errfunc: *mut c_void,
    pglob: *mut c_void,
) -> c_int {
    glob_with(crate::real::glob(), ALT, pattern, flags, errfunc, pglob)
}

#[no_mangle]
pub unsafe extern "C" fn glob64(
    pattern: *const c_char,
    flags: c_int,
    errfunc: *mut c_void,
    pglob: *mut c_void,
) -> c_int {
    glob_with(crate::real::glob64(), ALT64, pattern, flags, errfunc, pglob)
}
