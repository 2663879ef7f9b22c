//! The node-local list of the checkpoint sets on an S3 remote
//! (`paralog_aggregate::store::S3_INDEX`): written before a program starts
//! under capture, so that capture (no network I/O) can refuse a read of a
//! member on S3 with a line naming the set and `paralog extract`
//! (docs/aggregate.md, "Sets on S3").

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use paralog_aggregate::store::{encode_s3_index, S3_INDEX};
use paralog_backend::RemoteUrl;

use crate::remote::Remote;

/// Write the index of the sets under `remote` into `local` when it is an
/// S3 remote (one listing of the prefix, with or without `--aggregate`:
/// a restart job that only reads names no rule); otherwise remove an
/// index an earlier job left (it would name another remote's sets).
/// Returns how many sets it lists.
pub fn write_s3_index(local: &Path, remote: &Remote) -> Result<usize, String> {
    let path = local.join(S3_INDEX);
    let Remote::Url(RemoteUrl::S3(url), _) = remote else {
        return match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(format!("{}: {e}", path.display()))
            }
            _ => Ok(0),
        };
    };
    let s3 = super::scan::s3_sets(url).map_err(|e| e.to_string())?;
    let sets = s3
        .set_dirs()
        .map_err(|e| format!("listing the checkpoint sets: {e}"))?;
    let shown = {
        use paralog_aggregate::store::ContainerSource;
        let root = s3.display(b"", b"").display().to_string();
        root.trim_end_matches('/').to_owned()
    };
    let tmp = local.join(format!("{S3_INDEX}.{}.tmp", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(encode_s3_index(&shown, &sets).as_bytes())?;
        // Replaced whole: a reader sees the old list or the new one.
        std::fs::rename(&tmp, &path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("{}: {e}", path.display())
    })?;
    Ok(sets.len())
}
