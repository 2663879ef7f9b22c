//! `paralog check-symbols`: which I/O entry points a program (and the shared
//! libraries it loads) calls, and what capture does with each: captured,
//! passed through by design, or not handled (then a write through it to a
//! captured file is caught by the sentinel and fails the consistency point,
//! and a path operation under the prefix bypasses the log).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, Context};
use serde_json::json;

#[derive(clap::Args)]
pub struct Args {
    /// The program (an executable or a shared library).
    program: PathBuf,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// I/O entry points that capture deliberately leaves to the real call.
const PASS_THROUGH: &[(&str, &str)] = &[
    (
        "posix_fadvise",
        "advice only: on the placeholder it changes nothing",
    ),
    (
        "posix_fadvise64",
        "advice only: on the placeholder it changes nothing",
    ),
];

/// I/O entry points capture does not handle, with what that means.
const NOT_HANDLED: &[(&str, &str)] = &[(
    "io_uring_setup",
    "io_uring bypasses every wrapper: caught by the sentinel",
)];

/// Dynamic symbols a binary needs from elsewhere (`nm -D --undefined-only`).
fn undefined_symbols(bin: &Path) -> anyhow::Result<BTreeSet<String>> {
    let out = Command::new("nm")
        .args(["-D", "--undefined-only"])
        .arg(bin)
        .output()
        .context("running nm (package binutils)")?;
    if !out.status.success() {
        bail!(
            "nm {}: {}",
            bin.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .map(|s| s.split('@').next().unwrap_or(s).to_owned())
        .collect())
}

/// The program and the shared libraries it loads (`ldd`), minus the C
/// library and loader themselves.
fn objects(program: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(program)
        .output()
        .context("running ldd")?;
    let mut objs = vec![program.to_path_buf()];
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some((_, rest)) = line.split_once("=> ") {
            let path = rest.split(" (").next().unwrap_or("").trim();
            let name = Path::new(path)
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("");
            if path.starts_with('/')
                && !name.starts_with("libc.so")
                && !name.starts_with("ld-linux")
            {
                objs.push(PathBuf::from(path));
            }
        }
    }
    Ok(objs)
}

/// symbol -> (status, note, objects that call it), for a program and the
/// shared libraries it loads.
type Found = BTreeMap<String, (&'static str, &'static str, Vec<String>)>;

fn classify(program: &Path) -> anyhow::Result<Found> {
    let captured: BTreeSet<&str> = paralog_settings::SYMBOLS.iter().copied().collect();
    let mut found = Found::new();
    for obj in objects(program)? {
        let name = obj
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for sym in undefined_symbols(&obj)? {
            let class = if captured.contains(sym.as_str()) {
                Some(("captured", ""))
            } else if let Some((_, why)) = PASS_THROUGH.iter().find(|(s, _)| *s == sym) {
                Some(("passes through", *why))
            } else {
                NOT_HANDLED
                    .iter()
                    .find(|(s, _)| *s == sym)
                    .map(|(_, why)| ("NOT HANDLED", *why))
            };
            if let Some((status, why)) = class {
                found
                    .entry(sym)
                    .or_insert((status, why, Vec::new()))
                    .2
                    .push(name.clone());
            }
        }
    }
    Ok(found)
}

/// The I/O entry points a program (or its libraries) uses that capture
/// does not handle.
pub fn not_handled(program: &Path) -> anyhow::Result<Vec<String>> {
    Ok(classify(program)?
        .into_iter()
        .filter(|(_, (s, _, _))| *s == "NOT HANDLED")
        .map(|(sym, _)| sym)
        .collect())
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if !args.program.is_file() {
        bail!("{}: no such program", args.program.display());
    }
    let found = classify(&args.program)?;
    let not_handled = found
        .values()
        .filter(|(s, _, _)| *s == "NOT HANDLED")
        .count();
    if args.json {
        let rows: Vec<_> = found
            .iter()
            .map(|(sym, (status, why, by))| json!({"symbol": sym, "status": status, "note": why, "called_by": by}))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"program": args.program, "symbols": rows}))?
        );
    } else {
        println!(
            "I/O entry points used by {} and its libraries:",
            args.program.display()
        );
        for (sym, (status, why, by)) in &found {
            let note = if why.is_empty() {
                String::new()
            } else {
                format!(": {why}")
            };
            println!("  {sym:<18} {status}{note}  [{}]", by.join(", "));
        }
        if not_handled == 0 {
            println!("every I/O entry point it uses is captured or passes through by design");
        } else {
            println!("{not_handled} I/O entry point(s) not handled: see docs/capture.md, \"What is not captured\"");
        }
    }
    Ok(ExitCode::SUCCESS)
}
