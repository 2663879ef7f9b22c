//! The capture library runs inside the application: it may read drained
//! object-layout versions and checkpoint sets (plain file I/O), but must carry no remote
//! writer, no UUID generator, no chunk writer, and nothing of S3, an async
//! runtime or the network. The linker keeps only what the library calls, so
//! its symbol table says what it really carries.

use std::path::PathBuf;
use std::process::Command;

/// `libparalog_capture.so` as cargo built it for this test run.
fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let deps = exe.parent().expect("target/<profile>/deps");
    for dir in [deps, deps.parent().expect("target/<profile>")] {
        let p = dir.join("libparalog_capture.so");
        if p.exists() {
            return p;
        }
    }
    panic!("no libparalog_capture.so beside {}", deps.display());
}

/// Every symbol (demangled), local ones included.
fn symbols() -> Vec<String> {
    let lib = library();
    let out = Command::new("nm")
        .arg("-C")
        .arg(&lib)
        .output()
        .expect("running nm (package binutils)");
    assert!(
        out.status.success(),
        "nm {}: {}",
        lib.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn capture_links_the_object_reader_only() {
    let syms = symbols();
    // The reader is there (the symbol table is not stripped, and this test
    // would notice if its names changed).
    // Methods of ObjStore demangle as `objstore::<module>::<impl
    // paralog_backend::objstore::ObjStore>::name` (the layout is split by
    // job into modules).
    assert!(
        syms.iter()
            .any(|s| s.contains("objstore::ObjStore>::read_range")),
        "the object layout's reader is not in the library: did its name change?"
    );
    // The checkpoint set reader too (restart reads, docs/aggregate.md),
    // and none of the set writer or the rules.
    assert!(
        syms.iter()
            .any(|s| s.contains("paralog_aggregate::reader::SetReader::read_at")),
        "the checkpoint set reader is not in the library: did its name change?"
    );
    let forbidden = [
        "paralog_aggregate::publish",
        "paralog_aggregate::container",
        "SetWriter",
        "globset::",
        "uuid::",
        "ChunkWriter",
        "ObjSink",
        "ObjChunks",
        "ObjStore>::publish",
        "ObjStore>::writer",
        "ObjStore>::collect_orphans",
        "paralog_backend::objstore::publish::",
        "paralog_backend::objstore::sink::",
        "PosixBackend",
        "paralog_s3",
        "aws_sdk",
        "tokio::",
        "hyper::",
    ];
    let found: Vec<&String> = syms
        .iter()
        .filter(|s| forbidden.iter().any(|f| s.contains(f)))
        .take(10)
        .collect();
    assert!(
        found.is_empty(),
        "the capture library carries remote-writing code: {found:#?}"
    );
}
