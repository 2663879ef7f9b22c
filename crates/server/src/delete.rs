//! Deleting the local records of drained epochs off the drain's critical
//! path. Freeing a large data log's blocks costs about a second per GiB on
//! ext4 (docs/benchmarks.md); a worker hands that to this thread as soon as
//! the progress record is durable and goes on with the next epoch.
//! Invariant 3 is unchanged: nothing is deleted before its progress record.
//! A crash before the deletion leaves records that the next look at the
//! file removes (`delete_drained_leftovers`).

use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use paralog_log::reader::SourceReader;
use paralog_log::{EpochId, FileInventory};

struct Job {
    file: FileInventory,
    ids: Vec<EpochId>,
    /// The drain's open data logs: closed here, not in the worker.
    reader: SourceReader,
}

pub struct Deleter {
    tx: Mutex<Sender<Job>>,
    pending: Arc<(Mutex<usize>, Condvar)>,
}

impl Deleter {
    pub fn start() -> Deleter {
        let (tx, rx) = channel::<Job>();
        let pending = Arc::new((Mutex::new(0usize), Condvar::new()));
        let p = pending.clone();
        std::thread::Builder::new()
            .name("delete".into())
            .spawn(move || {
                for job in rx {
                    drop(job.reader);
                    for id in &job.ids {
                        if let Err(e) = crate::step::delete_epoch(&job.file, *id) {
                            tracing::warn!(file = %job.file.display_name(), error = %e, "deleting drained records failed; retried at the next look at the file");
                        }
                    }
                    let mut n = p.0.lock().unwrap_or_else(|e| e.into_inner());
                    *n -= 1;
                    p.1.notify_all();
                }
            })
            .expect("spawning the delete thread");
        Deleter {
            tx: Mutex::new(tx),
            pending,
        }
    }

    pub(crate) fn submit(&self, file: &FileInventory, ids: &[EpochId], reader: SourceReader) {
        *self.pending.0.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        let job = Job {
            file: file.clone(),
            ids: ids.to_vec(),
            reader,
        };
        let sent = self.tx.lock().unwrap_or_else(|e| e.into_inner()).send(job);
        if let Err(e) = sent {
            // The thread is gone (it cannot be, short of a panic): delete here.
            let job = e.0;
            drop(job.reader);
            for id in &job.ids {
                let _ = crate::step::delete_epoch(&job.file, *id);
            }
            *self.pending.0.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        }
    }

    /// Wait until every submitted deletion is done (or `timeout` passed).
    pub fn wait_empty(&self, timeout: Duration) -> bool {
        let n = self.pending.0.lock().unwrap_or_else(|e| e.into_inner());
        let (n, _) = self
            .pending
            .1
            .wait_timeout_while(n, timeout, |n| *n > 0)
            .unwrap_or_else(|e| e.into_inner());
        *n == 0
    }
}
