//! `paralog get URL OUT [--version V]`: read an object back from an object
//! remote: `objstore:///root/NAME` (a published version, every block's
//! checksum verified; `--list` shows the versions kept) or
//! `s3://bucket/key` (the object as it is).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context};
use paralog_backend::objstore::ObjStore;

#[derive(clap::Args)]
pub struct Args {
    /// The object: objstore:///root/NAME or s3://bucket/key
    url: String,
    /// Where to write it (`-`: standard output)
    #[arg(required_unless_present = "list")]
    out: Option<PathBuf>,
    /// Which version [default: the latest]
    #[arg(long)]
    version: Option<u64>,
    /// List the versions kept instead.
    #[arg(long)]
    list: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(rest) = args.url.strip_prefix("s3://") {
        return get_s3(&args, rest);
    }
    let Some(spec) = args.url.strip_prefix("objstore://") else {
        bail!(
            "{}: `get` reads objstore:///root/NAME and s3://bucket/key URLs",
            args.url
        );
    };
    let (store, name) = ObjStore::locate(spec).map_err(|e| anyhow!("{e}"))?;
    if args.list {
        for n in store.versions(&name).map_err(|e| anyhow!("{e}"))? {
            let v = store
                .version(&name, Some(n))
                .map_err(|e| anyhow!("{e}"))?
                .expect("listed");
            println!(
                "version {n}: {} bytes{}, epoch {}:{}",
                v.size,
                if v.deleted { " (deleted)" } else { "" },
                v.epoch.0,
                v.epoch.1
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let v = store
        .version(&name, args.version)
        .map_err(|e| anyhow!("{e}"))?
        .ok_or_else(|| anyhow!("{}: no version published yet", args.url))?;
    if v.deleted {
        bail!(
            "{}: version {} is a deletion (the program deleted the file)",
            args.url,
            v.number
        );
    }
    let out = args.out.expect("required unless --list");
    if out.as_os_str() == "-" {
        let stdout = std::io::stdout();
        let mut w = std::io::BufWriter::new(stdout.lock());
        store.read_version(&v, &mut w).map_err(|e| anyhow!("{e}"))?;
        w.flush()?;
    } else {
        let f =
            std::fs::File::create(&out).with_context(|| format!("creating {}", out.display()))?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        store
            .read_version(&v, &mut w)
            .map_err(|e| anyhow!("{e} (partial output left in {})", out.display()))?;
        w.flush()?;
    }
    Ok(ExitCode::SUCCESS)
}

fn get_s3(args: &Args, rest: &str) -> anyhow::Result<ExitCode> {
    if args.list || args.version.is_some() {
        bail!("--list and --version are for objstore:// (an S3 object has one version here)");
    }
    let (bucket, key) = rest
        .split_once('/')
        .filter(|(b, k)| !b.is_empty() && !k.is_empty())
        .ok_or_else(|| anyhow!("{}: expected s3://BUCKET/KEY", args.url))?;
    let be = paralog_s3::S3Backend::open(&format!("s3://{bucket}"))?;
    let out = args.out.clone().expect("required unless --list");
    let f = std::fs::File::create(&out).with_context(|| format!("creating {}", out.display()))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
    be.get(key, &mut w)?;
    w.flush()?;
    Ok(ExitCode::SUCCESS)
}
