//! The C functions the MPI shim calls. The shim turns MPI handles into plain
//! integers and runs the collective agreements; everything here is local to
//! the rank. Return values: 0 or a positive errno (the shim maps it to an
//! MPI error class); the problem is already reported on stderr.

#![allow(clippy::missing_safety_doc)]

use std::ffi::CStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use libc::{c_char, c_int};

use crate::guard::Guard;
use crate::posix::contain;
use crate::report;
use crate::settings::Settings;
use crate::state::{self, lock, resolve, Mode, State};

/// Bits of `paralog_mpi_open_begin`'s `amode` argument.
pub const OPEN_WRITE: c_int = 1;
pub const OPEN_CREATE: c_int = 2;

unsafe fn abs_path(filename: *const c_char) -> Option<PathBuf> {
    if filename.is_null() {
        return None;
    }
    let raw = CStr::from_ptr(filename).to_bytes();
    resolve(libc::AT_FDCWD, Path::new(std::ffi::OsStr::from_bytes(raw)))
}

/// Decide whether an MPI_File_open is captured. Returns 1 (captured; `*gen`
/// is this rank's proposal for the open generation, to be agreed as the
/// maximum over ranks), 0 (not captured), 2 (a second handle of a file this
/// process has open through MPI under capture: it joins that open) or
/// -errno.
#[no_mangle]
pub unsafe extern "C" fn paralog_mpi_open_begin(
    filename: *const c_char,
    amode: c_int,
    gen: *mut u64,
) -> c_int {
    let Some(_g) = Guard::enter() else { return 0 };
    let r = contain("MPI_File_open", -libc::EIO, || {
        let Some(abs) = abs_path(filename) else {
            return Ok(0);
        };
        let settings = state::settings();
        let prefix = match settings {
            Settings::Off => return Ok(0),
            Settings::On(c) => &c.prefix,
            Settings::Invalid {
                prefix: Some(p), ..
            } => p,
            Settings::Invalid { prefix: None, .. } => return Ok(0),
        };
        if !abs.starts_with(prefix)
            || abs == *prefix
            || amode & OPEN_WRITE == 0
            || crate::posix::is_mpi_helper_file(&abs)
        {
            return Ok(0);
        }
        if let Settings::Invalid { message, .. } = settings {
            report::line(&format!("capture is misconfigured: {message}"));
            return Ok(-libc::EINVAL);
        }
        let mut slot = lock();
        let st = State::get(&mut slot).ok_or(libc::EINVAL)?;
        if let Some(&id) = st.by_path.get(&abs) {
            // A second MPI handle of a file this process has open through
            // MPI already (PnetCDF's independent data mode): it joins that
            // open's log (2). Mixing it with a plain POSIX open is refused.
            if st.handles.get(&id).is_some_and(|h| h.mode == Mode::Mpi) {
                return Ok(2);
            }
            report::line(&format!(
                "{} is already open under capture in this process by a POSIX open; an MPI_File_open of it as well is not supported",
                abs.display()
            ));
            return Ok(-libc::EBUSY);
        }
        let rel = st.rel_of(&abs).ok_or(libc::EINVAL)?;
        let next = paralog_log::next_generation(&st.cfg.local, &st.cfg.job, &rel)
            .map_err(|e| state::log_errno("choosing the open generation", &e))?;
        if !gen.is_null() {
            *gen = next;
        }
        Ok(1)
    });
    r
}

/// Create this rank's log for the agreed generation and register the path,
/// so that the POSIX opens the MPI library makes for it are captured.
/// Returns a handle (> 0) or -errno.
#[no_mangle]
pub unsafe extern "C" fn paralog_mpi_open_attach(
    filename: *const c_char,
    gen: u64,
    rank: c_int,
    size: c_int,
    amode: c_int,
) -> i64 {
    let Some(_g) = Guard::enter() else {
        return -(libc::EIO as i64);
    };
    contain("MPI_File_open", -(libc::EIO as i64), || {
        let abs = abs_path(filename).ok_or(libc::EINVAL)?;
        let (rank, size) = (
            u32::try_from(rank).map_err(|_| libc::EINVAL)?,
            u32::try_from(size).map_err(|_| libc::EINVAL)?,
        );
        let mut slot = lock();
        let st = State::get(&mut slot).ok_or(libc::EINVAL)?;
        match st
            .committed(&abs)
            .and_then(|c| st.new_handle(&abs, Mode::Mpi, rank, size, Some(gen), c))
        {
            Ok(id) => {
                st.handles.get_mut(&id).expect("just made").create_allowed =
                    amode & OPEN_CREATE != 0;
                Ok(id as i64)
            }
            Err(e) => Ok(-(e as i64)),
        }
    })
}

fn with_state<T>(what: &str, fail: T, f: impl FnOnce(&mut State) -> state::CResult<T>) -> T {
    let Some(_g) = Guard::enter() else {
        return fail;
    };
    contain(what, fail, || {
        let mut slot = lock();
        let st = State::get(&mut slot).ok_or(libc::EINVAL)?;
        f(st)
    })
}

fn code(r: state::CResult<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// Local commit of the current epoch; `*size` receives this rank's view of
/// the file size, to be agreed as the maximum over ranks.
#[no_mangle]
pub unsafe extern "C" fn paralog_mpi_commit_local(handle: i64, size: *mut u64) -> c_int {
    with_state("MPI_File_sync", libc::EIO, |st| {
        let id = handle as u64;
        let r = st.commit_local(id);
        if !size.is_null() {
            *size = st.handles.get(&id).map_or(0, |h| h.size);
        }
        Ok(code(r))
    })
}

/// The agreement said every rank committed: mark and start the next epoch.
#[no_mangle]
pub unsafe extern "C" fn paralog_mpi_complete(handle: i64, global_size: u64) -> c_int {
    with_state("MPI_File_sync", libc::EIO, |st| {
        Ok(code(st.complete_epoch(handle as u64, global_size)))
    })
}

#[no_mangle]
pub unsafe extern "C" fn paralog_mpi_set_size(handle: i64, size: u64) -> c_int {
    with_state("MPI_File_set_size", libc::EIO, |st| {
        Ok(code(st.set_size(handle as u64, size)))
    })
}

#[no_mangle]
pub unsafe extern "C" fn paralog_mpi_preallocate(handle: i64, size: u64) -> c_int {
    with_state("MPI_File_preallocate", libc::EIO, |st| {
        Ok(code(st.preallocate(handle as u64, size)))
    })
}

/// A synchronizing point that every rank of the file passes (a collective
/// I/O call, or a collective on a communicator holding every rank of the
/// file): this rank's later writes are ordered after every rank's earlier
/// ones (docs/format.md, "Phases").
#[no_mangle]
pub unsafe extern "C" fn paralog_mpi_sync_point(handle: i64) {
    with_state("MPI synchronizing call", (), |st| {
        if let Some(log) = st
            .handles
            .get_mut(&(handle as u64))
            .and_then(|h| h.log.as_mut())
        {
            log.sync_point();
        }
        Ok(())
    })
}

/// Whether this rank wrote, resized or deleted since its last consistency
/// point (1) or not (0). On an internal failure 1, so that the caller's
/// commit runs and reports it rather than a read answering stale bytes.
#[no_mangle]
pub unsafe extern "C" fn paralog_mpi_dirty(handle: i64) -> c_int {
    with_state("MPI collective read", 1, |st| {
        Ok(st
            .handles
            .get(&(handle as u64))
            .map_or(0, |h| c_int::from(h.dirty)))
    })
}

/// MPI_File_close (or a failed open) is done with the handle.
#[no_mangle]
pub unsafe extern "C" fn paralog_mpi_release(handle: i64) {
    with_state("MPI_File_close", (), |st| {
        let id = handle as u64;
        if let Some(h) = st.handles.get_mut(&id) {
            h.pinned = false;
            if st.by_path.get(&h.path) == Some(&id) {
                let p = h.path.clone();
                st.by_path.remove(&p);
            }
        }
        st.maybe_release(id);
        Ok(())
    })
}

/// One line on stderr, for the shim.
#[no_mangle]
pub unsafe extern "C" fn paralog_report(msg: *const c_char) {
    if !msg.is_null() {
        report::line(&CStr::from_ptr(msg).to_string_lossy());
    }
}
