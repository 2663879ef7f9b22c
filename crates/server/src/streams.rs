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

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use paralog_stream::{DrainOptions, DrainReport, Drainer, StreamError, StreamPlace};

use crate::status::StreamReleased;
use crate::stop::Stop;

/// What local retention released on this node, per stream, since the
/// server started: counted by the drain (this thread, or a server job's
/// rounds), read by `status`. A clone is a handle to the same counts.
#[derive(Debug, Clone, Default)]
pub struct ReleaseCounts(Arc<Mutex<BTreeMap<String, StreamReleased>>>);

impl ReleaseCounts {
    /// One release of `stream`: `segments` deleted, of `bytes` in all.
    pub fn add(&self, stream: &str, segments: u64, bytes: u64) {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let c = m.entry(stream.into()).or_default();
        c.segments += segments;
        c.bytes += bytes;
        c.releases += 1;
    }

    pub fn snapshot(&self) -> BTreeMap<String, StreamReleased> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// A drain report's release, if it did one; logged at debug, the
    /// history of releases (the counts are this server's only:
    /// docs/streams.md "Status").
    fn count(&self, r: &DrainReport) {
        if let Some(base) = r.released.base {
            let bytes = r.released.segments.iter().map(|s| s.1).sum();
            let segments = r.released.segments.len() as u64;
            tracing::debug!(stream = %r.stream, segments, bytes, base, "drained local segments released");
            self.add(&r.stream, segments, bytes);
        }
    }
}

pub struct StreamDrain {
    stop: Stop,
    thread: Option<JoinHandle<Drainer>>,
    local: PathBuf,
    remote: StreamPlace,
    release_bytes: u64,
    released: ReleaseCounts,
}

/// Start draining the streams under `local` to `remote`, a round every
/// `interval`; local retention once `release_bytes` can be released
/// (`DrainOptions::release_bytes`; u64::MAX: never), each release
/// counted in `released` (the server's status).
pub fn start(
    local: PathBuf,
    remote: StreamPlace,
    interval: Duration,
    release_bytes: u64,
    released: ReleaseCounts,
) -> std::io::Result<StreamDrain> {
    let stop = Stop::default();
    let (l, r, s, c) = (
        local.clone(),
        remote.clone(),
        stop.clone(),
        released.clone(),
    );
    let thread = std::thread::Builder::new()
        .name("streams".into())
        .spawn(move || {
            let mut said = HashMap::new();
            let mut drainer = Drainer::default();
            let opts = DrainOptions {
                release_bytes,
                ..DrainOptions::default()
            };
            loop {
                round(false, &mut drainer, &l, &r, &opts, &c, &mut said);
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
        released,
    })
}

/// One round of every stream (`last`: rounds until everything committed
/// is drained); releases counted in `released`; errors logged once per
/// stream and message.
fn round(
    last: bool,
    drainer: &mut Drainer,
    local: &std::path::Path,
    remote: &StreamPlace,
    opts: &DrainOptions,
    released: &ReleaseCounts,
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
    let mut out = Vec::new();
    for s in streams {
        let r = if last {
            // Everything committed, however many rounds it takes (each
            // round's release counted).
            drainer
                .drain_pending_to(local, &*remote, &s, opts)
                .map(|v| {
                    v.iter().for_each(|r| released.count(r));
                    v.into_iter().last().unwrap_or_default()
                })
        } else {
            drainer
                .drain_to(local, &*remote, &s, opts)
                .inspect(|r| released.count(r))
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
        // The last rounds list every stream's segments and check the
        // remote, whatever the idle rounds relied on.
        drainer.relist();
        let mut said = HashMap::new();
        let opts = DrainOptions {
            release_bytes: self.release_bytes,
            ..DrainOptions::default()
        };
        round(
            true,
            &mut drainer,
            &self.local,
            &self.remote,
            &opts,
            &self.released,
            &mut said,
        )
        .into_iter()
        .filter_map(Result::err)
        .collect()
    }
}

/// The streams' last rounds, run once, by whichever comes first: a
/// `paralog wait` (its answer then names the streams that could not be
/// drained, instead of saying "drained" while their events are still on
/// the node) or the server's stop. Clones share it.
#[derive(Clone, Default)]
pub struct StreamsEnd(Arc<Mutex<EndState>>);

#[derive(Default)]
struct EndState {
    drain: Option<StreamDrain>,
    /// The last rounds' failures (stream, why), once they ran.
    failed: Option<Vec<(String, String)>>,
}

impl StreamsEnd {
    /// The drain whose last rounds these are (the server starts it after
    /// the service, which a `wait` may ask already).
    pub fn set(&self, drain: Option<StreamDrain>) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).drain = drain;
    }

    /// Stop the rounds and run the last ones (the first call; later calls
    /// answer what it found): the streams not drained, with why.
    pub fn finish(&self) -> Vec<(String, String)> {
        let mut st = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = &st.failed {
            return f.clone();
        }
        // No drain (yet: a `wait` before the server set it, or none at
        // all): nothing to finish, and nothing remembered, so that a
        // drain set later still gets its last rounds.
        let Some(d) = st.drain.take() else {
            return Vec::new();
        };
        let failed: Vec<(String, String)> = d
            .finish()
            .into_iter()
            .map(|(s, e)| (s, e.to_string()))
            .collect();
        st.failed = Some(failed.clone());
        failed
    }
}
