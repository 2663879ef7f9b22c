//! The streams' part of `paralog status` (docs/streams.md): per stream
//! under the server's node-local root, what the node holds and has not
//! drained yet, and per reader group its lag in events on the remote when
//! the stream is there (the server's remote: a directory, S3 or the
//! object layout; with `--stream-remote` elsewhere, `paralog stream
//! describe` shows the groups).

use std::path::Path;

use paralog_stream::drain::{local_lag, local_streams};
use paralog_stream::{RemoteStream, StreamPlace};

/// Where the streams may have been drained to, from the status's remote
/// (its URL; not when the remote is the prefix itself).
fn remote_place(remote: &str) -> Option<StreamPlace> {
    (remote.starts_with('/') || remote.contains("://"))
        .then(|| super::place(remote).ok())
        .flatten()
}

/// Per reader group, its lag in events (the events below the high
/// watermark past its committed offsets): what `stream describe` shows.
fn group_lags(remote: &StreamPlace, stream: &str) -> Option<serde_json::Value> {
    let s = RemoteStream::open_at(remote, stream).ok()?;
    let wm = s.watermark().ok()?;
    let groups = s.groups().ok()?;
    Some(
        groups
            .into_iter()
            .map(|(g, o)| serde_json::json!({"group": g, "lag": wm.lag(&o.offsets)}))
            .collect(),
    )
}

/// The streams of `root`, as JSON rows (an error as a row's `error`).
pub fn status_json(root: &Path, remote: &str) -> serde_json::Value {
    let names = match local_streams(root) {
        Ok(n) => n,
        Err(e) => return serde_json::json!([{"error": e.to_string()}]),
    };
    let remote = remote_place(remote);
    let rows: Vec<_> = names
        .iter()
        .map(|s| match local_lag(root, s) {
            Ok(l) => {
                let groups = remote.as_ref().and_then(|r| group_lags(r, s));
                serde_json::json!({
                    "stream": s, "producers": l.segments, "bytes": l.bytes,
                    "lag_bytes": l.bytes - l.drained, "rounds": l.rounds, "groups": groups,
                })
            }
            Err(e) => serde_json::json!({"stream": s, "error": e.to_string()}),
        })
        .collect();
    serde_json::Value::Array(rows)
}

/// One line per stream for the status table.
pub fn print(v: &serde_json::Value) {
    for r in v.as_array().map_or(&[][..], |a| a.as_slice()) {
        let name = r["stream"].as_str().unwrap_or("?");
        if let Some(e) = r["error"].as_str() {
            println!("stream {name}: {e}");
            continue;
        }
        let groups = match r["groups"].as_array() {
            Some(g) if !g.is_empty() => {
                let g: Vec<String> = g
                    .iter()
                    .map(|x| format!("{} {}", x["group"].as_str().unwrap_or("?"), x["lag"]))
                    .collect();
                format!("; group lag (events): {}", g.join(", "))
            }
            _ => String::new(),
        };
        println!(
            "stream {name}: {} producer(s), {} not drained yet of {}, {} drain round(s){groups}",
            r["producers"],
            crate::status::human_bytes(r["lag_bytes"].as_u64().unwrap_or(0)),
            crate::status::human_bytes(r["bytes"].as_u64().unwrap_or(0)),
            r["rounds"]
        );
    }
}
