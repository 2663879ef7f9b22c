//! Shared event streams in the one-node server (docs/streams.md): a thread
//! that runs one drain round of every stream under the node-local root
//! each interval (`paralog_stream::drain_stream`: cut recorded, then
//! applied, then the watermark), and a last round of every stream when the
//! server stops, so that `paralog run` leaves every flushed event on the
//! remote: a POSIX directory or an object store (S3, the object layout;
//! `stream_store.rs` makes the place from the URL).
//!
//! A stream whose round fails (a damaged segment, a remote that refuses)
//! is logged once per distinct error and tried again next round; the other
//! streams go on.

use std::collections::HashMap;
use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::Duration;

use paralog_stream::{DrainOptions, DrainReport, Drainer, StreamError, StreamPlace};

use crate::stop::Stop;

pub struct StreamDrain {
    stop: Stop,
    thread: Option<JoinHandle<Drainer>>,
    local: PathBuf,
    remote: StreamPlace,
    release_bytes: u64,
}

/// Start draining the streams under `local` to `remote`, a round every
/// `interval`; local retention once `release_bytes` can be released
/// (`DrainOptions::release_bytes`; u64::MAX: never).
pub fn start(
    local: PathBuf,
    remote: StreamPlace,
    interval: Duration,
    release_bytes: u64,
) -> std::io::Result<StreamDrain> {
    let stop = Stop::default();
    let (l, r, s) = (local.clone(), remote.clone(), stop.clone());
    let thread = std::thread::Builder::new()
        .name("streams".into())
        .spawn(move || {
            let mut said = HashMap::new();
            let mut drainer = Drainer::default();
            loop {
                round(false, &mut drainer, &l, &r, release_bytes, &mut said);
                if s.wait(interval) {
                    return drainer;
                }
            }
        })?;
    Ok(StreamDrain {
        stop,
        thread: Some(thread),
        local,
        remote,
        release_bytes,
    })
}

/// One round of every stream; errors logged once per stream and message.
fn round(
    last: bool,
    drainer: &mut Drainer,
    local: &std::path::Path,
    remote: &StreamPlace,
    release_bytes: u64,
    said: &mut HashMap<String, String>,
) -> Vec<Result<DrainReport, (String, StreamError)>> {
    let remote = remote.remote();
    let streams = match paralog_stream::drain::local_streams(local) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "listing the streams");
            return Vec::new();
        }
    };
    let opts = DrainOptions {
        release_bytes,
        ..DrainOptions::default()
    };
    let mut out = Vec::new();
    for s in streams {
        let r = if last {
            // Everything committed, however many rounds it takes.
            drainer
                .drain_pending_to(local, &*remote, &s, &opts)
                .map(|mut v| v.pop().unwrap_or_default())
        } else {
            drainer.drain_to(local, &*remote, &s, &opts)
        };
        match r {
            Ok(r) => {
                said.remove(&s);
                if let Some(round) = r.round {
                    tracing::debug!(stream = %s, round, events = r.events, bytes = r.bytes, "stream drained");
                }
                for t in r.trimmed.iter().filter(|t| !t.segments.is_empty()) {
                    tracing::info!(stream = %s, partition = t.partition, objects = t.segments.len(), bytes = t.bytes, first_offset = t.first, "stream trimmed (a trim request applied)");
                }
                out.push(Ok(r));
            }
            Err(e) => {
                let msg = e.to_string();
                if said.get(&s) != Some(&msg) {
                    tracing::error!(stream = %s, error = %msg, "stream not drained (tried again each round)");
                    said.insert(s.clone(), msg);
                }
                out.push(Err((s, e)));
            }
        }
    }
    out
}

impl StreamDrain {
    /// Stop the rounds, then run a last one of every stream (taking
    /// everything flushed by now); the streams that failed, with why.
    pub fn finish(mut self) -> Vec<(String, StreamError)> {
        self.stop.stop();
        // The thread's drainer knows where each stream is (a panic in it
        // leaves a fresh one, which reads the cut logs again).
        let mut drainer = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        let mut said = HashMap::new();
        round(
            true,
            &mut drainer,
            &self.local,
            &self.remote,
            self.release_bytes,
            &mut said,
        )
        .into_iter()
        .filter_map(Result::err)
        .collect()
    }
}
