//! `dprintf`, `vdprintf` and their fortified forms (`__dprintf_chk`,
//! `__vdprintf_chk`) into a captured descriptor: glibc formats into its own
//! buffer and writes it with its internal `write`, past every wrapper (the
//! bytes would land in the placeholder and the epoch be refused). So the
//! text is formatted here (`vasprintf`) and written with capture's `write`;
//! any other descriptor goes to glibc's `vdprintf` as before.
//!
//! `dprintf` is variadic, which stable Rust cannot define. On x86_64 it is
//! a naked function that does what a C compiler's prologue of a variadic
//! function does (the System V ABI, §3.5.7): it saves the argument
//! registers into a register save area, builds a `va_list` over it and the
//! caller's stack arguments, and calls the `va_list` form. Other
//! architectures keep glibc's `dprintf` (caught by the sentinel, as
//! before: docs/capture.md, "What is not captured").

#![allow(clippy::missing_safety_doc)]

use libc::{c_char, c_int, c_void};

extern "C" {
    fn vasprintf(out: *mut *mut c_char, fmt: *const c_char, ap: *mut c_void) -> c_int;
}

/// Format and write through capture: the number of bytes written, or -1
/// with errno set (a short write is retried, as glibc's `write` loop).
unsafe fn captured(fd: c_int, fmt: *const c_char, ap: *mut c_void) -> c_int {
    let mut text: *mut c_char = std::ptr::null_mut();
    let n = vasprintf(&mut text, fmt, ap);
    if n < 0 {
        return -1;
    }
    let mut done = 0usize;
    let mut rc = n;
    while done < n as usize {
        let w = crate::io::write(fd, text.add(done) as *const c_void, n as usize - done);
        if w <= 0 {
            rc = -1;
            break;
        }
        done += w as usize;
    }
    libc::free(text as *mut c_void);
    rc
}

#[no_mangle]
pub unsafe extern "C" fn vdprintf(fd: c_int, fmt: *const c_char, ap: *mut c_void) -> c_int {
    if crate::state::is_captured(fd) {
        return captured(fd, fmt, ap);
    }
    crate::pass!(vdprintf(fd, fmt, ap), -1)
}

#[no_mangle]
pub unsafe extern "C" fn __vdprintf_chk(
    fd: c_int,
    flag: c_int,
    fmt: *const c_char,
    ap: *mut c_void,
) -> c_int {
    if crate::state::is_captured(fd) {
        return captured(fd, fmt, ap);
    }
    crate::pass!(__vdprintf_chk(fd, flag, fmt, ap), -1)
}

/// The `va_list` form `dprintf` calls.
unsafe extern "C" fn dprintf_va(fd: c_int, fmt: *const c_char, ap: *mut c_void) -> c_int {
    vdprintf(fd, fmt, ap)
}

unsafe extern "C" fn dprintf_chk_va(
    fd: c_int,
    flag: c_int,
    fmt: *const c_char,
    ap: *mut c_void,
) -> c_int {
    __vdprintf_chk(fd, flag, fmt, ap)
}

/// A variadic entry point on x86_64 (the `va_list` prologue a C compiler
/// writes, once for both): `gp` is the gp_offset past its named integer
/// arguments, `ap` the register that passes the built `va_list` (the one
/// after the named arguments) to `$va`, its `va_list` form.
macro_rules! variadic_entry {
    ($(#[$doc:meta])* $name:ident, gp = $gp:literal, ap = $ap:literal, $va:ident) => {
        $(#[$doc])*
        #[cfg(target_arch = "x86_64")]
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name() {
            std::arch::naked_asm!(
                "sub rsp, 216",
                "mov [rsp], rdi",
                "mov [rsp + 8], rsi",
                "mov [rsp + 16], rdx",
                "mov [rsp + 24], rcx",
                "mov [rsp + 32], r8",
                "mov [rsp + 40], r9",
                "test al, al",
                "je 2f",
                "movaps [rsp + 48], xmm0",
                "movaps [rsp + 64], xmm1",
                "movaps [rsp + 80], xmm2",
                "movaps [rsp + 96], xmm3",
                "movaps [rsp + 112], xmm4",
                "movaps [rsp + 128], xmm5",
                "movaps [rsp + 144], xmm6",
                "movaps [rsp + 160], xmm7",
                "2:",
                concat!("mov dword ptr [rsp + 176], ", $gp),
                "mov dword ptr [rsp + 180], 48",
                "lea rax, [rsp + 224]",
                "mov [rsp + 184], rax",
                "mov [rsp + 192], rsp",
                concat!("lea ", $ap, ", [rsp + 176]"),
                "call {f}",
                "add rsp, 216",
                "ret",
                f = sym $va,
            )
        }
    };
}

pub(crate) use variadic_entry;

variadic_entry!(
    /// `dprintf(fd, fmt, ...)`. The frame: a register save area of 176 bytes
    /// at rsp (rdi, rsi, rdx, rcx, r8, r9, then xmm0-7, saved only when al,
    /// the caller's count of vector registers, is not zero), the `va_list` at
    /// rsp+176 (gp_offset 16: two named integer arguments; fp_offset 48;
    /// overflow_arg_area: the caller's stack arguments, above the return
    /// address; reg_save_area), 216 bytes in all, so that rsp is 16-aligned
    /// for `movaps` and for the call.
    dprintf,
    gp = "16",
    ap = "rdx",
    dprintf_va
);

variadic_entry!(
    /// `__dprintf_chk(fd, flag, fmt, ...)`: as `dprintf`, with three named
    /// integer arguments (gp_offset 24) and the `va_list` in rcx.
    __dprintf_chk,
    gp = "24",
    ap = "rcx",
    dprintf_chk_va
);
