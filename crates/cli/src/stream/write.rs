//! `paralog stream drain` and `paralog stream produce`.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use paralog_stream::{DrainOptions, Partitioner, Producer};

#[derive(clap::Args)]
pub struct DrainArgs {
    #[command(flatten)]
    local: crate::LocalArg,
    /// The remote: /path, file:///path, s3://bucket/prefix or objstore:///path
    #[arg(long)]
    remote: String,
    /// Only this stream (default: every stream under the node-local root).
    #[arg(long)]
    stream: Option<String>,
    /// Keep draining, a round every --interval-ms, until killed.
    #[arg(long)]
    follow: bool,
    #[arg(long, default_value_t = 100)]
    interval_ms: u64,
    /// Roll a partition's remote segment once it holds this many bytes.
    #[arg(long, default_value_t = 64 << 20)]
    roll_bytes: u64,
    /// Local retention: delete the drained segments of ended producers and
    /// rebase the cut log once they and the log amount to this many bytes
    /// (K, M, G; 0: keep everything) [env: PARALOG_STREAM_RELEASE_BYTES;
    /// default: 64M]
    #[arg(long, value_parser = super::release_arg::parse, value_name = "BYTES")]
    release_bytes: Option<u64>,
}

#[derive(clap::Args)]
pub struct LagArgs {
    #[command(flatten)]
    local: crate::LocalArg,
    #[arg(long)]
    json: bool,
}

pub fn lag(a: LagArgs) -> anyhow::Result<ExitCode> {
    let local = a.local.resolve()?;
    let mut rows = Vec::new();
    for s in paralog_stream::drain::local_streams(&local)? {
        let l = paralog_stream::drain::local_lag(&local, &s)?;
        rows.push(serde_json::json!({
            "stream": l.stream, "partitions": l.partitions, "producers": l.segments,
            "bytes": l.bytes, "drained": l.drained, "lag_bytes": l.bytes - l.drained, "rounds": l.rounds,
        }));
    }
    super::print_rows(a.json, &rows, Clone::clone, |r| {
        format!(
            "{}: {} producer(s), {} bytes, {} not drained yet, {} drain round(s)",
            r["stream"].as_str().unwrap_or(""),
            r["producers"],
            r["bytes"],
            r["lag_bytes"],
            r["rounds"]
        )
    })
}

#[derive(clap::Args)]
pub struct ProduceArgs {
    #[command(flatten)]
    local: crate::LocalArg,
    #[arg(long)]
    stream: String,
    #[arg(long, default_value_t = 1)]
    partitions: u32,
    /// How many events to append.
    #[arg(long)]
    events: u64,
    /// Flush after every N events (and at the end).
    #[arg(long, default_value_t = 1000)]
    flush_every: u64,
    /// round-robin, key (the key is the event's number modulo --keys), or fixed:P
    #[arg(long, default_value = "round-robin")]
    partition_by: String,
    #[arg(long, default_value_t = 16)]
    keys: u64,
    /// Pad each payload to this many bytes.
    #[arg(long, default_value_t = 0)]
    payload_size: usize,
    /// Backpressure: past this many bytes of the stream not drained yet on
    /// this node, an append waits up to --quota-wait-ms, then fails.
    #[arg(long)]
    quota_bytes: Option<u64>,
    /// With --quota-bytes: how long an append waits (0: fails at once).
    #[arg(long, default_value_t = 10_000)]
    quota_wait_ms: u64,
}

pub fn drain(a: DrainArgs) -> anyhow::Result<ExitCode> {
    crate::server::init_tracing_if_asked();
    paralog_server::open_files::raise_soft_limit();
    let local = a.local.resolve()?;
    let place = super::place(&a.remote)?;
    let remote = place.remote();
    let opts = DrainOptions {
        roll_bytes: a.roll_bytes.max(1),
        release_bytes: super::release_threshold(a.release_bytes)?,
        ..Default::default()
    };
    let mut drainer = paralog_stream::Drainer::default();
    loop {
        let streams = match &a.stream {
            Some(s) => vec![s.clone()],
            None => paralog_stream::drain::local_streams(&local)?,
        };
        for s in &streams {
            // One round per interval when following; else until nothing is left.
            let reports = if a.follow {
                vec![drainer.drain_to(&local, &*remote, s, &opts)?]
            } else {
                drainer.drain_pending_to(&local, &*remote, s, &opts)?
            };
            for r in &reports {
                if r.replayed > 0 {
                    println!("stream {s}: {} recorded round(s) applied again", r.replayed);
                }
                if let Some(round) = r.round {
                    println!(
                        "stream {s}: round {round}: {} events, {} bytes",
                        r.events, r.bytes
                    );
                }
                if let Some(base) = r.released.base {
                    let bytes: u64 = r.released.segments.iter().map(|s| s.1).sum();
                    println!(
                        "stream {s}: {} drained local segment(s) deleted ({bytes} bytes), cut log rebased at round {base}",
                        r.released.segments.len()
                    );
                }
                for t in r.trimmed.iter().filter(|t| !t.segments.is_empty()) {
                    println!("{}", super::trim::trimmed_line(s, t, "object"));
                }
            }
            let r = reports.last().expect("at least one report");
            if !a.follow {
                for (path, off) in &r.cut {
                    println!(
                        "stream {s}: {}: torn tail cut off at offset {off} (its producer is gone)",
                        path.display()
                    );
                }
                for (path, off, why) in &r.torn {
                    println!(
                        "stream {s}: {} at offset {off}: not read (a flush that did not finish, or one in progress: {why})",
                        path.display()
                    );
                }
            }
        }
        if !a.follow {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_millis(a.interval_ms));
    }
}

/// The payload of event `seq` of producer `id`: derived from both, so
/// that a test can tell a stored event from an invented one.
pub fn payload(id: u64, seq: u64, size: usize) -> Vec<u8> {
    let mut p = format!("{id:016x}:{seq}:").into_bytes();
    while p.len() < size {
        p.push(b'a' + (p.len() % 26) as u8);
    }
    p
}

pub fn produce(a: ProduceArgs) -> anyhow::Result<ExitCode> {
    let local = a.local.resolve()?;
    let how = match a.partition_by.as_str() {
        "round-robin" => Partitioner::RoundRobin,
        "key" => Partitioner::Key,
        s => match s.strip_prefix("fixed:").and_then(|n| n.parse().ok()) {
            Some(p) => Partitioner::Fixed(p),
            None => bail!("--partition-by {s}: round-robin, key or fixed:P"),
        },
    };
    let mut p = Producer::open(&local, &a.stream, a.partitions, how)?;
    p.set_quota(a.quota_bytes.map(|bytes| paralog_stream::Quota {
        bytes,
        wait: Duration::from_millis(a.quota_wait_ms),
    }));
    let mut out = std::io::stdout().lock();
    writeln!(out, "producer {:016x}", p.id())?;
    out.flush()?;
    for seq in 0..a.events {
        let key = format!("k{}", seq % a.keys.max(1));
        let key = matches!(how, Partitioner::Key).then_some(key.as_bytes());
        p.append(key, &payload(p.id(), seq, a.payload_size), None)?;
        if (seq + 1).is_multiple_of(a.flush_every.max(1)) {
            // Printed after the flush returned: a test that kills this
            // process knows every event below it was promised durable.
            writeln!(out, "flushed {}", p.flush()?)?;
            out.flush()?;
        }
    }
    p.set_roll_bytes(0); // as close: no new segment at the end
    let flushed = p.flush()?;
    // Its segment files' bytes, for tests that count what local
    // retention gave back (the last flush wrote everything; close adds
    // nothing).
    let bytes = p.bytes_written();
    p.close()?;
    writeln!(out, "flushed {flushed}")?;
    writeln!(out, "bytes {bytes}")?;
    Ok(ExitCode::SUCCESS)
}
