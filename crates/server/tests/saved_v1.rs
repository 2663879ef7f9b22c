//! The saved format-1 log (`crates/log/tests/vectors/v1_log`, written by
//! the last format-1 writer) drained by the server to a POSIX remote: every
//! build drains format 1 to exactly the bytes it materialized to then.

use std::path::{Path, PathBuf};
use std::time::Duration;

mod common;

fn vectors() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../log/tests/vectors")
}

#[test]
fn the_saved_v1_log_drains_byte_for_byte() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("local");
    // A copy: the drain deletes what it drained.
    let copied = std::process::Command::new("cp")
        .arg("-r")
        .args([vectors().join("v1_log"), root.clone()])
        .status()
        .unwrap();
    assert!(copied.success());
    let remote = d.path().join("remote");
    std::fs::create_dir(&remote).unwrap();
    let server = common::start(&root, common::posix(&remote));
    let st = server.wait_idle(Some(Duration::from_secs(60))).unwrap();
    // out.dat: epochs 1:1 and 1:2 (1:3 is not committed); single.txt: 1:1, 2:1.
    assert_eq!(st.epochs_drained, 4, "{st:?}");
    for (rel, want) in [("out.dat", "out.dat.1-2"), ("single.txt", "single.txt.2-1")] {
        let got = std::fs::read(remote.join(rel)).unwrap();
        let want = std::fs::read(vectors().join("v1_log.expected").join(want)).unwrap();
        assert!(
            got == want,
            "{rel}: the remote differs from the saved result"
        );
    }
    // The uncommitted epoch 3 of rank 0 stays; everything drained is gone.
    let left: Vec<String> = walk(&root)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "data"))
        .map(|p| p.strip_prefix(&root).unwrap().display().to_string())
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].ends_with("r0000000/e0000000003.data"), "{left:?}");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}
