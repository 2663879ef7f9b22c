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

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = DEPTH.try_with(|d| d.set(0));
    }
}
