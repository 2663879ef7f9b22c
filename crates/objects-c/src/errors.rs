//! Errors across C: a code per kind of [`paralog_objects::Error`], the
//! message kept per thread for `paralog_obj_errmsg`, and every call run
//! under `catch_unwind` so that no panic crosses into C.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use paralog_objects::Error;

pub const OK: c_int = 0;
pub const EINVAL: c_int = 1;
pub const ENAME: c_int = 2;
pub const ENOTFOUND: c_int = 3;
pub const ECHUNK: c_int = 4;
pub const EOVERLAP: c_int = 5;
pub const EPUT: c_int = 6;
pub const EDAMAGED: c_int = 7;
pub const EIO: c_int = 8;
pub const EURL: c_int = 9;
pub const EINTERNAL: c_int = 10;

thread_local! {
    static MESSAGE: RefCell<CString> = RefCell::new(CString::default());
}

/// A failure: its code and its message.
pub struct Failure(pub c_int, pub String);

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        let code = match &e {
            Error::Url { .. } => EURL,
            Error::BadName { .. } => ENAME,
            Error::Invalid { .. } => EINVAL,
            Error::NotFound { .. } => ENOTFOUND,
            Error::Chunk { .. } => ECHUNK,
            Error::Overlap { .. } | Error::PartsOverlap { .. } => EOVERLAP,
            Error::Put { .. } => EPUT,
            Error::Damaged { .. } => EDAMAGED,
            Error::Io { .. } | Error::Store(_) => EIO,
        };
        Failure(code, e.to_string())
    }
}

/// An argument error.
pub fn invalid(msg: impl Into<String>) -> Failure {
    Failure(EINVAL, msg.into())
}

pub fn set_message(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).expect("no NUL left");
    MESSAGE.with(|m| *m.borrow_mut() = c);
}

pub fn message() -> *const c_char {
    MESSAGE.with(|m| m.borrow().as_ptr())
}

/// Run one API call: its error becomes a code and this thread's message;
/// a panic becomes EINTERNAL.
pub fn guard(f: impl FnOnce() -> Result<(), Failure>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => {
            set_message("");
            OK
        }
        Ok(Err(Failure(code, msg))) => {
            set_message(&msg);
            code
        }
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            set_message(&format!(
                "paralog internal error (a bug, please report): {what}"
            ));
            EINTERNAL
        }
    }
}
