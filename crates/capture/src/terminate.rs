//! A process ended by SIGTERM, SIGHUP or SIGPIPE (`multiprocessing.Pool`
//! leaving its `with` block, a batch system's or a shell's `kill`, a
//! closed terminal, a pipeline's reader gone) keeps its writes without
//! paralog: the kernel has them. Under capture they are in the log but not
//! committed (a plain POSIX file commits at its last close, an fsync or
//! exit, and a signal's default action runs none of them), so they were
//! lost, and an append of another process past them drained zeros there.
//! So where the program left these signals at their default action when
//! capture started, capture's handler commits this process's plain POSIX
//! files first, then dies of the signal as the program would have.
//!
//! Committing is not async-signal-safe (it allocates and takes capture's
//! lock). So:
//! - If capture's state is in use (its lock is held: a write being logged,
//!   the commit at exit under way), the signal is kept pending and the
//!   handler returns; whoever releases the lock next commits every plain
//!   POSIX file there, at a safe point, and dies of the signal.
//! - Else the handler forks with the raw system call (no atfork handlers
//!   run), and the child, a copy of this process stopped at the signal,
//!   commits every plain POSIX file as the last close at exit does, and
//!   ends with `exit_group`. The handler waits for it at most `WAIT_MS`: a
//!   child stuck on a lock the interrupted code held (malloc's) is killed,
//!   and the writes are lost as before. Then the process dies of the
//!   signal.
//!
//! What the program buffered in user space (stdio) is not written, as the
//! kernel would not have it either; MPI-IO files keep their consistency
//! points only. SIGKILL cannot be caught: a process killed by it loses
//! what it wrote since its last commit, as in a crash. SIGINT is left
//! alone (Python installs its KeyboardInterrupt handler only where SIGINT
//! is at its default action).

use std::sync::atomic::{AtomicI32, Ordering};

use libc::c_int;

const SIGNALS: [c_int; 3] = [libc::SIGTERM, libc::SIGHUP, libc::SIGPIPE];

/// How long the handler waits for the committing child.
const WAIT_MS: u32 = 5000;

/// A terminating signal that came while capture's state was in use.
static PENDING: AtomicI32 = AtomicI32::new(0);

/// Take over the signals the program left at their default action (once
/// capture's state exists in this process; an inherited handler of ours,
/// after a fork, is kept).
pub fn install() {
    for sig in SIGNALS {
        // SAFETY: sigaction with zeroed structures filled in here.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0
                || old.sa_sigaction != libc::SIG_DFL
            {
                continue;
            }
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(c_int) as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            for s in SIGNALS {
                libc::sigaddset(&mut sa.sa_mask, s);
            }
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

extern "C" fn on_signal(sig: c_int) {
    // Whether capture's state is at rest: a try-lock is an atomic
    // exchange, and its release at most a futex wake.
    if crate::state::try_lock().is_none() {
        PENDING.store(sig, Ordering::SeqCst);
        return;
    }
    // SAFETY: only async-signal-safe system calls here; the child runs
    // capture's code on its own copy of the memory.
    unsafe {
        let pid = libc::syscall(
            libc::SYS_clone,
            libc::SIGCHLD as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        );
        if pid == 0 {
            commit_in_copy();
            libc::syscall(libc::SYS_exit_group, 0);
        }
        if pid > 0 {
            reap(pid as libc::pid_t);
        }
        die(sig);
    }
}

/// Capture's lock was just released: a signal kept pending meanwhile is
/// acted on here, at a safe point (never in a signal handler).
pub fn after_unlock() {
    if PENDING.load(Ordering::Relaxed) == 0 {
        return;
    }
    let sig = PENDING.swap(0, Ordering::SeqCst);
    if sig == 0 {
        return;
    }
    let _ = std::panic::catch_unwind(|| {
        let _g = crate::guard::Guard::take_over();
        let mut slot = crate::state::lock();
        if let Some(st) = slot.as_mut() {
            st.close_all_posix();
        }
    });
    // SAFETY: ends the process.
    unsafe { die(sig) }
}

/// A forked child does not inherit its parent's pending signal.
pub fn forget_pending() {
    PENDING.store(0, Ordering::SeqCst);
}

/// Die of `sig` as its default action does.
unsafe fn die(sig: c_int) {
    let mut sa: libc::sigaction = std::mem::zeroed();
    sa.sa_sigaction = libc::SIG_DFL;
    libc::sigaction(sig, &sa, std::ptr::null_mut());
    let mut set: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut set);
    libc::sigaddset(&mut set, sig);
    libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    libc::raise(sig);
}

/// In the copy: the last close of every plain POSIX file, if capture's
/// state was at rest when the signal came.
fn commit_in_copy() {
    let _ = std::panic::catch_unwind(|| {
        // The guard may be held by a pass-through call the signal
        // interrupted (a blocked read of a pipe); whether capture's state is
        // at rest is told by its lock alone.
        let _g = crate::guard::Guard::take_over();
        let Some(mut slot) = crate::state::try_lock() else {
            return;
        };
        if let Some(st) = slot.as_mut() {
            st.close_all_posix();
        }
    });
}

/// Wait for the committing child, killing it after `WAIT_MS` (raw system
/// calls: `waitpid` is one of capture's wrappers).
unsafe fn reap(pid: libc::pid_t) {
    let tick = libc::timespec {
        tv_sec: 0,
        tv_nsec: 10_000_000,
    };
    let mut status: c_int = 0;
    let null = std::ptr::null_mut::<libc::rusage>();
    for _ in 0..WAIT_MS / 10 {
        let r = libc::syscall(libc::SYS_wait4, pid, &mut status, libc::WNOHANG, null);
        if r == pid as i64 || (r < 0 && crate::state::errno() != libc::EINTR) {
            return;
        }
        libc::syscall(
            libc::SYS_nanosleep,
            &tick,
            std::ptr::null_mut::<libc::timespec>(),
        );
    }
    libc::syscall(libc::SYS_kill, pid, libc::SIGKILL);
    libc::syscall(libc::SYS_wait4, pid, &mut status, 0, null);
}
