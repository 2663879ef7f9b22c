//! The committed state of a captured path as this node's log holds it: the
//! real file under the prefix (what the drain has written so far, the
//! "base") plus the committed epochs not yet drained. Capture answers from
//! it whether the file exists, how long it is, and the bytes a rank reads
//! that it did not write in the current epoch: MPI makes another rank's
//! writes visible only after a sync, i.e. exactly the committed state.

use std::path::Path;

use paralog_log::reader::SourceReader;
use paralog_log::{FileInventory, LogicalFile};

use crate::report;
use crate::state::CResult;

pub struct View {
    pub lf: LogicalFile,
    /// The drained file the epochs apply on top of.
    pub base: Option<std::path::PathBuf>,
    pub base_len: u64,
    /// Every committed epoch has all its ranks' records on this node; else
    /// the view lacks other nodes' bytes and must not answer reads.
    pub complete: bool,
    reader: SourceReader,
}

pub struct Committed {
    pub view: View,
    pub exists: bool,
    pub size: u64,
}

fn real_len(abs: &Path) -> Option<u64> {
    std::fs::metadata(abs)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len())
}

/// Build the committed state of `abs` (remote-relative `rel`) for `job`.
pub fn committed(
    local: &Path,
    job: &str,
    abs: &Path,
    rel: &[u8],
    base: Option<&Path>,
) -> CResult<Committed> {
    let fail = |e: paralog_log::LogError| {
        report::line(&format!(
            "reading the committed state of {}: {e}",
            abs.display()
        ));
        e.raw_os_error().unwrap_or(libc::EIO)
    };
    let real = base.and_then(real_len);
    let base_len = real.unwrap_or(0);
    let (lf, complete) = match FileInventory::scan_path(local, job, rel).map_err(fail)? {
        None => (LogicalFile::default(), true),
        Some(inv) => (
            inv.logical_file(None).map_err(fail)?,
            inv.complete_locally().map_err(fail)?,
        ),
    };
    let (exists, size) = if lf.epochs.is_empty() {
        (real.is_some(), base_len)
    } else {
        (!lf.deleted, lf.size.final_size(base_len))
    };
    Ok(Committed {
        view: View {
            lf,
            base: base.map(Path::to_path_buf),
            base_len,
            complete,
            reader: SourceReader::default(),
        },
        exists,
        size,
    })
}

impl View {
    /// Bytes of the committed file at `off` (zeros past its end). ENOENT,
    /// quietly, when a data log went away under us (the server drained and
    /// deleted it): the caller rebuilds the view and asks again.
    pub fn read(&mut self, abs: &Path, off: u64, buf: &mut [u8]) -> CResult<()> {
        let base_path = self.base.clone();
        let mut base = |at: u64, dst: &mut [u8]| -> paralog_log::Result<()> {
            use std::os::unix::fs::FileExt;
            let p = base_path
                .as_deref()
                .ok_or_else(|| paralog_log::LogError::NotFound {
                    what: format!(
                        "drained bytes of {} are in object storage, which capture cannot read",
                        abs.display()
                    ),
                })?;
            let io = |op, error| paralog_log::LogError::Io {
                path: p.to_path_buf(),
                op,
                error,
            };
            let f = std::fs::File::open(p).map_err(|e| io("open", e))?;
            f.read_exact_at(dst, at).map_err(|e| io("read", e))
        };
        self.lf.read_at(&mut self.reader, off, buf, self.base_len, &mut base).map_err(|e| {
            if matches!(&e, paralog_log::LogError::Io { error, .. } if error.kind() == std::io::ErrorKind::NotFound) {
                return libc::ENOENT;
            }
            report::line(&format!("reading committed bytes of {} at offset {off}: {e}", abs.display()));
            e.raw_os_error().unwrap_or(libc::EIO)
        })
    }
}
