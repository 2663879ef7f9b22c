//! The `paralog` binary must not define the capture library's entry points.
//! If it did (by linking `paralog-capture`), its own I/O, and MPI's inside
//! `paralog server`, would go through capture's wrappers, and with
//! PARALOG_PREFIX set in the shell (`eval $(paralog env)`) the server would
//! capture the files it drains.

use std::collections::BTreeSet;
use std::process::Command;

/// The binary's dynamic symbols (`nm -D --defined-only` or
/// `--undefined-only`), without their version suffix.
fn dynamic_symbols(bin: &str, which: &str) -> BTreeSet<String> {
    let out = Command::new("nm")
        .args(["-D", which])
        .arg(bin)
        .output()
        .expect("running nm (package binutils)");
    assert!(
        out.status.success(),
        "nm {bin}: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .map(|s| s.split('@').next().unwrap_or(s).to_owned())
        .collect()
}

#[test]
fn paralog_binary_exports_no_wrapped_symbol() {
    let bin = env!("CARGO_BIN_EXE_paralog");
    // nm reads the dynamic symbol table: the binary's calls to libc are there.
    let undefined = dynamic_symbols(bin, "--undefined-only");
    assert!(
        undefined.contains("malloc"),
        "nm -D does not show the binary's calls to malloc: {undefined:?}"
    );
    let defined = dynamic_symbols(bin, "--defined-only");
    let wrapped: Vec<&str> = paralog_settings::SYMBOLS
        .iter()
        .copied()
        .filter(|s| defined.contains(*s))
        .collect();
    assert!(
        wrapped.is_empty(),
        "the paralog binary defines wrapped libc symbols (is paralog-capture linked in?): {wrapped:?}"
    );
    let entry_points: Vec<&String> = defined
        .iter()
        .filter(|s| s.starts_with("paralog_"))
        .collect();
    assert!(
        entry_points.is_empty(),
        "the paralog binary defines capture's C entry points: {entry_points:?}"
    );
}
