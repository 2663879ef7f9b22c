//! `paralog materialize`: the logical file at a committed epoch, from the log.

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use paralog_log::reader::fmt_ids;
use paralog_log::{EpochId, Inventory};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    local: crate::LocalArg,
    /// The path the program wrote (or its path relative to the prefix).
    file: PathBuf,
    /// Where to write the logical file.
    out: PathBuf,
    /// Epoch to materialize: `E`, or `OPEN:E` when the file was opened more
    /// than once [default: the last globally committed epoch]
    #[arg(long)]
    epoch: Option<String>,
    /// Only look in this job.
    #[arg(long)]
    job: Option<String>,
    /// The file as it was before the program's first epoch (for a program
    /// that modified an existing file) [default: none, a new file]
    #[arg(long, value_name = "FILE")]
    base: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let root = args.local.resolve()?;
    let inv = Inventory::scan(&root).with_context(|| format!("scanning {}", root.display()))?;
    let want = args.file.as_os_str().as_bytes();
    let found = inv.find_file(args.job.as_deref(), want);
    let (job, file) = match found.as_slice() {
        [] => bail!(
            "{}: no captured file {} here",
            root.display(),
            args.file.display()
        ),
        [one] => *one,
        many => bail!(
            "{} was captured by several jobs ({}): choose one with --job",
            args.file.display(),
            many.iter()
                .map(|(j, _)| j.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let committed = file.committed_epochs()?;
    let upto = match &args.epoch {
        None => None,
        Some(s) => Some(parse_epoch(s, &committed).with_context(|| format!("--epoch {s}"))?),
    };
    let lf = file
        .logical_file(upto)
        .with_context(|| format!("job {}: {}", job.name, args.file.display()))?;
    if let (Some(after), None) = (lf.after, &args.base) {
        bail!(
            "{}: epochs up to {after} are already drained to the remote and gone from the log; \
             give the remote file as --base to materialize the rest on top of it",
            args.file.display(),
        );
    }
    if lf.epochs.is_empty() {
        bail!(
            "{}: no globally committed epoch in job {}",
            args.file.display(),
            job.name
        );
    }
    let last = lf.epochs.last().expect("checked non-empty");
    if lf.deleted {
        match std::fs::remove_file(&args.out) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {}", args.out.display())),
        }
        eprintln!(
            "paralog: {} was deleted at epoch {last} (job {}); {} does not exist",
            args.file.display(),
            job.name,
            args.out.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let size = lf
        .materialize(&args.out, args.base.as_deref())
        .with_context(|| format!("materializing {}", args.file.display()))?;
    eprintln!(
        "paralog: wrote {} ({size} bytes) = {} at epoch {last} (job {}, {} epochs applied)",
        args.out.display(),
        args.file.display(),
        job.name,
        lf.epochs.len()
    );
    Ok(ExitCode::SUCCESS)
}

fn parse_epoch(s: &str, committed: &[EpochId]) -> anyhow::Result<EpochId> {
    if let Some((g, e)) = s.split_once(':') {
        return Ok(EpochId::new(
            g.parse().context("open number")?,
            e.parse().context("epoch number")?,
        ));
    }
    let e: u64 = s.parse().context("epoch number")?;
    let gens: std::collections::BTreeSet<u64> = committed.iter().map(|id| id.gen).collect();
    match gens.len() {
        0 | 1 => Ok(EpochId::new(gens.first().copied().unwrap_or(1), e)),
        _ => bail!(
            "the file was opened {} times; say which open as OPEN:{e} (committed: {})",
            gens.len(),
            fmt_ids(committed)
        ),
    }
}
