//! `paralog stream trim URL/STREAM --older-than T | --keep-bytes N`:
//! retention on the remote: a directory's segments deleted here
//! (`paralog_stream::retention`); on an object store, a request that the
//! stream's drain applies (`paralog_stream::object_trim`).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use paralog_stream::object_trim::{self, TrimRule};
use paralog_stream::retention::{trim as trim_stream, Keep, Trimmed};
use paralog_stream::{ObjectRemote, ObjectStore, RemoteStream, StreamPlace};

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
    /// On S3 and the object layout, where the drain applies the trim at
    /// its next round: how long to wait for it (ms) before saying that
    /// the request is pending.
    #[arg(long, default_value_t = 10_000)]
    wait_ms: u64,
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
    let keep = match (&a.older_than, &a.keep_bytes) {
        (Some(t), None) => Keep::Newer(parse_age(t)?),
        (None, Some(b)) => {
            let units = [("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)];
            Keep::Bytes(scaled(b, &units, "--keep-bytes")?)
        }
        _ => bail!("give --older-than T or --keep-bytes N"),
    };
    let (done, what) = match &place {
        StreamPlace::Dir(root) => (trim_stream(root, &name, keep)?, "segment"),
        StreamPlace::Store(store) => match request(store, &place, &name, keep, a.wait_ms)? {
            Some(done) => (done, "object"),
            None => {
                let msg = format!(
                    "stream {name}: trim requested on {}: no drain round applied it within {} ms; the next round of this stream's drain (paralog run or server, paralog stream drain) applies it and frees the space",
                    store.describe(""),
                    a.wait_ms
                );
                if a.json {
                    println!("{}", serde_json::json!({"pending": true, "message": msg}));
                } else {
                    println!("{msg}");
                }
                return Ok(ExitCode::SUCCESS);
            }
        },
    };
    super::print_rows(
        a.json,
        &done,
        |t| serde_json::json!({"partition": t.partition, "deleted": t.segments, "bytes": t.bytes, "first_offset": t.first}),
        |t| trimmed_line(&name, t, what),
    )
}

/// One partition's line of a trim's report.
pub fn trimmed_line(stream: &str, t: &Trimmed, what: &str) -> String {
    format!(
        "stream {stream}: partition {}: {} {what}(s) deleted ({} bytes), first offset now {}",
        t.partition,
        t.segments.len(),
        t.bytes,
        t.first
    )
}

/// On an object remote: PUT a trim request for the drain, which alone
/// PUTs the index, and wait up to `wait_ms` for a round to apply it (the
/// request gone). What it deleted, or `None` if it is still pending.
fn request(
    store: &Arc<dyn ObjectStore>,
    place: &StreamPlace,
    name: &str,
    keep: Keep,
    wait_ms: u64,
) -> anyhow::Result<Option<Vec<Trimmed>>> {
    let s = RemoteStream::open_at(place, name)?;
    let remote = ObjectRemote::new(store.clone());
    let before = remote.index(name, s.partitions)?;
    let rule = match keep {
        Keep::Newer(age) => object_trim::older_than(age),
        Keep::Bytes(n) => TrimRule::KeepBytes(n),
    };
    object_trim::request(&**store, name, rule)?;
    let until = Instant::now() + Duration::from_millis(wait_ms);
    loop {
        if !object_trim::pending(&**store, name)? {
            let after = remote.index(name, s.partitions)?;
            return Ok(Some(object_trim::compare(&before, &after)));
        }
        if Instant::now() >= until {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
