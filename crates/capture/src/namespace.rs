//! Namespace operations on captured paths: `unlink`/`unlinkat`, `rename`
//! (and `renameat`, `renameat2`), `link`, `mkdir`, `rmdir`. They take effect
//! in the program's view at once and reach the remote in order with the
//! epochs:
//!
//! - `unlink` is an epoch of the file (a delete), drained after the epochs
//!   before it.
//! - `rename(src, dst)` of a file is one operation in each log: an epoch
//!   of `dst` that takes `src`'s content at its last committed epoch
//!   (nothing is copied on the node), then an epoch of `src` that says it
//!   went to `dst`. The drain publishes `dst` whole and atomically, and
//!   removes `src` only once `dst` is remote, so the final name only ever
//!   holds a whole committed file and no temporary is left. A rename across the prefix's
//!   edge, or of a directory holding captured files, fails with EXDEV, as
//!   between two file systems (`mv` then copies); so does any rename from
//!   outside the prefix into it.
//! - `link` onto or from a captured file fails with EXDEV: a copy would
//!   part ways with its source at the next write.
//! - `mkdir` and `rmdir`: `dirops.rs`.

#![allow(clippy::missing_safety_doc)]

use std::ffi::{CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use libc::{c_char, c_int, c_uint, mode_t};

use crate::guard::Guard;
use crate::pass;
use crate::posix::{contain, prefix_path, under_prefix};
use crate::report;
use crate::settings::Settings;
use crate::state::{self, lock, resolve, CResult, State};
use paralog_log::format::RenameRef;

/// How long `rmdir` waits for the drain of the deletes under a directory.
const RMDIR_WAIT: Duration = Duration::from_secs(120);

/// unlink of a captured path: recorded in the log (a delete reaches the
/// remote in order, after the epochs before it), never applied directly.
#[no_mangle]
pub unsafe extern "C" fn unlink(path: *const c_char) -> c_int {
    let Some((_g, abs, id)) = prefix_path(path) else {
        return pass!(unlink(path), -1);
    };
    contain("unlink", -1, || unlink_captured(&abs, id))
}

fn unlink_captured(abs: &Path, id: Option<u64>) -> CResult<c_int> {
    let mut slot = lock();
    let st = State::get(&mut slot).ok_or(libc::EINVAL)?;
    if let Some(id) = id {
        return st.delete(id).map(|_| 0);
    }
    if !st.committed(abs)?.exists {
        if crate::posix::real_link(abs) {
            return unlink_link(st, abs);
        }
        if real_is_dir(abs) {
            return Err(libc::EISDIR);
        }
        return Err(libc::ENOENT);
    }
    st.path_op(abs, |st, id| st.delete(id)).map(|_| 0)
}

/// A symbolic link has no bytes in the log (symlink.rs): it goes from the
/// prefix at once, and from a POSIX remote other than the prefix, where
/// symlink.rs made it too.
fn unlink_link(st: &State, abs: &Path) -> CResult<c_int> {
    std::fs::remove_file(abs).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    if let Some(r) = remote_dir(st, abs) {
        if std::fs::symlink_metadata(&r).is_ok_and(|m| m.file_type().is_symlink()) {
            if let Err(e) = std::fs::remove_file(&r) {
                report::line(&format!("symbolic link {} on the remote: {e}", r.display()));
            }
        }
    }
    Ok(0)
}

fn real_is_dir(abs: &Path) -> bool {
    std::fs::symlink_metadata(abs).is_ok_and(|m| m.is_dir())
}

/// A path of an `*at` call under the prefix (capture on): the guard and the
/// absolute path.
pub(crate) unsafe fn at_path(dirfd: c_int, path: *const c_char) -> Option<(Guard, PathBuf)> {
    if path.is_null() {
        return None;
    }
    let g = Guard::enter()?;
    let p = Path::new(OsStr::from_bytes(CStr::from_ptr(path).to_bytes()));
    let abs = resolve(dirfd, p)?;
    matches!(under_prefix(&abs)?, Settings::On(_)).then_some((g, abs))
}

#[no_mangle]
pub unsafe extern "C" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    let Some((_g, abs)) = at_path(dirfd, path) else {
        return pass!(unlinkat(dirfd, path, flags), -1);
    };
    if flags & libc::AT_REMOVEDIR != 0 {
        return contain("unlinkat", -1, || crate::dirops::rmdir_captured(&abs));
    }
    contain("unlinkat", -1, || {
        let id = {
            let mut slot = lock();
            State::get(&mut slot).and_then(|st| st.by_path.get(&abs).copied())
        };
        unlink_captured(&abs, id)
    })
}

// ---- rename ----------------------------------------------------------------

/// Both names of a rename or link, when either is under the prefix.
struct TwoPaths {
    _guard: Guard,
    old: PathBuf,
    new: PathBuf,
    old_in: bool,
    new_in: bool,
}

unsafe fn two_paths(
    olddir: c_int,
    old: *const c_char,
    newdir: c_int,
    new: *const c_char,
) -> Option<TwoPaths> {
    if old.is_null() || new.is_null() {
        return None;
    }
    let g = Guard::enter()?;
    let a = resolve(
        olddir,
        Path::new(OsStr::from_bytes(CStr::from_ptr(old).to_bytes())),
    )?;
    let b = resolve(
        newdir,
        Path::new(OsStr::from_bytes(CStr::from_ptr(new).to_bytes())),
    )?;
    let on = |p: &Path| matches!(under_prefix(p), Some(Settings::On(_)));
    let (old_in, new_in) = (on(&a), on(&b));
    (old_in || new_in).then_some(TwoPaths {
        _guard: g,
        old: a,
        new: b,
        old_in,
        new_in,
    })
}

fn exdev(what: &str, a: &Path, b: &Path, why: &str) -> c_int {
    report::line(&format!(
        "{what} {} -> {}: {why}; failing with EXDEV as between two file systems (docs/capture.md)",
        a.display(),
        b.display()
    ));
    libc::EXDEV
}

/// `Ok(None)`: not captured's to do (a plain directory), the real rename.
fn rename_captured(src: &Path, dst: &Path, flags: c_uint) -> CResult<Option<c_int>> {
    if flags & (libc::RENAME_EXCHANGE | libc::RENAME_WHITEOUT) != 0 {
        return Err(libc::EINVAL);
    }
    let mut slot = lock();
    let st = State::get(&mut slot).ok_or(libc::EINVAL)?;
    if src == dst {
        return Ok(Some(0));
    }
    let from = st.committed(src)?;
    if !from.exists {
        if real_is_dir(src) {
            let elsewhere = st.cfg.remote_root.as_ref() != Some(&st.cfg.prefix);
            if elsewhere || !crate::dirlist::logged(st, src, true)?.is_empty() {
                return Err(exdev(
                    "rename",
                    src,
                    dst,
                    "a directory holding captured files",
                ));
            }
            return Ok(None);
        }
        return Err(libc::ENOENT);
    }
    for p in [src, dst] {
        if st.by_path.contains_key(p) {
            report::line(&format!(
                "rename {} -> {}: {} is open in this process; close it first (docs/capture.md)",
                src.display(),
                dst.display(),
                p.display()
            ));
            return Err(libc::EBUSY);
        }
    }
    let to = st.committed(dst)?;
    if flags & libc::RENAME_NOREPLACE != 0 && to.exists {
        return Err(libc::EEXIST);
    }
    if real_is_dir(dst) {
        return Err(libc::EISDIR);
    }
    // One record in each log, no byte copied: dst becomes src's content
    // at src's last committed epoch (0:0: its drained file alone), then
    // src is gone, naming dst's epoch, so that the drain removes src only
    // once dst is remote (docs/format.md, "Namespace operations").
    let at = from
        .view
        .lf
        .epochs
        .last()
        .copied()
        .unwrap_or(paralog_log::EpochId::new(0, 0));
    let (src_rel, dst_rel) = (
        st.rel_of(src).ok_or(libc::EINVAL)?,
        st.rel_of(dst).ok_or(libc::EINVAL)?,
    );
    let size = from.size;
    let src_times = st.times.get(src).copied();
    let dst_at = st.path_op_at(dst, to, |st, id| {
        st.rename_from(id, RenameRef::new(&src_rel, at), size)
    })?;
    st.path_op(src, |st, id| {
        st.renamed_to(id, RenameRef::new(&dst_rel, dst_at))
    })?;
    // The file keeps its permission bits under its new name.
    match st.modes.remove(src) {
        Some(m) => st.modes.insert(dst.to_path_buf(), m),
        None => st.modes.remove(dst),
    };
    // And its times (the operations above dropped both names' own).
    if let Some(t) = src_times {
        st.times.insert(dst.to_path_buf(), t);
    }
    Ok(Some(0))
}

unsafe fn rename_common(
    olddir: c_int,
    old: *const c_char,
    newdir: c_int,
    new: *const c_char,
    flags: c_uint,
    real: impl FnOnce() -> c_int,
) -> c_int {
    let Some(t) = two_paths(olddir, old, newdir, new) else {
        return real();
    };
    let (ra, rb) = (&t.old, &t.new);
    let r = if t.old_in && t.new_in {
        contain("rename", Some(-1), || rename_captured(ra, rb, flags))
    } else {
        // One side outside the prefix. Into the prefix: always EXDEV, as
        // between two file systems, so that the program (mv, shutil.move,
        // pip) copies the file in through capture instead of the kernel
        // moving it there past the log. Out of it: EXDEV if the inside one
        // is captured's (its bytes are in the log).
        contain("rename", Some(-1), || {
            if t.new_in {
                return Err(libc::EXDEV);
            }
            let mut slot = lock();
            let st = State::get(&mut slot).ok_or(libc::EINVAL)?;
            if st.committed(ra)?.exists || real_is_dir(ra) {
                return Err(exdev("rename", ra, rb, "one side is outside the prefix"));
            }
            Ok(None)
        })
    };
    drop(t);
    r.unwrap_or_else(real)
}

#[no_mangle]
pub unsafe extern "C" fn rename(old: *const c_char, new: *const c_char) -> c_int {
    rename_common(libc::AT_FDCWD, old, libc::AT_FDCWD, new, 0, || {
        pass!(rename(old, new), -1)
    })
}

#[no_mangle]
pub unsafe extern "C" fn renameat(
    olddir: c_int,
    old: *const c_char,
    newdir: c_int,
    new: *const c_char,
) -> c_int {
    rename_common(olddir, old, newdir, new, 0, || {
        pass!(renameat(olddir, old, newdir, new), -1)
    })
}

#[no_mangle]
pub unsafe extern "C" fn renameat2(
    olddir: c_int,
    old: *const c_char,
    newdir: c_int,
    new: *const c_char,
    flags: c_uint,
) -> c_int {
    rename_common(olddir, old, newdir, new, flags, || {
        pass!(renameat2(olddir, old, newdir, new, flags), -1)
    })
}

// ---- link ------------------------------------------------------------------

unsafe fn link_common(
    olddir: c_int,
    old: *const c_char,
    newdir: c_int,
    new: *const c_char,
    real: impl FnOnce() -> c_int,
) -> c_int {
    let Some(t) = two_paths(olddir, old, newdir, new) else {
        return real();
    };
    let (ra, rb) = (t.old.clone(), t.new.clone());
    drop(t);
    contain("link", -1, || {
        Err(exdev(
            "link",
            &ra,
            &rb,
            "a hard link to a captured file cannot be kept",
        ))
    })
}

#[no_mangle]
pub unsafe extern "C" fn link(old: *const c_char, new: *const c_char) -> c_int {
    link_common(libc::AT_FDCWD, old, libc::AT_FDCWD, new, || {
        pass!(link(old, new), -1)
    })
}

#[no_mangle]
pub unsafe extern "C" fn linkat(
    olddir: c_int,
    old: *const c_char,
    newdir: c_int,
    new: *const c_char,
    flags: c_int,
) -> c_int {
    link_common(olddir, old, newdir, new, || {
        pass!(linkat(olddir, old, newdir, new, flags), -1)
    })
}

// ---- permissions ------------------------------------------------------------

/// Wait until every committed epoch of `abs` is drained (the remote file
/// then stands for it), up to `RMDIR_WAIT`.
pub(crate) fn wait_drained(abs: &Path, what: &str) -> CResult<()> {
    until_drained(
        || {
            let mut slot = lock();
            let st = State::get(&mut slot).ok_or(libc::EINVAL)?;
            Ok(!st.committed(abs)?.view.lf.epochs.is_empty())
        },
        || format!("{what} {}: its epochs", abs.display()),
    )
}

/// Poll `pending` until nothing is left to drain, up to `RMDIR_WAIT`; past
/// it, one line says what was not drained (`late`: "SUBJECT: ITEMS"), and
/// EBUSY.
pub(crate) fn until_drained(
    mut pending: impl FnMut() -> CResult<bool>,
    late: impl FnOnce() -> String,
) -> CResult<()> {
    let deadline = Instant::now() + RMDIR_WAIT;
    while pending()? {
        if Instant::now() > deadline {
            report::line(&format!(
                "{} were not drained within {} s (is the server running?)",
                late(),
                RMDIR_WAIT.as_secs()
            ));
            return Err(libc::EBUSY);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// chmod of a captured file: the log keeps bytes and the creation mode, not
/// later metadata, so the mode is set on the drained file once its
/// committed epochs are drained (on the prefix, or on a POSIX remote other
/// than it; an object remote keeps no modes), and stat answers it in this
/// process at once. A file this process holds open records the new mode
/// in its log as the creation mode, for a drain that creates the file
/// later.
/// `Ok(None)`: not a captured file, the real chmod answers.
fn chmod_captured(abs: &Path, mode: mode_t) -> CResult<Option<c_int>> {
    let (exists, open, target) = {
        let mut slot = lock();
        let st = State::get(&mut slot).ok_or(libc::EINVAL)?;
        let exists = st.by_path.contains_key(abs) || st.committed(abs)?.exists;
        let target = match &st.cfg.remote_root {
            Some(root) if *root != st.cfg.prefix => {
                st.rel_of(abs).map(|r| root.join(OsStr::from_bytes(&r)))
            }
            Some(_) => Some(abs.to_path_buf()),
            None => None,
        };
        (exists, st.by_path.contains_key(abs), target)
    };
    if !exists {
        return crate::remotedir::chmod_dir(abs, mode);
    }
    if !open {
        wait_drained(abs, "chmod")?;
    }
    if let Some(t) = target {
        let c = c_path(&t)?;
        // SAFETY: a NUL-terminated path.
        if unsafe { pass!(chmod(c.as_ptr(), mode), -1) } != 0 && state::errno() != libc::ENOENT {
            return Err(state::errno());
        }
    }
    let mut slot = lock();
    if let Some(st) = State::get(&mut slot) {
        st.modes.insert(abs.to_path_buf(), mode & 0o7777);
        st.set_open_mode(abs, mode);
    }
    Ok(Some(0))
}

#[no_mangle]
pub unsafe extern "C" fn chmod(path: *const c_char, mode: mode_t) -> c_int {
    let Some((_g, abs, _)) = prefix_path(path) else {
        return pass!(chmod(path, mode), -1);
    };
    contain("chmod", Some(-1), || chmod_captured(&abs, mode))
        .unwrap_or_else(|| pass!(chmod(path, mode), -1))
}

#[no_mangle]
pub unsafe extern "C" fn fchmodat(
    dirfd: c_int,
    path: *const c_char,
    mode: mode_t,
    flags: c_int,
) -> c_int {
    let Some((_g, abs)) = at_path(dirfd, path) else {
        return pass!(fchmodat(dirfd, path, mode, flags), -1);
    };
    contain("fchmodat", Some(-1), || chmod_captured(&abs, mode))
        .unwrap_or_else(|| pass!(fchmodat(dirfd, path, mode, flags), -1))
}

/// Noted, so that the mode of a file created under the prefix is known
/// without reading `/proc/self/status` at each creation.
#[no_mangle]
pub unsafe extern "C" fn umask(mask: mode_t) -> mode_t {
    let old = match crate::real::umask() {
        Some(f) => f(mask),
        // SAFETY: umask(2) cannot fail.
        None => libc::syscall(libc::SYS_umask, mask) as mode_t,
    };
    crate::umask::note(mask);
    old
}

#[no_mangle]
pub unsafe extern "C" fn fchmod(fd: c_int, mode: mode_t) -> c_int {
    if !state::is_captured(fd) {
        return pass!(fchmod(fd, mode), -1);
    }
    let Some(_g) = Guard::enter() else {
        return pass!(fchmod(fd, mode), -1);
    };
    let path = {
        let mut slot = lock();
        State::get(&mut slot).and_then(|st| {
            let e = st.fds.get(&fd)?;
            Some(st.handles.get(&e.handle)?.path.clone())
        })
    };
    match path {
        Some(p) => contain("fchmod", -1, || {
            chmod_captured(&p, mode).map(|r| r.unwrap_or(0))
        }),
        None => pass!(fchmod(fd, mode), -1),
    }
}

// ---- directories ------------------------------------------------------------

/// The same directory on a POSIX remote other than the prefix.
pub(crate) fn remote_dir(st: &State, abs: &Path) -> Option<PathBuf> {
    let root = st
        .cfg
        .remote_root
        .as_ref()
        .filter(|r| **r != st.cfg.prefix)?;
    Some(root.join(OsStr::from_bytes(&st.rel_of(abs)?)))
}

pub(crate) fn c_path(p: &Path) -> CResult<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| libc::EINVAL)
}
