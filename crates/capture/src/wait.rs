//! The wait family: a child the program reaped may have written through a
//! placeholder it shares with this process (a shell's `{ echo a; cmd; echo
//! b; } > f`, `exec > log` then commands, `posix_spawn` with an inherited
//! stdout). Its captured writes moved the shared offset without leaving a
//! byte in the memfd, so this process must take that offset over before it
//! writes there again past the wrappers (glibc's stdio, a shell builtin's
//! `echo`): a harvest from the offset it knew would log the child's range
//! as zeros, over the child's bytes (crate::inherit, crate::shared).
//!
//! Only a blocking wait takes over: a shell reaps from its SIGCHLD handler
//! with WNOHANG, where nothing that allocates may run (bash's heap was
//! corrupted when it did), and waits for a foreground command without it.
//! A poll with WNOHANG leaves the take-over to the next captured call on
//! the descriptor.

#![allow(clippy::missing_safety_doc)]

use libc::{c_int, id_t, idtype_t, pid_t, rusage, siginfo_t};

use crate::inherit::after_child;
use crate::pass;

fn reaped(pid: pid_t, options: c_int) -> pid_t {
    if pid > 0 && options & libc::WNOHANG == 0 {
        let errno = crate::state::errno();
        after_child();
        crate::state::set_errno(errno);
    }
    pid
}

#[no_mangle]
pub unsafe extern "C" fn wait(status: *mut c_int) -> pid_t {
    reaped(pass!(wait(status), -1), 0)
}

#[no_mangle]
pub unsafe extern "C" fn waitpid(pid: pid_t, status: *mut c_int, options: c_int) -> pid_t {
    reaped(pass!(waitpid(pid, status, options), -1), options)
}

#[no_mangle]
pub unsafe extern "C" fn wait3(status: *mut c_int, options: c_int, usage: *mut rusage) -> pid_t {
    reaped(pass!(wait3(status, options, usage), -1), options)
}

#[no_mangle]
pub unsafe extern "C" fn wait4(
    pid: pid_t,
    status: *mut c_int,
    options: c_int,
    usage: *mut rusage,
) -> pid_t {
    reaped(pass!(wait4(pid, status, options, usage), -1), options)
}

#[no_mangle]
pub unsafe extern "C" fn waitid(
    idtype: idtype_t,
    id: id_t,
    info: *mut siginfo_t,
    options: c_int,
) -> c_int {
    let rc = pass!(waitid(idtype, id, info, options), -1);
    // WNOWAIT leaves the child to be reaped again; si_pid 0: none ready.
    if rc == 0 && options & libc::WNOWAIT == 0 && !info.is_null() && (*info).si_pid() > 0 {
        reaped((*info).si_pid(), options);
    }
    rc
}
