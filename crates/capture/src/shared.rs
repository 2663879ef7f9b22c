//! A placeholder shared past this process's wrappers (dup'ed, inherited,
//! or taken over from a parent): its private duplicate, the harvest of the
//! bytes written into it past capture, and the last close at exit
//! (crate::inherit says when each happens).

use libc::c_int;

use crate::state::{lock, set_captured, CResult, FdEntry, Mode, Ofd, State};

impl State {
    /// The descriptor to check a placeholder through: the private duplicate
    /// of a shared one (the program's may have been closed past the
    /// wrappers and its number reused), else the program's own.
    /// None: a shared placeholder whose duplicate is gone (nothing can be
    /// told about it any more).
    pub(crate) fn sentinel_fd(&self, fd: c_int) -> Option<c_int> {
        match self.fds.get(&fd).and_then(|e| self.ofds.get(&e.ofd)) {
            Some(o) if o.shared => o.keep.fd(),
            _ => Some(fd),
        }
    }

    /// A descriptor number the kernel handed out anew while the table still
    /// had it as captured (glibc closed it past the wrappers, as fclose of
    /// stdout at exit): its bytes are harvested through the private
    /// duplicate, and it is closed as far as capture is concerned (the
    /// number itself now belongs to another file, so it is never probed).
    pub fn forget_stale(&mut self, fd: c_int) {
        let _ = self.harvest(fd);
        let Some(e) = self.unregister_fd(fd) else {
            return;
        };
        // The line is printed; the program's open succeeded regardless.
        let _ = self.after_close(e.handle);
    }

    /// Register an inherited placeholder (crate::inherit): `fd` refers to
    /// open file description `ofd` of handle `id`, at kernel offset `pos`.
    pub fn adopt_fd(
        &mut self,
        fd: c_int,
        id: u64,
        ofd: Option<u64>,
        flags: c_int,
        pos: u64,
    ) -> u64 {
        let ofd = ofd.unwrap_or_else(|| {
            let o = self.new_id();
            let shared = Ofd {
                shared: true,
                kpos: pos,
                keep: crate::inherit::Keep::of(fd),
                ..Ofd::new(id, flags, pos)
            };
            self.ofds.insert(o, shared);
            o
        });
        if let Some(o) = self.ofds.get_mut(&ofd) {
            o.refs += 1;
        }
        if let Some(h) = self.handles.get_mut(&id) {
            h.fds += 1;
        }
        self.fds.insert(fd, FdEntry { handle: id, ofd });
        set_captured(fd, true);
        ofd
    }

    /// Bytes written into a shared placeholder past capture (glibc's stdio
    /// on a dup, a child process's raw writes) go into the log, where they
    /// were written: sequential writes from the kernel offset capture last
    /// set leave exactly [that offset, the kernel offset now) in the
    /// otherwise empty memfd. Anything else stays there and is refused at
    /// the next consistency point (invariant 5). The kernel offset moved
    /// by another process is taken over.
    pub fn harvest(&mut self, fd: c_int) -> CResult<()> {
        let Some(e) = self.fds.get(&fd) else {
            return Ok(());
        };
        let (id, ofd) = (e.handle, e.ofd);
        self.harvest_ofd(id, ofd)
    }

    pub fn harvest_ofd(&mut self, id: u64, ofd: u64) -> CResult<()> {
        let Some(o) = self.ofds.get(&ofd).filter(|o| o.shared) else {
            return Ok(());
        };
        let (kpos, keep) = (o.kpos, o.keep);
        let Some(fd) = keep.fd() else {
            return Ok(());
        };
        let len = keep.file_len().unwrap_or(0);
        let now = keep.offset().unwrap_or(kpos);
        if len == 0 {
            if now != kpos {
                let o = self.ofds.get_mut(&ofd).expect("looked up above");
                o.offset = now;
                o.kpos = now;
            }
            return Ok(());
        }
        let writable = o.writable
            && self
                .handles
                .get(&id)
                .is_some_and(|h| h.log.is_some() || h.lazy);
        if len != now || now <= kpos || !writable {
            return Ok(()); // left for the sentinel check
        }
        let data = crate::inherit::read_placeholder(fd, kpos, (now - kpos) as usize)?;
        self.write_handle(id, kpos, &data)?;
        crate::stats::captured(data.len());
        crate::inherit::empty_placeholder(fd);
        let o = self.ofds.get_mut(&ofd).expect("looked up above");
        o.offset = now;
        o.kpos = now;
        Ok(())
    }
}

/// The atexit handler: glibc flushes its streams only after every atexit
/// handler ran, so the bytes still buffered in a stream that glibc writes
/// onto a shared placeholder (a reopened or redirected stdout that was
/// never flushed) are pushed into the placeholder first, then harvested.
/// `_exit` flushes nothing (a forked child's copy of its parent's buffers
/// must not be written twice) and calls `close_at_exit` alone.
pub extern "C" fn exit_hook() {
    // SAFETY: flushing every stream, as exit is about to; captured streams
    // write through capture (no guard is held here).
    unsafe {
        libc::fflush(std::ptr::null_mut());
    }
    close_at_exit();
}

/// At exit the kernel closes every descriptor: for a plain POSIX open that
/// is its last close, so its epoch is committed here (a program that writes
/// and returns from `main` without `close` keeps its bytes, as without
/// paralog). Runs before the counters are written (atexit order).
pub extern "C" fn close_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let Some(_g) = crate::guard::Guard::enter() else {
            return;
        };
        let mut slot = lock();
        let Some(st) = slot.as_mut() else { return };
        st.close_all_posix();
    });
}

impl State {
    /// The last close of every plain POSIX open (exit).
    fn close_all_posix(&mut self) {
        let ids: Vec<u64> = self
            .handles
            .iter()
            .filter(|(_, h)| h.mode == Mode::Posix && (h.log.is_some() || h.lazy))
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            let ofds: Vec<u64> = self
                .ofds
                .iter()
                .filter(|(_, o)| o.handle == id)
                .map(|(&k, _)| k)
                .collect();
            for ofd in ofds {
                let _ = self.harvest_ofd(id, ofd);
            }
            for fd in self.fds_of(id) {
                self.detach_fd(fd);
            }
            let h = &self.handles[&id];
            if h.dirty || !h.committed_any {
                // The line is printed; the exit status is the program's.
                let _ = self.commit_single(id);
            }
            self.maybe_release(id);
        }
    }
}
