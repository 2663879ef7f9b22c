//! Helpers shared by the CLI's integration tests.

// Each test binary uses its own part of this module.
#![allow(dead_code)]

use std::process::Output;

/// The command succeeded; its stderr is the failure's message.
#[track_caller]
pub fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
