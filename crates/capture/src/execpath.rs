//! Executing a file of capture's view (`gcc -o P/hello hello.c && P/hello`,
//! a script written into the prefix then run). The kernel reads the file
//! itself, past the wrappers, and with a remote other than the prefix the
//! prefix holds no such file (its bytes are in the log, or on the remote).
//! So, before the exec family hands a captured path to the kernel:
//! - the prefix is the remote: wait until the file's committed epochs are
//!   drained (the real file is then whole), and run it there;
//! - else a script (`#!`) is run as the kernel would run it, its
//!   interpreter with the script's path, which the interpreter (capture
//!   preloaded) reads through capture;
//! - else a program is copied from capture's view into a private directory
//!   (0700) under the node-local root and the copy is run, argv unchanged;
//!   the new program removes its copy as it starts (`forget_copy`);
//! - what cannot be read (an S3 remote's drained bytes) is refused with one
//!   line naming the file.
//!
//! A file this process has open for writing is refused with ETXTBSY, as
//! the kernel refuses it; one without an execute bit with EACCES.

#![allow(clippy::missing_safety_doc)]

use std::ffi::{CStr, CString, OsStr};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use libc::{c_char, c_int};

use crate::posix::{logged_state, prefix_path};
use crate::report;
use crate::state::{lock, CResult};

/// What the exec family runs instead of the path it was given.
pub(crate) enum Plan {
    /// The path as given (not captured, or drained into the prefix).
    Pass,
    /// Another file, argv unchanged (a private copy).
    Copy(CString),
    /// An interpreter: (its path, the arguments that go before the
    /// script's path: the interpreter's name and the `#!` line's argument).
    Script(CString, Vec<CString>),
}

/// The directory private copies are made in: hidden beside the job's log.
fn copies_dir(local: &Path, job: &str) -> PathBuf {
    local.join(format!(".paralog-exec-{job}"))
}

/// The plan for executing `path`.
pub(crate) unsafe fn plan(path: *const c_char) -> CResult<Plan> {
    let Some((g, abs, id)) = prefix_path(path) else {
        return Ok(Plan::Pass);
    };
    let (writing, at_prefix, local, job) = {
        let slot = lock();
        let Some(st) = slot.as_ref() else {
            return Ok(Plan::Pass);
        };
        let writing = id
            .and_then(|id| st.handles.get(&id))
            .is_some_and(|h| h.log.is_some());
        let at_prefix = st.cfg.remote_root.as_ref() == Some(&st.cfg.prefix);
        (writing, at_prefix, st.cfg.local.clone(), st.cfg.job.clone())
    };
    if writing {
        return Err(libc::ETXTBSY);
    }
    if id.is_none() {
        match logged_state(&abs)? {
            None => return Ok(Plan::Pass),
            Some((false, _)) => return Err(libc::ENOENT),
            Some((true, _)) => {}
        }
    }
    if at_prefix {
        crate::namespace::wait_drained(&abs, "exec")?;
        return Ok(Plan::Pass);
    }
    drop(g);
    // Capture's own wrappers answer from here on (stat, open, read).
    let mut sb: libc::stat = std::mem::zeroed();
    if crate::stat::stat(path, &mut sb) != 0 {
        return Err(crate::state::errno());
    }
    if sb.st_mode & 0o111 == 0 {
        return Err(libc::EACCES);
    }
    let bytes = std::fs::read(&abs).map_err(|e| {
        report::line(&format!(
            "exec of {}: its bytes cannot be read from capture's view ({e}): not run",
            abs.display()
        ));
        e.raw_os_error().unwrap_or(libc::EIO)
    })?;
    if let Some(s) = shebang(&bytes) {
        return Ok(s);
    }
    copy(&abs, &bytes, &copies_dir(&local, &job)).map(Plan::Copy)
}

/// The interpreter of a `#!` file, as the kernel reads its first line (at
/// most 256 bytes): the interpreter and one optional argument.
fn shebang(bytes: &[u8]) -> Option<Plan> {
    let head = bytes.strip_prefix(b"#!")?;
    let head = &head[..head.len().min(254)];
    let line = head.split(|&b| b == b'\n').next()?;
    let line: &[u8] = {
        let s = line.iter().position(|&b| b != b' ' && b != b'\t')?;
        let e = line
            .iter()
            .rposition(|&b| b != b' ' && b != b'\t' && b != b'\r')?;
        &line[s..=e]
    };
    let (interp, arg) = match line.iter().position(|&b| b == b' ' || b == b'\t') {
        Some(i) => {
            let rest = &line[i..];
            let s = rest.iter().position(|&b| b != b' ' && b != b'\t')?;
            (&line[..i], Some(&rest[s..]))
        }
        None => (line, None),
    };
    let interp = CString::new(interp).ok()?;
    let mut before = vec![interp.clone()];
    before.extend(arg.and_then(|a| CString::new(a).ok()));
    Some(Plan::Script(interp, before))
}

/// A private copy of `bytes` (the program at `abs`) to run: read and
/// execute by the owner only, in a directory of its own.
fn copy(abs: &Path, bytes: &[u8], root: &Path) -> CResult<CString> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let fail = |what: &str, e: std::io::Error| {
        report::line(&format!(
            "exec of {}: {what} its private copy under {}: {e}",
            abs.display(),
            root.display()
        ));
        e.raw_os_error().unwrap_or(libc::EIO)
    };
    let dir = root.join(format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| fail("making the directory of", e))?;
    let to = dir.join(abs.file_name().unwrap_or(OsStr::new("program")));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o500)
        .open(&to)
        .map_err(|e| fail("creating", e))?;
    f.write_all(bytes).map_err(|e| fail("writing", e))?;
    drop(f);
    CString::new(to.as_os_str().as_bytes()).map_err(|_| libc::EINVAL)
}

/// An exec that failed: its private copy goes.
pub(crate) fn discard(plan: &Plan) {
    if let Plan::Copy(p) = plan {
        let p = Path::new(OsStr::from_bytes(p.as_bytes()));
        let _ = std::fs::remove_file(p);
        if let Some(d) = p.parent() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// At load: a program run from a private copy removes it (the kernel keeps
/// the running file).
pub(crate) fn forget_copy() {
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return;
    };
    let Some(dir) = exe.parent() else { return };
    let ours = dir
        .parent()
        .and_then(|r| r.file_name())
        .is_some_and(|n| n.as_bytes().starts_with(b".paralog-exec-"));
    if ours {
        let _ = std::fs::remove_file(&exe);
        let _ = std::fs::remove_dir(dir);
    }
}

/// The argv a script runs with: the interpreter's part, the script's path
/// as given, then the program's arguments after argv[0].
pub(crate) unsafe fn script_argv(
    before: &[CString],
    path: *const c_char,
    argv: *const *const c_char,
) -> Vec<*const c_char> {
    let mut v: Vec<*const c_char> = before.iter().map(|c| c.as_ptr()).collect();
    v.push(path);
    if !argv.is_null() && !(*argv).is_null() {
        let mut i = 1;
        while !(*argv.add(i)).is_null() {
            v.push(*argv.add(i));
            i += 1;
        }
    }
    v.push(std::ptr::null());
    v
}

/// The file `execvp`'s PATH search would run for `name` (no '/'), if it is
/// one capture answers for; `None`: let glibc search.
pub(crate) unsafe fn search(name: *const c_char) -> Option<CString> {
    let n = CStr::from_ptr(name).to_bytes();
    if n.is_empty() || n.contains(&b'/') {
        return None;
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/bin:/usr/bin".into());
    for dir in path.as_bytes().split(|&b| b == b':') {
        let dir = if dir.is_empty() { b".".as_slice() } else { dir };
        let cand = CString::new([dir, b"/", n].concat()).ok()?;
        let mut sb: libc::stat = std::mem::zeroed();
        // Capture's stat: a captured file is found as a real one is.
        if crate::stat::stat(cand.as_ptr(), &mut sb) == 0
            && sb.st_mode & libc::S_IFMT == libc::S_IFREG
            && sb.st_mode & 0o111 != 0
        {
            return prefix_path(cand.as_ptr()).map(|_| cand);
        }
    }
    None
}

/// The errno of a refused exec, set, and -1.
pub(crate) fn refuse(e: c_int) -> c_int {
    crate::state::set_errno(e);
    -1
}

// ---- the exec family -------------------------------------------------------

/// Run `path` (a file of capture's view becomes what crate::execpath
/// plans) with `run(path, argv)`, the real call, after this process's
/// writes are committed. `Err`: refused before any call.
pub(crate) unsafe fn exec_planned(
    path: *const c_char,
    argv: *const *const c_char,
    run: impl FnOnce(*const c_char, *const *const c_char) -> c_int,
) -> Result<c_int, c_int> {
    crate::inherit::prepare_spawn();
    let plan = plan(path)?;
    let rc = match &plan {
        Plan::Pass => run(path, argv),
        Plan::Copy(c) => run(c.as_ptr(), argv),
        Plan::Script(interp, before) => {
            let v = script_argv(before, path, argv);
            run(interp.as_ptr(), v.as_ptr())
        }
    };
    if rc != 0 {
        discard(&plan);
    }
    Ok(rc)
}

/// `execvp`'s name found on PATH when it is a file of capture's view.
pub(crate) unsafe fn searched(name: *const c_char) -> (Option<std::ffi::CString>, *const c_char) {
    let found = search(name);
    let p = found.as_ref().map_or(name, |c| c.as_ptr());
    (found, p)
}

// Only the `p` forms search PATH: `execve("name")` runs ./name.
crate::twins! {
    execve => fn(
        path: *const c_char,
        argv: *const *const c_char,
        envp: *const *const c_char,
    ) -> c_int, -1, |real| {
        exec_planned(path, argv, |p, a| real(p, a, envp)).unwrap_or_else(refuse)
    }
}

crate::twins! {
    execvpe => fn(
        path: *const c_char,
        argv: *const *const c_char,
        envp: *const *const c_char,
    ) -> c_int, -1, |real| {
        let (_keep, path) = searched(path);
        exec_planned(path, argv, |p, a| real(p, a, envp)).unwrap_or_else(refuse)
    }
}

crate::twins! {
    execv => fn(path: *const c_char, argv: *const *const c_char) -> c_int, -1, |real| {
        exec_planned(path, argv, real).unwrap_or_else(refuse)
    }
}

crate::twins! {
    execvp => fn(path: *const c_char, argv: *const *const c_char) -> c_int, -1, |real| {
        let (_keep, path) = searched(path);
        exec_planned(path, argv, real).unwrap_or_else(refuse)
    }
}

/// glibc's `fexecve` runs the descriptor's file (`execveat` of `""`): a
/// captured descriptor's is an empty placeholder, so its path is run.
#[no_mangle]
pub unsafe extern "C" fn fexecve(
    fd: c_int,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let path = crate::state::is_captured(fd)
        .then(|| {
            let _g = crate::guard::Guard::enter()?;
            let slot = lock();
            let st = slot.as_ref()?;
            let h = st.handles.get(&st.fds.get(&fd)?.handle)?;
            std::ffi::CString::new(h.path.as_os_str().as_bytes()).ok()
        })
        .flatten();
    match path {
        Some(p) => exec_planned(p.as_ptr(), argv, |p, a| {
            crate::pass!(execve(p, a, envp), -1)
        })
        .unwrap_or_else(refuse),
        None => crate::pass!(fexecve(fd, argv, envp), -1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(bytes: &[u8]) -> Option<(Vec<u8>, Vec<Vec<u8>>)> {
        match shebang(bytes)? {
            Plan::Script(i, before) => Some((
                i.into_bytes(),
                before.into_iter().map(|c| c.into_bytes()).collect(),
            )),
            _ => None,
        }
    }

    #[test]
    fn shebang_lines_as_the_kernel_reads_them() {
        assert_eq!(
            parts(b"#!/bin/sh\necho hi\n"),
            Some((b"/bin/sh".to_vec(), vec![b"/bin/sh".to_vec()]))
        );
        // One argument: everything after the interpreter, trimmed.
        assert_eq!(
            parts(b"#! /usr/bin/env  python3 -u \r\nprint()\n"),
            Some((
                b"/usr/bin/env".to_vec(),
                vec![b"/usr/bin/env".to_vec(), b"python3 -u".to_vec()]
            ))
        );
        assert!(parts(b"\x7fELF\x02\x01").is_none());
        assert!(parts(b"#!\n").is_none());
        assert!(parts(b"#!   \n").is_none());
    }
}
