//! `paralog doctor`: whether a run would work on this node, one check per
//! line with its verdict and, when it fails, the fix. Exit status 0 when
//! nothing failed (warnings allowed), 1 otherwise.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use crate::env::{lib_dir, Mpi};
use crate::remote::RemoteArg;
use crate::run::{default_local, env_path, which, MpiChoice};

#[derive(clap::Args)]
pub struct Args {
    /// The directory whose files would be captured [env: PARALOG_PREFIX]
    #[arg(long, value_name = "DIR")]
    prefix: Option<PathBuf>,
    /// Node-local log directory [env: PARALOG_LOCAL; default: $TMPDIR/paralog-<uid>]
    #[arg(long, value_name = "DIR")]
    local: Option<PathBuf>,
    #[command(flatten)]
    remote: RemoteArg,
    /// The MPI the program uses (default: whichever is installed)
    #[arg(long, value_enum)]
    mpi: Option<MpiChoice>,
    /// Bytes the job is expected to write, checked against free space
    #[arg(long, value_name = "BYTES")]
    expect: Option<u64>,
    /// The command the run would start: its MPI is checked against --mpi.
    #[arg(value_name = "COMMAND", last = true)]
    command: Vec<String>,
}

#[derive(Default)]
struct Verdicts {
    failed: usize,
    warned: usize,
}

impl Verdicts {
    fn ok(&mut self, what: &str, verdict: impl AsRef<str>) {
        println!("ok    {what}: {}", verdict.as_ref());
    }
    fn warn(&mut self, what: &str, verdict: impl AsRef<str>, fix: impl AsRef<str>) {
        self.warned += 1;
        print_with_fix("warn", what, verdict.as_ref(), fix.as_ref());
    }
    fn fail(&mut self, what: &str, verdict: impl AsRef<str>, fix: impl AsRef<str>) {
        self.failed += 1;
        print_with_fix("FAIL", what, verdict.as_ref(), fix.as_ref());
    }
}

/// A verdict line that is not ok, and the fix under it.
fn print_with_fix(tag: &str, what: &str, verdict: &str, fix: &str) {
    println!("{tag:<5} {what}: {verdict}\n      fix: {fix}");
}

/// statfs magic numbers of file systems that are not the node's own.
const REMOTE_FS: &[(i64, &str)] = &[
    (0x6969, "NFS"),
    (0x6573_5546, "FUSE"),
    (0x0BD0_0BD0, "Lustre"),
    (0x4750_4653, "GPFS"),
    (0xFF53_4D42, "CIFS"),
    (0xFE53_4D42, "SMB2"),
    (0x0102_1997, "9p"),
    (0x00C3_6400, "CephFS"),
    (0x1983_0326, "BeeGFS"),
];

fn fs_kind(dir: &Path) -> Option<&'static str> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: a zeroed statfs filled by the kernel for a NUL-terminated path.
    let st = unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        (libc::statfs(c.as_ptr(), &mut st) == 0).then_some(st)
    }?;
    REMOTE_FS
        .iter()
        .find(|(m, _)| *m == st.f_type as i64)
        .map(|(_, n)| *n)
}

fn free_bytes(dir: &Path) -> Option<u64> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: as above.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        (libc::statvfs(c.as_ptr(), &mut st) == 0).then(|| st.f_bavail as u64 * st.f_frsize as u64)
    }
}

/// Median fsync latency of a 4 KiB write (ms), and the throughput of a
/// 32 MiB write made durable (MB/s), in a scratch file of `dir`.
fn speed(dir: &Path) -> std::io::Result<(f64, f64)> {
    let path = dir.join(format!(".paralog-doctor-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)?;
        let block = vec![7u8; 4096];
        let mut lat = Vec::new();
        for _ in 0..16 {
            let t = Instant::now();
            f.write_all(&block)?;
            f.sync_data()?;
            lat.push(t.elapsed().as_secs_f64() * 1e3);
        }
        lat.sort_by(f64::total_cmp);
        let big = vec![3u8; 1 << 20];
        let t = Instant::now();
        for _ in 0..32 {
            f.write_all(&big)?;
        }
        f.sync_data()?;
        let mbs = 32.0 * 1.048576 / t.elapsed().as_secs_f64();
        Ok((lat[lat.len() / 2], mbs))
    })();
    let _ = std::fs::remove_file(&path);
    result
}

fn check_settings(v: &mut Verdicts) {
    let known: Vec<&str> = paralog_settings::SETTINGS.iter().map(|s| s.name).collect();
    let unknown: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| k.starts_with("PARALOG_") && !known.contains(&k.as_str()))
        .collect();
    if !unknown.is_empty() {
        v.fail(
            "settings",
            format!("unknown in the environment: {}", unknown.join(", ")),
            "correct or unset them (docs/capture.md lists every PARALOG_* setting)",
        );
    } else if std::env::var_os("PARALOG_PREFIX").is_some() {
        match paralog_settings::Settings::from_env() {
            paralog_settings::Settings::Invalid { message, .. } => {
                v.fail("settings", message, "correct the PARALOG_* variables named")
            }
            _ => v.ok(
                "settings",
                "the PARALOG_* variables in the environment are valid",
            ),
        }
    } else {
        v.ok(
            "settings",
            "no unknown PARALOG_* variable in the environment",
        );
    }
}

fn check_libraries(v: &mut Verdicts, mpi: Option<MpiChoice>, command: &[String]) {
    let Ok(dir) = lib_dir() else {
        return v.fail(
            "capture library",
            "cannot locate this executable",
            "run paralog from its build",
        );
    };
    let capture = dir.join("libparalog_capture.so");
    if capture.is_file() {
        v.ok("capture library", capture.display().to_string());
    } else {
        v.fail(
            "capture library",
            format!("{} is missing", capture.display()),
            "make build",
        );
    }
    let installed = |m: Mpi| which(&format!("mpirun.{}", m.name())).is_some();
    if let (Some(choice), Some(found)) = (mpi, crate::run::detect_mpi(command)) {
        if choice.shim() != Some(found) {
            let given = choice.shim().map_or("none", Mpi::name);
            return v.fail(
                "MPI",
                format!(
                    "`{}` uses {}, but --mpi {given}",
                    command.join(" "),
                    found.name()
                ),
                format!("give --mpi {}", found.name()),
            );
        }
    }
    let chosen: Vec<Mpi> = match mpi {
        Some(MpiChoice::None) => return v.ok("MPI", "none: a plain POSIX program, no shim"),
        Some(c) => c.shim().into_iter().collect(),
        None => [Mpi::Mpich, Mpi::Openmpi]
            .into_iter()
            .filter(|&m| installed(m))
            .collect(),
    };
    if chosen.is_empty() {
        v.warn(
            "MPI",
            "no MPI found (mpirun.mpich or mpirun.openmpi)",
            "install MPICH or Open MPI, or run plain POSIX programs with --mpi none",
        );
    }
    for m in chosen {
        let shim = dir.join(format!("libparalog_mpi_{}.so", m.name()));
        if !installed(m) {
            v.fail(
                "MPI",
                format!(
                    "--mpi {} but mpirun.{} is not installed",
                    m.name(),
                    m.name()
                ),
                "install it, or give the --mpi of the MPI the program was built with",
            );
        } else if !shim.is_file() {
            v.fail(
                "MPI",
                format!("the {} shim {} is missing", m.name(), shim.display()),
                "make build",
            );
        } else {
            v.ok(
                "MPI",
                format!(
                    "{}: mpirun.{} and its shim {}",
                    m.name(),
                    m.name(),
                    shim.display()
                ),
            );
        }
    }
}

fn check_local(
    v: &mut Verdicts,
    local: &Path,
    prefix: Option<&Path>,
    expect: Option<u64>,
) -> Option<f64> {
    let what = "node-local directory";
    if prefix.is_some_and(|p| local.starts_with(p)) {
        v.fail(
            what,
            format!("{} is inside the prefix", local.display()),
            "choose a --local outside the prefix",
        );
        return None;
    }
    let existing = local
        .ancestors()
        .find(|a| a.exists())
        .unwrap_or(Path::new("/"));
    match std::fs::metadata(local) {
        Ok(m) if !m.is_dir() => {
            v.fail(
                what,
                format!("{} is not a directory", local.display()),
                "give a directory with --local",
            );
            return None;
        }
        Ok(m) if m.mode() & 0o077 != 0 => v.fail(
            what,
            format!(
                "{} is not private (mode {:o})",
                local.display(),
                m.mode() & 0o777
            ),
            format!("chmod 700 {}", local.display()),
        ),
        Ok(_) => {}
        Err(_) if existing != local.parent().unwrap_or(existing) => {
            v.fail(
                what,
                format!("{} does not exist, nor does its parent", local.display()),
                format!("mkdir -p -m 700 {}", local.display()),
            );
            return None;
        }
        Err(_) => v.ok(what, format!("{} will be created (0700)", local.display())),
    }
    if let Some(kind) = fs_kind(existing) {
        v.fail(
            what,
            format!(
                "{} is on {kind}, not the node's own storage",
                existing.display()
            ),
            "give a --local on the node's SSD or tmpfs",
        );
    }
    let result = match speed(existing) {
        Ok((ms, mbs)) => {
            v.ok(
                what,
                format!(
                    "{} is writable: fsync {ms:.2} ms, writes {mbs:.0} MB/s",
                    existing.display()
                ),
            );
            Some(mbs)
        }
        Err(e) => {
            v.fail(
                what,
                format!("{} is not writable: {e}", existing.display()),
                "give a writable --local",
            );
            None
        }
    };
    if let (Some(want), Some(free)) = (expect, free_bytes(existing)) {
        if free < want {
            v.fail(
                "free space",
                format!(
                    "{} MB free on {}, the job writes {} MB",
                    free >> 20,
                    existing.display(),
                    want >> 20
                ),
                "free space or choose a larger --local",
            );
        } else {
            v.ok(
                "free space",
                format!("{} MB free, {} MB expected", free >> 20, want >> 20),
            );
        }
    }
    result
}

fn check_remote(
    v: &mut Verdicts,
    remote: &RemoteArg,
    prefix: Option<&Path>,
    local_mbs: Option<f64>,
) {
    let what = "remote";
    let resolved = match remote.resolve() {
        Ok(r) => r,
        Err(e) => return v.fail(what, e.to_string(), "correct --remote"),
    };
    let dir: Option<PathBuf> = match &resolved {
        paralog_server::remote::Remote::Prefix => prefix.map(Path::to_path_buf),
        paralog_server::remote::Remote::Url(u, backend) => {
            if let Err(e) = backend.probe() {
                return v.fail(
                    what,
                    format!("{u}: {e}"),
                    "create it, mount it, or correct --remote",
                );
            }
            match backend.root_dir() {
                Some(d) => Some(d.to_path_buf()),
                // Credentials come from the standard chain; never printed.
                None => {
                    return v.ok(
                        what,
                        format!("{u}: the remote answers to the credentials found"),
                    )
                }
            }
        }
    };
    let Some(dir) = dir else {
        return v.warn(
            what,
            "the prefix itself, but no --prefix given",
            "give --prefix to check it",
        );
    };
    if !dir.is_dir() {
        return v.fail(
            what,
            format!("{} does not exist", dir.display()),
            format!("mkdir -p {}", dir.display()),
        );
    }
    match speed(&dir) {
        Ok((ms, mbs)) => {
            let ratio = local_mbs
                .map(|l| format!(", the node-local directory writes {:.1}x as fast", l / mbs));
            v.ok(
                what,
                format!(
                    "{} is writable: fsync {ms:.2} ms, writes {mbs:.0} MB/s{}",
                    dir.display(),
                    ratio.unwrap_or_default()
                ),
            )
        }
        Err(e) => v.fail(
            what,
            format!("{} is not writable: {e}", dir.display()),
            "give a writable --remote",
        ),
    }
}

fn check_inotify(v: &mut Verdicts) {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
    };
    match (
        read("/proc/sys/fs/inotify/max_user_watches"),
        read("/proc/sys/fs/inotify/max_user_instances"),
    ) {
        (Some(w), Some(i)) if w >= 8192 && i >= 8 => {
            v.ok("inotify", format!("{w} watches, {i} instances per user"))
        }
        (Some(w), Some(i)) => v.warn(
            "inotify",
            format!("only {w} watches and {i} instances per user: the server falls back to scans"),
            "sysctl fs.inotify.max_user_watches=524288 fs.inotify.max_user_instances=128",
        ),
        _ => v.warn(
            "inotify",
            "the limits cannot be read",
            "check /proc/sys/fs/inotify",
        ),
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut v = Verdicts::default();
    check_settings(&mut v);
    check_libraries(&mut v, args.mpi, &args.command);
    let prefix = env_path(&args.prefix, "PARALOG_PREFIX");
    match &prefix {
        Some(p) if !p.is_absolute() => v.fail(
            "prefix",
            format!("{} is not absolute", p.display()),
            "give an absolute --prefix",
        ),
        Some(p) if !p.is_dir() => v.fail(
            "prefix",
            format!("{} does not exist", p.display()),
            format!("mkdir -p {}", p.display()),
        ),
        Some(p) => v.ok("prefix", p.display().to_string()),
        None => v.warn(
            "prefix",
            "none given",
            "give --prefix (the directory the program writes)",
        ),
    }
    let local = env_path(&args.local, "PARALOG_LOCAL").unwrap_or_else(default_local);
    let local_mbs = check_local(&mut v, &local, prefix.as_deref(), args.expect);
    check_remote(&mut v, &args.remote, prefix.as_deref(), local_mbs);
    check_inotify(&mut v);
    if v.failed == 0 {
        println!("a run would work ({} warning(s))", v.warned);
        Ok(ExitCode::SUCCESS)
    } else {
        println!(
            "{} check(s) failed: a run would not work as set up",
            v.failed
        );
        Ok(ExitCode::from(1))
    }
}
