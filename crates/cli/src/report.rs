//! `paralog report`: the HTML report of a job (timeline, summary) and a
//! PNG of its timeline, from what the run recorded in the node-local root
//! (docs/report.md). `paralog run --report FILE` calls `write` at its end.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::bail;
use paralog_report::Report;

#[derive(clap::Args)]
#[command(mut_arg("job", |a| a.help("The job [env: PARALOG_JOB; default: the only job with a timeline]")))]
pub struct Args {
    #[command(flatten)]
    at: crate::LocalJob,
    /// The page to write; the PNG goes beside it (same name, .png)
    /// [default: paralog-report-<job>.html]
    #[arg(long, short, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Also print the report's numbers (the page's JSON) on stdout
    #[arg(long)]
    json: bool,
}

/// Write the report of `job` to `html` and its PNG beside it; the report
/// and the PNG's path.
pub fn write(root: &Path, job: &str, html: &Path) -> anyhow::Result<(Report, PathBuf)> {
    let report = Report::load(root, job)?;
    let png = paralog_report::write(&report, html)?;
    Ok((report, png))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // As `paralog run`: PARALOG_LOCAL, else $TMPDIR/paralog-<uid>.
    let root = if args.at.local.local.is_none() && std::env::var_os("PARALOG_LOCAL").is_none() {
        crate::run::default_local()
    } else {
        args.at.local.resolve()?
    };
    if !root.is_dir() {
        bail!(
            "{}: not a directory (give the node-local directory of the run with --local)",
            root.display()
        );
    }
    let job = match args
        .at
        .job
        .clone()
        .or_else(|| std::env::var("PARALOG_JOB").ok().filter(|j| !j.is_empty()))
    {
        Some(j) => j,
        None => match paralog_log::timeline::jobs(&root).as_slice() {
            [one] => one.clone(),
            [] => bail!("{} holds no job's timeline", root.display()),
            many => bail!(
                "give --job: {} holds the timelines of {}",
                root.display(),
                many.join(", ")
            ),
        },
    };
    paralog_log::layout::validate_component("job name", &job)
        .map_err(|e| anyhow::anyhow!("--job: {e}"))?;
    let html = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("paralog-report-{job}.html")));
    let (report, png) = write(&root, &job, &html)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.json())?);
    }
    eprintln!("paralog: {}", said(&report, &html, &png));
    Ok(ExitCode::SUCCESS)
}

/// One line on what was written.
pub fn said(r: &Report, html: &Path, png: &Path) -> String {
    format!(
        "report of job {}: {} (timeline picture: {}); {} consistency point(s) of {} process(es), {} captured, {} drained",
        r.job,
        html.display(),
        png.display(),
        r.summary.consistency_points,
        r.summary.processes,
        crate::status::human_bytes(r.summary.bytes_captured),
        crate::status::human_bytes(r.summary.bytes_drained)
    )
}
