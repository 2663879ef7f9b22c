//! The reader's entry points: join (a group, or alone), next event with a
//! timeout, acknowledge, commit, leave. A reader polls the watermark when
//! it has read everything published (`Reader::refresh`), so that `next`
//! waits for the drain's next round instead of ending.

use std::ffi::c_char;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use paralog_stream::{Delivered, From, Order, Reader, RemoteStream};

use crate::{give_out, guard, handle_arg, opt_str, release, req_str, Fail, Res, OK, TIMEDOUT};

/// `paralog_stream_event` (stream.h): the same fields in the same order.
#[repr(C)]
pub struct CEvent {
    offset: u64,
    round: u64,
    producer: u64,
    seq: u64,
    time_ns: i64,
    key: *const u8,
    key_len: usize,
    payload: *const u8,
    payload_len: usize,
    partition: u32,
    reserved: u32,
}

/// `paralog_stream_reader`.
pub struct Handle {
    stream: String,
    reader: Reader,
    /// The last event handed out: its bytes stay valid until the next call.
    last: Option<Delivered>,
    /// Per partition, the offset after the last acknowledged event (what
    /// a commit stores).
    acked: Vec<u64>,
}

/// How often a waiting `next` reads the watermark again: the server's
/// drain runs a round every 100 ms, so a few polls per round suffice.
const POLL: Duration = Duration::from_millis(20);

/// A POSIX remote: a directory, or file:///path.
fn remote_dir(url: &str) -> Res<PathBuf> {
    if let Some(p) = url.strip_prefix("file://") {
        return Ok(PathBuf::from(p));
    }
    if url.contains("://") {
        return Err(Fail::inval(format!(
            "{url}: streams are read from POSIX remotes (a directory) so far (docs/streams.md)"
        )));
    }
    Ok(PathBuf::from(url))
}

fn handle<'a>(r: *mut Handle) -> Res<&'a mut Handle> {
    handle_arg(r, "reader")
}

/// # Safety
/// The strings are NULL or NUL-terminated; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn paralog_stream_join(
    remote: *const c_char,
    stream: *const c_char,
    group: *const c_char,
    from: i32,
    order: i32,
    out: *mut *mut Handle,
) -> i32 {
    if from > 1 {
        return guard(|| {
            Err(Fail::inval(format!(
                "from {from}: 0 (earliest) or 1 (committed); paralog_stream_join_time for a time"
            )))
        });
    }
    // SAFETY: the caller's pointers, passed on.
    unsafe { join(remote, stream, group, from, 0, order, out) }
}

/// # Safety
/// As `paralog_stream_join`.
#[no_mangle]
pub unsafe extern "C" fn paralog_stream_join_time(
    remote: *const c_char,
    stream: *const c_char,
    group: *const c_char,
    time_ns: i64,
    order: i32,
    out: *mut *mut Handle,
) -> i32 {
    // SAFETY: the caller's pointers, passed on.
    unsafe { join(remote, stream, group, 2, time_ns, order, out) }
}

/// # Safety
/// As `paralog_stream_join`.
unsafe fn join(
    remote: *const c_char,
    stream: *const c_char,
    group: *const c_char,
    from: i32,
    time_ns: i64,
    order: i32,
    out: *mut *mut Handle,
) -> i32 {
    // SAFETY: `out` is NULL or writable (stream.h).
    unsafe {
        give_out(out, || {
            let name = req_str(stream, "stream name")?;
            let dir = remote_dir(req_str(remote, "remote")?)?;
            let group = opt_str(group, "group")?;
            let from = match from {
                0 => From::Earliest,
                1 => From::Committed,
                f if f > 1 => From::Time(time_ns),
                f => {
                    return Err(Fail::inval(format!(
                        "stream {name}: from {f}: 0 (earliest) or 1 (committed)"
                    )))
                }
            };
            let order = match order {
                0 => Order::Cut,
                1 => Order::Time,
                2 => Order::Watermark { idle: DEFAULT_IDLE },
                o => {
                    return Err(Fail::inval(format!(
                        "stream {name}: order {o}: 0 (cut), 1 (time) or 2 (watermark)"
                    )))
                }
            };
            let rs = RemoteStream::open(&dir, name).map_err(|e| Fail::of(name, e))?;
            let reader = Reader::open(rs, group, from, order).map_err(|e| Fail::of(name, e))?;
            Ok(Handle {
                stream: name.to_owned(),
                acked: reader.positions().to_vec(),
                reader,
                last: None,
            })
        })
    }
}

/// The watermark order's idle timeout until `paralog_stream_set_idle`.
const DEFAULT_IDLE: Duration = Duration::from_millis(1000);

/// # Safety
/// `r` is a joined reader.
#[no_mangle]
pub unsafe extern "C" fn paralog_stream_set_idle(r: *mut Handle, idle_ms: i64) -> i32 {
    guard(|| {
        let h = handle(r)?;
        if idle_ms < 0 {
            return Err(Fail::inval(format!(
                "stream {}: idle timeout {idle_ms} ms: 0 or more",
                h.stream
            )));
        }
        if !h.reader.set_idle(Duration::from_millis(idle_ms as u64)) {
            return Err(Fail::inval(format!(
                "stream {}: an idle timeout is for a reader in watermark order (PARALOG_STREAM_ORDER_WATERMARK)",
                h.stream
            )));
        }
        Ok(OK)
    })
}

/// # Safety
/// `r` is a joined reader; `ev` is writable.
#[no_mangle]
pub unsafe extern "C" fn paralog_stream_next(
    r: *mut Handle,
    timeout_ms: i32,
    ev: *mut CEvent,
) -> i32 {
    guard(|| {
        let h = handle(r)?;
        if ev.is_null() {
            return Err(Fail::inval("ev is NULL"));
        }
        let Some(d) = h.next_within(timeout_ms)? else {
            h.last = None;
            return Ok(TIMEDOUT);
        };
        // SAFETY: checked non-NULL; the bytes live in `h.last` until the next call.
        unsafe { *ev = CEvent::of(&d) };
        h.last = Some(d);
        Ok(OK)
    })
}

impl CEvent {
    /// The C view of an event; its key and payload point into `d`.
    pub(crate) fn of(d: &Delivered) -> CEvent {
        let e = &d.event;
        let (key, key_len) = e
            .key
            .as_deref()
            .map_or((std::ptr::null(), 0), |k| (k.as_ptr(), k.len()));
        CEvent {
            offset: d.offset,
            round: d.round,
            producer: e.producer,
            seq: e.seq,
            time_ns: e.time_ns,
            key,
            key_len,
            payload: e.payload.as_ptr(),
            payload_len: e.payload.len(),
            partition: d.partition,
            reserved: 0,
        }
    }
}

impl Handle {
    /// The next event, waiting up to `timeout_ms` (negative: as long as it
    /// takes) for the drain to publish one.
    pub(crate) fn next_within(&mut self, timeout_ms: i32) -> Res<Option<Delivered>> {
        let deadline =
            (timeout_ms >= 0).then(|| Instant::now() + Duration::from_millis(timeout_ms as u64));
        let stream = self.stream.clone();
        let fail = |e| Fail::of(&stream, e);
        loop {
            if let Some(d) = self.reader.next_event().map_err(fail)? {
                return Ok(Some(d));
            }
            let now = Instant::now();
            if deadline.is_some_and(|t| now >= t) {
                return Ok(None);
            }
            let nap = deadline.map_or(POLL, |t| POLL.min(t - now));
            std::thread::sleep(nap);
            self.reader.refresh().map_err(fail)?;
        }
    }

    /// Acknowledge, per partition, every event below `upto` (what a group's
    /// proxy computed), and store the group's offsets.
    pub(crate) fn commit_below(&mut self, upto: &[u64]) -> Res<()> {
        for (a, &u) in self.acked.iter_mut().zip(upto) {
            *a = (*a).max(u);
        }
        self.reader
            .commit_at(&self.acked)
            .map_err(|e| Fail::of(&self.stream, e))
    }

    pub(crate) fn positions(&self) -> &[u64] {
        self.reader.positions()
    }
}

/// # Safety
/// `r` is a joined reader.
#[no_mangle]
pub unsafe extern "C" fn paralog_stream_ack(r: *mut Handle, partition: u32, offset: u64) -> i32 {
    guard(|| {
        let h = handle(r)?;
        let handed = *h
            .reader
            .positions()
            .get(partition as usize)
            .ok_or_else(|| {
                Fail::inval(format!(
                    "stream {}: partition {partition} of a stream of {}",
                    h.stream,
                    h.acked.len()
                ))
            })?;
        if offset >= handed {
            return Err(Fail::inval(format!(
                "stream {}: partition {partition} offset {offset} was not handed to this reader (it has had offsets below {handed})",
                h.stream
            )));
        }
        let a = &mut h.acked[partition as usize];
        *a = (*a).max(offset + 1);
        Ok(OK)
    })
}

/// # Safety
/// `r` is a joined reader.
#[no_mangle]
pub unsafe extern "C" fn paralog_stream_commit(r: *mut Handle) -> i32 {
    guard(|| {
        let h = handle(r)?;
        h.reader
            .commit_at(&h.acked)
            .map_err(|e| Fail::of(&h.stream, e))?;
        Ok(OK)
    })
}

/// # Safety
/// `r` is a joined reader (or NULL), not used again.
#[no_mangle]
pub unsafe extern "C" fn paralog_stream_leave(r: *mut Handle) -> i32 {
    // SAFETY: a handle from paralog_stream_join (or NULL), given back once.
    unsafe {
        release(r, |h| {
            if h.reader.has_group() {
                h.reader
                    .commit_at(&h.acked)
                    .map_err(|e| Fail::of(&h.stream, e))?;
            }
            Ok(())
        })
    }
}

/// # Safety
/// `r` is a joined reader or NULL.
#[no_mangle]
pub unsafe extern "C" fn paralog_stream_reader_partitions(r: *const Handle) -> u32 {
    // SAFETY: a joined reader or NULL.
    unsafe { r.as_ref() }.map_or(0, |h| h.reader.stream().partitions)
}
