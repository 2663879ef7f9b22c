//! `paralog run`: one job on one node in one command. Starts a server for
//! the job, runs the program with capture on, waits until everything the
//! program committed is drained, stops the server and prints a summary.
//! Exit status: the program's; or 3 if the program succeeded but something
//! it committed could not be drained (then the summary says how to recover).

use std::io::Read;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use paralog_log::{timeline, Inventory};
use paralog_server::status::{self, FileState, Request, Status};
use paralog_settings::counters::ProcessCounters;

use crate::env::{capture_env, Mpi};
use crate::missed::{Missed, RunSnapshot};
use crate::status::human_bytes;

#[derive(clap::Args)]
#[command(trailing_var_arg = true)]
pub struct Args {
    #[command(flatten)]
    remote: crate::remote::RemoteArg,
    /// Node-local log directory [env: PARALOG_LOCAL; default: $TMPDIR/paralog-<uid>]
    #[arg(long, value_name = "DIR")]
    local: Option<PathBuf>,
    /// Directory whose files are captured [env: PARALOG_PREFIX]
    #[arg(long, value_name = "DIR")]
    prefix: Option<PathBuf>,
    /// MPI the program uses [default: detected from the launcher or the program; none: a plain POSIX program]
    #[arg(long, value_enum)]
    mpi: Option<MpiChoice>,
    /// Job name [env: PARALOG_JOB; default: run-<time>-<pid>]
    #[arg(long)]
    job: Option<String>,
    /// Return when the program ends; the server finishes the drain alone
    /// (`paralog status` follows it).
    #[arg(long)]
    no_wait: bool,
    /// Give up waiting for the drain after this many seconds [default: no limit]
    #[arg(long, value_name = "SECONDS")]
    wait_timeout: Option<f64>,
    /// At the end, write an HTML report of the run (timeline plot and
    /// summary) to FILE, and a PNG of its timeline beside it (docs/report.md)
    #[arg(long, value_name = "FILE", conflicts_with = "no_wait")]
    report: Option<PathBuf>,
    #[command(flatten)]
    tuning: crate::server::Tuning,
    #[command(flatten)]
    aggregate: crate::aggregate_args::AggregateArgs,
    /// The command, e.g. `mpirun.mpich -n 4 ./sim`.
    #[arg(required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum MpiChoice {
    Mpich,
    Openmpi,
    None,
}

impl MpiChoice {
    /// The MPI shim to preload (`None` for a plain POSIX program).
    pub fn shim(self) -> Option<Mpi> {
        match self {
            MpiChoice::Mpich => Some(Mpi::Mpich),
            MpiChoice::Openmpi => Some(Mpi::Openmpi),
            MpiChoice::None => None,
        }
    }
}

/// Which MPI a command uses: its launcher's name (through Debian's
/// alternatives symlinks), else the libraries the program links.
pub fn detect_mpi(command: &[String]) -> Option<Mpi> {
    let by_name = |name: &str| -> Option<Mpi> {
        if name.ends_with(".mpich") || name.contains("hydra") {
            Some(Mpi::Mpich)
        } else if name.ends_with(".openmpi") || name == "orterun" || name == "prterun" {
            Some(Mpi::Openmpi)
        } else {
            None
        }
    };
    let first = command.first()?;
    let exe = which(first)?;
    let real = std::fs::canonicalize(&exe).unwrap_or(exe.clone());
    for p in [&exe, &real] {
        if let Some(m) = p.file_name().and_then(|n| n.to_str()).and_then(by_name) {
            return Some(m);
        }
    }
    // A program started without a launcher (singleton MPI), or a launcher
    // we do not know: look at what the programs on the line link.
    for arg in command {
        let Some(p) = which(arg) else { continue };
        if let Some(m) = linked_mpi(&p) {
            return Some(m);
        }
    }
    None
}

pub fn which(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return p.is_file().then_some(p);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn linked_mpi(prog: &Path) -> Option<Mpi> {
    let mut head = [0u8; 4];
    std::fs::File::open(prog).ok()?.read_exact(&mut head).ok()?;
    if &head != b"\x7fELF" {
        return None;
    }
    let out = Command::new("ldd").arg(prog).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    if text.contains("libmpich") {
        Some(Mpi::Mpich)
    } else if text.contains("libmpi.so") {
        Some(Mpi::Openmpi)
    } else {
        None
    }
}

pub fn default_local() -> PathBuf {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    std::env::temp_dir().join(format!("paralog-{uid}"))
}

pub fn env_path(flag: &Option<PathBuf>, var: &str) -> Option<PathBuf> {
    flag.clone().or_else(|| {
        std::env::var_os(var)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    })
}

/// Committed epochs of other jobs not yet drained: a crashed earlier run.
/// Draining them alongside this job could put an older epoch over a newer
/// one of the same file, so the user recovers them first.
fn undrained_elsewhere(root: &Path, job: &str) -> anyhow::Result<Vec<String>> {
    let inv = Inventory::scan(root).with_context(|| format!("scanning {}", root.display()))?;
    let mut out = Vec::new();
    for j in inv.jobs.iter().filter(|j| j.name != job) {
        for f in &j.files {
            let pending = f.pending_epochs().map(|p| p.len()).unwrap_or(1);
            if pending > 0 {
                out.push(format!("job {}: {}", j.name, f.display_name()));
            }
        }
    }
    Ok(out)
}

struct ServerProc {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
}

fn start_server(
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
fn orphans(server: u32) -> Vec<i32> {
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

fn wait_for_orphans(server: u32) {
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

#[derive(Default)]
struct Counters {
    processes: u64,
    bytes: u64,
    max_epochs: u64,
    max_sync: Duration,
    sum_sync: Duration,
    /// Epochs capture refused to commit (bytes bypassed it), one line each.
    refused: Vec<String>,
}

fn read_counters(dir: &Path) -> Counters {
    let mut c = Counters::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return c;
    };
    for e in entries.flatten() {
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        if e.path().extension().is_some_and(|x| x == "refused") {
            c.refused.extend(text.lines().map(str::to_owned));
            continue;
        }
        let Some(p) = ProcessCounters::decode(&text) else {
            continue;
        };
        let (epochs, bytes) = (p.epochs, p.bytes);
        if epochs == 0 && bytes == 0 {
            continue; // a launcher or helper process: it captured nothing
        }
        let sync = Duration::from_nanos(p.sync_ns);
        c.processes += 1;
        c.bytes += bytes;
        c.max_epochs = c.max_epochs.max(epochs);
        c.max_sync = c.max_sync.max(sync);
        c.sum_sync += sync;
    }
    c
}

/// The program's run in the job's timeline (docs/report.md).
fn record_run(root: &Path, job: &str, (t0, t1): (u64, u64), code: u8, command: &[String]) {
    let pid = std::process::id();
    let line = timeline::Event::Run {
        pid,
        t0,
        t1,
        status: i32::from(code),
        command: command.join(" ").into_bytes(),
    }
    .encode();
    let dir = timeline::dir(root, job);
    if let Err(e) = timeline::append(&dir, &format!("run-{pid}"), &line) {
        eprintln!("paralog: writing the timeline in {}: {e}", dir.display());
    }
}

fn exit_code_of(st: std::process::ExitStatus) -> u8 {
    match (st.code(), st.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(s)) => 128u8.wrapping_add(s as u8),
        _ => 1,
    }
}

/// Remove the job's directory when nothing is left in it but records of
/// drained epochs: the job is over, its generation numbers are free.
fn remove_finished_job(root: &Path, job: &str) -> anyhow::Result<bool> {
    let inv = Inventory::scan(root)?;
    let Some(j) = inv.job(job) else {
        return Ok(true);
    };
    // Records at or before the progress record are drained (kept until now
    // for an S3 remote); anything after it was never committed.
    let undrained = |f: &paralog_log::FileInventory| {
        let done = f.progress.map(|p| p.id());
        f.epoch_ids().iter().any(|id| Some(*id) > done)
    };
    if j.files
        .iter()
        .any(|f| undrained(f) || f.progress_error.is_some())
    {
        return Ok(false);
    }
    std::fs::remove_dir_all(&j.dir).with_context(|| format!("removing {}", j.dir.display()))?;
    // The lock files capture made for the job's files (docs/capture.md).
    let locks = root.join(format!(
        "{}locks-{job}",
        paralog_log::layout::RUNTIME_PREFIX
    ));
    if let Err(e) = std::fs::remove_dir_all(&locks) {
        if e.kind() != std::io::ErrorKind::NotFound {
            return Err(e).with_context(|| format!("removing {}", locks.display()));
        }
    }
    Ok(true)
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    crate::server::init_tracing();
    let aggregate = args.aggregate.resolve()?;
    let Some(prefix) = env_path(&args.prefix, "PARALOG_PREFIX") else {
        bail!("no prefix: give --prefix DIR (the directory whose files are captured) or set PARALOG_PREFIX");
    };
    let local = env_path(&args.local, "PARALOG_LOCAL").unwrap_or_else(default_local);
    let root = crate::server::prepare_root(&local)?;
    let job = args
        .job
        .clone()
        .or_else(|| std::env::var("PARALOG_JOB").ok().filter(|j| !j.is_empty()))
        .unwrap_or_else(|| {
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            format!("run-{secs}-{}", std::process::id())
        });
    paralog_log::layout::validate_component("job name", &job)
        .map_err(|e| anyhow::anyhow!("--job: {e}"))?;
    if let Some(html) = &args.report {
        // Refused now rather than after the program ran.
        let missing = html
            .parent()
            .filter(|d| !d.as_os_str().is_empty() && !d.is_dir());
        if let Some(d) = missing {
            bail!(
                "--report {}: the directory {} does not exist",
                html.display(),
                d.display()
            );
        }
    }
    // Passed on to the capture library and the server as the user wrote it
    // (settings at their defaults left out).
    let remote_url = args.remote.url()?.map(|u| u.to_string());
    // Validate the remote now rather than in the server's log, and refuse
    // one that cannot work as given rather than retry forever.
    let remote = args.remote.resolve_checked()?;
    crate::aggregate_args::AggregateArgs::sets(aggregate, &remote, false)?;
    let stale = undrained_elsewhere(&root, &job)?;
    if !stale.is_empty() {
        bail!(
            "{} holds committed epochs that were never drained (a crashed run?):\n  {}\nrun `paralog recover --local {}{}` first, so that they reach the remote before newer output",
            root.display(),
            stale.join("\n  "),
            root.display(),
            remote_url.as_deref().map(|r| format!(" --remote {r}")).unwrap_or_default()
        );
    }
    let mpi = match args.mpi {
        Some(choice) => choice.shim(),
        None => {
            let m = detect_mpi(&args.command);
            if m.is_none() {
                eprintln!("paralog: no MPI found in the command (launcher or linked library): capturing it as a plain POSIX program; give --mpi mpich|openmpi if it uses MPI-IO");
            }
            m
        }
    };
    let vars = capture_env(mpi, &prefix, &root, remote_url.as_deref(), Some(&job))?;
    let stats_dir = root.join(format!(
        "{}stats-{job}",
        paralog_log::layout::RUNTIME_PREFIX
    ));
    let _ = std::fs::remove_dir_all(&stats_dir);
    // This run of the job starts its timeline afresh (kept afterwards for
    // `paralog report`).
    let _ = std::fs::remove_dir_all(timeline::dir(&root, &job));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(&stats_dir)
        .with_context(|| format!("creating {}", stats_dir.display()))?;

    let mut server = start_server(&args, &root, &job, remote_url.as_deref())?;
    tracing::debug!(pid = server.child.id(), "server started");

    // Ranks that outlive their launcher (Open MPI's, when mpirun is killed)
    // become our children, so that we can wait for them: the program is
    // not over while one of its processes may still commit an epoch.
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
    // The prefix before the program starts, kept where `paralog status`
    // finds it until the run ends.
    let before = RunSnapshot::take(&prefix, &args.command);
    if let Err(e) = before.save(&root, &job) {
        eprintln!("paralog: {e:#}: `paralog status` will not name files written past capture");
    }
    let t0 = Instant::now();
    let t0_us = timeline::now_us();
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..])
        .envs(vars.iter().map(|(k, v)| (k, v)))
        .env("PARALOG_STATS", &stats_dir);
    let program = match cmd.spawn() {
        Ok(mut c) => c.wait(),
        Err(e) => Err(e),
    };
    wait_for_orphans(server.child.id());
    let program_time = t0.elapsed();
    // The program's processes are gone: nobody shares a placeholder now.
    let _ = std::fs::remove_dir_all(paralog_log::layout::shared_ledgers(&root, &job));
    let at_end = status::request_status(&server.socket, &Request::Status).ok();

    let program = match program {
        Ok(st) => st,
        Err(e) => {
            RunSnapshot::remove(&root, &job);
            let _ = status::request(&server.socket, &Request::Stop);
            let _ = server.child.wait();
            bail!("could not run {}: {e}", args.command[0]);
        }
    };
    let code = exit_code_of(program);
    let t1_us = t0_us + program_time.as_micros() as u64;
    record_run(&root, &job, (t0_us, t1_us), code, &args.command);
    let counters = read_counters(&stats_dir);

    if args.no_wait {
        let _ = status::request(&server.socket, &Request::Finish);
        println!(
            "paralog: program exited with status {code} after {:.2} s; the server (pid {}) finishes the drain in the background: `paralog status --local {} --job {job}`",
            program_time.as_secs_f64(),
            server.child.id(),
            root.display()
        );
        let _ = std::fs::remove_dir_all(&stats_dir);
        // Whatever was written past capture is written by now.
        let missed = print_missed(before.missed(&root, &job));
        RunSnapshot::remove(&root, &job);
        return Ok(ExitCode::from(if missed && code == 0 { 3 } else { code }));
    }

    let drained = wait_drained(&server.socket, args.wait_timeout);
    let total_time = t0.elapsed();
    let missed = before.missed(&root, &job);
    let captured = crate::missed::captured_paths(&root, &job);
    RunSnapshot::remove(&root, &job);
    let _ = status::request(&server.socket, &Request::Stop);
    let server_exit = server.child.wait();
    let _ = std::fs::remove_dir_all(&stats_dir);
    // Every drain is in the timeline once the server stopped.
    let report_failed =
        args.report
            .as_deref()
            .is_some_and(|html| match crate::report::write(&root, &job, html) {
                Ok((r, png)) => {
                    eprintln!("paralog: {}", crate::report::said(&r, html, &png));
                    false
                }
                Err(e) => {
                    eprintln!("paralog: no report: {e:#}");
                    true
                }
            });

    let final_status = match drained {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "paralog: the server failed before the drain finished: {e} (log: {})",
                server.log.display()
            );
            eprintln!(
                "{}",
                recover_hint(&root, &job, remote_url.as_deref(), &args)
            );
            return Ok(ExitCode::from(if code == 0 { 3 } else { code }));
        }
    };
    if let Ok(st) = server_exit {
        if !st.success() {
            tracing::warn!(status = %st, log = %server.log.display(), "server exit");
        }
    }
    summary(
        &args,
        code,
        program_time,
        total_time,
        &counters,
        at_end.as_ref(),
        &final_status,
    );
    let complete = final_status.idle
        && final_status.epochs_pending == 0
        && final_status.damaged == 0
        && final_status.retrying == 0;
    // A refused epoch is lost output even if the program ignored the error.
    for line in &counters.refused {
        eprintln!("paralog: REFUSED: {line}");
    }
    let missed = print_missed(missed);
    if let Ok(Some(agg)) = args.aggregate.resolve() {
        for line in crate::aggregate_args::AggregateArgs::unmatched(&agg, &captured) {
            eprintln!("paralog: {line}");
        }
    }
    let code = if (counters.refused.is_empty() && !missed) || code != 0 {
        code
    } else {
        3
    };
    if complete {
        match remove_finished_job(&root, &job) {
            Ok(true) => {
                let _ = std::fs::remove_file(&server.log);
            }
            Ok(false) => eprintln!(
                "paralog: {} keeps records of epochs that were never committed (the program stopped inside an epoch); `paralog inspect --local {}` shows them, `paralog recover --local {} --gc` removes them",
                root.join(&job).display(),
                root.display(),
                root.display()
            ),
            Err(e) => eprintln!("paralog: cleaning up job {job}: {e:#}"),
        }
        return Ok(ExitCode::from(if report_failed && code == 0 {
            1
        } else {
            code
        }));
    }
    for f in final_status.files.iter().filter(|f| f.message.is_some()) {
        let why = match f.state {
            FileState::Refused => " (refused by the remote)",
            FileState::Damaged => " (a damaged record)",
            _ => "",
        };
        eprintln!(
            "paralog: NOT DRAINED{why}: {}: {}",
            f.path,
            f.message.as_deref().unwrap_or("")
        );
    }
    eprintln!(
        "{}",
        recover_hint(&root, &job, remote_url.as_deref(), &args)
    );
    Ok(ExitCode::from(if code == 0 { 3 } else { code }))
}

/// The MISSED lines on stderr; whether a file was missed.
fn print_missed(m: Missed) -> bool {
    match m {
        Missed::TooLarge => {
            eprintln!(
                "paralog: the prefix holds too many files to check for files written past capture"
            );
            false
        }
        Missed::Files { files, lines } => {
            for line in lines {
                eprintln!("paralog: {line}");
            }
            !files.is_empty()
        }
    }
}

/// Ask the server to drain everything, in slices of a few seconds so that
/// a remote that keeps failing is reported on stderr while we wait (the
/// server's own log is a file), until done or `timeout` seconds passed.
fn wait_drained(
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
        let done = st.idle && (st.epochs_pending == 0 || st.damaged > 0);
        if done || left.is_some_and(|l| l <= slice) {
            return Ok(st);
        }
        let trouble: Vec<String> = st
            .files
            .iter()
            .filter_map(|f| f.message.as_ref().map(|m| format!("{}: {m}", f.path)))
            .collect();
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

fn recover_hint(root: &Path, job: &str, remote: Option<&str>, args: &Args) -> String {
    // The same checkpoint sets, or members would drain as plain files.
    let sets = match args.aggregate.resolve() {
        Ok(Some(a)) => crate::aggregate_args::AggregateArgs::to_args(&a)
            .chunks(2)
            .map(|kv| format!(" {} '{}'", kv[0], kv[1]))
            .collect::<String>(),
        _ => String::new(),
    };
    format!(
        "paralog: every committed byte is kept in {}; once the cause is fixed, `paralog recover --local {} --job {job}{}{sets}` finishes the drain",
        root.join(job).display(),
        root.display(),
        remote.map(|r| format!(" --remote {r}")).unwrap_or_default()
    )
}

fn summary(
    args: &Args,
    code: u8,
    program_time: Duration,
    total_time: Duration,
    c: &Counters,
    at_end: Option<&Status>,
    fin: &Status,
) {
    let overlapped = at_end.map_or(0.0, |s| s.drain_active_s);
    let after = (total_time - program_time).as_secs_f64();
    let mean_sync = if c.processes > 0 {
        c.sum_sync.as_secs_f64() / c.processes as f64
    } else {
        0.0
    };
    eprintln!(
        "paralog: summary of job {} ({})",
        fin.job.as_deref().unwrap_or("?"),
        args.command.join(" ")
    );
    eprintln!(
        "  program            exit status {code}, {:.2} s",
        program_time.as_secs_f64()
    );
    eprintln!(
        "  captured           {} by {} process(es), {} epoch(s) per rank at most",
        human_bytes(c.bytes),
        c.processes,
        c.max_epochs
    );
    eprintln!(
        "  consistency points {:.1} ms per rank on average, {:.1} ms at most (local commit + agreement)",
        mean_sync * 1e3,
        c.max_sync.as_secs_f64() * 1e3
    );
    eprintln!(
        "  drained            {} in {} epoch(s) to {}",
        human_bytes(fin.bytes_drained),
        fin.epochs_drained,
        fin.remote
    );
    eprintln!(
        "  drain time         {:.2} s while the program ran, then {:.2} s of waiting after it ended ({:.2} s end to end)",
        overlapped,
        after,
        total_time.as_secs_f64()
    );
}
