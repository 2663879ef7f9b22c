//! Keep the drain out of the program's way: a worker lowers its own CPU
//! priority (nice) and its I/O priority (best-effort, lowest level), so the
//! program's compute and its own I/O go first on a shared node. On Linux
//! both are per thread, so each worker calls this for itself.

/// Lower the calling thread's priority; `nice` 0 leaves it unchanged.
pub fn lower(nice: i32) {
    if nice == 0 {
        return;
    }
    // SAFETY: plain syscalls on the calling thread (who = 0).
    unsafe {
        if libc::setpriority(libc::PRIO_PROCESS, 0, nice) != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "setpriority");
        }
        // ioprio_set(IOPRIO_WHO_PROCESS, 0, IOPRIO_PRIO_VALUE(BE, 7)).
        const IOPRIO_WHO_PROCESS: libc::c_long = 1;
        const IOPRIO_CLASS_BE: libc::c_long = 2;
        let prio = (IOPRIO_CLASS_BE << 13) | 7;
        if libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, prio) != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "ioprio_set");
        }
    }
}
