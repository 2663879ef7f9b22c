//! `paralog stream trim URL/STREAM --older-than T | --keep-bytes N`:
//! retention on the remote (`paralog_stream::retention`).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, bail};
use paralog_stream::retention::{trim as trim_stream, Keep};

#[derive(clap::Args)]
pub struct TrimArgs {
    /// URL/STREAM
    target: String,
    /// Delete the segments last written longer ago than this (90s, 30m,
    /// 12h, 7d; a number alone is seconds).
    #[arg(
        long,
        conflicts_with = "keep_bytes",
        required_unless_present = "keep_bytes"
    )]
    older_than: Option<String>,
    /// Keep the newest segments holding at least this many bytes per
    /// partition (suffixes K, M, G: powers of 1024); delete the older ones.
    #[arg(long)]
    keep_bytes: Option<String>,
    #[arg(long)]
    json: bool,
}

/// A number with an optional unit, times the unit's factor.
fn scaled(s: &str, units: &[(&str, u64)], what: &str) -> anyhow::Result<u64> {
    let t = s.trim();
    let (num, factor) = units
        .iter()
        .find_map(|(u, f)| t.strip_suffix(u).map(|n| (n, *f)))
        .unwrap_or((t, 1));
    num.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(factor))
        .ok_or_else(|| {
            anyhow!(
                "{what} {s:?}: a whole number with an optional unit ({})",
                units.iter().map(|u| u.0).collect::<Vec<_>>().join(", ")
            )
        })
}

pub fn parse_age(s: &str) -> anyhow::Result<Duration> {
    let units = [("s", 1), ("m", 60), ("h", 3600), ("d", 86_400)];
    Ok(Duration::from_secs(scaled(s, &units, "--older-than")?))
}

pub fn trim(a: TrimArgs) -> anyhow::Result<ExitCode> {
    let (place, name) = super::split_target(&a.target)?;
    let paralog_stream::StreamPlace::Dir(root) = place else {
        bail!("{}: trim works on a directory remote so far (on an object store, retention is still to do: docs/streams.md)", a.target);
    };
    let keep = match (&a.older_than, &a.keep_bytes) {
        (Some(t), None) => Keep::Newer(parse_age(t)?),
        (None, Some(b)) => {
            let units = [("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)];
            Keep::Bytes(scaled(b, &units, "--keep-bytes")?)
        }
        _ => bail!("give --older-than T or --keep-bytes N"),
    };
    let done = trim_stream(&root, &name, keep)?;
    super::print_rows(
        a.json,
        &done,
        |t| serde_json::json!({"partition": t.partition, "deleted": t.segments, "bytes": t.bytes, "first_offset": t.first}),
        |t| {
            format!(
                "stream {name}: partition {}: {} segment(s) deleted ({} bytes), first offset now {}",
                t.partition,
                t.segments.len(),
                t.bytes,
                t.first
            )
        },
    )
}
