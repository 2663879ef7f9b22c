//! A placeholder shared past this process's wrappers (dup'ed, inherited,
//! or taken over from a parent): its private duplicate, the harvest of the
//! bytes written into it past capture, and the last close at exit
//! (crate::inherit says when each happens).

use libc::c_int;

use crate::inherit::Keep;
use crate::ledger::Ledger;
use crate::state::{lock, set_captured, CResult, FdEntry, Mode, Ofd, State};

impl State {
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
    /// were written: sequential writes from the accounted end (the shared
    /// ledger's, crate::ledger) leave exactly [that end, the kernel offset
    /// now) in the memfd, and nothing past it. They are logged, freed from
    /// the memfd, and the accounted end moves to the kernel offset. Anything
    /// else stays there and is refused at the next consistency point
    /// (invariant 5). An offset another process moved through capture is
    /// taken over.
    pub fn harvest(&mut self, fd: c_int) -> CResult<()> {
        let Some(e) = self.fds.get(&fd) else {
            return Ok(());
        };
        let (id, ofd) = (e.handle, e.ofd);
        self.harvest_ofd(id, ofd)
    }

    pub fn harvest_ofd(&mut self, id: u64, ofd: u64) -> CResult<()> {
        if !self.ofds.get(&ofd).is_some_and(|o| o.shared) {
            return Ok(());
        }
        let ledger = self.ledger(ofd);
        self.harvest_held(id, ofd, ledger.as_ref())
    }

    /// The ledger of a shared description, locked (crate::ledger): opened
    /// at its first use and kept with the description.
    pub(crate) fn ledger(&mut self, ofd: u64) -> Option<Ledger> {
        let o = self.ofds.get_mut(&ofd)?;
        if let Some(l) = Ledger::lock(o.ledger) {
            return Some(l);
        }
        // Not open yet, closed past us, or not lockable: (re)opened once.
        o.ledger.close();
        o.ledger = crate::ledger::open(&self.cfg, o.keep.ino()).unwrap_or(Keep::NONE);
        Ledger::lock(o.ledger)
    }

    /// The harvest, with the ledger held by the caller.
    pub(crate) fn harvest_held(
        &mut self,
        id: u64,
        ofd: u64,
        ledger: Option<&Ledger>,
    ) -> CResult<()> {
        let now = self.ofds.get(&ofd).and_then(|o| o.keep.offset());
        self.harvest_to(id, ofd, ledger, now)
    }

    /// The harvest of what was written past capture below `upto` (the
    /// kernel offset, read by the caller: lseek waits for a write in
    /// flight through the description, so every byte below it is in the
    /// memfd; the length may run ahead of it, another sharer's write in
    /// flight, whose bytes are the next harvest's).
    fn harvest_to(
        &mut self,
        id: u64,
        ofd: u64,
        ledger: Option<&Ledger>,
        upto: Option<u64>,
    ) -> CResult<()> {
        let Some(o) = self.ofds.get(&ofd).filter(|o| o.shared) else {
            return Ok(());
        };
        let (own, keep) = (o.kpos, o.keep);
        let Some(fd) = keep.fd() else {
            return Ok(());
        };
        let kpos = ledger.and_then(Ledger::get).unwrap_or(own);
        let now = upto.unwrap_or(kpos);
        if now < kpos {
            // The shared offset went back past capture (glibc's fseek on a
            // reopened stdout): what is written there cannot be told from
            // what was harvested, so the epoch is refused (invariant 5).
            if let Some(h) = self.handles.get_mut(&id) {
                h.bypass.get_or_insert_with(|| {
                    format!(
                        "{} bytes reached {} without passing through capture (its offset was moved back from {kpos} to {now} past it)",
                        kpos - now,
                        h.path.display()
                    )
                });
            }
            return Ok(());
        }
        let len = keep.file_len().unwrap_or(0);
        if now == kpos || len < now {
            // Nothing past capture at the offset: at most moved by another
            // process through capture (or lseek), which is taken over (this
            // process's own idea of the offset may be older than the shared
            // end, and must never move the shared offset back).
            self.accounted(ofd, now, ledger);
            return Ok(());
        }
        let writable = o.writable
            && self
                .handles
                .get(&id)
                .is_some_and(|h| h.log.is_some() || h.lazy);
        if !writable {
            return Ok(()); // left for the sentinel check
        }
        let data = crate::inherit::read_placeholder(fd, kpos, (now - kpos) as usize)?;
        // Through an appending description the placeholder only stages the
        // bytes: they are appended at the file's end now, as the kernel
        // would have placed them (crate::append_end).
        let at = if o.append {
            self.append_place(id, now - kpos)?
        } else {
            kpos
        };
        self.write_handle(id, at, &data)?;
        crate::stats::captured(data.len());
        crate::inherit::punch_placeholder(fd, kpos, now);
        self.accounted(ofd, now, ledger);
        Ok(())
    }

    /// The bytes through `ofd` are in a log up to `end`.
    pub(crate) fn accounted(&mut self, ofd: u64, end: u64, ledger: Option<&Ledger>) {
        if let Some(o) = self.ofds.get_mut(&ofd) {
            o.offset = end;
            o.kpos = end;
        }
        if let Some(l) = ledger {
            l.set(end);
        }
    }

    /// A write through capture at the offset of a description other
    /// processes share: its place is reserved by moving the shared offset
    /// past it in one lseek (serialized by the kernel with every write
    /// through the description, past capture or not), what others wrote
    /// past capture below it is harvested, and the accounted end moves past
    /// it, all under one hold of the ledger. An appending description
    /// writes at the file's end (crate::append_end). Returns the place.
    pub(crate) fn reserve_shared(&mut self, id: u64, ofd: u64, n: u64) -> CResult<u64> {
        let o = self.ofds.get(&ofd).ok_or(libc::EBADF)?;
        let (keep, append) = (o.keep, o.append);
        let ledger = self.ledger(ofd);
        let Some(fd) = keep.fd() else {
            return Err(libc::EBADF);
        };
        if append {
            // What other sharers wrote past capture goes first; then the
            // place is the file's end for every appender of it, not the
            // shared offset, which only stages bytes written past capture
            // (crate::append_end) and is never moved back under them.
            self.harvest_held(id, ofd, ledger.as_ref())?;
            drop(ledger);
            return self.append_place(id, n);
        }
        // SAFETY: raw syscall on our own duplicate.
        let end = unsafe { libc::syscall(libc::SYS_lseek, fd, n as i64, libc::SEEK_CUR) };
        let end = u64::try_from(end).map_err(|_| crate::state::errno())?;
        let pos = end - n;
        self.harvest_to(id, ofd, ledger.as_ref(), Some(pos))?;
        self.accounted(ofd, end, ledger.as_ref());
        Ok(pos)
    }

    /// Move a shared description's offset through capture (a captured
    /// write, lseek, a new child): the kernel offset every sharer sees, and
    /// the accounted end.
    pub(crate) fn move_shared(&mut self, ofd: u64, to: u64) {
        let Some(o) = self.ofds.get_mut(&ofd) else {
            return;
        };
        o.offset = to;
        o.kpos = to;
        o.keep.set_offset(to);
        // Moved back (pytest's capture seeks its file to 0 and truncates
        // it): the memfd, whose length is the accounted end, is cut there,
        // or the harvested bytes past it would count as written past
        // capture.
        if let Some(fd) = o
            .keep
            .fd()
            .filter(|_| o.keep.file_len().is_some_and(|len| len > to))
        {
            crate::inherit::truncate_placeholder(fd, to);
        }
        if let Some(l) = self.ledger(ofd) {
            l.set(to);
        }
    }

    /// Harvest `fds` and tell what is left in each placeholder. Past the
    /// accounted end of a shared one there may be another sharer's write
    /// still in flight (the memfd grew, the offset not yet): it is given a
    /// few milliseconds to land and be harvested before the bytes count as
    /// written past capture.
    pub(crate) fn settled_unharvested(&mut self, fds: &[c_int]) -> CResult<Vec<u64>> {
        let mut tries = 0;
        loop {
            for &fd in fds {
                self.harvest(fd)?;
            }
            let left: Vec<u64> = fds.iter().filter_map(|&fd| self.unharvested(fd)).collect();
            let shared = fds.iter().any(|fd| {
                self.fds
                    .get(fd)
                    .and_then(|e| self.ofds.get(&e.ofd))
                    .is_some_and(|o| o.shared)
            });
            if !shared || left.iter().all(|&n| n == 0) || tries == 25 {
                return Ok(left);
            }
            tries += 1;
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    /// Bytes in a placeholder that capture did not log: anything in a
    /// private one (it must stay empty), anything past the accounted end of
    /// a shared one. None: nothing can be told (its duplicate is gone).
    pub(crate) fn unharvested(&mut self, fd: c_int) -> Option<u64> {
        let ofd = self.fds.get(&fd)?.ofd;
        match self.ofds.get(&ofd) {
            Some(o) if o.shared => {
                let (len, kpos) = (o.keep.file_len()?, o.kpos);
                let end = self.ledger(ofd).and_then(|l| l.get()).unwrap_or(kpos);
                Some(len.saturating_sub(end))
            }
            _ => crate::state::sentinel_len(fd),
        }
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
    pub(crate) fn close_all_posix(&mut self) {
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
