//! Kernel copies into or out of a captured descriptor (`sendfile`,
//! `copy_file_range`, `splice`): the kernel would write the empty
//! placeholder, so the bytes are copied here instead, through capture's own
//! read and write (`cp` uses copy_file_range, `cat` and many servers
//! sendfile). Same results and offset rules as the calls.

#![allow(clippy::missing_safety_doc)]

use libc::{c_int, c_uint, c_void, off64_t, off_t, size_t, ssize_t};

use crate::state::is_captured;
use crate::{entry_points, twins};

const CHUNK: usize = 1 << 20;

/// Copy up to `len` bytes from `fin` to `fout`. With an offset pointer a
/// side is read or written at it (and the pointer advanced), leaving that
/// descriptor's file offset alone; without, at its file offset.
unsafe fn copy(
    fin: c_int,
    off_in: *mut i64,
    fout: c_int,
    off_out: *mut i64,
    len: size_t,
) -> ssize_t {
    let mut buf = vec![0u8; len.min(CHUNK)];
    let mut total = 0usize;
    while total < len {
        let want = (len - total).min(buf.len());
        let got = if off_in.is_null() {
            crate::io::read(fin, buf.as_mut_ptr() as *mut c_void, want)
        } else {
            crate::io::pread64(fin, buf.as_mut_ptr() as *mut c_void, want, *off_in)
        };
        if got < 0 {
            return if total > 0 { total as ssize_t } else { -1 };
        }
        if got == 0 {
            break;
        }
        let mut done = 0usize;
        while done < got as usize {
            let p = buf[done..].as_ptr() as *const c_void;
            let n = got as usize - done;
            let w = if off_out.is_null() {
                crate::io::write(fout, p, n)
            } else {
                crate::io::pwrite64(fout, p, n, *off_out + done as i64)
            };
            if w <= 0 {
                return if total + done > 0 {
                    (total + done) as ssize_t
                } else {
                    -1
                };
            }
            done += w as usize;
        }
        if !off_in.is_null() {
            *off_in += got as i64;
        }
        if !off_out.is_null() {
            *off_out += got as i64;
        }
        total += got as usize;
        if (got as usize) < want {
            break;
        }
    }
    total as ssize_t
}

entry_points! {
    fn sendfile(out: c_int, fin: c_int, off: *mut off_t, n: size_t)
    | fn sendfile64(out: c_int, fin: c_int, off: *mut off64_t, n: size_t) -> ssize_t {
        (is_captured(out) || is_captured(fin)).then(|| copy(fin, off, out, std::ptr::null_mut(), n))
    } else -1;
}

twins! {
    copy_file_range, splice => fn(
        fin: c_int,
        off_in: *mut off64_t,
        out: c_int,
        off_out: *mut off64_t,
        n: size_t,
        flags: c_uint,
    ) -> ssize_t, -1, |real| {
        if !is_captured(out) && !is_captured(fin) {
            return real(fin, off_in, out, off_out, n, flags);
        }
        copy(fin, off_in, out, off_out, n)
    }
}
