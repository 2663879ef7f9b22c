//! The interposed opens, closes and dups, and what every wrapper shares:
//! `contain` (no panic crosses the C boundary: a panic becomes EIO plus one
//! line on stderr), `pass!` (the next definition), the prefix checks. Each
//! wrapper passes through at once unless the descriptor (lock-free check)
//! or the path (prefix check) is captured; otherwise it does the work under
//! the state lock. The data calls are in `io.rs`, AIO in `aio.rs`.

#![allow(clippy::missing_safety_doc)]

use std::ffi::CStr;
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use libc::{c_char, c_int, c_ulong, mode_t};

use paralog_log::format::Times;

use crate::guard::Guard;
use crate::report;
use crate::settings::Settings;
use crate::state::{self, is_captured, lock, resolve, set_errno, CResult, Mode, State};

/// Run `f` with panics contained; an error becomes `fail` with errno set.
pub(crate) fn contain<T>(what: &str, fail: T, f: impl FnOnce() -> CResult<T>) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_errno(e);
            fail
        }
        Err(_) => {
            report::line(&format!("internal error in {what}; returning EIO"));
            set_errno(libc::EIO);
            fail
        }
    }
}

/// Call the next definition of a symbol, or fail with ENOSYS (with a line
/// on stderr) if there is none: never exit the program.
#[macro_export]
macro_rules! pass {
    ($name:ident ( $($a:expr),* ), $fail:expr) => {
        match $crate::real::$name() {
            Some(f) => f($($a),*),
            None => {
                $crate::report::line(concat!("no next definition of ", stringify!($name)));
                $crate::state::set_errno(libc::ENOSYS);
                $fail
            }
        }
    };
}

/// C entry points that do paralog's work when `ours` (an `Option` of the
/// return value) is `Some`, and otherwise call the next definition
/// (`fail` when there is none): `fn name(args) -> ret { ours } else fail;`.
/// One body may serve a symbol and its twins (`fn a(..) | fn a64(..)`),
/// each with its own prototype.
#[macro_export]
macro_rules! entry_points {
    ($(
        $(fn $name:ident($($a:ident: $t:ty),* $(,)?))|+ -> $r:ty { $ours:expr } else $fail:expr;
    )*) => {$($(
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $r {
            match $ours {
                Some(r) => r,
                None => $crate::pass!($name($($a),*), $fail),
            }
        }
    )+)*};
}

/// C entry points on a descriptor: `body` on a captured one, with the
/// per-thread guard held (not re-entered: inside paralog every call passes
/// through); otherwise the next definition, still under the guard when it
/// was free. Written as `entry_points!`.
#[macro_export]
macro_rules! fd_entry_points {
    ($(
        $(fn $name:ident($fd:ident: c_int $(, $a:ident: $t:ty)* $(,)?))|+ -> $r:ty { $body:expr } else $fail:expr;
    )*) => {$($(
        #[no_mangle]
        pub unsafe extern "C" fn $name($fd: libc::c_int $(, $a: $t)*) -> $r {
            match ($crate::state::is_captured($fd), $crate::guard::Guard::enter()) {
                (true, Some(_g)) => $body,
                _ => $crate::pass!($name($fd $(, $a)*), $fail),
            }
        }
    )+)*};
}

/// Symbols that share one body and one prototype (`a, b => fn(args) ->
/// ret, fail, |real| body`); in `body`, `real(args)` calls the next
/// definition of the symbol being run (`fail` when there is none).
#[macro_export]
macro_rules! twins {
    ($name:ident, $($more:ident),+ => $($def:tt)*) => {
        $crate::twins!($name => $($def)*);
        $crate::twins!($($more),+ => $($def)*);
    };
    ($name:ident => fn($($a:ident: $t:ty),* $(,)?) -> $r:ty, $fail:expr, |$real:ident| $body:block) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $r {
            let $real = |$($a: $t),*| $crate::pass!($name($($a),*), $fail);
            $body
        }
    };
}

// ---- open ---------------------------------------------------------------

enum OpenDecision {
    Pass,
    Fd(c_int),
}

// The variadic entry points. Stable Rust cannot define a C variadic
// function, and the C objects of a cdylib are not exported past rustc's
// version script, so they are defined here with the optional argument as a
// fixed one: on the x86_64 and aarch64 Linux ABIs it travels in the same
// register either way. Like glibc, `mode` is only used when O_CREAT or
// O_TMPFILE says the caller passed it (otherwise it is whatever the
// register held, and ignored), and fcntl's argument is read as a word.

const K_OPEN: c_int = 0;
const K_OPEN64: c_int = 1;
const K_OPENAT: c_int = 2;
const K_OPENAT64: c_int = 3;
const K_OPEN_2: c_int = 4;
const K_OPEN64_2: c_int = 5;
const K_OPENAT_2: c_int = 6;
const K_OPENAT64_2: c_int = 7;
const K_CREAT: c_int = 8;
const K_CREAT64: c_int = 9;

fn mode_if_passed(flags: c_int, mode: mode_t) -> mode_t {
    if flags & libc::O_CREAT != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE {
        mode
    } else {
        0
    }
}

#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    paralog_open_impl(
        libc::AT_FDCWD,
        path,
        flags,
        mode_if_passed(flags, mode),
        K_OPEN,
    )
}

#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    paralog_open_impl(
        libc::AT_FDCWD,
        path,
        flags,
        mode_if_passed(flags, mode),
        K_OPEN64,
    )
}

#[no_mangle]
pub unsafe extern "C" fn openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    paralog_open_impl(dirfd, path, flags, mode_if_passed(flags, mode), K_OPENAT)
}

#[no_mangle]
pub unsafe extern "C" fn openat64(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    paralog_open_impl(dirfd, path, flags, mode_if_passed(flags, mode), K_OPENAT64)
}

/// Fortified variants (_FORTIFY_SOURCE): never called with a mode.
#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    paralog_open_impl(libc::AT_FDCWD, path, flags, 0, K_OPEN_2)
}

#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    paralog_open_impl(libc::AT_FDCWD, path, flags, 0, K_OPEN64_2)
}

#[no_mangle]
pub unsafe extern "C" fn __openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    paralog_open_impl(dirfd, path, flags, 0, K_OPENAT_2)
}

#[no_mangle]
pub unsafe extern "C" fn __openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    paralog_open_impl(dirfd, path, flags, 0, K_OPENAT64_2)
}

#[no_mangle]
pub unsafe extern "C" fn creat(path: *const c_char, mode: mode_t) -> c_int {
    paralog_open_impl(
        libc::AT_FDCWD,
        path,
        libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
        mode,
        K_CREAT,
    )
}

#[no_mangle]
pub unsafe extern "C" fn creat64(path: *const c_char, mode: mode_t) -> c_int {
    paralog_open_impl(
        libc::AT_FDCWD,
        path,
        libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
        mode,
        K_CREAT64,
    )
}

#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    fcntl_impl(fd, cmd, arg, 0)
}

#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    fcntl_impl(fd, cmd, arg, 1)
}

unsafe fn paralog_open_impl(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
    kind: c_int,
) -> c_int {
    let decision = match Guard::enter() {
        Some(_g) if !path.is_null() => {
            let p = Path::new(std::ffi::OsStr::from_bytes(CStr::from_ptr(path).to_bytes()));
            contain("open", None, || {
                open_captured(dirfd, p, flags, mode).map(Some)
            })
        }
        _ => Some(OpenDecision::Pass),
    };
    match decision {
        Some(OpenDecision::Fd(fd)) => fd,
        None => -1,
        // A name relative to a dead directory (remotefd.rs): by its path.
        Some(OpenDecision::Pass) => match crate::remotefd::absolute(dirfd, path) {
            Some(c) => forget_if_stale(pass!(openat(libc::AT_FDCWD, c.as_ptr(), flags, mode), -1)),
            None => forget_if_stale(match kind {
                K_OPEN => pass!(open(path, flags, mode), -1),
                K_OPEN64 => pass!(open64(path, flags, mode), -1),
                K_OPENAT => pass!(openat(dirfd, path, flags, mode), -1),
                K_OPENAT64 => pass!(openat64(dirfd, path, flags, mode), -1),
                K_OPEN_2 => pass!(__open_2(path, flags), -1),
                K_OPEN64_2 => pass!(__open64_2(path, flags), -1),
                K_OPENAT_2 => pass!(__openat_2(dirfd, path, flags), -1),
                K_OPENAT64_2 => pass!(__openat64_2(dirfd, path, flags), -1),
                K_CREAT => pass!(creat(path, mode), -1),
                _ => pass!(creat64(path, mode), -1),
            }),
        },
    }
}

/// A descriptor the real open returned that the table still lists as
/// captured was closed past the wrappers (glibc's fclose of stdout on an
/// inherited placeholder): it is the program's plain file now.
pub(crate) fn forget_if_stale(fd: c_int) -> c_int {
    if fd >= 0 && is_captured(fd) {
        if let Some(_g) = Guard::enter() {
            let mut slot = lock();
            if let Some(st) = slot.as_mut() {
                st.forget_stale(fd);
            }
        }
    }
    fd
}

/// Is this absolute path under the prefix (and not the prefix itself)?
pub(crate) fn under_prefix(abs: &Path) -> Option<&'static Settings> {
    let s = state::settings();
    let prefix = match s {
        Settings::Off => return None,
        Settings::On(c) => &c.prefix,
        Settings::Invalid {
            prefix: Some(p), ..
        } => p,
        Settings::Invalid { prefix: None, .. } => return None,
    };
    (abs.starts_with(prefix) && abs != prefix && !is_mpi_helper_file(abs)).then_some(s)
}

pub(crate) use paralog_settings::is_mpi_helper_file;

fn report_invalid_once(message: &str) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        report::line(&format!(
            "capture is misconfigured, opens under the prefix fail: {message}"
        ))
    });
}

fn open_captured(dirfd: c_int, path: &Path, flags: c_int, mode: mode_t) -> CResult<OpenDecision> {
    let Some(abs) = resolve(dirfd, path) else {
        return Ok(OpenDecision::Pass);
    };
    let Some(settings) = under_prefix(&abs) else {
        return Ok(OpenDecision::Pass);
    };
    if let Settings::Invalid { message, .. } = settings {
        report_invalid_once(message);
        return Err(libc::EINVAL);
    }
    let acc = flags & libc::O_ACCMODE;
    let writing = acc != libc::O_RDONLY || flags & (libc::O_CREAT | libc::O_TRUNC) != 0;
    let mut slot = lock();
    let Some(st) = State::get(&mut slot) else {
        return Ok(OpenDecision::Pass);
    };
    let create = flags & libc::O_CREAT != 0;
    let excl = create && flags & libc::O_EXCL != 0;
    let known = st.by_path.get(&abs).copied();
    // What the committed state is needed for decides how much of it is
    // built: nothing for another open of a file already captured (unless
    // existence decides the outcome), the log alone for a new open that
    // truncates, the log and the drained state otherwise (docs/capture.md,
    // "Opens and the remote").
    let needs_existence = |h: &crate::state::Handle| {
        excl || (!create && h.mode == Mode::Mpi && !h.create_allowed && !h.committed_any)
    };
    let committed = match known {
        Some(id) if !needs_existence(&st.handles[&id]) => None,
        None if writing && create && !excl && flags & libc::O_TRUNC != 0 => {
            Some(st.committed_cut(&abs)?)
        }
        _ => Some(st.committed(&abs)?),
    };
    let exists = committed.as_ref().is_some_and(|c| c.exists);
    if create && !exists && !parent_dir_exists(st, &abs) {
        return Err(libc::ENOENT);
    }
    let id = match known {
        Some(id) => {
            // Another open of a file we already capture (ROMIO's create
            // protocol reopens; the program reopens): same log.
            if excl && exists {
                return Err(libc::EEXIST);
            }
            id
        }
        None if !writing => {
            let committed = committed.expect("built for a new open");
            if !committed.exists {
                if let Some(fd) = crate::remotefd::open(st, &abs, flags)? {
                    return Ok(OpenDecision::Fd(fd));
                }
            }
            // A file this job never wrote: the real file answers, unless
            // the drained bytes live on a remote other than the prefix (then
            // the prefix holds no copy, and the program reads its output
            // from there).
            // A file this job wrote stays capture's to answer (its locks
            // are capture's lock file, its identity capture's) even once
            // drained.
            let elsewhere = st.cfg.remote_root.as_ref() != Some(&st.cfg.prefix);
            // A checkpoint set member is capture's to answer too: no plain
            // file holds its bytes (docs/aggregate.md).
            if !(committed.known || elsewhere && committed.exists || committed.in_set) {
                if !committed.known && crate::sets::refuse_s3_member(&st.cfg, &abs) {
                    return Err(libc::EIO);
                }
                return Ok(OpenDecision::Pass);
            }
            if !committed.exists {
                return Err(libc::ENOENT);
            }
            st.new_readonly_handle(&abs, committed)
        }
        None => {
            if excl && exists {
                return Err(libc::EEXIST);
            }
            if !create && !exists {
                return Err(libc::ENOENT);
            }
            let committed = committed.expect("built for a new open");
            let id = st.new_handle(&abs, Mode::Posix, 0, 1, None, committed)?;
            if create && !exists {
                st.set_create_mode(id, mode);
            }
            id
        }
    };
    let h = &st.handles[&id];
    if flags & libc::O_CREAT == 0
        && !exists
        && !h.create_allowed
        && !h.committed_any
        && h.mode == Mode::Mpi
    {
        return Err(libc::ENOENT);
    }
    st.attach_fd(id, flags).map(OpenDecision::Fd)
}

/// Whether the name is a symbolic link in the prefix itself.
pub(crate) fn real_link(abs: &Path) -> bool {
    std::fs::symlink_metadata(abs).is_ok_and(|m| m.file_type().is_symlink())
}

/// Whether the directory a new file would be created in exists in the
/// program's view: in the prefix, or on a POSIX remote other than the prefix
/// (the output of an earlier job). Without it a create succeeded in a
/// directory nobody made, the drain made it on the remote, and programs that
/// create their directories only when an open fails with ENOENT (git's
/// reflogs) never made it in the prefix, where `stat` then missed it.
fn parent_dir_exists(st: &State, abs: &Path) -> bool {
    let Some(parent) = abs.parent() else {
        return true;
    };
    if parent == st.cfg.prefix || std::fs::metadata(parent).is_ok_and(|m| m.is_dir()) {
        return true;
    }
    crate::namespace::remote_dir(st, parent)
        .is_some_and(|r| std::fs::metadata(r).is_ok_and(|m| m.is_dir()))
        // An object layout's directory of names, or a set's directory.
        || crate::remotedir::stand_in(st, parent).is_some()
}

// ---- close, dup ----------------------------------------------------------

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if !is_captured(fd) {
        crate::remotefd::forget(fd);
        return pass!(close(fd), -1);
    }
    let Some(_g) = Guard::enter() else {
        return pass!(close(fd), -1);
    };
    contain("close", -1, || {
        let mut slot = lock();
        let st = State::get(&mut slot).ok_or(libc::EBADF)?;
        let id = st.detach_fd(fd).ok_or(libc::EBADF)?;
        let rc = pass!(close(fd), -1);
        let result = if rc == 0 { Ok(0) } else { Err(state::errno()) };
        st.after_close(id).and(result)
    })
}

unsafe fn dup_common(old: c_int, new_fd: c_int) -> c_int {
    crate::remotefd::dup(old, new_fd);
    if new_fd >= 0 && is_captured(old) {
        if let Some(_g) = Guard::enter() {
            let mut slot = lock();
            if let Some(st) = State::get(&mut slot) {
                st.dup_fd(old, new_fd);
            }
        }
    }
    new_fd
}

#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    dup_common(fd, pass!(dup(fd), -1))
}

#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if is_captured(new) && old != new {
        close(new);
    }
    dup_common(old, pass!(dup2(old, new), -1))
}

#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if is_captured(new) && old != new {
        close(new);
    }
    dup_common(old, pass!(dup3(old, new, flags), -1))
}

unsafe fn fcntl_impl(fd: c_int, cmd: c_int, arg: c_ulong, kind: c_int) -> c_int {
    if let Some(r) = crate::locks::fcntl_lock(fd, cmd, arg) {
        return r;
    }
    let rc = if kind == 0 {
        pass!(fcntl(fd, cmd, arg), -1)
    } else {
        pass!(fcntl64(fd, cmd, arg), -1)
    };
    if cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC {
        return dup_common(fd, rc);
    }
    rc
}

/// A path argument made absolute, with the guard held while capture
/// answers for it (`None`: a null path, or inside paralog already).
pub(crate) unsafe fn resolved(path: *const c_char) -> Option<(Guard, std::path::PathBuf)> {
    if path.is_null() {
        return None;
    }
    let g = Guard::enter()?;
    let p = Path::new(std::ffi::OsStr::from_bytes(CStr::from_ptr(path).to_bytes()));
    Some((g, resolve(libc::AT_FDCWD, p)?))
}

/// For an absolute path under the prefix while capture is on: the handle
/// that has it open in this process, if any.
pub(crate) fn captured_id(abs: &Path) -> Option<Option<u64>> {
    if !matches!(under_prefix(abs)?, Settings::On(_)) {
        return None;
    }
    let mut slot = lock();
    Some(State::get(&mut slot)?.by_path.get(abs).copied())
}

/// A path under the prefix while capture is on: the guard, the absolute
/// path, and the handle that has it open in this process (if any).
pub(crate) unsafe fn prefix_path(
    path: *const c_char,
) -> Option<(Guard, std::path::PathBuf, Option<u64>)> {
    let (g, abs) = resolved(path)?;
    let id = captured_id(&abs)?;
    Some((g, abs, id))
}

/// Whether the node-local log knows this path (then it, not the real file,
/// says whether the file exists); `None`: ask the real file system. The
/// rule is open's (`open_captured`): a file this job wrote stays capture's to
/// answer once drained, also when the prefix is the remote, so that a stat
/// by path and an fstat of an open agree (`cp` refuses a source whose two
/// differ) and st_dev/st_ino do not change when the drain puts the real
/// file there (GNU tar checks them before it replaces a placeholder with a
/// link).
pub(crate) fn logged_state(abs: &Path) -> CResult<Option<(bool, u64)>> {
    Ok(logged(abs, false)?.map(|(exists, size, _, _)| (exists, size)))
}

/// What the log says of a path: (exists, size, times, permission bits).
pub(crate) type Logged = (bool, u64, Option<Times>, Option<u32>);

/// `logged_state`, and the file's times and permission bits in the log's
/// view (stat; another process created the file, or it is closed here).
pub(crate) fn logged_stat(abs: &Path) -> CResult<Option<Logged>> {
    logged(abs, true)
}

fn logged(abs: &Path, meta: bool) -> CResult<Option<Logged>> {
    let mut slot = lock();
    let st = State::get(&mut slot).ok_or(libc::EINVAL)?;
    let c = st.committed(abs)?;
    let answers = answers_for(st, abs, &c);
    if !answers && !c.known && crate::sets::refuse_s3_member(&st.cfg, abs) {
        return Err(libc::EIO);
    }
    Ok(answers.then(|| match meta {
        true => (c.exists, c.size, c.view.times(), c.view.mode()),
        false => (c.exists, c.size, None, None),
    }))
}

/// Whether capture, not the real file system, answers for `abs`, whose
/// committed state is `c`.
pub(crate) fn answers_for(st: &State, abs: &Path, c: &crate::view::Committed) -> bool {
    // A link or directory made in the prefix at the name of a captured file
    // the program deleted (git probes for links with a temporary file's
    // name, GNU tar replaces its placeholders with links): the real entry
    // is what the program sees there now.
    if !c.exists && (real_link(abs) || std::fs::symlink_metadata(abs).is_ok_and(|m| m.is_dir())) {
        return false;
    }
    let elsewhere = st.cfg.remote_root.as_ref() != Some(&st.cfg.prefix);
    c.known || (elsewhere && c.exists) || c.in_set
}
