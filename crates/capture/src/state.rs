//! What the capture library knows: which descriptors are captured (a
//! lock-free table for the "is this mine?" check on every call), and for
//! each captured open file its log, its size and its consistency state.

use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use libc::c_int;
use paralog_log::{FileIdent, LogError, RankLog, WriterConfig};

use crate::report;
use crate::settings::{normalize, Config, Settings};
pub use crate::view::Committed;
use crate::view::{self, View};

const FAST_FDS: usize = 1 << 16;
/// One byte per descriptor below 65536: nonzero when captured.
static CAPTURED: [AtomicU8; FAST_FDS] = [const { AtomicU8::new(0) }; FAST_FDS];
/// Some descriptor at or above 65536 is captured (rare: look in the map).
static HIGH_FDS: AtomicBool = AtomicBool::new(false);

static SETTINGS: OnceLock<Settings> = OnceLock::new();
static STATE: Mutex<Option<State>> = Mutex::new(None);

pub fn settings() -> &'static Settings {
    SETTINGS.get_or_init(|| {
        crate::inherit::install_fork_handlers();
        Settings::from_env()
    })
}

/// Cheap check, no lock: is `fd` a captured descriptor?
#[inline]
pub fn is_captured(fd: c_int) -> bool {
    if fd < 0 {
        return false;
    }
    let i = fd as usize;
    if i < FAST_FDS {
        CAPTURED[i].load(Ordering::Acquire) != 0
    } else {
        HIGH_FDS.load(Ordering::Acquire) && lock().as_ref().is_some_and(|s| s.fds.contains_key(&fd))
    }
}

pub(crate) fn set_captured(fd: c_int, on: bool) {
    let i = fd as usize;
    if i < FAST_FDS {
        CAPTURED[i].store(on as u8, Ordering::Release);
    } else if on {
        HIGH_FDS.store(true, Ordering::Release);
    }
}

/// Forget that `fd` is captured (a forked child dropping its parent's state).
pub fn forget_captured(fd: c_int) {
    set_captured(fd, false);
}

/// The state if no thread holds it (a process copied at a signal:
/// crate::terminate), else `None`.
pub fn try_lock() -> Option<MutexGuard<'static, Option<State>>> {
    match STATE.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// Capture's state, locked: the lock is released when the slot is
/// dropped, and then a terminating signal that came while it was held is
/// acted on (crate::terminate).
pub struct Slot(std::mem::ManuallyDrop<MutexGuard<'static, Option<State>>>);

impl std::ops::Deref for Slot {
    type Target = Option<State>;
    fn deref(&self) -> &Option<State> {
        &self.0
    }
}

impl std::ops::DerefMut for Slot {
    fn deref_mut(&mut self) -> &mut Option<State> {
        &mut self.0
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // SAFETY: dropped once, here; the field is never used again.
        unsafe { std::mem::ManuallyDrop::drop(&mut self.0) };
        crate::terminate::after_unlock();
    }
}

pub fn lock() -> Slot {
    Slot(std::mem::ManuallyDrop::new(
        STATE
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()),
    ))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A plain POSIX open: fsync and the last close are consistency points
    /// of a one-rank communicator.
    Posix,
    /// Opened by MPI_File_open: the MPI shim drives consistency points.
    Mpi,
}

pub struct Handle {
    /// The mode the program created the file with (less its umask), for
    /// its log (docs/format.md, "Namespace operations").
    pub create_mode: Option<u32>,
    /// `None` for a read-only open of a file with committed history: it
    /// reads the committed view and writes nothing.
    pub log: Option<RankLog>,
    pub mode: Mode,
    pub path: PathBuf,
    /// Size of the file as this rank knows it: the global size at the last
    /// consistency point, grown by this rank's writes since.
    pub size: u64,
    /// The committed state, for reads of bytes this rank did not write in
    /// the current epoch (`None`: rebuild at the next such read).
    pub view: Option<View>,
    /// Lowest size set (or delete) in the current epoch: committed bytes at
    /// or beyond it are gone (read as zeros until rewritten).
    pub cut: Option<u64>,
    pub dirty: bool,
    pub committed_any: bool,
    /// Open placeholder descriptors.
    pub fds: u32,
    /// The MPI shim holds this handle until MPI_File_close.
    pub pinned: bool,
    /// MPI_MODE_CREATE was given: the POSIX opens may create the file.
    pub create_allowed: bool,
    /// Writes that bypassed capture were found (invariant 5).
    pub bypass: Option<String>,
    /// Reads answered from the committed view (bytes this rank did not
    /// write in the current epoch); reported under PARALOG_VERBOSE=1.
    pub view_reads: u64,
    /// When the current consistency point started (its local commit).
    pub cp_started: Option<std::time::Instant>,
    /// A writer whose log is made at its first write (inherited).
    pub lazy: bool,
    /// The file's end for appenders, mapped (crate::append_end), once
    /// used.
    pub append_end: Option<crate::append_end::EndMap>,
}

impl Handle {
    /// A handle of `path` opened in `mode` (an MPI one is pinned until
    /// MPI_File_close), `size` bytes as this rank knows it, over the
    /// committed `view`: nothing written, nothing open yet.
    fn new(path: &Path, mode: Mode, log: Option<RankLog>, size: u64, view: View) -> Handle {
        Handle {
            log,
            mode,
            path: path.to_path_buf(),
            size,
            view: Some(view),
            cut: None,
            dirty: false,
            committed_any: false,
            fds: 0,
            pinned: mode == Mode::Mpi,
            create_allowed: false,
            bypass: None,
            view_reads: 0,
            cp_started: None,
            lazy: false,
            create_mode: None,
            append_end: None,
        }
    }
}

/// A captured descriptor: which open file description it refers to (its
/// `dup`s refer to the same one) and, for the cheap lookups, its handle.
pub struct FdEntry {
    pub handle: u64,
    pub ofd: u64,
}

/// An open file description (POSIX): what an `open` made and every `dup` of
/// it shares, above all the file offset.
pub struct Ofd {
    pub handle: u64,
    pub offset: u64,
    pub append: bool,
    pub readable: bool,
    pub writable: bool,
    /// Descriptors of this process that refer to it.
    pub(crate) refs: u32,
    /// Reachable past capture: dup'ed (glibc's own stdio may write to the
    /// copy) or shared with another process. Then the placeholder's kernel
    /// offset mirrors `offset`, and bytes written raw into the placeholder
    /// are harvested into the log (crate::inherit).
    pub shared: bool,
    /// The kernel offset of the placeholder as last set or seen.
    pub kpos: u64,
    /// A private duplicate of the placeholder (close-on-exec) while shared,
    /// so that its bytes can be harvested even after glibc closed the
    /// program's descriptor past the wrappers (fclose(stdout) at exit).
    pub keep: crate::inherit::Keep,
    /// The lock file standing for the file in locks (crate::locks), once
    /// the description locked.
    pub lock: crate::inherit::Keep,
    /// The ledger of the accounted end while shared (crate::ledger), once
    /// used.
    pub ledger: crate::inherit::Keep,
}

impl Ofd {
    /// A description of handle `handle` opened with `flags` (its access
    /// mode and O_APPEND), at `offset`: private, no descriptor yet.
    pub(crate) fn new(handle: u64, flags: c_int, offset: u64) -> Ofd {
        let acc = flags & libc::O_ACCMODE;
        Ofd {
            handle,
            offset,
            append: flags & libc::O_APPEND != 0,
            readable: acc != libc::O_WRONLY,
            writable: acc != libc::O_RDONLY,
            refs: 0,
            shared: false,
            kpos: 0,
            keep: crate::inherit::Keep::NONE,
            lock: crate::inherit::Keep::NONE,
            ledger: crate::inherit::Keep::NONE,
        }
    }
}

pub struct State {
    pub cfg: Config,
    pub handles: HashMap<u64, Handle>,
    pub fds: HashMap<c_int, FdEntry>,
    pub ofds: HashMap<u64, Ofd>,
    pub by_path: HashMap<PathBuf, u64>,
    pub(crate) next_id: u64,
    /// Results of captured AIO requests, by aiocb address: (return, errno).
    pub aio: HashMap<usize, (isize, c_int)>,
    /// Permission bits set by `chmod` on captured paths (stat answers them).
    pub modes: HashMap<PathBuf, u32>,
    /// Times set by `utimensat` and its family on captured paths, until the
    /// file changes again (stat answers them).
    pub times: HashMap<PathBuf, paralog_log::format::Times>,
    /// statfs/statvfs answers of directories under the prefix, kept a
    /// moment (statfs.rs); here so that fork's lock covers them too.
    pub fs_kept: crate::statfs::Kept,
}

/// Errors at the C boundary: an errno for the caller, the line already
/// printed on stderr.
pub type CResult<T> = Result<T, c_int>;

pub fn log_errno(what: &str, e: &LogError) -> c_int {
    report::line(&format!("{what}: {e}"));
    e.raw_os_error().unwrap_or(libc::EIO)
}

impl State {
    fn new(cfg: Config) -> State {
        if let Some(dir) = &cfg.stats {
            crate::stats::write_at_exit(dir);
        }
        crate::timeline::init(&cfg);
        // SAFETY: registering a plain extern "C" function, once (the state
        // is created once per process).
        unsafe {
            libc::atexit(crate::shared::exit_hook);
        }
        crate::terminate::install();
        State {
            cfg,
            handles: HashMap::new(),
            fds: HashMap::new(),
            ofds: HashMap::new(),
            by_path: HashMap::new(),
            next_id: 1,
            aio: HashMap::new(),
            modes: HashMap::new(),
            times: HashMap::new(),
            fs_kept: HashMap::new(),
        }
    }

    /// The state, created on first use; `None` when capture is off.
    pub fn get(slot: &mut Option<State>) -> Option<&mut State> {
        if slot.is_none() {
            if let Settings::On(cfg) = settings() {
                *slot = Some(State::new(cfg.clone()));
            }
        }
        slot.as_mut()
    }

    pub fn writer_config(&self) -> WriterConfig {
        WriterConfig {
            coalesce_bytes: self.cfg.coalesce_bytes,
            small_write: self.cfg.small_write,
            ..WriterConfig::default()
        }
    }

    /// Ensure the node-local root exists (0700); its parent must exist.
    /// Looked at until it is there once (a new file per write asked at
    /// every open).
    fn ensure_local(&self) -> CResult<()> {
        static THERE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if THERE.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(());
        }
        self.make_local()?;
        THERE.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    fn make_local(&self) -> CResult<()> {
        let local = &self.cfg.local;
        match std::fs::metadata(local) {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => {
                report::line(&format!(
                    "PARALOG_LOCAL={} is not a directory",
                    local.display()
                ));
                Err(libc::ENOTDIR)
            }
            Err(_) => {
                use std::os::unix::fs::DirBuilderExt;
                // The ranks of one node race here: another one's directory
                // is as good as ours.
                match std::fs::DirBuilder::new().mode(0o700).create(local) {
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && local.is_dir() => {
                        return Ok(())
                    }
                    r => r,
                }
                .map_err(|e| {
                    report::line(&format!(
                        "PARALOG_LOCAL={}: cannot create it: {e}",
                        local.display()
                    ));
                    e.raw_os_error().unwrap_or(libc::EIO)
                })
            }
        }
    }

    pub fn rel_of(&self, abs: &Path) -> Option<Vec<u8>> {
        let rel = abs.strip_prefix(&self.cfg.prefix).ok()?;
        let bytes = rel.as_os_str().as_bytes().to_vec();
        (!bytes.is_empty()).then_some(bytes)
    }

    /// The committed state of a path under the prefix.
    pub fn committed(&self, abs: &Path) -> CResult<Committed> {
        let rel = self.rel_of(abs).ok_or(libc::EINVAL)?;
        let base = view::Base::of(&self.cfg, &rel)?;
        view::committed(&self.cfg.local, &self.cfg.job, abs, &rel, base)
    }

    /// The committed state of a file an open truncates: the log only, the
    /// drained state is never looked at (see `view::Base::Cut`).
    pub fn committed_cut(&self, abs: &Path) -> CResult<Committed> {
        let rel = self.rel_of(abs).ok_or(libc::EINVAL)?;
        view::committed(&self.cfg.local, &self.cfg.job, abs, &rel, view::Base::Cut)
    }

    /// The log of an open of `abs` (a generation of its own for a POSIX
    /// open, chosen at its commit).
    fn make_log(
        &self,
        abs: &Path,
        mode: Mode,
        rank: u32,
        size: u32,
        gen: Option<u64>,
    ) -> CResult<RankLog> {
        self.ensure_local()?;
        let rel = self.rel_of(abs).ok_or(libc::EINVAL)?;
        let job = self.cfg.job.clone();
        let gen = match gen {
            Some(g) => g,
            None if mode == Mode::Posix => paralog_log::single::STAGED_GEN,
            None => paralog_log::next_generation(&self.cfg.local, &job, &rel)
                .map_err(|e| log_errno("choosing the open generation", &e))?,
        };
        let ident = FileIdent {
            job,
            path: abs.as_os_str().as_bytes().to_vec(),
            rel,
            gen,
        };
        // A plain POSIX open agrees with no other process: each of its
        // commits becomes a generation of its own (paralog_log::single), so
        // that several processes writing one file never share a rank.
        if mode == Mode::Posix {
            RankLog::create_single(&self.cfg.local, ident, self.writer_config())
        } else {
            RankLog::create(&self.cfg.local, ident, rank, size, self.writer_config())
        }
        .map_err(|e| log_errno(&format!("capturing {}", abs.display()), &e))
    }

    /// Create the log of a new open of `abs` and register it.
    pub fn new_handle(
        &mut self,
        abs: &Path,
        mode: Mode,
        rank: u32,
        size: u32,
        gen: Option<u64>,
        committed: Committed,
    ) -> CResult<u64> {
        let log = self.make_log(abs, mode, rank, size, gen)?;
        let id = self.register(abs, mode, Some(log), committed);
        if self.cfg.verbose {
            report::line(&format!(
                "capturing {} (rank {rank} of {size})",
                abs.display()
            ));
        }
        Ok(id)
    }

    /// A handle for a descriptor this process inherited (crate::inherit): a
    /// POSIX writer of its own whose log is made at its first write.
    pub fn inherited_handle(&mut self, abs: &Path, committed: Committed) -> u64 {
        let id = self.register(abs, Mode::Posix, None, committed);
        let h = self.handles.get_mut(&id).expect("just registered");
        h.lazy = true;
        h.committed_any = true;
        id
    }

    fn register(
        &mut self,
        abs: &Path,
        mode: Mode,
        log: Option<RankLog>,
        committed: Committed,
    ) -> u64 {
        let base = if committed.exists { committed.size } else { 0 };
        let id = self.new_id();
        let h = Handle::new(abs, mode, log, base, committed.view);
        self.handles.insert(id, h);
        self.by_path.insert(abs.to_path_buf(), id);
        id
    }

    /// Make the log of an inherited handle at its first write.
    pub fn ensure_log(&mut self, id: u64) -> CResult<()> {
        let h = self.handles.get(&id).ok_or(libc::EBADF)?;
        if h.lazy && h.log.is_none() {
            let path = h.path.clone();
            let mut log = self.make_log(&path, Mode::Posix, 0, 1, None)?;
            let h = self.handles.get_mut(&id).expect("looked up above");
            if let Some(m) = h.create_mode {
                log.set_create_mode(m);
            }
            h.log = Some(log);
            h.lazy = false;
        }
        Ok(())
    }

    /// The program created the file with `mode` (its umask applied here):
    /// recorded in its log, so that the drain creates the remote file so,
    /// and answered by `stat` in this process at once.
    pub fn set_create_mode(&mut self, id: u64, mode: u32) {
        let mode = mode & !crate::umask::current() & 0o7777;
        if let Some(h) = self.handles.get_mut(&id) {
            self.modes.insert(h.path.clone(), mode);
            h.create_mode = Some(mode);
            if let Some(log) = h.log.as_mut() {
                log.set_create_mode(mode);
            }
        }
    }

    /// A chmod of `path` while this process holds it open: its log records
    /// the new mode as the one the drain creates the remote file with (the
    /// real chmod of the remote file cannot reach a file not drained yet:
    /// `tar -x` and `cp -p` create with 0600 and fchmod before closing).
    pub fn set_open_mode(&mut self, path: &Path, mode: u32) {
        let mode = mode & 0o7777;
        let Some(h) = self
            .by_path
            .get(path)
            .and_then(|id| self.handles.get_mut(id))
        else {
            return;
        };
        h.create_mode = Some(mode);
        if let Some(log) = h.log.as_mut() {
            log.set_create_mode(mode);
        }
    }

    /// A read-only open of a captured file whose committed epochs are not
    /// all drained: reads come from the committed view, never from the
    /// stale real file. Not registered by path: a later write open of the
    /// path gets a handle of its own.
    pub fn new_readonly_handle(&mut self, abs: &Path, committed: Committed) -> u64 {
        let id = self.new_id();
        let mut h = Handle::new(abs, Mode::Posix, None, committed.size, committed.view);
        h.committed_any = true;
        self.handles.insert(id, h);
        id
    }

    /// Hand out a placeholder descriptor for `handle`: a memfd that must stay
    /// empty (anything written to it bypassed capture).
    pub fn attach_fd(&mut self, id: u64, flags: c_int) -> CResult<c_int> {
        let path = self
            .handles
            .get(&id)
            .map(|h| h.path.clone())
            .unwrap_or_default();
        let name = crate::inherit::placeholder_name(&path, flags);
        let fd = crate::inherit::new_placeholder(&name, flags & libc::O_CLOEXEC != 0)?;
        // A number the table still lists was closed past the wrappers.
        if self.fds.contains_key(&fd) {
            self.forget_stale(fd);
        }
        let ofd = self.new_id();
        let o = Ofd {
            refs: 1,
            ..Ofd::new(id, flags, 0)
        };
        self.ofds.insert(ofd, o);
        self.fds.insert(fd, FdEntry { handle: id, ofd });
        if let Some(h) = self.handles.get_mut(&id) {
            h.fds += 1;
            if let Some(log) = h.log.as_mut().filter(|_| flags & libc::O_TRUNC != 0) {
                log.set_size(0);
                h.size = 0;
                h.cut = Some(0);
                h.dirty = true;
                self.append_end_cut(id, 0);
            }
        }
        set_captured(fd, true);
        Ok(fd)
    }

    /// Register `new_fd` (a dup of a captured descriptor): the same open
    /// file description, so the same offset (POSIX).
    pub fn dup_fd(&mut self, old: c_int, new_fd: c_int) {
        if new_fd != old && self.fds.contains_key(&new_fd) {
            // The kernel handed out a number the table still lists.
            self.forget_stale(new_fd);
        }
        if let Some(e) = self.fds.get(&old) {
            let entry = FdEntry {
                handle: e.handle,
                ofd: e.ofd,
            };
            if let Some(h) = self.handles.get_mut(&e.handle) {
                h.fds += 1;
            }
            let size = self.handles.get(&e.handle).map_or(0, |h| h.size);
            let mut now_shared = None;
            if let Some(o) = self.ofds.get_mut(&e.ofd) {
                o.refs += 1;
                if !o.shared {
                    o.shared = true;
                    o.keep = crate::inherit::Keep::of(new_fd);
                    // Raw writes of an appending description go to the end.
                    now_shared = Some(if o.append { size } else { o.offset });
                }
            }
            if let Some(to) = now_shared {
                self.move_shared(e.ofd, to);
            }
            self.fds.insert(new_fd, entry);
            set_captured(new_fd, true);
        }
    }

    /// The open file description of a captured descriptor.
    pub fn ofd(&self, fd: c_int) -> CResult<&Ofd> {
        let e = self.fds.get(&fd).ok_or(libc::EBADF)?;
        self.ofds.get(&e.ofd).ok_or(libc::EBADF)
    }

    pub fn set_offset(&mut self, fd: c_int, to: u64) -> CResult<()> {
        let ofd = self.fds.get(&fd).ok_or(libc::EBADF)?.ofd;
        let o = self.ofds.get_mut(&ofd).ok_or(libc::EBADF)?;
        if !o.shared {
            o.offset = to;
        } else if o.kpos != to || o.keep.offset() != Some(to) {
            self.move_shared(ofd, to);
        }
        Ok(())
    }

    /// Forget a descriptor (the caller closes it). Returns its handle.
    pub fn detach_fd(&mut self, fd: c_int) -> Option<u64> {
        // Measured before the last reference goes: that closes the private
        // duplicate a shared placeholder is probed through.
        let left = self
            .settled_unharvested(&[fd])
            .ok()
            .and_then(|l| l.into_iter().next())
            .filter(|&n| n > 0);
        let e = self.unregister_fd(fd)?;
        if let Some(h) = self.handles.get_mut(&e.handle) {
            if let Some(n) = left {
                h.bypass.get_or_insert_with(|| {
                    format!(
                        "{} bytes reached {} without passing through capture",
                        n,
                        h.path.display()
                    )
                });
            }
        }
        Some(e.handle)
    }

    /// Take `fd` out of the tables: its open file description loses a
    /// reference (and its private descriptors with the last one), its
    /// handle a descriptor.
    pub(crate) fn unregister_fd(&mut self, fd: c_int) -> Option<FdEntry> {
        let e = self.fds.remove(&fd)?;
        set_captured(fd, false);
        if let Some(o) = self.ofds.get_mut(&e.ofd) {
            o.refs -= 1;
            if o.refs == 0 {
                o.keep.close();
                o.lock.close();
                o.ledger.close();
                self.ofds.remove(&e.ofd);
            }
        }
        if let Some(h) = self.handles.get_mut(&e.handle) {
            h.fds = h.fds.saturating_sub(1);
        }
        Some(e)
    }

    /// Check every placeholder of a handle for bytes that bypassed capture.
    fn check_sentinels(&mut self, id: u64) -> CResult<()> {
        let fds = self.fds_of(id);
        let left = self.settled_unharvested(&fds)?;
        let h = self.handles.get_mut(&id).ok_or(libc::EBADF)?;
        for n in left {
            if n > 0 {
                h.bypass.get_or_insert_with(|| {
                    format!(
                        "{} bytes reached {} without passing through capture",
                        n,
                        h.path.display()
                    )
                });
            }
        }
        if let Some(msg) = &h.bypass {
            let line = format!(
                "{msg} (an uninterposed call, AIO or a raw syscall wrote to the file, or stdio wrote out of sequence \
                 into a descriptor it shares with capture, as after an fseek on a reopened stdout): \
                 this epoch cannot be committed; run `paralog check-symbols` on the program"
            );
            report::line(&line);
            crate::stats::refused(&line);
            return Err(libc::EIO);
        }
        Ok(())
    }

    /// Local commit of the handle's current epoch (data durable, manifest
    /// renamed into place).
    pub fn commit_local(&mut self, id: u64) -> CResult<()> {
        self.check_sentinels(id)?;
        let h = self.handles.get_mut(&id).ok_or(libc::EBADF)?;
        h.cp_started.get_or_insert_with(std::time::Instant::now);
        log_of(h)?
            .commit_local()
            .map_err(|e| log_errno(&format!("committing {} locally", h.path.display()), &e))?;
        Ok(())
    }

    /// After the agreement: mark the epoch globally committed, start the next.
    pub fn complete_epoch(&mut self, id: u64, global_size: u64) -> CResult<()> {
        let h = self.handles.get_mut(&id).ok_or(libc::EBADF)?;
        let log = log_of(h)?;
        let point = crate::timeline::Point::of(log);
        let epoch = log
            .complete_epoch()
            .map_err(|e| log_errno(&format!("marking {} committed", h.path.display()), &e))?;
        h.size = global_size;
        if let Some(t) = h.cp_started.take() {
            let took = t.elapsed();
            crate::timeline::consistency_point(took, point, epoch);
            crate::stats::consistency_point(took);
        }
        h.view = None;
        h.cut = None;
        h.dirty = false;
        h.committed_any = true;
        if self.cfg.verbose {
            report::line(&format!(
                "{}: epoch {epoch} committed (size {global_size})",
                h.path.display()
            ));
        }
        Ok(())
    }

    /// A consistency point of a one-rank communicator (POSIX fsync/close).
    pub fn commit_single(&mut self, id: u64) -> CResult<()> {
        self.commit_single_at(id).map(|_| ())
    }

    /// `commit_single`, and which epoch it committed (its generation is
    /// chosen by the commit): what a rename's other record names.
    pub fn commit_single_at(&mut self, id: u64) -> CResult<paralog_log::EpochId> {
        self.commit_local(id)?;
        let h = &self.handles[&id];
        let log = log_of_ref(h)?;
        let at = paralog_log::EpochId::new(log.ident().gen, log.epoch());
        let size = h.size;
        self.complete_epoch(id, size)?;
        Ok(at)
    }

    /// After a descriptor of handle `id` went away: the last close of a
    /// plain POSIX open is its consistency point; then the handle is
    /// dropped if nothing refers to it.
    pub fn after_close(&mut self, id: u64) -> CResult<()> {
        let h = self.handles.get(&id).ok_or(libc::EBADF)?;
        let writer = h.log.is_some() || h.lazy;
        let result = if writer
            && h.mode == Mode::Posix
            && h.fds == 0
            && !h.pinned
            && (h.dirty || !h.committed_any)
        {
            self.commit_single(id)
        } else {
            Ok(())
        };
        self.maybe_release(id);
        result
    }

    /// Drop a handle that no descriptor and no MPI handle refers to.
    pub fn maybe_release(&mut self, id: u64) {
        if self
            .handles
            .get(&id)
            .is_some_and(|h| h.fds == 0 && !h.pinned)
        {
            let h = self.handles.remove(&id).expect("checked");
            if h.committed_any {
                if let Some(log) = &h.log {
                    if let Err(e) = log.mark_closed() {
                        // Only an upload that waits for the close is delayed.
                        log_errno(&format!("closing {}", h.path.display()), &e);
                    }
                }
            }
            if self.cfg.verbose {
                report::line(&format!(
                    "{}: {} reads answered from the committed view",
                    h.path.display(),
                    h.view_reads
                ));
            }
            if self.by_path.get(&h.path) == Some(&id) {
                self.by_path.remove(&h.path);
            }
        }
    }

    pub fn handle_of(&self, fd: c_int) -> CResult<u64> {
        self.fds.get(&fd).map(|e| e.handle).ok_or(libc::EBADF)
    }

    /// A new handle or description number.
    pub(crate) fn new_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// The descriptors of handle `id`.
    pub(crate) fn fds_of(&self, id: u64) -> Vec<c_int> {
        self.fds
            .iter()
            .filter(|(_, e)| e.handle == id)
            .map(|(&fd, _)| fd)
            .collect()
    }
}

/// The log of a handle that writes (EBADF for a read-only one).
pub(crate) fn log_of(h: &mut Handle) -> CResult<&mut RankLog> {
    h.log.as_mut().ok_or(libc::EBADF)
}

fn log_of_ref(h: &Handle) -> CResult<&RankLog> {
    h.log.as_ref().ok_or(libc::EBADF)
}

/// Size of a placeholder memfd (raw syscall: never our own fstat wrapper).
pub(crate) fn sentinel_len(fd: c_int) -> Option<u64> {
    // SAFETY: a zeroed stat buffer filled by the kernel.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        (libc::syscall(libc::SYS_fstat, fd, &mut st as *mut libc::stat) == 0)
            .then_some(st.st_size as u64)
    }
}

pub fn errno() -> c_int {
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() }
}

pub fn set_errno(e: c_int) {
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() = e }
}

/// The absolute, normalized path an open refers to (relative paths against
/// the working directory or `dirfd`).
pub fn resolve(dirfd: c_int, path: &Path) -> Option<PathBuf> {
    if path.is_absolute() {
        return Some(normalize(path));
    }
    // A directory only the remote has (remotefd.rs) is a dead directory
    // to the kernel: capture knows which one of the view it stands for.
    let base = if dirfd == libc::AT_FDCWD {
        match crate::remotefd::cwd() {
            Some(p) => p,
            None => std::env::current_dir()
                .ok()
                .or_else(crate::remotefd::inherited_cwd)?,
        }
    } else {
        match crate::remotefd::path_of(dirfd) {
            Some(p) => p,
            None => std::fs::read_link(format!("/proc/self/fd/{dirfd}")).ok()?,
        }
    };
    Some(normalize(&base.join(path)))
}
