//! Wakes the publisher of logged array puts (`obj_publish`) the moment a
//! put commits on this node, instead of at its next round (up to 200 ms
//! later: on the bandwidth-limited remote of docs/benchmarks.md section 11
//! that wait was a large part of each version's publish). A thread of the
//! server watches, with the server's tree watch (inotify,
//! `paralog_server::tree_watch`), the node-local object log
//! `ROOT/.paralog-objects/staging/` and each put's directory in it; a
//! commit record (`logged`) or a share record (`s<writer>`) closed after
//! writing kicks the publisher (`Puts::kick`). The rounds still come every
//! interval without it: a watch that cannot be made only costs latency.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use paralog_objects::logged::LOCAL_DIR;
use paralog_server::puts::Puts;
use paralog_server::tree_watch::{Overflow, Policy, TreeWatch};

/// Depth below the node-local root: 0 the root, 1 the object log, 2 its
/// `staging/`, 3 a put's directory.
const PUT_DEPTH: usize = 3;

/// Kicks `puts` once for all the commits of one read of events.
struct Commits {
    puts: Puts,
    kick: bool,
}

/// Start watching `root` for logged commits, kicking `puts`. The thread
/// lives as long as the server (it blocks in inotify).
pub fn start(root: PathBuf, puts: Puts) -> std::io::Result<()> {
    let w = TreeWatch::new(root, Commits { puts, kick: false })?;
    std::thread::Builder::new()
        .name("objects-watch".into())
        .spawn(move || {
            if let Err(e) = w.run() {
                tracing::warn!(error = %e, "watching logged array puts (inotify) failed: they are found by the publisher's rounds only");
            }
        })?;
    Ok(())
}

/// A file whose closing commits something the publisher acts on.
fn commits(name: &OsStr) -> bool {
    let n = name.to_string_lossy();
    n == "logged" || (n.len() == 33 && n.starts_with('s'))
}

impl Policy for Commits {
    const LEAF_DEPTH: usize = PUT_DEPTH;

    /// The one directory that matters at depths 1 and 2; any put below.
    fn wants(&self, dir: &Path, depth: usize) -> bool {
        let name = dir.file_name().unwrap_or_default();
        match depth {
            1 => name == LOCAL_DIR,
            2 => name == "staging",
            _ => true,
        }
    }

    /// A put renamed into place may hold its commit record already (no
    /// event for it): a round looks. The start-up scan needs no kick, the
    /// publisher's first round comes anyway.
    fn appeared(&mut self, _dir: &Path, _depth: usize) {
        self.kick = true;
    }

    fn file(&mut self, _put: &Path, name: &OsStr) {
        if commits(name) {
            self.kick = true;
        }
    }

    /// Commits may have been missed: a round finds them; the watches stay
    /// (a put missed is found by the rounds, only later).
    fn overflow(&mut self) -> Overflow {
        self.kick = true;
        Overflow::Keep
    }

    fn out_of_watches(&mut self, dir: &Path) {
        tracing::warn!(dir = %dir.display(), "out of inotify watches: logged puts below are found by the publisher's rounds only");
    }

    fn batch_done(&mut self) {
        if std::mem::take(&mut self.kick) {
            self.puts.kick();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Naps of `short` until one runs its full length: the kicks queued
    /// so far are used up.
    fn drain(puts: &Puts, short: Duration) {
        loop {
            let t = Instant::now();
            puts.nap(short);
            if t.elapsed() >= short {
                return;
            }
        }
    }

    /// Whether a nap of a minute ends within 20 s: something kicked.
    fn kicked(puts: &Puts) -> bool {
        let t = Instant::now();
        puts.nap(Duration::from_secs(60));
        t.elapsed() < Duration::from_secs(20)
    }

    #[test]
    fn a_commit_record_or_a_share_record_wakes_the_publisher() {
        let root = tempfile::tempdir().unwrap();
        let puts = Puts::default();
        // Watched before the object log exists (a server started before
        // the program's first logged put).
        start(root.path().to_path_buf(), puts.clone()).unwrap();
        let short = Duration::from_millis(300);
        drain(&puts, short);
        let staging = root.path().join(LOCAL_DIR).join("staging");
        let put = staging.join("0123456789abcdef0123456789abcdef");
        std::fs::create_dir_all(&put).unwrap();
        std::fs::write(put.join("begin"), b"x").unwrap();
        drain(&puts, short);
        // Not a commit: no kick.
        std::fs::write(put.join("c00000000000000000000"), b"x").unwrap();
        let t = Instant::now();
        puts.nap(short);
        assert!(t.elapsed() >= short, "a claim woke the publisher");
        // The commit record: a kick at once.
        std::fs::write(put.join("logged"), b"x").unwrap();
        assert!(
            kicked(&puts),
            "the commit record did not wake the publisher"
        );
        // A put made under a temporary name and renamed into place, and
        // a share record in it.
        drain(&puts, short);
        let tmp = staging.join(".share.x");
        std::fs::create_dir(&tmp).unwrap();
        let share = staging.join("fedcba9876543210fedcba9876543210");
        std::fs::rename(&tmp, &share).unwrap();
        drain(&puts, short);
        std::fs::write(share.join(format!("s{}", "ab".repeat(16))), b"x").unwrap();
        assert!(kicked(&puts), "the share record did not wake the publisher");
    }
}
