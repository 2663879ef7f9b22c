//! Captured descriptors shared with other processes: `fork`, `exec`,
//! `posix_spawn`, `system` and `vfork` children (a shell's `>` and `>>`,
//! `subprocess.run(stdout=f)`, a child writing its parent's file).
//!
//! The rule: every process is a writer of its own (docs/capture.md).
//! - Before a child can run, the parent commits what it wrote to its plain
//!   POSIX files (an epoch each), so that the child's commits come after
//!   the parent's earlier writes, as in the program.
//! - The placeholder memfd carries what a new process needs to take it
//!   over: its name is `paralog:<r|w|b><a|->:<path>` (read, write or both;
//!   append), and its kernel offset mirrors the shared file offset.
//! - A forked child forgets the parent's state and takes over the
//!   placeholders it holds; an exec'd program does so when the library
//!   loads. Writes through the wrappers go to the log; bytes written past
//!   them (glibc's stdio on stdout, a raw `write(2)`) land in the memfd at
//!   the shared offset and are harvested into the log at the next captured
//!   call, consistency point, close or exit (`State::harvest`).
//! - `vfork` is served by `fork`: a vfork child shares the parent's memory,
//!   and its `dup2`/`close` through the wrappers would rewrite the parent's
//!   capture state.

#![allow(clippy::missing_safety_doc)]

use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use libc::{c_char, c_int, pid_t};

use crate::guard::Guard;
use crate::state::{self, lock, Mode, State};
use crate::{pass, twins};

const TAG: &[u8] = b"paralog:";

/// The memfd name of a placeholder for `path` opened with `flags`
/// (memfd names hold 249 bytes; a longer path cannot be taken over by
/// another process, which then writes into the sentinel and is refused).
pub fn placeholder_name(path: &Path, flags: c_int) -> CString {
    let acc = match flags & libc::O_ACCMODE {
        libc::O_RDONLY => b'r',
        libc::O_WRONLY => b'w',
        _ => b'b',
    };
    let app = if flags & libc::O_APPEND != 0 {
        b'a'
    } else {
        b'-'
    };
    let mut name = TAG.to_vec();
    name.extend_from_slice(&[acc, app, b':']);
    let p = path.as_os_str().as_bytes();
    if name.len() + p.len() <= 249 {
        name.extend_from_slice(p);
    }
    CString::new(name).unwrap_or_default()
}

/// A new placeholder descriptor named `name` (the lowest free number, as
/// an open's). Not the memfd's own open file description: the kernel
/// serializes the file position of a description shared by several
/// descriptors or processes (`f_pos_lock`) only for descriptions that were
/// opened as regular files, and memfd_create's is not one. Two processes
/// writing through a memfd's description at once (`make -j` children on a
/// redirected stdout) could both write at the same position, one line over
/// the other, and an `lseek(SEEK_CUR)` that reserves a captured write's
/// place could be undone by a write in flight. So the memfd is opened anew
/// through `/proc/self/fd`, which makes a regular file's description of the
/// same inode (and the same name), and that takes the memfd's number.
pub fn new_placeholder(name: &CString, cloexec: bool) -> state::CResult<c_int> {
    let cl = if cloexec { libc::O_CLOEXEC } else { 0 };
    // SAFETY: raw syscalls (never our wrappers) on descriptors made here.
    unsafe {
        let fd = libc::syscall(libc::SYS_memfd_create, name.as_ptr(), libc::MFD_CLOEXEC) as c_int;
        if fd < 0 {
            return Err(state::errno());
        }
        let proc = CString::new(format!("/proc/self/fd/{fd}")).unwrap_or_default();
        let flags = libc::O_RDWR | libc::O_LARGEFILE | libc::O_CLOEXEC;
        let again =
            libc::syscall(libc::SYS_openat, libc::AT_FDCWD, proc.as_ptr(), flags, 0) as c_int;
        if again >= 0 {
            let r = libc::syscall(libc::SYS_dup3, again, fd, cl);
            libc::syscall(libc::SYS_close, again);
            if r >= 0 {
                return Ok(fd);
            }
        }
        // No /proc: the memfd's own description (placeholders cannot be
        // taken over by another process without /proc either).
        libc::syscall(
            libc::SYS_fcntl,
            fd,
            libc::F_SETFD,
            if cloexec { libc::FD_CLOEXEC } else { 0 },
        );
        Ok(fd)
    }
}

/// (path, open flags) from the target of `/proc/self/fd/N` of a placeholder.
fn parse_link(link: &[u8]) -> Option<(PathBuf, c_int)> {
    let rest = link.strip_prefix(b"/memfd:")?.strip_prefix(TAG)?;
    let rest = rest.strip_suffix(b" (deleted)").unwrap_or(rest);
    let (&acc, rest) = rest.split_first()?;
    let (&app, rest) = rest.split_first()?;
    let path = rest.strip_prefix(b":")?;
    if !path.starts_with(b"/") {
        return None;
    }
    let mut flags = match acc {
        b'r' => libc::O_RDONLY,
        b'w' => libc::O_WRONLY,
        b'b' => libc::O_RDWR,
        _ => return None,
    };
    if app == b'a' {
        flags |= libc::O_APPEND;
    }
    Some((PathBuf::from(OsStr::from_bytes(path)), flags))
}

/// A private close-on-exec duplicate of a descriptor, above the numbers
/// programs use, made with raw syscalls so that the wrappers never see it.
/// The program may still close it past us (a "close every descriptor"
/// loop) and the number be reused for another file, so every use checks
/// first that it is still the same file (its inode): never an lseek, read
/// or truncation of a file that is not ours.
#[derive(Debug, Clone, Copy)]
pub struct Keep {
    fd: c_int,
    ino: u64,
}

fn inode(fd: c_int) -> Option<(u64, u64)> {
    // SAFETY: a zeroed stat buffer filled by the kernel.
    unsafe {
        let mut sb: libc::stat = std::mem::zeroed();
        (libc::syscall(libc::SYS_fstat, fd, &mut sb) == 0).then_some((sb.st_ino, sb.st_size as u64))
    }
}

impl Keep {
    pub const NONE: Keep = Keep { fd: -1, ino: 0 };

    pub fn of(fd: c_int) -> Keep {
        // SAFETY: raw syscall on a descriptor the program holds.
        let k = unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_DUPFD_CLOEXEC, 512) as c_int };
        match inode(k) {
            Some((ino, _)) if k >= 0 => Keep { fd: k, ino },
            _ => Keep::NONE,
        }
    }

    /// The memfd's inode (it names the ledger, crate::ledger).
    pub fn ino(&self) -> u64 {
        self.ino
    }

    /// The descriptor, if it still is the file it was made for.
    pub fn fd(&self) -> Option<c_int> {
        (self.fd >= 0 && inode(self.fd).is_some_and(|(ino, _)| ino == self.ino)).then_some(self.fd)
    }

    /// Its file's size (a placeholder's: bytes that bypassed capture).
    pub fn file_len(&self) -> Option<u64> {
        let fd = self.fd()?;
        inode(fd).map(|(_, len)| len)
    }

    pub fn set_offset(&self, to: u64) {
        if let Some(fd) = self.fd() {
            set_kernel_offset(fd, to);
        }
    }

    pub fn offset(&self) -> Option<u64> {
        kernel_offset(self.fd()?)
    }

    pub fn close(&self) {
        if let Some(fd) = self.fd() {
            // SAFETY: our own duplicate, checked to be it.
            unsafe {
                libc::syscall(libc::SYS_close, fd);
            }
        }
    }
}

fn set_kernel_offset(fd: c_int, to: u64) {
    // SAFETY: raw syscall on a descriptor we own; never our wrapper.
    unsafe {
        libc::syscall(libc::SYS_lseek, fd, to as i64, libc::SEEK_SET);
    }
}

pub fn kernel_offset(fd: c_int) -> Option<u64> {
    // SAFETY: as above.
    let r = unsafe { libc::syscall(libc::SYS_lseek, fd, 0i64, libc::SEEK_CUR) };
    u64::try_from(r).ok()
}

pub fn read_placeholder(fd: c_int, at: u64, n: usize) -> state::CResult<Vec<u8>> {
    let mut buf = vec![0u8; n];
    let mut done = 0;
    while done < n {
        // SAFETY: the buffer is valid for n - done bytes.
        let r = unsafe {
            libc::syscall(
                libc::SYS_pread64,
                fd,
                buf[done..].as_mut_ptr(),
                n - done,
                (at + done as u64) as i64,
            )
        };
        if r <= 0 {
            return Err(libc::EIO);
        }
        done += r as usize;
    }
    Ok(buf)
}

/// Cut a shared placeholder's memfd to `len` (its accounted end).
pub fn truncate_placeholder(fd: c_int, len: u64) {
    // SAFETY: raw syscall on our own duplicate.
    unsafe {
        libc::syscall(libc::SYS_ftruncate, fd, len as i64);
    }
}

/// Free the harvested bytes [from, to) of a shared placeholder. A hole,
/// not a truncation: another process may be writing past `to` right now,
/// and its bytes must stay where they land.
pub fn punch_placeholder(fd: c_int, from: u64, to: u64) {
    // SAFETY: raw syscall on our own duplicate.
    unsafe {
        libc::syscall(
            libc::SYS_fallocate,
            fd,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            from as i64,
            (to - from) as i64,
        );
    }
}

/// Take over every placeholder this process holds that the state does not
/// know (inherited across exec, or kept after fork).
pub fn adopt(st: &mut State) {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    // Descriptors of one open file description share one memfd inode.
    let mut by_inode: std::collections::HashMap<u64, u64> = Default::default();
    for e in dir.flatten() {
        let Some(fd) = e.file_name().to_str().and_then(|n| n.parse::<c_int>().ok()) else {
            continue;
        };
        if st.fds.contains_key(&fd) {
            continue;
        }
        let Ok(link) = std::fs::read_link(e.path()) else {
            continue;
        };
        let Some((path, flags)) = parse_link(link.as_os_str().as_bytes()) else {
            continue;
        };
        if st.rel_of(&path).is_none() {
            continue;
        }
        // SAFETY: a zeroed stat buffer filled by the kernel.
        let ino = unsafe {
            let mut sb: libc::stat = std::mem::zeroed();
            libc::syscall(libc::SYS_fstat, fd, &mut sb);
            sb.st_ino
        };
        let id = match st.by_path.get(&path) {
            Some(&id) => id,
            None => match st.committed(&path) {
                Ok(c) => st.inherited_handle(&path, c),
                Err(_) => continue,
            },
        };
        let pos = kernel_offset(fd).unwrap_or(0);
        let ofd = st.adopt_fd(fd, id, by_inode.get(&ino).copied(), flags, pos);
        by_inode.insert(ino, ofd);
        if st.cfg.verbose {
            crate::report::line(&format!(
                "took over {} (descriptor {fd}, offset {pos})",
                path.display()
            ));
        }
    }
}

/// Before another process can touch the shared descriptors: commit this
/// process's plain POSIX writes, and publish every offset in its
/// placeholder's kernel offset.
pub fn before_child(st: &mut State) {
    // Bytes written past the wrappers first: they are this process's
    // writes too, and must be in the commit the child sees (an appending
    // child takes the file's end from it).
    let fds: Vec<(c_int, u64)> = st.fds.iter().map(|(&fd, e)| (fd, e.ofd)).collect();
    for &(fd, _) in &fds {
        let _ = st.harvest(fd);
    }
    let dirty: Vec<u64> = st
        .handles
        .iter()
        .filter(|(_, h)| h.mode == Mode::Posix && h.dirty && h.log.is_some())
        .map(|(&id, _)| id)
        .collect();
    for id in dirty {
        let _ = st.commit_single(id);
    }
    for (fd, ofd) in fds {
        let size = st
            .fds
            .get(&fd)
            .and_then(|e| st.handles.get(&e.handle))
            .map_or(0, |h| h.size);
        let Some(o) = st.ofds.get_mut(&ofd) else {
            continue;
        };
        if !o.shared {
            // Shared from now on: the kernel offset becomes the offset.
            o.shared = true;
            o.keep = Keep::of(fd);
            let to = if o.append { size } else { o.offset };
            st.move_shared(ofd, to);
        }
    }
}

pub(crate) fn prepare_spawn() {
    let Some(_g) = Guard::enter() else { return };
    let mut slot = lock();
    if let Some(st) = slot.as_mut() {
        before_child(st);
    }
}

// ---- fork -------------------------------------------------------------------

thread_local! {
    static HELD: std::cell::RefCell<Option<crate::state::Slot>> =
        const { std::cell::RefCell::new(None) };
}

extern "C" fn at_prepare() {
    let _ = std::panic::catch_unwind(|| {
        let g = Guard::enter();
        let mut slot = lock();
        if g.is_some() {
            if let Some(st) = slot.as_mut() {
                before_child(st);
            }
        }
        // Held across fork: the child must not inherit a lock another
        // thread holds.
        HELD.with(|h| *h.borrow_mut() = Some(slot));
    });
}

extern "C" fn at_parent() {
    let _ = std::panic::catch_unwind(|| HELD.with(|h| h.borrow_mut().take()));
}

extern "C" fn at_child() {
    crate::terminate::forget_pending();
    let _ = std::panic::catch_unwind(|| {
        let Some(mut slot) = HELD.with(|h| h.borrow_mut().take()) else {
            return;
        };
        // Our own I/O below (scanning the log, statting the remote) must
        // pass straight through the wrappers, which would take the lock
        // held here.
        let Some(_g) = Guard::enter() else {
            return;
        };
        // The parent's logs are the parent's: forget them without closing
        // or committing anything, then take over the placeholders anew.
        if let Some(old) = slot.take() {
            for &fd in old.fds.keys() {
                state::forget_captured(fd);
            }
            for o in old.ofds.values() {
                o.keep.close();
                o.lock.close();
                o.ledger.close();
            }
            std::mem::forget(old);
            if let Some(st) = State::get(&mut slot) {
                adopt(st);
            }
        }
    });
}

/// Register the fork handlers once (called at initialization).
pub fn install_fork_handlers() {
    // SAFETY: registering plain functions with no captured state.
    unsafe {
        libc::pthread_atfork(Some(at_prepare), Some(at_parent), Some(at_child));
    }
}

/// At load: an exec'd program takes over the placeholders it inherited.
extern "C" fn at_load() {
    let _ = std::panic::catch_unwind(|| {
        if std::env::var_os("PARALOG_PREFIX").is_none() {
            return;
        }
        let Some(_g) = Guard::enter() else { return };
        crate::execpath::forget_copy();
        // Started in a directory only the remote has (a shell's `cd`).
        crate::remotefd::inherited_cwd();
        let mut slot = lock();
        if slot.is_some() {
            return;
        }
        let any = std::fs::read_dir("/proc/self/fd").is_ok_and(|d| {
            d.flatten().any(|e| {
                std::fs::read_link(e.path())
                    .is_ok_and(|l| parse_link(l.as_os_str().as_bytes()).is_some())
            })
        });
        if any {
            if let Some(st) = State::get(&mut slot) {
                adopt(st);
            }
        }
    });
}

#[used]
#[link_section = ".init_array"]
static AT_LOAD: extern "C" fn() = at_load;

// ---- spawning wrappers ----------------------------------------------------------

/// `_exit` skips atexit handlers, and shells (dash) end with it: the last
/// close of this process's plain POSIX files happens here first.
#[no_mangle]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    crate::shared::close_at_exit();
    match crate::real::_exit() {
        Some(f) => f(status),
        None => {
            libc::syscall(libc::SYS_exit_group, status);
        }
    };
    unreachable!("_exit returned")
}

#[no_mangle]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    _exit(status)
}

#[no_mangle]
pub unsafe extern "C" fn vfork() -> pid_t {
    libc::fork()
}

/// `posix_spawn` and `posix_spawnp` (`$search`: only the `p` form searches
/// PATH), planned as an exec of a captured file would be.
macro_rules! spawn_entry {
    ($name:ident, $search:expr) => {
        twins! {
            $name => fn(
                pid: *mut pid_t,
                path: *const c_char,
                acts: *const libc::posix_spawn_file_actions_t,
                attr: *const libc::posix_spawnattr_t,
                argv: *const *mut c_char,
                envp: *const *mut c_char,
            ) -> c_int, libc::ENOSYS, |real| {
                let (_keep, path) = if $search { crate::execpath::searched(path) } else { (None, path) };
                let run = |p: *const c_char, a: *const *const c_char| real(pid, p, acts, attr, a.cast(), envp);
                crate::execpath::exec_planned(path, argv.cast(), run).unwrap_or_else(|e| e)
            }
        }
    };
}

spawn_entry!(posix_spawn, false);
spawn_entry!(posix_spawnp, true);

#[no_mangle]
pub unsafe extern "C" fn system(cmd: *const c_char) -> c_int {
    prepare_spawn();
    let rc = pass!(system(cmd), -1);
    after_child();
    rc
}

/// After a child ended (`system` waited for it): take over the offsets it
/// moved in the shared placeholders, before this process writes to them
/// again past the wrappers (glibc's stdio on a reopened stdout), which
/// would otherwise be harvested from the offset before the child's bytes.
pub(crate) fn after_child() {
    let Some(_g) = Guard::enter() else { return };
    let mut slot = lock();
    if let Some(st) = slot.as_mut() {
        let fds: Vec<c_int> = st.fds.keys().copied().collect();
        for fd in fds {
            let _ = st.harvest(fd);
            take_over_end(st, fd);
        }
    }
}

/// An appending description the child may have appended to (it committed
/// at its exit): its end is the file's committed end now, not the one this
/// process knew, which would put this process's next append over the
/// child's (a shell loop's builtin `echo` and a command, `>> f`).
fn take_over_end(st: &mut State, fd: c_int) {
    let Some(e) = st.fds.get(&fd) else { return };
    let (id, ofd) = (e.handle, e.ofd);
    if !st.ofds.get(&ofd).is_some_and(|o| o.append && o.shared) {
        return;
    }
    let Some(path) = st
        .handles
        .get(&id)
        .filter(|h| h.mode == Mode::Posix && !h.dirty)
        .map(|h| h.path.clone())
    else {
        return;
    };
    let Ok(c) = st.committed(&path) else { return };
    let h = st.handles.get_mut(&id).expect("looked up above");
    if c.size == h.size {
        return;
    }
    h.size = c.size;
    h.view = None;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let p = Path::new("/pfs/run/out.txt");
        for flags in [
            libc::O_WRONLY,
            libc::O_RDONLY,
            libc::O_RDWR | libc::O_APPEND,
        ] {
            let name = placeholder_name(p, flags);
            let link = [b"/memfd:".as_slice(), name.as_bytes(), b" (deleted)"].concat();
            assert_eq!(parse_link(&link), Some((p.to_path_buf(), flags)));
        }
        assert_eq!(parse_link(b"/memfd:other (deleted)"), None);
        assert_eq!(parse_link(b"/tmp/paralog:w-:/x"), None);
        let long = PathBuf::from(format!("/{}", "x".repeat(300)));
        let link = [
            b"/memfd:".as_slice(),
            placeholder_name(&long, libc::O_WRONLY).as_bytes(),
        ]
        .concat();
        assert_eq!(parse_link(&link), None);
    }
}
