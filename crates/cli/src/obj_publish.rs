//! The node server's publisher of logged array puts (docs/objects.md,
//! "Logged mode"): a thread that publishes every committed logged put
//! under the node-local root each interval, and a last round when the
//! server stops; `paralog recover` runs one round. Each error is logged
//! once per distinct message and the put is tried again next round.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Duration;

use paralog_objects::logged::{publish_committed, Published, LOCAL_DIR};
use paralog_server::stop::Stop;

pub struct Publisher {
    stop: Stop,
    thread: Option<JoinHandle<bool>>,
}

/// One round: what was published, or the first error (the others were
/// still tried). Nothing to do when no logged put was ever made here.
pub fn round(root: &Path) -> Result<Vec<Published>, paralog_objects::Error> {
    if !root.join(LOCAL_DIR).join("staging").is_dir() {
        return Ok(Vec::new());
    }
    publish_committed(root)
}

fn logged_round(root: &Path, said: &mut HashSet<String>) -> bool {
    match round(root) {
        Ok(done) => {
            for p in done {
                tracing::info!(name = %p.name, version = p.committed.number, remote = %p.remote,
                    "published a logged array put");
            }
            true
        }
        Err(e) => {
            let m = e.to_string();
            if said.insert(m.clone()) {
                tracing::error!("logged array puts: {m} (tried again)");
            }
            false
        }
    }
}

/// Start publishing the logged puts under `root`, a round every `every`.
pub fn start(root: PathBuf, every: Duration) -> std::io::Result<Publisher> {
    let stop = Stop::default();
    let s = stop.clone();
    let thread = std::thread::Builder::new()
        .name("objects".into())
        .spawn(move || {
            let mut said = HashSet::new();
            loop {
                logged_round(&root, &mut said);
                if s.wait(every) {
                    // The last round: every put committed before the stop.
                    return logged_round(&root, &mut said);
                }
            }
        })?;
    Ok(Publisher {
        stop,
        thread: Some(thread),
    })
}

impl Publisher {
    /// Stop after a last round; whether that round published everything.
    pub fn finish(mut self) -> bool {
        self.stop.stop();
        self.thread
            .take()
            .map(|t| t.join().unwrap_or(false))
            .unwrap_or(true)
    }
}
