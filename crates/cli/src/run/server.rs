//! The one-node server `paralog run` starts for its job, waits on until
//! what the program committed is drained, and stops.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use paralog_server::status::{self, Request, Status};

use super::{env_path, Args};
use crate::status::human_bytes;

pub(super) struct ServerProc {
    pub(super) child: Child,
    pub(super) socket: PathBuf,
    pub(super) log: PathBuf,
}

pub(super) fn start_server(
    args: &Args,
    root: &Path,
    job: &str,
    remote: Option<&str>,
) -> anyhow::Result<ServerProc> {
    let socket = status::default_socket(root, Some(job));
    let log = root.join(format!(
        "{}server-{job}.log",
        paralog_log::layout::RUNTIME_PREFIX
    ));
    // Private like every node-local file: the log names the user's paths.
    let logf = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&log)
        .with_context(|| format!("creating {}", log.display()))?;
    let t = &args.tuning;
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.arg("server")
        .arg("--local")
        .arg(root)
        .arg("--job")
        .arg(job)
        .arg("--socket")
        .arg(&socket)
        .arg("--workers")
        .arg(t.workers.to_string())
        .arg("--memory")
        .arg(t.memory.to_string())
        .arg("--buffer")
        .arg(t.buffer.to_string())
        .arg("--nice")
        .arg(t.nice.to_string());
    if let Some(r) = t.max_rate {
        cmd.arg("--max-rate").arg(r.to_string());
    }
    if let Some(r) = remote {
        cmd.arg("--remote").arg(r);
    } else if let Some(p) = env_path(&args.prefix, "PARALOG_PREFIX") {
        // Files go back to the prefix; streams go to its .paralog-streams.
        // Absolute and without `..`, as a remote URL must be.
        let p = std::path::absolute(&p).unwrap_or(p);
        cmd.arg("--stream-remote")
            .arg(paralog_settings::normalize(&p));
    }
    if let Some(a) = args.aggregate.resolve()? {
        cmd.args(crate::aggregate_args::AggregateArgs::to_args(&a));
    }
    cmd.args(crate::stream::ReleaseArg::to_args(args.release.resolve()?));
    // The server is not the program: no capture, no inherited settings that
    // would say otherwise.
    cmd.env_remove("LD_PRELOAD")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(logf);
    let mut child = cmd.spawn().context("starting the paralog server")?;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if status::request_status(&socket, &Request::Status).is_ok_and(|s| s.pid == child.id()) {
            return Ok(ServerProc { child, socket, log });
        }
        if let Some(st) = child.try_wait()? {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            bail!(
                "the paralog server exited ({st}) before it was ready:\n{}",
                text.trim_end()
            );
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!(
                "the paralog server did not answer on {} within 20 s (log: {})",
                socket.display(),
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Our children other than the server: processes of the program that
/// outlived its launcher and were re-parented to us.
pub(super) fn orphans(server: u32) -> Vec<i32> {
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid as u32 != server)
        .filter(|&pid| {
            // Field 4 of /proc/PID/stat, after the parenthesised name.
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    let rest = &s[s.rfind(')')? + 1..];
                    rest.split_whitespace().nth(1)?.parse::<i32>().ok()
                })
                == Some(me)
        })
        .collect()
}

pub(super) fn wait_for_orphans(server: u32) {
    let mut told = false;
    loop {
        let left = orphans(server);
        if left.is_empty() {
            return;
        }
        if !told {
            eprintln!(
                "paralog: the launcher exited but {} process(es) of the program still run ({}); waiting for them",
                left.len(),
                left.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(" ")
            );
            told = true;
        }
        for pid in left {
            let mut st = 0;
            // SAFETY: reaping our own child without blocking.
            unsafe {
                libc::waitpid(pid, &mut st, libc::WNOHANG);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Ask the server to drain everything, in slices of a few seconds so that
/// a remote that keeps failing is reported on stderr while we wait (the
/// server's own log is a file), until done or `timeout` seconds passed.
pub(super) fn wait_drained(
    socket: &Path,
    timeout: Option<f64>,
) -> Result<Status, paralog_server::status::StatusError> {
    const SLICE: f64 = 10.0;
    let start = Instant::now();
    let mut last_said = String::new();
    loop {
        let left = timeout.map(|t| (t - start.elapsed().as_secs_f64()).max(0.0));
        let slice = left.map_or(SLICE, |l| l.min(SLICE));
        let st = status::request_status(
            socket,
            &Request::Drain {
                timeout_s: Some(slice),
            },
        )?;
        // Logged array puts too (docs/objects.md "Waiting for logged
        // puts"): done when none may still publish.
        let puts_done = st
            .puts
            .iter()
            .all(|p| p.state == paralog_server::puts::PutState::Failed);
        let done = st.idle && (st.epochs_pending == 0 || st.damaged > 0) && puts_done;
        if done || left.is_some_and(|l| l <= slice) {
            return Ok(st);
        }
        let trouble = trouble_lines(
            st.files
                .iter()
                .filter_map(|f| Some((f.path.as_str(), f.message.as_deref()?))),
        );
        let say = if trouble.is_empty() {
            format!(
                "paralog: draining: {} in {} epoch(s) left",
                human_bytes(st.bytes_pending),
                st.epochs_pending
            )
        } else {
            format!(
                "paralog: the drain is retrying (local data is kept; Ctrl-C leaves it for `paralog recover`):\n  {}",
                trouble.join("\n  ")
            )
        };
        if say != last_said {
            eprintln!("{say}");
            last_said = say;
        }
    }
}

/// One line per cause of the files' failed drains: a remote that is gone
/// fails every file alike, and a line per file would bury the cause under
/// thousands of lines. A cause shared by several files names how many and
/// the first few; the most common cause first (sorted, so that the same
/// state prints the same lines).
fn trouble_lines<'a>(files: impl Iterator<Item = (&'a str, &'a str)>) -> Vec<String> {
    const NAMED: usize = 3;
    let mut by_cause: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for (path, message) in files {
        by_cause.entry(message).or_default().push(path);
    }
    let mut causes: Vec<_> = by_cause.into_iter().collect();
    causes.sort_by_key(|(_, paths)| std::cmp::Reverse(paths.len()));
    causes
        .into_iter()
        .map(|(cause, mut paths)| {
            paths.sort_unstable();
            match paths.len() {
                1 => format!("{}: {cause}", paths[0]),
                n => {
                    let more = if n > NAMED { ", ..." } else { "" };
                    let named = paths[..n.min(NAMED)].join(", ");
                    format!("{n} files ({named}{more}): {cause}")
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::trouble_lines;

    #[test]
    fn one_line_per_cause() {
        let gone = "/r: open remote root: the remote directory does not exist (not mounted?)";
        let files = [
            ("/p/c", gone),
            ("/p/a", gone),
            ("/p/x", "/r/x: write: No space left on device"),
            ("/p/d", gone),
            ("/p/b", gone),
        ];
        assert_eq!(
            trouble_lines(files.into_iter()),
            vec![
                format!("4 files (/p/a, /p/b, /p/c, ...): {gone}"),
                "/p/x: /r/x: write: No space left on device".to_string(),
            ]
        );
        let two = [("/p/b", gone), ("/p/a", gone)];
        assert_eq!(
            trouble_lines(two.into_iter()),
            vec![format!("2 files (/p/a, /p/b): {gone}")]
        );
    }
}
