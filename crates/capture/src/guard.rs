//! "Am I inside paralog?" per thread. While the capture library does its own
//! I/O (data logs, manifests), every wrapper it reaches again must pass
//! straight through. (Children of fork take over their descriptors:
//! crate::inherit.)

use std::cell::Cell;

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

pub struct Guard(());

impl Guard {
    /// `None` when this thread is already inside paralog (pass through).
    pub fn enter() -> Option<Guard> {
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

impl Guard {
    /// Enter whatever this thread was doing: for the copy of a process
    /// stopped at a signal (crate::terminate), where the interrupted code
    /// may have held the guard around a pass-through call (a blocked
    /// `read` of a pipe) and never returns to drop it.
    pub fn take_over() -> Guard {
        let _ = DEPTH.try_with(|d| d.set(1));
        Guard(())
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = DEPTH.try_with(|d| d.set(0));
    }
}
