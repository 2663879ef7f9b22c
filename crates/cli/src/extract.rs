//! `paralog extract URL SET OUT [--member PATH]`: a checkpoint set's
//! members written as ordinary files under OUT (docs/aggregate.md), every
//! block verified before it is written; holes stay holes. Member paths come
//! from a verified record that refuses any path leaving the set, and no
//! symbolic link under OUT is followed.

use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context};
use paralog_aggregate::reader::MemberReader;

#[derive(clap::Args)]
pub struct Args {
    /// The remote: /path, file:///path, objstore:///root or s3://bucket/prefix
    url: String,
    /// The set directory, relative to the remote (as `paralog sets` lists it)
    set: String,
    /// Where to write the members (created if missing)
    out: PathBuf,
    /// Only this member (its path inside the set)
    #[arg(long, value_name = "PATH")]
    member: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let remote = crate::sets::SetsRemote::parse(&args.url)?;
    paralog_aggregate::format::check_rel(args.set.as_bytes())
        .map_err(|e| anyhow!("set {}: {e}", args.set))?;
    let dir = PathBuf::from(format!("{}/{}", remote.display(), args.set));
    let set = remote.open(&args.set)?.ok_or_else(|| {
        anyhow!(
            "{}: no checkpoint set here (no {})",
            dir.display(),
            paralog_aggregate::format::RECORD_NAME
        )
    })?;
    let set = Arc::new(set);
    let members: Vec<Vec<u8>> = match &args.member {
        Some(m) => {
            if set.member(m.as_bytes()).is_none() {
                bail!("{}: the set has no member {m}", dir.display());
            }
            vec![m.as_bytes().to_vec()]
        }
        None => set
            .record()
            .members
            .iter()
            .map(|m| m.path.clone())
            .collect(),
    };
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let mut buf = vec![0u8; 8 << 20];
    let mut bytes = 0u64;
    for path in &members {
        let mut m = MemberReader::new(set.clone(), path).expect("listed");
        let target = args.out.join(OsStr::from_bytes(path));
        if let Err(e) = write_member(&args.out, &target, &mut m, &mut buf) {
            let _ = std::fs::remove_file(&target);
            return Err(e);
        }
        bytes += m.size();
    }
    let mut err = std::io::stderr().lock();
    let _ = writeln!(
        err,
        "extracted {} member(s), {bytes} bytes, of {} (version {}{}) into {}",
        members.len(),
        dir.display(),
        set.record().version,
        if set.record().complete {
            ""
        } else {
            ", INCOMPLETE: members missing"
        },
        args.out.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Refuse a symbolic link anywhere between `out` and `target` (a link
/// planted under OUT would let a member land outside it).
fn no_links(out: &Path, target: &Path) -> anyhow::Result<()> {
    let rel = target.strip_prefix(out).expect("below OUT");
    let mut p = out.to_path_buf();
    for c in rel.components() {
        p.push(c);
        if p.symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
        {
            bail!("{} is a symbolic link: not following it", p.display());
        }
    }
    Ok(())
}

fn write_member(
    out: &Path,
    target: &Path,
    m: &mut MemberReader,
    buf: &mut [u8],
) -> anyhow::Result<()> {
    no_links(out, target)?;
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    no_links(out, target)?;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o600)
        .open(target)
        .with_context(|| format!("creating {}", target.display()))?;
    let extents: Vec<(u64, u64)> = m
        .member()
        .extents
        .iter()
        .map(|e| (e.offset, e.len))
        .collect();
    for (off, len) in extents {
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(buf.len() as u64) as usize;
            m.read_at(off + done, &mut buf[..n])
                .map_err(|e| anyhow!("{e}"))?;
            f.write_all_at(&buf[..n], off + done)
                .with_context(|| format!("writing {}", target.display()))?;
            done += n as u64;
        }
    }
    f.set_len(m.size())
        .with_context(|| format!("sizing {}", target.display()))?;
    f.set_permissions(std::fs::Permissions::from_mode(m.member().mode))
        .with_context(|| format!("chmod {}", target.display()))?;
    Ok(())
}
