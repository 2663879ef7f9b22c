//! `paralog stream ls|describe|cat`.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::anyhow;
use paralog_stream::{Delivered, From, Order, Reader, RemoteStream};

#[derive(clap::Args)]
pub struct LsArgs {
    /// The remote: /path, file:///path, s3://bucket/prefix or objstore:///path
    url: String,
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub struct DescribeArgs {
    /// URL/STREAM
    target: String,
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum OrderArg {
    /// Drain round, then partition, then offset: the same for every reader.
    Cut,
    /// Event time (ties: partition, offset): see docs/streams.md for what it promises.
    Time,
    /// Strict event time: an event waits until every partition has passed
    /// its time or has been silent for --idle-ms (docs/streams.md).
    Watermark,
}

#[derive(clap::Args)]
pub struct CatArgs {
    /// URL/STREAM
    target: String,
    /// Read as this reader group: start from its committed offsets (with
    /// --from committed) and commit what was printed.
    #[arg(long)]
    group: Option<String>,
    /// earliest, committed (the group's offsets; earliest without a group
    /// or offsets), or a TIME: per partition, from the first event at or
    /// after it. TIME is ns since the epoch, an RFC 3339 UTC time
    /// (2026-11-26T17:00:00Z), or an age (90s, 5m, 2h, 1d: that long ago).
    #[arg(long, default_value = "committed")]
    from: String,
    #[arg(long, value_enum, default_value = "cut")]
    order: OrderArg,
    /// With --order watermark: a partition with nothing new for this long
    /// (ms) is no longer waited for.
    #[arg(long, default_value_t = 1000)]
    idle_ms: u64,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
    /// Stop after this many events.
    #[arg(long)]
    limit: Option<u64>,
    /// With --group: commit offsets after every N events printed (and at the end).
    #[arg(long, default_value_t = 10_000)]
    commit_every: u64,
}

#[derive(clap::Args)]
pub struct TailArgs {
    #[command(flatten)]
    cat: CatArgs,
    /// How often to look for a newly published drain round.
    #[arg(long, default_value_t = 100)]
    interval_ms: u64,
}

pub fn ls(a: LsArgs) -> anyhow::Result<ExitCode> {
    let names = paralog_stream::reader::list_streams_at(&super::place(&a.url)?)?;
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(out, "{}", serde_json::to_string(&names)?)?;
    } else {
        for n in names {
            writeln!(out, "{n}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn describe(a: DescribeArgs) -> anyhow::Result<ExitCode> {
    let (root, name) = super::split_target(&a.target)?;
    let s = RemoteStream::open_at(&root, &name)?;
    let wm = s.watermark()?;
    let firsts = s.first_offsets()?;
    let segs = s.segment_counts()?;
    let mut parts = Vec::new();
    for (p, m) in wm.parts.iter().enumerate() {
        parts.push(serde_json::json!({"partition": p, "first_offset": firsts[p], "high_watermark": m.next, "segments": segs[p], "last_segment_bytes": m.seg_end}));
    }
    let total: u64 = wm.parts.iter().map(|m| m.next).sum();
    let groups: Vec<_> = s
        .groups()?
        .into_iter()
        .map(|(g, o)| {
            let lag = wm.lag(&o.offsets);
            serde_json::json!({"group": g, "offsets": o.offsets, "lag": lag})
        })
        .collect();
    let v = serde_json::json!({"stream": name, "partitions": s.partitions, "round": wm.round, "events": total, "partition": parts, "groups": groups});
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(out, "{v}")?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        out,
        "stream {name}: {} partitions, {total} events, drain round {}",
        s.partitions, wm.round
    )?;
    for p in &parts {
        writeln!(
            out,
            "  partition {}: offsets {}..{}, {} segment(s)",
            p["partition"], p["first_offset"], p["high_watermark"], p["segments"]
        )?;
    }
    for g in &groups {
        writeln!(
            out,
            "  group {}: offsets {}, lag {}",
            g["group"].as_str().unwrap_or(""),
            g["offsets"],
            g["lag"]
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Bytes as a JSON string if they are UTF-8, else under `NAME_hex`.
fn bytes_field(obj: &mut serde_json::Map<String, serde_json::Value>, name: &str, b: &[u8]) {
    match std::str::from_utf8(b) {
        Ok(s) => obj.insert(name.into(), s.into()),
        Err(_) => obj.insert(
            format!("{name}_hex"),
            b.iter()
                .map(|x| format!("{x:02x}"))
                .collect::<String>()
                .into(),
        ),
    };
}

fn line(d: &Delivered, json: bool) -> String {
    let e = &d.event;
    if !json {
        let key = e
            .key
            .as_deref()
            .map(String::from_utf8_lossy)
            .unwrap_or_default();
        return format!(
            "{}\t{}\t{:016x}\t{}\t{}\t{}\t{}",
            d.partition,
            d.offset,
            e.producer,
            e.seq,
            e.time_ns,
            key,
            String::from_utf8_lossy(&e.payload)
        );
    }
    let mut o = serde_json::Map::new();
    o.insert("partition".into(), d.partition.into());
    o.insert("offset".into(), d.offset.into());
    o.insert("round".into(), d.round.into());
    o.insert("producer".into(), format!("{:016x}", e.producer).into());
    o.insert("seq".into(), e.seq.into());
    o.insert("time_ns".into(), e.time_ns.into());
    match &e.key {
        Some(k) => bytes_field(&mut o, "key", k),
        None => {
            o.insert("key".into(), serde_json::Value::Null);
        }
    }
    bytes_field(&mut o, "payload", &e.payload);
    serde_json::Value::Object(o).to_string()
}

/// `--from`: a position, or a time (see `CatArgs::from`).
fn parse_from(s: &str) -> anyhow::Result<From> {
    match s {
        "earliest" => return Ok(From::Earliest),
        "committed" => return Ok(From::Committed),
        _ => {}
    }
    if let Ok(ns) = s.parse::<i64>() {
        return Ok(From::Time(ns));
    }
    if let Some(ns) = super::time::rfc3339_utc(s) {
        return Ok(From::Time(ns));
    }
    let age = super::trim::parse_age(s).map_err(|_| {
        anyhow!("--from {s:?}: earliest, committed, ns since the epoch, an RFC 3339 UTC time (2026-11-26T17:00:00Z) or an age (5m)")
    })?;
    Ok(From::Time(
        paralog_stream::producer::now_ns().saturating_sub(age.as_nanos() as i64),
    ))
}

pub fn cat(a: CatArgs) -> anyhow::Result<ExitCode> {
    print_events(a, None)
}

/// `cat` that does not end at the watermark: it waits for the next drain
/// round (until killed; a group commits what it printed at each wait).
pub fn tail(a: TailArgs) -> anyhow::Result<ExitCode> {
    print_events(a.cat, Some(Duration::from_millis(a.interval_ms.max(1))))
}

/// How often `cat --order watermark` looks again while events wait for
/// a partition (it does not look for new rounds: only the idle timeout
/// of partitions at their end releases them).
const WAIT: Duration = Duration::from_millis(20);

fn print_events(a: CatArgs, follow: Option<Duration>) -> anyhow::Result<ExitCode> {
    let (root, name) = super::split_target(&a.target)?;
    let s = RemoteStream::open_at(&root, &name)?;
    let from = parse_from(&a.from)?;
    let order = match a.order {
        OrderArg::Cut => Order::Cut,
        OrderArg::Time => Order::Time,
        OrderArg::Watermark => Order::Watermark {
            idle: Duration::from_millis(a.idle_ms),
        },
    };
    let mut r = Reader::open(s, a.group.as_deref(), from, order)?;
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let mut n = 0u64;
    let mut uncommitted = false;
    while a.limit.is_none_or(|l| n < l) {
        let Some(d) = r.next_event()? else {
            let Some(every) = follow.or_else(|| r.waiting().then_some(WAIT)) else {
                break;
            };
            // Everything published is printed: show it, store the
            // group's position, and look for the next round.
            out.flush()?;
            if a.group.is_some() && uncommitted {
                r.commit()?;
                uncommitted = false;
            }
            std::thread::sleep(every);
            if follow.is_some() {
                r.refresh()?;
            }
            continue;
        };
        let mut text = line(&d, a.json);
        if r.last_was_late() {
            // Below a time already printed (docs/streams.md: late events).
            text = match a.json {
                true => format!("{},\"late\":true}}", &text[..text.len() - 1]),
                false => format!("{text}\tlate"),
            };
        }
        writeln!(out, "{text}")?;
        n += 1;
        uncommitted = true;
        // At least once: offsets are stored only after what they cover
        // was written out.
        if a.group.is_some() && n.is_multiple_of(a.commit_every.max(1)) {
            out.flush()?;
            r.commit()?;
            uncommitted = false;
        }
    }
    out.flush()?;
    if r.late() > 0 {
        eprintln!(
            "stream {name}: {} event(s) printed late (below an event time already printed: a partition not in time order, or one silent past --idle-ms that came back)",
            r.late()
        );
    }
    if a.group.is_some() {
        r.commit()
            .map_err(|e| anyhow!("committing the group's offsets: {e}"))?;
    }
    Ok(ExitCode::SUCCESS)
}
