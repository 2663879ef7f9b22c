//! The node server's publisher of logged array puts (docs/objects.md,
//! "Logged mode"): a thread that publishes every committed logged put
//! under the node-local root, a round at once when a put commits
//! (`obj_watch`), again at once after a round that published (more may
//! have committed meanwhile), else each interval; and a last round when
//! the server stops; the same in each server of a server job, on its own
//! node (docs/objects.md "Logged puts in a server job"); `paralog
//! recover` and `paralog obj publish` run one round.
//! Each round's result goes to the server (`paralog_server::puts`), whose
//! status shows what waits and whose `wait`/`drain` wait for it
//! (docs/objects.md "Waiting for logged puts"). Each line is logged once
//! per distinct message and the put is tried again next round.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Duration;

use paralog_objects::logged::{publish_round, publish_round_with, LOCAL_DIR};
use paralog_objects::pending::Why;
use paralog_objects::{id_hex, Pending, Round, ViewServer};
use paralog_server::puts::{PutState, PutStatus, Puts};
use paralog_server::stop::Stop;

pub struct Publisher {
    stop: Stop,
    puts: Puts,
    thread: Option<JoinHandle<bool>>,
}

/// One round: what was published and what was left, or why the node-local
/// store could not be read. Nothing to do when no logged put was ever made
/// here. The HDF5 views by `h5`'s co-process.
pub fn round(root: &Path, h5: &ViewServer) -> Result<Round, paralog_objects::Error> {
    if !root.join(LOCAL_DIR).join("staging").is_dir() {
        return Ok(Round::default());
    }
    publish_round_with(root, h5)
}

/// How the server reports a put the round left.
fn put_status(p: &Pending) -> PutStatus {
    let state = if p.lasting() {
        PutState::Failed
    } else if matches!(p.why, Why::Failed(_)) {
        PutState::Retrying
    } else {
        PutState::Waiting
    };
    PutStatus {
        name: p.name.clone(),
        id: id_hex(&p.id),
        share: p.share,
        state,
        waits_for: p.waits_for(),
        message: p.message(),
        node: None,
    }
}

/// `array NAME put ID: why`, the line for each put a round left.
pub fn pending_line(p: &Pending) -> String {
    format!("{}: {}", p.what(), p.message())
}

/// Whether a round failed for a put (waiting for another node is not
/// failing).
pub fn failed(r: &Round) -> bool {
    r.pending.iter().any(|p| matches!(p.why, Why::Failed(_)))
}

/// What `paralog recover` prints of the puts a round left: failures on
/// standard error, waiting puts on standard output.
pub fn print_left(pending: &[Pending]) {
    for p in pending {
        match p.why {
            Why::Failed(_) => eprintln!("paralog: logged {}", pending_line(p)),
            _ => println!("logged {}", pending_line(p)),
        }
    }
}

/// `paralog obj publish L`: one round; a line per put published, and per
/// put left (what it waits for); an error naming every put that failed.
pub fn publish_command(local: &Path, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
    let r = publish_round(local)?;
    for p in &r.published {
        let line = format!(
            "{} version {} id {} published to {}\n",
            p.name,
            p.committed.number,
            id_hex(&p.committed.id),
            p.remote
        );
        crate::obj::print(out, &line)?;
    }
    let mut failed = Vec::new();
    for p in &r.pending {
        match p.why {
            Why::Failed(_) => failed.push(pending_line(p)),
            _ => crate::obj::print(out, &format!("{}\n", pending_line(p)))?,
        }
    }
    if !failed.is_empty() {
        anyhow::bail!("{}", failed.join("\n"));
    }
    Ok(())
}

/// What a round of the server's publisher did.
struct Done {
    /// Nothing failed.
    ok: bool,
    /// It published at least one put.
    published: bool,
}

/// A round: its puts published and left reported to `puts`, each line
/// logged once per distinct text.
fn logged_round(root: &Path, said: &mut HashSet<String>, puts: &Puts, h5: &ViewServer) -> Done {
    let n = puts.begin_round();
    // Failures as errors, waiting puts as warnings.
    let mut once = |error: bool, m: String| {
        if said.insert(m.clone()) {
            if error {
                tracing::error!("{m}");
            } else {
                tracing::warn!("{m}");
            }
        }
    };
    match round(root, h5) {
        Ok(r) => {
            for p in &r.published {
                tracing::info!(name = %p.name, version = p.committed.number, remote = %p.remote,
                    "published a logged array put");
            }
            let left: Vec<PutStatus> = r.pending.iter().map(put_status).collect();
            for p in &r.pending {
                match p.why {
                    Why::Failed(_) => {
                        once(true, format!("logged {} (tried again)", pending_line(p)))
                    }
                    _ => once(false, format!("logged {}", pending_line(p))),
                }
            }
            puts.end_round(n, r.published.len() as u64, left);
            // Waiting for another node is no failure of this server.
            Done {
                ok: !failed(&r),
                published: !r.published.is_empty(),
            }
        }
        Err(e) => {
            let m = format!("logged array puts: {e} (tried again)");
            once(true, m.clone());
            let failed = PutStatus {
                name: String::new(),
                id: String::new(),
                share: false,
                state: PutState::Retrying,
                waits_for: Vec::new(),
                message: m,
                node: None,
            };
            puts.end_round(n, 0, vec![failed]);
            Done {
                ok: false,
                published: false,
            }
        }
    }
}

/// Start publishing the logged puts under `root`, each round reported to
/// `puts` (the server's, started with `logged_puts`, so attached already:
/// a wait before the first round waits for it): a round when a put
/// commits (the watch), right after a round that published, else every
/// `every` (puts waiting for other nodes' shares, or retried).
pub fn start(root: PathBuf, every: Duration, puts: Puts) -> std::io::Result<Publisher> {
    if let Err(e) = crate::obj_watch::start(root.clone(), puts.clone()) {
        tracing::warn!(error = %e, "cannot watch for logged array puts (inotify): published every {every:?} only");
    }
    let stop = Stop::default();
    let (s, p) = (stop.clone(), puts.clone());
    let thread = std::thread::Builder::new()
        .name("objects".into())
        .spawn(move || {
            let mut said = HashSet::new();
            // One HDF5 view co-process for every round, ended with the
            // thread.
            let h5 = ViewServer::new();
            loop {
                let done = logged_round(&root, &mut said, &p, &h5);
                // A round that published may have let later commits wait:
                // the next one at once. Else a nap, cut short by a commit
                // (the watch), a wait or the stop.
                if !done.published {
                    p.nap(every);
                }
                if s.wait(Duration::ZERO) {
                    // The last round: every put committed before the stop.
                    let ok = logged_round(&root, &mut said, &p, &h5).ok;
                    p.detach();
                    return ok;
                }
            }
        })?;
    Ok(Publisher {
        stop,
        puts,
        thread: Some(thread),
    })
}

/// How often a server's publisher makes a round.
pub const EVERY: Duration = Duration::from_millis(200);

/// The publisher of a server of a server job (or of `recover` started as
/// one): it reports to a board of its own, attached before its first
/// round, which the job's rounds read ([`Publisher::puts`];
/// paralog_server's cluster/puts.rs: the job ends only once every node's
/// publisher left nothing that may still publish).
pub fn start_for_job(root: PathBuf) -> std::io::Result<Publisher> {
    let puts = Puts::default();
    puts.attach();
    start(root, EVERY, puts)
}

impl Publisher {
    /// The board its rounds report to.
    pub fn puts(&self) -> Puts {
        self.puts.clone()
    }

    /// Stop after a last round; whether that round published everything.
    pub fn finish(mut self) -> bool {
        self.stop.stop();
        self.puts.kick();
        self.thread
            .take()
            .map(|t| t.join().unwrap_or(false))
            .unwrap_or(true)
    }
}
