//! "Am I inside paralog?" per thread. While the capture library does its own
//! I/O (data logs, manifests), every wrapper it reaches again must pass
//! straight through; after fork() the child passes everything through.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Set in a forked child: its inherited handles belong to the parent.
static FORKED_CHILD: AtomicBool = AtomicBool::new(false);

pub struct Guard(());

impl Guard {
    /// `None` when this thread is already inside paralog (pass through).
    pub fn enter() -> Option<Guard> {
        if FORKED_CHILD.load(Ordering::Relaxed) {
            return None;
        }
        DEPTH
            .try_with(|d| {
                if d.get() > 0 {
                    None
                } else {
                    d.set(1);
                    Some(Guard(()))
                }
            })
            .ok()
            .flatten()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = DEPTH.try_with(|d| d.set(0));
    }
}

extern "C" fn in_child() {
    FORKED_CHILD.store(true, Ordering::Relaxed);
}

/// Register the fork handler once (called at initialization).
pub fn install_fork_handler() {
    // SAFETY: registering a plain function with no captured state.
    unsafe {
        libc::pthread_atfork(None, None, Some(in_child));
    }
}
