//! `paralog recover` on one node: the streams under the node-local root
//! drained to the server's stream remote with the one-node drain step
//! (`Drainer::drain_pending_to`, as the server's last round and `paralog
//! stream drain` do): recorded cuts the remote lacks applied again, then
//! new rounds until nothing committed is left. A stream whose cut log a
//! server job of several nodes made is refused here (the job of recovers
//! drains it: docs/streams.md, "Recovery").

use std::path::Path;

use paralog_stream::job_root::JobShare;
use paralog_stream::{DrainOptions, Drainer, StreamPlace};
use serde::Serialize;

/// What recovery did to one stream (`paralog recover --json`: `streams`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct StreamRecovery {
    pub stream: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
    /// Cuts recorded before the crash and applied again now.
    pub replayed: u64,
    /// New rounds.
    pub rounds: u64,
    /// Events stored by this recovery, in recorded rounds and new ones.
    pub events: u64,
    /// Torn tails of dead producers cut off (flushes that never returned).
    pub torn_cut: usize,
    /// Drained segments local retention deleted, and their bytes
    /// (`--stream-release-bytes`).
    pub released_segments: u64,
    pub released_bytes: u64,
    /// Why the stream was not (fully) drained; its local data is kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Every stream under `root` drained to the place `place` makes, called
/// once if there is a stream (`None`: no stream remote was given, and
/// every stream is reported not drained); local retention at
/// `release_bytes` (`DrainOptions::release_bytes`), as the server's.
pub fn recover(
    root: &Path,
    release_bytes: u64,
    place: impl FnOnce() -> anyhow::Result<Option<StreamPlace>>,
) -> anyhow::Result<Vec<StreamRecovery>> {
    let names = paralog_stream::drain::local_streams(root)?;
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let place = place()?;
    let place = place.as_ref();
    let mut drainer = Drainer::default();
    let mut out = Vec::new();
    for stream in names {
        let mut row = StreamRecovery {
            stream: stream.clone(),
            remote: place.map(StreamPlace::describe),
            ..Default::default()
        };
        if let Err(e) = recover_one(root, place, release_bytes, &mut drainer, &mut row) {
            row.error = Some(e);
        }
        out.push(row);
    }
    Ok(out)
}

fn recover_one(
    root: &Path,
    place: Option<&StreamPlace>,
    release_bytes: u64,
    drainer: &mut Drainer,
    row: &mut StreamRecovery,
) -> Result<(), String> {
    let s = row.stream.as_str();
    let Some(place) = place else {
        return Err(
            "no stream remote: give --stream-remote URL, the server's (`paralog run` without --remote: --stream-remote PREFIX), or --remote URL".into(),
        );
    };
    let remote = place.remote();
    let n = paralog_stream::drain::local_lag(root, s)
        .ok()
        .and_then(|l| l.partitions);
    let watermark = |n: u32| remote.watermark(s, n).ok();
    let before = n.and_then(watermark);
    let published = before.as_ref().map_or(0, |w| w.round);
    let job = paralog_stream::job_root::job_share(root, s, published).map_err(|e| e.to_string())?;
    if let Some(why) = job {
        let why = match why {
            JobShare::Marked { nodes } => format!("a server job of {nodes} nodes drained it"),
            JobShare::Elsewhere {
                round,
                producer,
                rounds,
            } => format!(
                "its cut log ({rounds} round(s)) is a server job's: round {round}, not published yet, names producer {producer:016x}, whose segment is not on this node"
            ),
        };
        return Err(format!(
            "{why}; one node alone must not apply or add rounds of the job's cut log: run `paralog recover` as an MPI job, one process per node, on the nodes of that server job (docs/cluster.md)"
        ));
    }
    let opts = DrainOptions {
        release_bytes,
        ..DrainOptions::default()
    };
    let reports = drainer
        .drain_pending_to(root, &*remote, s, &opts)
        .map_err(|e| e.to_string())?;
    let mut new_events = 0;
    for r in &reports {
        row.replayed += r.replayed;
        row.rounds += u64::from(r.round.is_some());
        new_events += r.events;
        row.torn_cut += r.cut.len();
        row.released_segments += r.released.segments.len() as u64;
        row.released_bytes += r.released.segments.iter().map(|s| s.1).sum::<u64>();
    }
    // The events this recovery stored, of recorded rounds and new ones:
    // what the published watermark gained.
    let events =
        |w: &paralog_stream::format::Watermark| -> u64 { w.parts.iter().map(|p| p.next).sum() };
    row.events = match (
        before.as_ref().map(events),
        n.and_then(watermark).as_ref().map(events),
    ) {
        (Some(b), Some(a)) if a >= b => a - b,
        _ => new_events,
    };
    Ok(())
}

/// The lines `paralog recover` prints for the streams.
pub fn print(rows: &[StreamRecovery]) {
    for r in rows {
        let s = &r.stream;
        if let Some(e) = &r.error {
            println!("stream {s}: NOT DRAINED: {e}");
            println!("  local segments and cut log are kept; fix the cause and run `paralog recover` again");
            continue;
        }
        let to = r.remote.as_deref().unwrap_or("?");
        if r.rounds == 0 && r.replayed == 0 {
            println!("stream {s}: nothing to drain ({to} is up to date)");
        } else {
            let mut did = Vec::new();
            if r.replayed > 0 {
                did.push(format!("{} recorded round(s) applied again", r.replayed));
            }
            if r.rounds > 0 {
                did.push(format!("{} new round(s)", r.rounds));
            }
            println!(
                "stream {s}: {}: {} event(s) stored in {to}",
                did.join(", "),
                r.events
            );
        }
        if r.torn_cut > 0 {
            println!(
                "  {} torn tail(s) of dead producers cut off (flushes that never returned)",
                r.torn_cut
            );
        }
        if r.released_segments > 0 {
            println!(
                "  {} drained local segment(s) released ({} bytes)",
                r.released_segments, r.released_bytes
            );
        }
    }
    let ok: Vec<&StreamRecovery> = rows.iter().filter(|r| r.error.is_none()).collect();
    if ok.len() > 1 {
        println!(
            "streams: {} drained: {} recorded round(s) applied again, {} new round(s), {} event(s)",
            ok.len(),
            ok.iter().map(|r| r.replayed).sum::<u64>(),
            ok.iter().map(|r| r.rounds).sum::<u64>(),
            ok.iter().map(|r| r.events).sum::<u64>()
        );
    }
}
