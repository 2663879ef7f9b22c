//! `statfs` and `statvfs` of a captured file: the file system of its
//! directory under the prefix, the one the program would write to without
//! paralog. Not the placeholder's (an fstatfs of the memfd would say
//! tmpfs) and not ENOENT for a file only the log holds so far (a stat of it
//! says it exists).
//!
//! ROMIO picks its driver at every `MPI_File_open` from `statfs` of the
//! file (of its directory when that fails), OMPIO from its directory's. On
//! sshfs or NFS each is a round trip that waits behind the drain's own
//! traffic, so a directory's answer is kept for `FRESH` and given for every
//! captured file in it, and for the directory itself while this process
//! has one of them open. Other paths and descriptors get the real call.

#![allow(clippy::missing_safety_doc)]

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use libc::{c_char, c_int};

use crate::entry_points;
use crate::guard::Guard;
use crate::posix::{captured_id, logged_state, resolved};
use crate::state::{is_captured, lock};

/// How long a directory's answer is reused. The fields drivers read (type,
/// block size, name length) do not change; free space a second old is as
/// good an answer as any while the bytes are still in the node-local log.
const FRESH: Duration = Duration::from_secs(1);

#[derive(Clone, Copy)]
pub enum Answer {
    Fs(libc::statfs),
    Vfs(libc::statvfs),
}

/// Which call asked, with the caller's buffer.
#[derive(Clone, Copy)]
enum Out {
    Fs(*mut libc::statfs),
    Vfs(*mut libc::statvfs),
}

impl Out {
    fn kind(self) -> Kind {
        matches!(self, Out::Vfs(_))
    }

    /// The real call of this kind on `c`, with the guard held (so libc's
    /// is the real one); `Err`: its errno.
    unsafe fn ask(self, c: &CStr) -> Result<Answer, c_int> {
        let got = match self {
            Out::Fs(_) => {
                let mut b: libc::statfs = std::mem::zeroed();
                (libc::statfs(c.as_ptr(), &mut b) == 0).then_some(Answer::Fs(b))
            }
            Out::Vfs(_) => {
                let mut b: libc::statvfs = std::mem::zeroed();
                (libc::statvfs(c.as_ptr(), &mut b) == 0).then_some(Answer::Vfs(b))
            }
        };
        got.ok_or_else(|| {
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO)
        })
    }

    unsafe fn give(self, a: Answer) -> c_int {
        match (self, a) {
            (Out::Fs(b), Answer::Fs(a)) if !b.is_null() => *b = a,
            (Out::Vfs(b), Answer::Vfs(a)) if !b.is_null() => *b = a,
            _ => {
                crate::state::set_errno(libc::EFAULT);
                return -1;
            }
        }
        0
    }
}

/// statvfs (true) or statfs (false).
pub type Kind = bool;

/// (directory, kind) -> when it was asked, and the answer.
pub type Kept = HashMap<(PathBuf, Kind), (Instant, Answer)>;

/// The real answer for the nearest existing directory at or above `dir`
/// (a directory the program made under capture may exist in the log
/// only).
unsafe fn real_for_dir(dir: &Path, out: Out) -> Option<Answer> {
    let mut at = Some(dir);
    while let Some(d) = at {
        let c = CString::new(d.as_os_str().as_bytes()).ok()?;
        if let Ok(a) = out.ask(&c) {
            return Some(a);
        }
        at = d.parent();
    }
    None
}

/// The answer for a captured file at `abs`: its directory's.
unsafe fn for_file(abs: &Path, out: Out) -> Option<Answer> {
    for_dir(abs.parent()?, out)
}

/// The answer for a directory under the prefix, kept or fresh.
unsafe fn for_dir(dir: &Path, out: Out) -> Option<Answer> {
    let key = (dir.to_path_buf(), out.kind());
    let now = Instant::now();
    let kept = lock().as_ref().and_then(|st| st.fs_kept.get(&key).copied());
    if let Some((at, a)) = kept {
        if now.duration_since(at) < FRESH {
            return Some(a);
        }
    }
    // Asked without holding the lock: a slow remote must not stall other
    // threads' answers.
    let a = real_for_dir(&key.0, out)?;
    if let Some(st) = lock().as_mut() {
        st.fs_kept.insert(key, (now, a));
    }
    Some(a)
}

/// Whether `abs` is the directory of a captured file this process has
/// open (the prefix or a directory under it: every such file is under the
/// prefix). OMPIO asks the file's directory at every `MPI_File_open`, after
/// capture has taken the file; the directory exists as far as capture can
/// tell: it holds that file.
fn holds_open_file(abs: &Path) -> bool {
    lock()
        .as_ref()
        .is_some_and(|st| st.by_path.keys().any(|f| f.parent() == Some(abs)))
}

/// By path: `None` lets the real call answer.
unsafe fn by_path(path: *const c_char, out: Out) -> Option<c_int> {
    let (_g, abs) = resolved(path)?;
    if holds_open_file(&abs) {
        return Some(out.give(for_dir(&abs, out)?));
    }
    if captured_id(&abs)?.is_none() {
        // Not open here: the real file, if there is one, answers for
        // itself; a file the log alone holds (closed, not yet drained)
        // answers as an open one.
        let c = CString::new(abs.as_os_str().as_bytes()).ok()?;
        match out.ask(&c) {
            Ok(a) => return Some(out.give(a)),
            Err(libc::ENOENT) if matches!(logged_state(&abs), Ok(Some((true, _)))) => {}
            Err(e) => {
                crate::state::set_errno(e);
                return Some(-1);
            }
        }
    }
    Some(out.give(for_file(&abs, out)?))
}

/// By descriptor: a captured one answers for its path.
unsafe fn by_fd(fd: c_int, out: Out) -> Option<c_int> {
    if !is_captured(fd) {
        return None;
    }
    let _g = Guard::enter()?;
    let abs = {
        let slot = lock();
        let st = slot.as_ref()?;
        let id = st.fds.get(&fd)?.handle;
        st.handles.get(&id)?.path.clone()
    };
    Some(out.give(for_file(&abs, out)?))
}

// The `*64` twins fill the same layout on the 64-bit ABIs.
entry_points! {
    fn statfs(path: *const c_char, buf: *mut libc::statfs)
    | fn statfs64(path: *const c_char, buf: *mut libc::statfs64) -> c_int {
        by_path(path, Out::Fs(buf.cast()))
    } else -1;
    fn fstatfs(fd: c_int, buf: *mut libc::statfs)
    | fn fstatfs64(fd: c_int, buf: *mut libc::statfs64) -> c_int {
        by_fd(fd, Out::Fs(buf.cast()))
    } else -1;
    fn statvfs(path: *const c_char, buf: *mut libc::statvfs)
    | fn statvfs64(path: *const c_char, buf: *mut libc::statvfs64) -> c_int {
        by_path(path, Out::Vfs(buf.cast()))
    } else -1;
    fn fstatvfs(fd: c_int, buf: *mut libc::statvfs)
    | fn fstatvfs64(fd: c_int, buf: *mut libc::statvfs64) -> c_int {
        by_fd(fd, Out::Vfs(buf.cast()))
    } else -1;
}
