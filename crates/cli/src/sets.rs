//! `paralog sets URL [--json]`: the checkpoint sets under a remote
//! (docs/aggregate.md): set directory, version, members, containers,
//! bytes, complete or not; a set whose record cannot be read is listed
//! with the reason.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, Context};
use paralog_aggregate::{SetReader, SetRecord};
use paralog_backend::objstore::ObjStore;
use paralog_backend::RemoteUrl;

#[derive(clap::Args)]
pub struct Args {
    /// The remote: /path, file:///path, objstore:///root or s3://bucket/prefix
    url: String,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

/// Where sets are read from: a POSIX remote's directory or an object
/// layout.
pub enum SetsRemote {
    Posix(PathBuf),
    Obj(ObjStore),
    /// Read through S3's client: the record, then ranged GETs.
    S3(paralog_s3::sets::S3Sets),
}

impl SetsRemote {
    /// The remote a URL names.
    pub fn parse(url: &str) -> anyhow::Result<SetsRemote> {
        match url.parse::<RemoteUrl>().map_err(|e| anyhow!("{e}"))? {
            RemoteUrl::Posix(p) => Ok(SetsRemote::Posix(p)),
            RemoteUrl::ObjStore(u) => Ok(SetsRemote::Obj(ObjStore::new(&u))),
            RemoteUrl::S3(u) => Ok(SetsRemote::S3(
                paralog_s3::sets::S3Sets::open(&u).map_err(|e| anyhow!("{e}"))?,
            )),
        }
    }

    /// Every set with its record or why it cannot be read.
    pub fn list(&self) -> anyhow::Result<Vec<(PathBuf, paralog_aggregate::Result<SetRecord>)>> {
        match self {
            SetsRemote::Posix(root) => paralog_aggregate::reader::list_sets(root),
            SetsRemote::Obj(store) => paralog_aggregate::objset::list_sets(store),
            SetsRemote::S3(s3) => s3.list_sets(),
        }
        .map_err(|e| anyhow!("{e}"))
    }

    /// The set `set` (relative), `None` when it has no record.
    pub fn open(&self, set: &str) -> anyhow::Result<Option<SetReader>> {
        match self {
            SetsRemote::Posix(root) => SetReader::open(&root.join(set)),
            SetsRemote::Obj(store) => SetReader::open_obj(store, set.as_bytes()),
            SetsRemote::S3(s3) => s3.open_set(set.as_bytes()),
        }
        .map_err(|e| anyhow!("{e}"))
    }

    /// How messages name the remote.
    pub fn display(&self) -> String {
        match self {
            SetsRemote::Posix(root) => root.display().to_string(),
            SetsRemote::Obj(store) => format!("objstore://{}", store.root().display()),
            SetsRemote::S3(s3) => {
                use paralog_aggregate::store::ContainerSource;
                let root = s3.display(b"", b"").display().to_string();
                root.trim_end_matches('/').to_owned()
            }
        }
    }
}

#[derive(serde::Serialize)]
struct Row {
    set: String,
    version: Option<u64>,
    members: Option<usize>,
    containers: Option<usize>,
    bytes: Option<u64>,
    complete: Option<bool>,
    job: Option<String>,
    error: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let remote = SetsRemote::parse(&args.url)?;
    let sets = remote.list()?;
    let rows: Vec<Row> = sets
        .into_iter()
        .map(|(dir, rec)| {
            let set = dir.display().to_string();
            match rec {
                Ok(r) => Row {
                    set,
                    version: Some(r.version),
                    members: Some(r.members.len()),
                    containers: Some(r.containers.len()),
                    bytes: Some(r.bytes()),
                    complete: Some(r.complete),
                    job: Some(String::from_utf8_lossy(&r.job).into_owned()),
                    error: None,
                },
                Err(e) => Row {
                    set,
                    version: None,
                    members: None,
                    containers: None,
                    bytes: None,
                    complete: None,
                    job: None,
                    error: Some(e.to_string()),
                },
            }
        })
        .collect();
    let damaged = rows.iter().any(|r| r.error.is_some());
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&rows)?).context("writing")?;
    } else if rows.is_empty() {
        writeln!(out, "no checkpoint sets under {}", remote.display()).context("writing")?;
    } else {
        writeln!(
            out,
            "{:<40} {:>7} {:>8} {:>4} {:>12}  complete",
            "SET", "VERSION", "MEMBERS", "K", "BYTES"
        )
        .context("writing")?;
        for r in &rows {
            match &r.error {
                Some(e) => writeln!(out, "{:<40} DAMAGED: {e}", r.set),
                None => writeln!(
                    out,
                    "{:<40} {:>7} {:>8} {:>4} {:>12}  {}",
                    r.set,
                    r.version.unwrap_or(0),
                    r.members.unwrap_or(0),
                    r.containers.unwrap_or(0),
                    r.bytes.unwrap_or(0),
                    if r.complete == Some(true) {
                        "yes"
                    } else {
                        "NO (members missing)"
                    }
                ),
            }
            .context("writing")?;
        }
    }
    Ok(if damaged {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}
