//! `paralog inspect`: what a node holds, for people first (`--json` for scripts).

use std::process::ExitCode;

use anyhow::Context;
use paralog_log::reader::{fmt_ids, CommitStatus, FileInventory, ManifestAt};
use paralog_log::{EpochId, Inventory, Op};
use serde_json::{json, Value};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    at: crate::LocalJob,
    /// List every extent (default: the first 8 per rank and epoch).
    #[arg(long)]
    all_extents: bool,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

const SHOWN_EXTENTS: usize = 8;

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let root = args.at.local.resolve()?;
    let inv = Inventory::scan(&root).with_context(|| format!("scanning {}", root.display()))?;
    if let Some(job) = &args.at.job {
        if inv.job(job).is_none() {
            anyhow::bail!("{}: no job named {job:?}", root.display());
        }
    }
    let report = build(&inv, args.at.job.as_deref())?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_human(&report, args.all_extents);
    }
    Ok(ExitCode::SUCCESS)
}

fn status_str(s: &CommitStatus) -> String {
    match s {
        CommitStatus::Marked => "committed (mark)".into(),
        CommitStatus::AllManifests => "committed (all manifests)".into(),
        CommitStatus::Incomplete { comm_size: 0, .. } => "not committed (no manifest)".into(),
        CommitStatus::Incomplete { missing, .. } => {
            format!(
                "not committed here (no manifest from rank {})",
                join(missing)
            )
        }
    }
}

fn join<T: ToString>(v: &[T]) -> String {
    v.iter().map(T::to_string).collect::<Vec<_>>().join(", ")
}

/// Everything inspect knows, as JSON; the human form is printed from it, so
/// the two can never disagree.
fn build(inv: &Inventory, job: Option<&str>) -> anyhow::Result<Value> {
    let mut jobs = Vec::new();
    for j in inv.jobs.iter().filter(|j| job.is_none_or(|n| n == j.name)) {
        let mut files = Vec::new();
        for f in &j.files {
            files.push(file_json(f));
        }
        jobs.push(json!({ "name": j.name, "dir": j.dir, "files": files }));
    }
    Ok(json!({
        "root": inv.root,
        "jobs": jobs,
        "stray": inv.stray,
    }))
}

fn file_json(f: &FileInventory) -> Value {
    let mut epochs = Vec::new();
    let mut problems = Vec::new();
    for id in f.epoch_ids() {
        let status = match f.commit_status(id) {
            Ok(s) => s,
            Err(e) => {
                problems.push(e.to_string());
                continue;
            }
        };
        let manifests = match f.manifests(id) {
            Ok(m) => m,
            Err(e) => {
                problems.push(e.to_string());
                Vec::new()
            }
        };
        let gen = &f.gens[&id.gen];
        let mut ranks = Vec::new();
        for (&rank, r) in &gen.ranks {
            let Some(files) = r.epochs.get(&id.epoch) else {
                continue;
            };
            let m = manifests
                .iter()
                .find(|(m, _)| m.rank == rank)
                .map(|(m, _)| m);
            let ops: Vec<Value> = m
                .map(|m| {
                    m.ops
                        .iter()
                        .map(|op| match op {
                            Op::Extent(e) => json!({
                                "extent": { "offset": e.file_off, "len": e.len, "log_pos": e.log_pos, "crc32c": format!("{:08x}", e.crc) }
                            }),
                            Op::SetSize(n) => json!({ "set_size": n }),
                            Op::Preallocate(n) => json!({ "preallocate": n }),
                            Op::Delete => json!({ "delete": true }),
                            Op::Phase(p) => json!({ "phase": p }),
                            Op::RenameFrom(r) => json!({
                                "rename_from": { "file": r.file_dir_name(), "epoch": r.at.to_string() }
                            }),
                            Op::Mode(m) => json!({ "create_mode": format!("{m:04o}") }),
                            Op::Times(t) => json!({
                                "times": { "atime_ns": t.atime, "mtime_ns": t.mtime }
                            }),
                            Op::RenamedTo(r) => json!({
                                "renamed_to": { "file": r.file_dir_name(), "epoch": r.at.to_string() }
                            }),
                        })
                        .collect()
                })
                .unwrap_or_default();
            ranks.push(json!({
                "rank": rank,
                "data_bytes": files.data,
                "manifest": files.manifest.is_some(),
                "manifest_in": files.manifest.map(|at| match at {
                    ManifestAt::File => "manifest file",
                    ManifestAt::Log { .. } => "data log",
                }),
                "torn": files.torn,
                "staged": r.staged.then(|| r.dir.display().to_string()),
                "manifest_tmp": files.manifest_tmp,
                "mark": files.mark,
                "comm_size": m.map(|m| m.comm_size),
                "ops": ops,
            }));
        }
        epochs.push(json!({
            "open": id.gen,
            "epoch": id.epoch,
            "committed": status.is_committed(),
            "status": status_str(&status),
            "ranks": ranks,
        }));
    }
    let committed: Vec<_> = f.committed_epochs().unwrap_or_default();
    json!({
        "dir": f.dir,
        "path": f.record.as_ref().map(|r| String::from_utf8_lossy(&r.path).into_owned()),
        "rel": f.record.as_ref().map(|r| String::from_utf8_lossy(&r.rel).into_owned()),
        "path_error": f.path_error,
        "path_from_manifest": f.record_rebuilt,
        "last_committed": committed.last().map(EpochId::to_string),
        "drained_up_to": f.progress.map(|p| p.id().to_string()),
        "progress_error": f.progress_error,
        "committed": fmt_ids(&committed),
        "epochs": epochs,
        "problems": problems,
    })
}

fn print_human(report: &Value, all_extents: bool) {
    println!("node-local root {}", report["root"].as_str().unwrap_or("?"));
    let jobs = report["jobs"].as_array().cloned().unwrap_or_default();
    if jobs.is_empty() {
        println!("  (no jobs)");
    }
    for j in jobs {
        println!("job {}", j["name"].as_str().unwrap_or("?"));
        for f in j["files"].as_array().cloned().unwrap_or_default() {
            let path = f["path"].as_str().map(str::to_owned).unwrap_or_else(|| {
                format!(
                    "<unknown path: {}>",
                    f["path_error"].as_str().unwrap_or("?")
                )
            });
            println!(
                "  file {path}  -> remote {}  (last committed epoch: {}; drained up to: {})",
                f["rel"].as_str().unwrap_or("?"),
                f["last_committed"].as_str().unwrap_or("none"),
                f["drained_up_to"].as_str().unwrap_or("nothing")
            );
            if f["path_from_manifest"] == true {
                println!(
                    "    path record unreadable ({}); the path is the manifests'",
                    f["path_error"].as_str().unwrap_or("?")
                );
            }
            if let Some(e) = f["progress_error"].as_str() {
                println!("    PROBLEM: {e}");
            }
            for p in f["problems"].as_array().cloned().unwrap_or_default() {
                println!("    PROBLEM: {}", p.as_str().unwrap_or("?"));
            }
            for e in f["epochs"].as_array().cloned().unwrap_or_default() {
                println!(
                    "    open {} epoch {}: {}",
                    e["open"],
                    e["epoch"],
                    e["status"].as_str().unwrap_or("?")
                );
                for r in e["ranks"].as_array().cloned().unwrap_or_default() {
                    let mut notes = Vec::new();
                    if r["manifest"] == true {
                        match r["manifest_in"].as_str() {
                            Some("data log") => {
                                notes.push("committed (record in the data log)".to_owned())
                            }
                            _ => notes.push("manifest".to_owned()),
                        }
                    }
                    if let Some(t) = r["torn"].as_str() {
                        notes.push(format!("no valid commit record ({t})"));
                    }
                    if let Some(d) = r["staged"].as_str() {
                        notes.push(format!("still in its staging directory {d}"));
                    }
                    if r["manifest_tmp"] == true {
                        notes.push("unrenamed manifest (crash during commit)".to_owned());
                    }
                    if r["mark"] == true {
                        notes.push("mark".to_owned());
                    }
                    match r["data_bytes"].as_u64() {
                        Some(n) => notes.push(format!("data log {n} B")),
                        None => notes.push("no data log".to_owned()),
                    }
                    println!("      rank {}: {}", r["rank"], notes.join(", "));
                    let ops = r["ops"].as_array().cloned().unwrap_or_default();
                    let shown = if all_extents {
                        ops.len()
                    } else {
                        ops.len().min(SHOWN_EXTENTS)
                    };
                    for op in &ops[..shown] {
                        if let Some(x) = op.get("extent") {
                            println!(
                                "        [{}, {}) len {} at log {} crc32c {}",
                                x["offset"],
                                x["offset"].as_u64().unwrap_or(0) + x["len"].as_u64().unwrap_or(0),
                                x["len"],
                                x["log_pos"],
                                x["crc32c"].as_str().unwrap_or("?")
                            );
                        } else if let Some(n) = op.get("set_size") {
                            println!("        set size {n}");
                        } else if let Some(n) = op.get("preallocate") {
                            println!("        preallocate {n}");
                        } else if op.get("delete").is_some() {
                            println!("        delete");
                        }
                    }
                    if shown < ops.len() {
                        println!("        ... {} more (--all-extents)", ops.len() - shown);
                    }
                }
            }
        }
    }
    let stray = report["stray"].as_array().cloned().unwrap_or_default();
    if !stray.is_empty() {
        println!("not part of the layout (left alone):");
        for s in stray {
            println!("  {}", s.as_str().unwrap_or("?"));
        }
    }
}
