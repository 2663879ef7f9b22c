//! Unique temporary names under the prefix: `mkstemp` and its variants,
//! `mkdtemp`. glibc makes these files with its internal `__open` and
//! `__mkdir`, which no wrapper sees, so `sed -i`, `sort -o` and every
//! library that saves through a temporary created its file past capture
//! (named MISSED at the end, and the rename onto the real name failed).
//! Here a template under the prefix gets its name chosen as glibc would
//! (the trailing `XXXXXX`, before an optional suffix, replaced in place)
//! and the file opened through capture's own `open` (`O_CREAT|O_EXCL`,
//! mode 0600), the directory made through capture's `mkdir` (0700).
//! Templates elsewhere go to the next definition untouched.

#![allow(clippy::missing_safety_doc)]

use std::ffi::CStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use libc::{c_char, c_int};

use crate::guard::Guard;
use crate::pass;
use crate::posix::under_prefix;
use crate::state::{self, resolve};

/// glibc's TMP_MAX: how many names are tried before EEXIST.
const ATTEMPTS: u32 = 238_328;
const LETTERS: &[u8; 62] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// Is the template's path under the prefix? Decided without holding the
/// guard, so that the `open`/`mkdir` called next is captured.
unsafe fn under(template: *const c_char) -> bool {
    if template.is_null() {
        return false;
    }
    let Some(_g) = Guard::enter() else {
        return false;
    };
    let p = Path::new(std::ffi::OsStr::from_bytes(
        CStr::from_ptr(template).to_bytes(),
    ));
    resolve(libc::AT_FDCWD, p).is_some_and(|abs| under_prefix(&abs).is_some())
}

/// Where the six bytes to replace start: the template ends with `XXXXXX`
/// followed by `suffix` bytes (EINVAL otherwise, as glibc).
unsafe fn slot(template: *const c_char, suffix: c_int) -> Option<usize> {
    let bytes = CStr::from_ptr(template).to_bytes();
    let end = bytes.len().checked_sub(usize::try_from(suffix).ok()?)?;
    let start = end.checked_sub(6)?;
    bytes[start..end]
        .iter()
        .all(|&b| b == b'X')
        .then_some(start)
}

/// A fresh random word for each attempt (the kernel's, or the clock's).
fn random_word() -> u64 {
    let mut v = 0u64;
    // SAFETY: getrandom into a local of the size given.
    let n = unsafe { libc::getrandom((&mut v as *mut u64).cast(), 8, libc::GRND_NONBLOCK) };
    if n != 8 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        v = t ^ (u64::from(std::process::id()) << 32) ^ v.rotate_left(17);
    }
    v
}

/// Fill the slot with a new name and call `make` until it does not fail
/// with EEXIST; the template keeps the name that worked.
unsafe fn try_names(
    template: *mut c_char,
    suffix: c_int,
    mut make: impl FnMut() -> c_int,
) -> c_int {
    let Some(start) = slot(template, suffix) else {
        state::set_errno(libc::EINVAL);
        return -1;
    };
    for _ in 0..ATTEMPTS {
        let mut w = random_word();
        for i in 0..6 {
            // SAFETY: start + 6 <= the template's length (slot checked).
            *template.add(start + i) = LETTERS[(w % 62) as usize] as c_char;
            w /= 62;
        }
        let r = make();
        if r >= 0 || state::errno() != libc::EEXIST {
            return r;
        }
    }
    state::set_errno(libc::EEXIST);
    -1
}

unsafe fn make_file(template: *mut c_char, suffix: c_int, flags: c_int) -> c_int {
    // Only the flags glibc lets through (O_APPEND, O_CLOEXEC, O_SYNC, ...);
    // the access mode is always read-write.
    let flags = (flags & !libc::O_ACCMODE) | libc::O_RDWR | libc::O_CREAT | libc::O_EXCL;
    try_names(template, suffix, || {
        crate::posix::open(template, flags, 0o600)
    })
}

#[no_mangle]
pub unsafe extern "C" fn mkstemp(template: *mut c_char) -> c_int {
    if !under(template) {
        return pass!(mkstemp(template), -1);
    }
    make_file(template, 0, 0)
}

#[no_mangle]
pub unsafe extern "C" fn mkstemp64(template: *mut c_char) -> c_int {
    if !under(template) {
        return pass!(mkstemp64(template), -1);
    }
    make_file(template, 0, 0)
}

#[no_mangle]
pub unsafe extern "C" fn mkostemp(template: *mut c_char, flags: c_int) -> c_int {
    if !under(template) {
        return pass!(mkostemp(template, flags), -1);
    }
    make_file(template, 0, flags)
}

#[no_mangle]
pub unsafe extern "C" fn mkostemp64(template: *mut c_char, flags: c_int) -> c_int {
    if !under(template) {
        return pass!(mkostemp64(template, flags), -1);
    }
    make_file(template, 0, flags)
}

#[no_mangle]
pub unsafe extern "C" fn mkstemps(template: *mut c_char, suffix: c_int) -> c_int {
    if !under(template) {
        return pass!(mkstemps(template, suffix), -1);
    }
    make_file(template, suffix, 0)
}

#[no_mangle]
pub unsafe extern "C" fn mkstemps64(template: *mut c_char, suffix: c_int) -> c_int {
    if !under(template) {
        return pass!(mkstemps64(template, suffix), -1);
    }
    make_file(template, suffix, 0)
}

#[no_mangle]
pub unsafe extern "C" fn mkostemps(template: *mut c_char, suffix: c_int, flags: c_int) -> c_int {
    if !under(template) {
        return pass!(mkostemps(template, suffix, flags), -1);
    }
    make_file(template, suffix, flags)
}

#[no_mangle]
pub unsafe extern "C" fn mkostemps64(template: *mut c_char, suffix: c_int, flags: c_int) -> c_int {
    if !under(template) {
        return pass!(mkostemps64(template, suffix, flags), -1);
    }
    make_file(template, suffix, flags)
}

#[no_mangle]
pub unsafe extern "C" fn mkdtemp(template: *mut c_char) -> *mut c_char {
    if !under(template) {
        return pass!(mkdtemp(template), std::ptr::null_mut());
    }
    match try_names(template, 0, || crate::dirops::mkdir(template, 0o700)) {
        0 => template,
        _ => std::ptr::null_mut(),
    }
}
