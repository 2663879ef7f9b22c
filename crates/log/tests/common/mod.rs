//! Helpers shared by the log's integration tests.

use std::path::Path;

use paralog_log::FileInventory;

/// The first `len` bytes of file "f" of job "j" at its last committed epoch,
/// on top of nothing, checking that this root holds all of it.
pub fn read_committed(root: &Path, len: usize) -> Vec<u8> {
    let inv = FileInventory::scan_path(root, "j", b"f").unwrap().unwrap();
    assert!(inv.complete_locally().unwrap(), "the file looks incomplete");
    let lf = inv.logical_file(None).unwrap();
    let mut buf = vec![0u8; len];
    let mut reader = paralog_log::reader::SourceReader::default();
    lf.read_at(&mut reader, 0, &mut buf, 0, &mut |_, _| Ok(()))
        .unwrap();
    buf
}
