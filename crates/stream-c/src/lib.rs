//! `libparalog_stream.so`: the C API of shared event streams
//! (`include/paralog/stream.h`, docs/streams.md) over `paralog-stream`.
//!
//! Every entry point returns a code; a failure's message is kept per
//! thread for `paralog_stream_last_error`. No panic crosses the boundary:
//! each body runs under `catch_unwind` and a panic becomes
//! `PARALOG_STREAM_EINTERNAL`. No threads, no async runtime: a call does
//! its work on the caller's thread.

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use paralog_stream::StreamError;

mod group;
mod produce;
mod read;

pub const OK: i32 = 0;
pub const TIMEDOUT: i32 = 1;
pub const EINVAL: i32 = 2;
pub const EUNKNOWN: i32 = 3;
pub const EPARTITIONS: i32 = 4;
pub const ETOOLARGE: i32 = 5;
pub const ECORRUPT: i32 = 6;
pub const EIO: i32 = 7;
pub const EFULL: i32 = 8;
pub const EPEER: i32 = 9;
pub const EINTERNAL: i32 = 10;
pub const ETRIMMED: i32 = 11;

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// A failure at the boundary: its code and its message.
pub(crate) struct Fail(i32, String);

impl Fail {
    pub(crate) fn inval(what: impl Into<String>) -> Fail {
        Fail(EINVAL, what.into())
    }

    /// A stream error, its message prefixed with the stream's name (the
    /// library's messages name the file; a C caller also wants the stream).
    pub(crate) fn of(stream: &str, e: StreamError) -> Fail {
        let code = match &e {
            StreamError::Io { .. } | StreamError::Store { .. } => EIO,
            StreamError::Corrupt { .. } => ECORRUPT,
            StreamError::InvalidName { .. } | StreamError::Invalid { .. } => EINVAL,
            StreamError::PartitionMismatch { .. } => EPARTITIONS,
            StreamError::TooLarge { .. } => ETOOLARGE,
            StreamError::UnknownStream { .. } => EUNKNOWN,
            StreamError::QuotaFull { .. } => EFULL,
            StreamError::Trimmed { .. } => ETRIMMED,
        };
        let msg = e.to_string();
        let msg = if msg.starts_with(&format!("stream {stream}")) {
            msg
        } else {
            format!("stream {stream}: {msg}")
        };
        Fail(code, msg)
    }
}

pub(crate) type Res<T> = std::result::Result<T, Fail>;

fn set_last(msg: &str) {
    let c = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = c);
}

/// Run an entry point's body: its code, its message kept, a panic caught.
pub(crate) fn guard(f: impl FnOnce() -> Res<i32>) -> i32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(code)) => code,
        Ok(Err(Fail(code, msg))) => {
            set_last(&msg);
            code
        }
        Err(p) => {
            let why = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            set_last(&format!("paralog stream: internal error (a bug): {why}"));
            EINTERNAL
        }
    }
}

/// A handle argument; `what` names its kind in the NULL message.
pub(crate) fn handle_arg<'a, H>(p: *mut H, what: &str) -> Res<&'a mut H> {
    // SAFETY: a handle this library gave out (or NULL), used by one thread
    // at a time (stream.h).
    unsafe { p.as_mut() }.ok_or_else(|| Fail::inval(format!("the {what} handle is NULL")))
}

/// Make a handle and give it to C through `out`: the one shape of every
/// `open`/`join` (a NULL `out` is refused before any work).
///
/// # Safety
/// `out` is NULL or writable.
pub(crate) unsafe fn give_out<H>(out: *mut *mut H, make: impl FnOnce() -> Res<H>) -> i32 {
    guard(|| {
        if out.is_null() {
            return Err(Fail::inval("out is NULL"));
        }
        let h = Box::new(make()?);
        // SAFETY: checked non-NULL above.
        unsafe { *out = Box::into_raw(h) };
        Ok(OK)
    })
}

/// Take back a handle this library boxed and gave to C, and run its last
/// step on it: the one shape of every `close`/`leave` (NULL does nothing;
/// the handle is freed whether the step fails or not).
///
/// # Safety
/// `p` is NULL or a handle from this library's `Box::into_raw`, given
/// back once and not used again.
pub(crate) unsafe fn release<H, T>(p: *mut H, last: impl FnOnce(Box<H>) -> Res<T>) -> i32 {
    guard(|| {
        if p.is_null() {
            return Ok(OK);
        }
        // SAFETY: the caller's contract above.
        last(unsafe { Box::from_raw(p) })?;
        Ok(OK)
    })
}

/// A C string argument as UTF-8 (`None` for NULL).
pub(crate) fn opt_str<'a>(p: *const c_char, what: &str) -> Res<Option<&'a str>> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller passes a NUL-terminated string (stream.h).
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map(Some)
        .map_err(|_| Fail::inval(format!("{what} {:?} is not UTF-8", s.to_string_lossy())))
}

pub(crate) fn req_str<'a>(p: *const c_char, what: &str) -> Res<&'a str> {
    opt_str(p, what)?.ok_or_else(|| Fail::inval(format!("{what} is NULL")))
}

/// Bytes from a pointer and a length (NULL allowed for length 0).
pub(crate) fn bytes<'a>(p: *const u8, len: usize, what: &str) -> Res<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Fail::inval(format!("{what} is NULL with length {len}")));
    }
    // SAFETY: the caller passes `len` readable bytes at `p` (stream.h).
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// The message of this thread's last failure.
#[no_mangle]
pub extern "C" fn paralog_stream_last_error() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

/// Set this thread's message (the MPI helper's failures: a partition
/// count that the ranks do not agree on, another rank's failure), so that
/// the C helper holds no logic beyond the MPI calls.
///
/// # Safety
/// `msg` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn paralog_stream_collective_error(
    code: i32,
    stream: *const c_char,
    min_partitions: u32,
    max_partitions: u32,
) -> i32 {
    guard(|| {
        let name = opt_str(stream, "stream")?.unwrap_or("?");
        let msg = match code {
            EPARTITIONS => format!(
                "stream {name}: the ranks asked for different partition counts ({min_partitions} to {max_partitions})"
            ),
            _ => format!("stream {name}: the collective call failed on another rank"),
        };
        Err(Fail(code, msg))
    })
}
