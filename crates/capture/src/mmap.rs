//! `mmap` of a captured file. The placeholder is an empty memfd, so a
//! mapping of it would read zeros and fault (SIGBUS) past its end. A
//! private or read-only mapping gets a private copy of the file's bytes as
//! capture sees them; a shared writable mapping, whose stores no wrapper
//! could ever see, is refused at `mmap` with ENODEV and one line naming the
//! file (never a SIGBUS, never an error found only later).

#![allow(clippy::missing_safety_doc)]

use libc::{c_int, c_void, off64_t, size_t};

use crate::guard::Guard;
use crate::report;
use crate::state::{is_captured, lock, set_errno, State};
use crate::{entry_points, pass};

unsafe fn map_captured(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off64_t,
) -> Option<*mut c_void> {
    if fd < 0 || !is_captured(fd) {
        return None;
    }
    let _g = Guard::enter()?;
    let path = {
        let mut slot = lock();
        let st = State::get(&mut slot)?;
        let e = st.fds.get(&fd)?;
        st.handles.get(&e.handle)?.path.clone()
    };
    if flags & libc::MAP_SHARED != 0 && prot & libc::PROT_WRITE != 0 {
        report::line(&format!(
            "mmap of {} for writing (MAP_SHARED, PROT_WRITE): stores into a mapping cannot be captured; \
             write with write/pwrite instead (docs/capture.md)",
            path.display()
        ));
        set_errno(libc::ENODEV);
        return Some(libc::MAP_FAILED);
    }
    let Ok(start) = u64::try_from(off) else {
        set_errno(libc::EINVAL);
        return Some(libc::MAP_FAILED);
    };
    // A private copy: anonymous memory filled with the file's bytes.
    let anon = flags & !(libc::MAP_SHARED | libc::MAP_SHARED_VALIDATE)
        | libc::MAP_PRIVATE
        | libc::MAP_ANONYMOUS;
    let p = pass!(
        mmap64(addr, len, prot | libc::PROT_WRITE, anon, -1, 0),
        libc::MAP_FAILED
    );
    if p == libc::MAP_FAILED {
        return Some(p);
    }
    let buf = std::slice::from_raw_parts_mut(p as *mut u8, len);
    let mut done = 0usize;
    while done < len {
        let n = crate::io::do_read(fd, &mut buf[done..], Some(start + done as u64));
        if n < 0 {
            libc::munmap(p, len);
            return Some(libc::MAP_FAILED);
        }
        if n == 0 {
            break;
        }
        done += n as usize;
    }
    if prot & libc::PROT_WRITE == 0 {
        libc::mprotect(p, len, prot);
    }
    Some(p)
}

entry_points! {
    fn mmap(addr: *mut c_void, len: size_t, prot: c_int, flags: c_int, fd: c_int, off: libc::off_t)
    | fn mmap64(addr: *mut c_void, len: size_t, prot: c_int, flags: c_int, fd: c_int, off: off64_t)
        -> *mut c_void {
        map_captured(addr, len, prot, flags, fd, off)
    } else libc::MAP_FAILED;
}
