//! The process's umask, for the mode of a file created under the prefix:
//! read from `/proc/self/status` once, then followed through the `umask(3)`
//! wrapper (a new file per write read the status file at every creation:
//! 9 system calls).

/// The umask as last set through `umask(3)`, `UMASK_UNKNOWN` before.
static UMASK: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(UMASK_UNKNOWN);
const UMASK_UNKNOWN: u32 = u32::MAX;

/// The program set its umask to `mask`.
pub fn note(mask: u32) {
    UMASK.store(mask & 0o777, std::sync::atomic::Ordering::Relaxed);
}

/// The process's umask, read without changing it (`umask(2)` can only be
/// read by setting it, which races with other threads' creations); 022
/// where `/proc/self/status` (Linux 4.7+) cannot be read.
pub fn current() -> u32 {
    use std::sync::atomic::Ordering;
    let known = UMASK.load(Ordering::Relaxed);
    if known != UMASK_UNKNOWN {
        return known;
    }
    let read = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022);
    // A umask(3) of another thread meanwhile wins.
    let _ = UMASK.compare_exchange(UMASK_UNKNOWN, read, Ordering::Relaxed, Ordering::Relaxed);
    UMASK.load(Ordering::Relaxed)
}
