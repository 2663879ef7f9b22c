//! `execl`, `execlp` and `execle`: glibc builds their argument vector and
//! calls its own `execve` inside, past every wrapper, so the parent's
//! writes were not committed before the new program ran, and a captured
//! file run this way was not found with a remote other than the prefix.
//! Here the arguments are collected from the variadic list and run by
//! capture's vector forms (crate::execpath), as `execv`, `execvp` and
//! `execve` would be.
//!
//! Variadic, so defined on x86_64 only (crate::dprintf's entry, the System
//! V `va_list`, §3.5.7); other architectures keep glibc's.

#![allow(clippy::missing_safety_doc)]
#![cfg(target_arch = "x86_64")]

use libc::{c_char, c_int, c_void};

/// The x86_64 `va_list` the entry builds.
#[repr(C)]
struct VaList {
    gp_offset: u32,
    fp_offset: u32,
    overflow_arg_area: *const *const c_char,
    reg_save_area: *const u8,
}

/// The next integer-class (pointer) argument: from the register save area
/// while the six integer registers last, then from the caller's stack.
unsafe fn next(ap: *mut VaList) -> *const c_char {
    let ap = &mut *ap;
    if ap.gp_offset < 48 {
        let p = *(ap.reg_save_area.add(ap.gp_offset as usize) as *const *const c_char);
        ap.gp_offset += 8;
        p
    } else {
        let p = *ap.overflow_arg_area;
        ap.overflow_arg_area = ap.overflow_arg_area.add(1);
        p
    }
}

/// `arg0` and the arguments after it up to the NULL that ends them: the
/// argument vector, NULL-terminated.
unsafe fn argv(arg0: *const c_char, ap: *mut VaList) -> Vec<*const c_char> {
    let mut v = vec![arg0];
    let mut last = arg0;
    while !last.is_null() {
        last = next(ap);
        v.push(last);
    }
    v
}

unsafe extern "C" fn execl_va(path: *const c_char, arg0: *const c_char, ap: *mut c_void) -> c_int {
    let v = argv(arg0, ap.cast());
    crate::execpath::execv(path, v.as_ptr())
}

unsafe extern "C" fn execlp_va(file: *const c_char, arg0: *const c_char, ap: *mut c_void) -> c_int {
    let v = argv(arg0, ap.cast());
    crate::execpath::execvp(file, v.as_ptr())
}

/// `execle`'s environment is the pointer after the NULL.
unsafe extern "C" fn execle_va(path: *const c_char, arg0: *const c_char, ap: *mut c_void) -> c_int {
    let v = argv(arg0, ap.cast());
    let envp = next(ap.cast()) as *const *const c_char;
    crate::execpath::execve(path, v.as_ptr(), envp)
}

crate::dprintf::variadic_entry!(
    /// `execl(path, arg0, ...)`: two named integer arguments (gp_offset
    /// 16), the `va_list` in rdx.
    execl,
    gp = "16",
    ap = "rdx",
    execl_va
);

crate::dprintf::variadic_entry!(
    /// `execlp(file, arg0, ...)`, as `execl`.
    execlp,
    gp = "16",
    ap = "rdx",
    execlp_va
);

crate::dprintf::variadic_entry!(
    /// `execle(path, arg0, ..., NULL, envp)`, as `execl`.
    execle,
    gp = "16",
    ap = "rdx",
    execle_va
);
