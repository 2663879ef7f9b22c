//! The producer's entry points: open, append, flush, close.

use std::ffi::c_char;
use std::path::PathBuf;

use paralog_stream::{Partitioner, Producer, Quota};

use crate::{bytes, give_out, guard, handle_arg, opt_str, release, req_str, Fail, Res, OK};

/// `paralog_stream`: a producer and its stream's name (for messages).
pub struct Handle {
    stream: String,
    /// The name for `paralog_stream_name`.
    cname: std::ffi::CString,
    producer: Producer,
}

/// The node-local root: the argument, else `PARALOG_LOCAL`, with `{node}`
/// standing for this node's name (as the CLI and the server read it).
fn local_root(arg: Option<&str>) -> Res<PathBuf> {
    let raw = match arg {
        Some(s) => PathBuf::from(s),
        None => std::env::var_os("PARALOG_LOCAL")
            .map(PathBuf::from)
            .ok_or_else(|| Fail::inval("no node-local directory: pass one or set PARALOG_LOCAL"))?,
    };
    if !raw.to_string_lossy().contains("{node}") {
        return Ok(raw);
    }
    let node = std::env::var("PARALOG_NODE").ok();
    let name = paralog_settings::node_name(node.as_deref()).map_err(Fail::inval)?;
    Ok(paralog_settings::expand_node(&raw, &name))
}

fn handle<'a>(s: *mut Handle) -> Res<&'a mut Handle> {
    handle_arg(s, "stream")
}

/// # Safety
/// The strings are NULL or NUL-terminated; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn paralog_stream_open(
    local: *const c_char,
    stream: *const c_char,
    partitions: u32,
    out: *mut *mut Handle,
) -> i32 {
    // SAFETY: `out` is NULL or writable (stream.h).
    unsafe {
        give_out(out, || {
            let name = req_str(stream, "stream name")?;
            let root = local_root(opt_str(local, "node-local directory")?)?;
            let producer = Producer::open(&root, name, partitions, Partitioner::RoundRobin)
                .map_err(|e| Fail::of(name, e))?;
            Ok(Handle {
                stream: name.to_owned(),
                cname: std::ffi::CString::new(name)
                    .map_err(|_| Fail::inval("a NUL in the name"))?,
                producer,
            })
        })
    }
}

/// # Safety
/// `s` is an open handle; the byte ranges are readable; the outputs are
/// NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn paralog_stream_append(
    s: *mut Handle,
    payload: *const u8,
    payload_len: usize,
    key: *const u8,
    key_len: usize,
    time_ns: i64,
    partition: i32,
    partition_out: *mut u32,
    seq_out: *mut u64,
) -> i32 {
    guard(|| {
        let h = handle(s)?;
        let payload = bytes(payload, payload_len, "payload")?;
        let key = if key.is_null() {
            None
        } else {
            Some(bytes(key, key_len, "key")?)
        };
        let how = match partition {
            -1 => Partitioner::RoundRobin,
            -2 => Partitioner::Key,
            p if p >= 0 => Partitioner::Fixed(p as u32),
            p => {
                return Err(Fail::inval(format!(
                    "stream {}: partition {p}: give a partition number, PARALOG_STREAM_ROUND_ROBIN or PARALOG_STREAM_BY_KEY",
                    h.stream
                )))
            }
        };
        let time = (time_ns != i64::MIN).then_some(time_ns);
        let (p, seq) = h
            .producer
            .append_with(how, key, payload, time)
            .map_err(|e| Fail::of(&h.stream, e))?;
        // SAFETY: NULL or writable (stream.h).
        unsafe {
            if let Some(o) = partition_out.as_mut() {
                *o = p;
            }
            if let Some(o) = seq_out.as_mut() {
                *o = seq;
            }
        }
        Ok(OK)
    })
}

/// # Safety
/// `s` is an open handle.
#[no_mangle]
pub unsafe extern "C" fn paralog_stream_set_quota(
    s: *mut Handle,
    bytes: u64,
    timeout_ms: i32,
) -> i32 {
    guard(|| {
        let h = handle(s)?;
        if timeout_ms < 0 {
            return Err(Fail::inval(format!(
                "stream {}: quota timeout {timeout_ms} ms: 0 (fail at once) or more",
                h.stream
            )));
        }
        h.producer.set_quota((bytes > 0).then(|| Quota {
            bytes,
            wait: std::time::Duration::from_millis(timeout_ms as u64),
        }));
        Ok(OK)
    })
}

/// # Safety
/// `s` is an open handle.
#[no_mangle]
pub unsafe extern "C" fn paralog_stream_set_roll(s: *mut Handle, bytes: u64) -> i32 {
    guard(|| {
        handle(s)?.producer.set_roll_bytes(bytes);
        Ok(OK)
    })
}

/// # Safety
/// `s` is an open handle; `durable_out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn paralog_stream_flush(s: *mut Handle, durable_out: *mut u64) -> i32 {
    guard(|| {
        let h = handle(s)?;
        let n = h.producer.flush().map_err(|e| Fail::of(&h.stream, e))?;
        // SAFETY: NULL or writable.
        if let Some(o) = unsafe { durable_out.as_mut() } {
            *o = n;
        }
        Ok(OK)
    })
}

/// # Safety
/// `s` is an open handle (or NULL), not used again.
#[no_mangle]
pub unsafe extern "C" fn paralog_stream_close(s: *mut Handle) -> i32 {
    // SAFETY: a handle from paralog_stream_open (or NULL), given back once.
    unsafe {
        release(s, |h| {
            h.producer.close().map_err(|e| Fail::of(&h.stream, e))
        })
    }
}

/// # Safety
/// `s` is an open handle or NULL.
#[no_mangle]
pub unsafe extern "C" fn paralog_stream_partitions(s: *const Handle) -> u32 {
    // SAFETY: an open handle or NULL.
    unsafe { s.as_ref() }.map_or(0, |h| h.producer.partitions())
}

/// # Safety
/// `s` is an open handle or NULL.
#[no_mangle]
pub unsafe extern "C" fn paralog_stream_name(s: *const Handle) -> *const c_char {
    // SAFETY: an open handle or NULL.
    unsafe { s.as_ref() }.map_or(std::ptr::null(), |h| h.cname.as_ptr())
}

/// # Safety
/// `s` is an open handle or NULL.
#[no_mangle]
pub unsafe extern "C" fn paralog_stream_id(s: *const Handle) -> u64 {
    // SAFETY: an open handle or NULL.
    unsafe { s.as_ref() }.map_or(0, |h| h.producer.id())
}
