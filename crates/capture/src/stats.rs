//! Counters for `paralog run`'s summary: bytes the program wrote to
//! captured files, epochs it committed, and the time it spent inside
//! consistency points (local commit plus agreement). With PARALOG_STATS set,
//! each process leaves them in `<dir>/<pid>.json`, one JSON object, at every
//! consistency point and at exit (so that a rank killed later, by
//! MPI_Abort or a signal, still counts), and every epoch capture refused in
//! `<dir>/<pid>.refused`, one line each, at once.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use paralog_settings::counters::ProcessCounters;

static BYTES: AtomicU64 = AtomicU64::new(0);
static EPOCHS: AtomicU64 = AtomicU64::new(0);
static CP_NANOS: AtomicU64 = AtomicU64::new(0);
static DIR: OnceLock<PathBuf> = OnceLock::new();

pub fn captured(bytes: usize) {
    BYTES.fetch_add(bytes as u64, Ordering::Relaxed);
}

/// Bytes this process captured so far (for its timeline's exit line).
pub fn bytes_captured() -> u64 {
    BYTES.load(Ordering::Relaxed)
}

pub fn consistency_point(took: Duration) {
    EPOCHS.fetch_add(1, Ordering::Relaxed);
    CP_NANOS.fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
    write_now();
}

/// An epoch capture could not commit (bytes bypassed it): `paralog run`
/// names it and exits non-zero even if the program ignored the error.
pub fn refused(line: &str) {
    use std::io::Write;
    let Some(dir) = DIR.get() else { return };
    let path = dir.join(format!("{}.refused", std::process::id()));
    let written = private_file()
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
    if let Err(e) = written {
        crate::report::line(&format!("writing {}: {e}", path.display()));
    }
}

/// Arrange for the counters to be written at exit (once per process).
pub fn write_at_exit(dir: &Path) {
    if DIR.set(dir.to_path_buf()).is_ok() {
        // SAFETY: registering a plain extern "C" function.
        unsafe {
            libc::atexit(at_exit);
        }
    }
}

extern "C" fn at_exit() {
    // Never unwind out of an exit handler.
    let _ = std::panic::catch_unwind(|| {
        // None in a forked child: its counters are a copy of the parent's.
        let Some(_g) = crate::guard::Guard::enter() else {
            return;
        };
        write_now();
    });
}

/// Write this process's counters (no fsync: they are for the summary).
fn write_now() {
    let Some(dir) = DIR.get() else { return };
    let text = ProcessCounters {
        pid: std::process::id(),
        bytes: BYTES.load(Ordering::Relaxed),
        epochs: EPOCHS.load(Ordering::Relaxed),
        sync_ns: CP_NANOS.load(Ordering::Relaxed),
    }
    .encode();
    let path = dir.join(format!("{}.json", std::process::id()));
    let written = private_file()
        .write(true)
        .truncate(true)
        .open(&path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()));
    if let Err(e) = written {
        crate::report::line(&format!("writing counters to {}: {e}", path.display()));
    }
}

/// Created 0600, like every node-local file: the counters name the job.
fn private_file() -> std::fs::OpenOptions {
    use std::os::unix::fs::OpenOptionsExt;
    let mut o = std::fs::OpenOptions::new();
    o.create(true).mode(0o600);
    o
}
