//! `paralog get URL OUT [--version V]`: read an object back from an object
//! remote: `objstore:///root/NAME` (a published version, every block's
//! checksum verified; `--list` shows the versions kept) or
//! `s3://bucket/key` (the object as it is).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context};
use paralog_backend::objstore::ObjStore;
use paralog_backend::{RemoteUrl, S3Url};

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
    let objstore = match args.url.parse::<RemoteUrl>().map_err(|e| anyhow!("{e}"))? {
        RemoteUrl::S3(s3) => return get_s3(&args, s3),
        RemoteUrl::ObjStore(o) => o,
        RemoteUrl::Posix(_) => bail!(
            "{}: `get` reads objstore:///root/NAME and s3://bucket/key URLs (a POSIX remote's files are plain files)",
            args.url
        ),
    };
    let (store, name) = ObjStore::locate(&objstore).map_err(|e| anyhow!("{e}"))?;
    if args.list {
        let mut stdout = std::io::stdout().lock();
        for n in store.versions(&name).map_err(|e| anyhow!("{e}"))? {
            let v = store
                .version(&name, Some(n))
                .map_err(|e| anyhow!("{e}"))?
                .expect("listed");
            let line = writeln!(
                stdout,
                "version {n}: {} bytes{}, epoch {}",
                v.size,
                if v.deleted { " (deleted)" } else { "" },
                v.epoch
            );
            match line {
                // The reader went away (`| head`): end quietly, as Unix tools do.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                    return Ok(ExitCode::SUCCESS)
                }
                r => r.context("writing the list")?,
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let out = args.out.clone().expect("required unless --list");
    // The latest version may be replaced and its chunks removed by
    // retention while we read it: then start again from the newest one.
    let mut attempt = 0;
    loop {
        match read_once(&args, &store, &name, &out) {
            Err(ReadErr::Vanished(e)) if args.version.is_none() && attempt < 20 => {
                attempt += 1;
                eprintln!("paralog: {e}; a newer version replaced it, reading that one");
            }
            Err(ReadErr::Vanished(e)) | Err(ReadErr::Other(e)) => return Err(e),
            Ok(()) => return Ok(ExitCode::SUCCESS),
        }
    }
}

enum ReadErr {
    /// A chunk of the version disappeared (retention after a newer publish).
    Vanished(anyhow::Error),
    Other(anyhow::Error),
}

fn read_once(
    args: &Args,
    store: &ObjStore,
    name: &[u8],
    out: &std::path::Path,
) -> Result<(), ReadErr> {
    use paralog_backend::objstore::ObjError;
    let v = store
        .version(name, args.version)
        .map_err(|e| ReadErr::Other(anyhow!("{e}")))?
        .ok_or_else(|| ReadErr::Other(anyhow!("{}: no version published yet", args.url)))?;
    if v.deleted {
        return Err(ReadErr::Other(anyhow!(
            "{}: version {} is a deletion (the program deleted the file)",
            args.url,
            v.number
        )));
    }
    let classify = |e: ObjError| match e {
        ObjError::Io { ref error, .. } if error.kind() == std::io::ErrorKind::NotFound => {
            ReadErr::Vanished(anyhow!("{e}"))
        }
        e => ReadErr::Other(anyhow!("{e}")),
    };
    if out.as_os_str() == "-" {
        // Read and checked in memory first: nothing partial reaches the pipe.
        let mut buf = Vec::with_capacity(v.size as usize);
        store.read_version(&v, &mut buf).map_err(classify)?;
        match std::io::stdout().write_all(&buf) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            r => r.map_err(|e| ReadErr::Other(e.into()))?,
        }
    } else {
        let f = std::fs::File::create(out)
            .with_context(|| format!("creating {}", out.display()))
            .map_err(ReadErr::Other)?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        store.read_version(&v, &mut w).map_err(classify)?;
        w.flush().map_err(|e| ReadErr::Other(e.into()))?;
    }
    Ok(())
}

fn get_s3(args: &Args, url: S3Url) -> anyhow::Result<ExitCode> {
    if args.list || args.version.is_some() {
        bail!("--list and --version are for objstore:// (an S3 object has one version here)");
    }
    if url.prefix.is_empty() {
        bail!("{}: expected s3://BUCKET/KEY", args.url);
    }
    // The URL's path is the object's key, not a prefix of keys.
    let key = url.prefix.clone();
    let be = paralog_s3::S3Backend::open(&S3Url {
        prefix: String::new(),
        ..url
    })?;
    let out = args.out.clone().expect("required unless --list");
    let f = std::fs::File::create(&out).with_context(|| format!("creating {}", out.display()))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
    be.get(&key, &mut w)?;
    w.flush()?;
    Ok(ExitCode::SUCCESS)
}
