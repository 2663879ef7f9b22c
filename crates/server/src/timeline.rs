//! The drain's part of the job's timeline (`paralog_log::timeline`,
//! docs/report.md): one line per drained group of epochs (one epoch, or a
//! whole open for a backend that takes them together) with when its
//! verification began, when its progress record was durable, and the bytes
//! written to the remote, appended to
//! `<root>/.paralog-timeline-<job>/drain-<pid>` of the file's job. No
//! fsync; a failure to write it is a warning, never a failed drain.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use paralog_log::timeline::{self, Event};
use paralog_log::EpochId;

/// A drain of epochs `ids` of one file, from its start.
pub struct DrainSpan {
    t0: u64,
    last: EpochId,
    count: u64,
}

impl DrainSpan {
    pub fn start(ids: &[EpochId]) -> DrainSpan {
        DrainSpan {
            t0: timeline::now_us(),
            last: ids.last().copied().unwrap_or_default(),
            count: ids.len() as u64,
        }
    }

    /// The epochs are on the remote and recorded as drained: `bytes` moved.
    /// `file_dir` is the file's directory (`<root>/<job>/f-*`), `rel` its
    /// path relative to the prefix.
    pub fn end(self, file_dir: &Path, rel: &[u8], bytes: u64) {
        let (Some(job_dir), Some(root)) =
            (file_dir.parent(), file_dir.parent().and_then(Path::parent))
        else {
            return;
        };
        let Some(job) = job_dir.file_name().and_then(|n| n.to_str()) else {
            return;
        };
        let pid = std::process::id();
        let line = Event::Drain(timeline::Drain {
            pid,
            t0: self.t0,
            t1: timeline::now_us(),
            gen: self.last.gen,
            epoch: self.last.epoch,
            count: self.count.max(1),
            bytes,
            path: rel.to_vec(),
        })
        .encode();
        let dir = timeline::dir(root, job);
        if let Err(e) = timeline::append(&dir, &format!("drain-{pid}"), &line) {
            static WARNED: AtomicBool = AtomicBool::new(false);
            if !WARNED.swap(true, Ordering::Relaxed) {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot write the job's timeline (the drain goes on; `paralog report` will lack its epochs)");
            }
        }
    }
}
