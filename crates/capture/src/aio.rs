//! POSIX AIO on captured descriptors (MPICH's `iwrite_at`, OMPIO's
//! nonblocking I/O).

#![allow(clippy::missing_safety_doc)]

use libc::{aiocb, c_int, ssize_t, timespec};

use crate::guard::Guard;
use crate::io::{do_read, do_write, slice, slice_mut};
use crate::state::{self, is_captured, lock, set_errno, State};
use crate::{entry_points, twins};

// ---- POSIX AIO -----------------------------------------------------------
//
// glibc's AIO thread calls pwrite64 internally, past any wrapper; so a
// request on a captured descriptor is done at once, synchronously, and its
// result kept until aio_return asks for it.

unsafe fn aio_submit(cb: *mut aiocb, write: bool) -> Option<c_int> {
    if cb.is_null() || !is_captured((*cb).aio_fildes) {
        return None;
    }
    let _g = Guard::enter()?;
    let fd = (*cb).aio_fildes;
    let off = (*cb).aio_offset;
    let n = (*cb).aio_nbytes;
    let buf = (*cb).aio_buf;
    let (ret, err) = {
        let r = if write {
            do_write(fd, slice(buf, n), u64::try_from(off).ok())
        } else {
            do_read(fd, slice_mut(buf, n), u64::try_from(off).ok())
        };
        (r, if r < 0 { state::errno() } else { 0 })
    };
    let mut slot = lock();
    if let Some(st) = State::get(&mut slot) {
        st.aio.insert(cb as usize, (ret, err));
    }
    Some(0)
}

fn aio_result(cb: *const aiocb, take: bool) -> Option<(isize, c_int)> {
    let mut slot = lock();
    let st = slot.as_mut()?;
    if take {
        st.aio.remove(&(cb as usize))
    } else {
        st.aio.get(&(cb as usize)).copied()
    }
}

entry_points! {
    fn aio_write(cb: *mut aiocb) | fn aio_write64(cb: *mut aiocb) -> c_int {
        aio_submit(cb, true)
    } else -1;
    fn aio_read(cb: *mut aiocb) | fn aio_read64(cb: *mut aiocb) -> c_int {
        aio_submit(cb, false)
    } else -1;
    fn aio_error(cb: *const aiocb) | fn aio_error64(cb: *const aiocb) -> c_int {
        aio_result(cb, false).map(|(_, err)| err)
    } else libc::ENOSYS;
    fn aio_return(cb: *mut aiocb) | fn aio_return64(cb: *mut aiocb) -> ssize_t {
        aio_result(cb, true).map(|(ret, err)| {
            if ret < 0 {
                set_errno(err);
            }
            ret
        })
    } else -1;
}

unsafe fn any_ours(list: *const *const aiocb, n: c_int) -> bool {
    if list.is_null() || n <= 0 {
        return false;
    }
    std::slice::from_raw_parts(list, n as usize)
        .iter()
        .any(|&cb| !cb.is_null() && aio_result(cb, false).is_some())
}

entry_points! {
    // A captured request is complete on submission, so suspend returns at once.
    fn aio_suspend(list: *const *const aiocb, n: c_int, t: *const timespec)
    | fn aio_suspend64(list: *const *const aiocb, n: c_int, t: *const timespec) -> c_int {
        any_ours(list, n).then_some(0)
    } else -1;
    fn aio_cancel(fd: c_int, cb: *mut aiocb) | fn aio_cancel64(fd: c_int, cb: *mut aiocb) -> c_int {
        is_captured(fd).then_some(libc::AIO_ALLDONE)
    } else -1;
}

/// lio_listio: the requests on captured descriptors are done at once (as
/// aio_write/aio_read above); the others go to the real call. A list made
/// only of captured requests completes before return, so LIO_WAIT holds;
/// its completion signal (LIO_NOWAIT with a sigevent) is not sent.
unsafe fn lio(
    list: *const *mut aiocb,
    n: c_int,
    real: impl FnOnce(*const *mut aiocb) -> c_int,
) -> c_int {
    if list.is_null() || n <= 0 {
        return real(list);
    }
    let entries = std::slice::from_raw_parts(list, n as usize);
    if !entries
        .iter()
        .any(|&cb| !cb.is_null() && is_captured((*cb).aio_fildes))
    {
        return real(list);
    }
    let mut rest = entries.to_vec();
    for (i, &cb) in entries.iter().enumerate() {
        if cb.is_null() || !is_captured((*cb).aio_fildes) {
            continue;
        }
        match (*cb).aio_lio_opcode {
            libc::LIO_WRITE => {
                aio_submit(cb, true);
            }
            libc::LIO_READ => {
                aio_submit(cb, false);
            }
            _ => {}
        }
        rest[i] = std::ptr::null_mut();
    }
    if rest.iter().any(|cb| !cb.is_null()) {
        return real(rest.as_ptr());
    }
    0
}

twins! {
    lio_listio, lio_listio64 => fn(
        mode: c_int,
        list: *const *mut aiocb,
        n: c_int,
        sev: *mut libc::sigevent,
    ) -> c_int, -1, |real| {
        lio(list, n, |l| real(mode, l, n, sev))
    }
}
