//! `paralog run`: one job on one node in one command. Starts a server for
//! the job, runs the program with capture on, waits until everything the
//! program committed is drained, stops the server and prints a summary.
//! Exit status: the program's; or 3 if the program succeeded but something
//! it committed could not be drained (then the summary says how to recover).

use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{bail, Context};
use paralog_log::{timeline, Inventory};
use paralog_server::status::{self, FileState, Request};

use crate::env::capture_env;
use crate::missed::RunSnapshot;

mod launcher;
mod report;
mod server;

pub use launcher::{detect_mpi, which, MpiChoice};
use report::{print_missed, read_counters, record_run, summary};
use server::{start_server, wait_drained, wait_for_orphans};

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
    #[command(flatten)]
    release: crate::stream::ReleaseArg,
    /// The command, e.g. `mpirun.mpich -n 4 ./sim`.
    #[arg(required = true, value_name = "COMMAND")]
    command: Vec<String>,
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

fn exit_code_of(st: std::process::ExitStatus) -> u8 {
    match (st.code(), st.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(s)) => 128u8.wrapping_add(s as u8),
        _ => 1,
    }
}

/// Remove the job's directory when nothing is left in it but records of
/// drained epochs: the job is over, its generation numbers are free.
/// Removes the records of a job whose every committed epoch is drained:
/// `Ok(false)` (kept) if some epoch was never committed or drained. The
/// records are renamed aside at once and deleted by a detached `rm`, so
/// the end of the job does not wait for the file system to free them (a
/// job's drained records can be hundreds of MiB: kept until now for an
/// S3 remote). Trash a killed `rm` left is removed by the next run.
fn remove_finished_job(
    root: &Path,
    job: &str,
    inv: Option<&paralog_log::reader::JobInventory>,
) -> anyhow::Result<bool> {
    let Some(j) = inv else {
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
    let trash = new_trash_dir(root, job)?;
    std::fs::rename(&j.dir, trash.join("records"))
        .with_context(|| format!("moving {} aside", j.dir.display()))?;
    // The lock files capture made for the job's files (docs/capture.md).
    let locks = root.join(format!(
        "{}locks-{job}",
        paralog_log::layout::RUNTIME_PREFIX
    ));
    if let Err(e) = std::fs::rename(&locks, trash.join("locks")) {
        if e.kind() != std::io::ErrorKind::NotFound {
            return Err(e).with_context(|| format!("moving {} aside", locks.display()));
        }
    }
    remove_detached(&[trash]);
    Ok(true)
}

/// A new directory for a job's trash: an earlier run of the same job name
/// may have left one whose `rm` still runs.
fn new_trash_dir(root: &Path, job: &str) -> anyhow::Result<PathBuf> {
    let pid = std::process::id();
    let mut n = 0u32;
    loop {
        let dir = root.join(format!(
            "{}trash-{job}-{pid}-{n}",
            paralog_log::layout::RUNTIME_PREFIX
        ));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
            Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
        }
    }
}

/// Trash directories earlier runs under `root` left (their `rm` killed).
fn leftover_trash(root: &Path) -> Vec<PathBuf> {
    let head = format!("{}trash-", paralog_log::layout::RUNTIME_PREFIX);
    std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .as_encoded_bytes()
                .starts_with(head.as_bytes())
        })
        .map(|e| e.path())
        .collect()
}

/// `rm -rf` of `dirs` in a new session with no terminal and no pipes of
/// ours: it outlives us, and whoever waits for our output is not kept
/// waiting for it.
fn remove_detached(dirs: &[PathBuf]) {
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    if dirs.is_empty() {
        return;
    }
    let mut rm = Command::new("rm");
    rm.arg("-rf")
        .arg("--")
        .args(dirs)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: setsid is async-signal-safe and touches no memory of ours.
    unsafe {
        rm.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    if let Err(e) = rm.spawn() {
        tracing::warn!(error = %e, "could not start rm for the drained records");
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    crate::server::init_tracing();
    let aggregate = args.aggregate.resolve()?;
    let Some(prefix) = env_path(&args.prefix, "PARALOG_PREFIX") else {
        bail!("no prefix: give --prefix DIR (the directory whose files are captured) or set PARALOG_PREFIX");
    };
    let local = env_path(&args.local, "PARALOG_LOCAL").unwrap_or_else(default_local);
    let root = crate::server::prepare_root(&local)?;
    remove_detached(&leftover_trash(&root));
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
    // Checked now (refused before the program starts); the server takes
    // the options again.
    crate::aggregate_args::AggregateArgs::sets(aggregate, &remote, false)?;
    crate::aggregate_args::AggregateArgs::index_s3_sets(&root, &remote);
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
    let _ = status::request(&server.socket, &Request::Stop);
    let server_exit = server.child.wait();
    // One scan of the stopped job's records serves the MISSED check, the
    // rules' check and the removal.
    let inventory = Inventory::scan(&root);
    let job_inv = inventory.as_ref().ok().and_then(|i| i.job(&job));
    let captured = crate::missed::captured_in(job_inv);
    let missed = before.missed_of(&captured);
    RunSnapshot::remove(&root, &job);
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
    // The files drained, the server can still fail at its end: a
    // stream's last round or a logged put not published. Then the job is
    // not complete: said, its log kept, exit 3.
    let server_failed = match &server_exit {
        Ok(st) if st.success() => None,
        Ok(st) => Some(st.to_string()),
        Err(e) => Some(format!("not waited for: {e}")),
    };
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
        && final_status.retrying == 0
        && server_failed.is_none();
    if let Some(st) = &server_failed {
        eprintln!(
            "paralog: NOT DRAINED: the server ended with {st} (log: {}, kept)",
            server.log.display()
        );
        for line in server_errors(&server.log) {
            eprintln!("paralog:   {line}");
        }
    }
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
        // A scan that failed removes nothing (and says why).
        let removal = match &inventory {
            Ok(_) => remove_finished_job(&root, &job, job_inv),
            Err(e) => Err(anyhow::anyhow!("reading {}: {e}", root.display())),
        };
        match removal {
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

/// The server log's distinct ERROR lines, without their time stamps
/// (what the user needs to see why the server failed), at most 5.
fn server_errors(log: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        let Some((_, rest)) = line.split_once(" ERROR ") else {
            continue;
        };
        if !out.iter().any(|l| l == rest) {
            out.push(rest.to_owned());
        }
    }
    out.truncate(5);
    out
}

fn has_streams(root: &Path) -> bool {
    paralog_stream::drain::local_streams(root).is_ok_and(|s| !s.is_empty())
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
    // Without a remote the server sent the streams to the prefix, which
    // recover cannot guess (docs/streams.md "Recovery").
    let to = match (remote, env_path(&args.prefix, "PARALOG_PREFIX")) {
        (Some(r), _) => format!(" --remote {r}"),
        (None, Some(p)) if has_streams(root) => format!(
            " --stream-remote {}",
            paralog_settings::normalize(&std::path::absolute(&p).unwrap_or(p)).display()
        ),
        _ => String::new(),
    };
    format!(
        "paralog: every committed byte is kept in {}; once the cause is fixed, `paralog recover --local {} --job {job}{to}{sets}` finishes the drain",
        root.join(job).display(),
        root.display(),
    )
}
