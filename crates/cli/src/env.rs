//! `paralog env`: the `export` lines that turn capture on for a batch script
//! (`eval "$(paralog env ...)"`, then launch the program as usual).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use paralog_settings::Settings;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mpi {
    Mpich,
    Openmpi,
}

impl Mpi {
    pub fn name(self) -> &'static str {
        match self {
            Mpi::Mpich => "mpich",
            Mpi::Openmpi => "openmpi",
        }
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// MPI implementation the program uses (the shim is built per MPI);
    /// none: a plain POSIX program, as `paralog run --mpi none`.
    #[arg(long, value_enum)]
    mpi: crate::run::MpiChoice,
    /// Directory whose files are captured.
    #[arg(long)]
    prefix: PathBuf,
    /// Node-local log directory (created 0700 if missing).
    #[arg(long)]
    local: PathBuf,
    /// Where the server drains to [default: the prefix itself]
    #[arg(long)]
    remote: Option<String>,
    /// Job name shared by all ranks [default: "default"]
    #[arg(long)]
    job: Option<String>,
}

/// The environment that turns capture on, validated by the same table the
/// capture library reads, so an error shows here rather than in rank 0.
pub fn capture_env(
    mpi: Option<Mpi>,
    prefix: &Path,
    local: &Path,
    remote: Option<&str>,
    job: Option<&str>,
) -> anyhow::Result<Vec<(String, String)>> {
    let abs = |p: &Path| -> anyhow::Result<PathBuf> {
        Ok(paralog_settings::normalize(
            &std::env::current_dir()?.join(p),
        ))
    };
    let prefix = abs(prefix)?;
    let local = abs(local)?;
    let libdir = lib_dir()?;
    // A plain POSIX program needs no shim; an MPI program needs its MPI's.
    let mut libs: Vec<PathBuf> = mpi
        .map(|m| libdir.join(format!("libparalog_mpi_{}.so", m.name())))
        .into_iter()
        .collect();
    libs.push(libdir.join("libparalog_capture.so"));
    for lib in &libs {
        if !lib.is_file() {
            bail!("{} is missing: build it with `make build`", lib.display());
        }
    }
    let mut preload = libs
        .iter()
        .map(|l| l.display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload = format!("{preload}:{}", old.to_string_lossy());
    }
    let mut vars = vec![
        ("LD_PRELOAD".to_owned(), preload),
        ("PARALOG_PREFIX".to_owned(), prefix.display().to_string()),
        ("PARALOG_LOCAL".to_owned(), local.display().to_string()),
        (
            "PARALOG_JOB".to_owned(),
            job.unwrap_or("default").to_owned(),
        ),
    ];
    if let Some(m) = mpi {
        vars.push(("PARALOG_MPI".to_owned(), m.name().to_owned()));
    }
    if let Some(r) = remote {
        vars.push(("PARALOG_REMOTE".to_owned(), r.to_owned()));
    }
    if mpi == Some(Mpi::Openmpi) {
        // OMPIO reads these at MPI_Init (the shim sets them too, but a
        // launcher that starts ranks on other nodes forwards only what it sees).
        vars.push(("OMPI_MCA_fcoll".to_owned(), "individual".to_owned()));
        vars.push((
            "OMPI_MCA_fbtl_posix_write_datasieving".to_owned(),
            "0".to_owned(),
        ));
    }
    let check: Vec<(OsString, OsString)> = vars
        .iter()
        .filter(|(k, _)| k.starts_with("PARALOG_"))
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect();
    if let Settings::Invalid { message, .. } = Settings::from_vars(check) {
        bail!("{message}");
    }
    // With `{node}` each node's process makes its own directory: here only
    // the part above it, which the capture library expects to exist.
    let text = local.to_string_lossy();
    let made = match text.find("{node}") {
        Some(i) => PathBuf::from(&text[..text[..i].rfind('/').unwrap_or(0).max(1)]),
        None => local.clone(),
    };
    if !made.exists() {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .recursive(true)
            .create(&made)
            .with_context(|| format!("creating the node-local directory {}", made.display()))?;
    }
    Ok(vars)
}

/// Where the capture library and the shims are: next to this executable.
pub fn lib_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the paralog executable")?;
    Ok(exe
        .parent()
        .context("executable has no directory")?
        .to_path_buf())
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let vars = capture_env(
        args.mpi.shim(),
        &args.prefix,
        &args.local,
        args.remote.as_deref(),
        args.job.as_deref(),
    )?;
    for (k, v) in vars {
        println!("export {k}={}", shell_quote(&v));
    }
    Ok(ExitCode::SUCCESS)
}
