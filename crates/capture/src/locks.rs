//! File locks on captured files. The placeholder is a memfd of its own per
//! open, so a lock on it would lock nothing that another open or process
//! sees. Instead, every open of one captured path locks one lock file on
//! the node, `<PARALOG_LOCAL>/.paralog-locks-<job>/<hash16>` (0600), so
//! `flock`, `fcntl` record locks (`F_SETLK`, `F_SETLKW`, `F_GETLK`, the
//! `F_OFD_` forms) and `lockf` between the processes of one node (HDF5's
//! file locking among them) behave as on the real file. Across nodes they
//! lock nothing (as on most parallel file systems without a lock daemon).

#![allow(clippy::missing_safety_doc)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;

use libc::{c_int, c_ulong, off_t};

use crate::guard::Guard;
use crate::pass;
use crate::posix::contain;
use crate::state::{is_captured, lock, CResult, State};

/// The lock file descriptor of `fd`'s open file description (made at its
/// first lock, closed with the description).
fn lock_fd(st: &mut State, fd: c_int) -> CResult<c_int> {
    let e = st.fds.get(&fd).ok_or(libc::EBADF)?;
    let (ofd, handle) = (e.ofd, e.handle);
    if let Some(fd) = st.ofds.get(&ofd).and_then(|o| o.lock.fd()) {
        return Ok(fd);
    }
    let path = st.handles.get(&handle).ok_or(libc::EBADF)?.path.clone();
    let rel = st.rel_of(&path).ok_or(libc::EINVAL)?;
    let dir = st.cfg.local.join(format!(
        "{}locks-{}",
        paralog_log::layout::RUNTIME_PREFIX,
        st.cfg.job
    ));
    {
        use std::os::unix::fs::DirBuilderExt;
        let _ = std::fs::DirBuilder::new()
            .mode(0o700)
            .recursive(true)
            .create(&dir);
    }
    let file = dir.join(format!("{:016x}", paralog_log::layout::path_hash(&rel)));
    let c = CString::new(file.as_os_str().as_bytes()).map_err(|_| libc::EINVAL)?;
    // SAFETY: a NUL-terminated path; the guard is held, so this open passes
    // straight through.
    let lfd = unsafe {
        pass!(
            open(
                c.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC,
                0o600
            ),
            -1
        )
    };
    if lfd < 0 {
        return Err(crate::state::errno());
    }
    // Kept above the numbers programs use, checked before each use.
    let keep = crate::inherit::Keep::of(lfd);
    // SAFETY: the descriptor just opened, now duplicated.
    unsafe {
        libc::syscall(libc::SYS_close, lfd);
    }
    let fd = keep.fd().ok_or(libc::EMFILE)?;
    if let Some(o) = st.ofds.get_mut(&ofd) {
        o.lock = keep;
    }
    Ok(fd)
}

fn with_lock_fd(fd: c_int, f: impl FnOnce(&mut State, c_int) -> CResult<c_int>) -> c_int {
    contain("lock", -1, || {
        let mut slot = lock();
        let st = State::get(&mut slot).ok_or(libc::EBADF)?;
        let lfd = lock_fd(st, fd)?;
        f(st, lfd)
    })
}

fn rc(r: c_int) -> CResult<c_int> {
    if r < 0 {
        Err(crate::state::errno())
    } else {
        Ok(r)
    }
}

#[no_mangle]
pub unsafe extern "C" fn flock(fd: c_int, op: c_int) -> c_int {
    match (is_captured(fd), Guard::enter()) {
        (true, Some(_g)) => with_lock_fd(fd, |_, lfd| rc(pass!(flock(lfd, op), -1))),
        _ => pass!(flock(fd, op), -1),
    }
}

/// A record lock command of fcntl on a captured descriptor: the same
/// command on the lock file, with a range relative to the file offset or
/// end made absolute (the lock file's own are 0).
pub(crate) unsafe fn fcntl_lock(fd: c_int, cmd: c_int, arg: c_ulong) -> Option<c_int> {
    let record = matches!(
        cmd,
        libc::F_SETLK
            | libc::F_SETLKW
            | libc::F_GETLK
            | libc::F_OFD_SETLK
            | libc::F_OFD_SETLKW
            | libc::F_OFD_GETLK
    );
    if !record || !is_captured(fd) {
        return None;
    }
    let _g = Guard::enter()?;
    let fl = arg as *mut libc::flock;
    if fl.is_null() {
        return Some(contain("fcntl", -1, || Err(libc::EFAULT)));
    }
    Some(with_lock_fd(fd, |st, lfd| {
        let mut copy = *fl;
        let o = st.ofd(fd)?;
        let base = match copy.l_whence as c_int {
            libc::SEEK_CUR => o.offset as i64,
            libc::SEEK_END => st.handles.get(&o.handle).map_or(0, |h| h.size as i64),
            _ => 0,
        };
        copy.l_start += base;
        copy.l_whence = libc::SEEK_SET as _;
        let r = rc(pass!(
            fcntl(lfd, cmd, &mut copy as *mut libc::flock as c_ulong),
            -1
        ))?;
        if cmd == libc::F_GETLK || cmd == libc::F_OFD_GETLK {
            *fl = copy;
        }
        Ok(r)
    }))
}

/// lockf locks from the file offset: done as the fcntl lock it stands for.
#[no_mangle]
pub unsafe extern "C" fn lockf(fd: c_int, cmd: c_int, len: off_t) -> c_int {
    if !is_captured(fd) {
        return pass!(lockf(fd, cmd, len), -1);
    }
    let (fcmd, typ) = match cmd {
        libc::F_LOCK => (libc::F_SETLKW, libc::F_WRLCK),
        libc::F_TLOCK => (libc::F_SETLK, libc::F_WRLCK),
        libc::F_ULOCK => (libc::F_SETLK, libc::F_UNLCK),
        libc::F_TEST => (libc::F_GETLK, libc::F_WRLCK),
        _ => return contain("lockf", -1, || Err(libc::EINVAL)),
    };
    let mut fl: libc::flock = std::mem::zeroed();
    fl.l_type = typ as _;
    fl.l_whence = libc::SEEK_CUR as _;
    fl.l_len = len;
    let r = fcntl_lock(fd, fcmd, &mut fl as *mut libc::flock as c_ulong).unwrap_or(-1);
    if r == 0 && cmd == libc::F_TEST && fl.l_type as c_int != libc::F_UNLCK {
        crate::state::set_errno(libc::EACCES);
        return -1;
    }
    r
}
