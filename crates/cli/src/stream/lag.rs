//! The streams' part of `paralog status` (docs/streams.md): per stream
//! under the server's node-local root, what the node holds and has not
//! drained yet, what the server's local retention released (the only
//! number the server itself reports), and per reader group its lag in
//! events on the remote when the stream is there (the server's remote: a
//! directory, S3 or the object layout; with `--stream-remote` elsewhere,
//! `paralog stream describe` shows the groups).

use std::path::Path;

use paralog_server::status::Status;
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

/// The streams of the server's status `st` (its node-local root), as
/// JSON rows (an error as a row's `error`): what the node holds, from the
/// root, and what the server's local retention released, from `st`.
pub fn status_json(st: &Status) -> serde_json::Value {
    let root = Path::new(&st.root);
    let names = match local_streams(root) {
        Ok(n) => n,
        Err(e) => return serde_json::json!([{"error": e.to_string()}]),
    };
    let remote = remote_place(&st.remote);
    let rows: Vec<_> = names
        .iter()
        .map(|s| match local_lag(root, s) {
            Ok(l) => {
                let groups = remote.as_ref().and_then(|r| group_lags(r, s));
                let rel = st.stream_released.get(s).copied().unwrap_or_default();
                serde_json::json!({
                    "stream": s, "producers": l.segments, "bytes": l.bytes,
                    "lag_bytes": l.bytes - l.drained, "rounds": l.rounds, "groups": groups,
                    "held_bytes": l.held, "drained_bytes": l.drained,
                    "released_segments": rel.segments, "released_bytes": rel.bytes,
                    "releases": rel.releases,
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
        let b = |k: &str| crate::status::human_bytes(r[k].as_u64().unwrap_or(0));
        println!(
            "stream {name}: {} producer(s), {} not drained yet of {}, {} drain round(s){groups}",
            r["producers"],
            b("lag_bytes"),
            b("bytes"),
            r["rounds"]
        );
        println!(
            "  on the node: {} in segment files ({} drained, not released yet); released {} segment(s), {} since the server started",
            b("held_bytes"),
            b("drained_bytes"),
            r["released_segments"],
            b("released_bytes"),
        );
    }
}
