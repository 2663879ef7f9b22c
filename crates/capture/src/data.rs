//! The data path of a captured open: writes, reads (own bytes, then the
//! committed view), size operations and the one-epoch path operations.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use libc::c_int;
use paralog_log::format::RenameRef;
use paralog_log::{ReadRange, ReadSource};

use crate::report;
use crate::state::{log_errno, log_of, CResult, Committed, Mode, State};
use crate::view;

impl State {
    pub fn write(&mut self, fd: c_int, data: &[u8], at: Option<u64>) -> CResult<usize> {
        let e = self.ofd(fd)?;
        if e.shared && at.is_none() {
            return self.write_shared(fd, data);
        }
        self.harvest(fd)?;
        let e = self.ofd(fd)?;
        if !e.writable {
            return Err(libc::EBADF);
        }
        let (id, append, offset) = (e.handle, e.append, e.offset);
        let pos = match at {
            Some(p) => p,
            None if append => self.append_place(id, data.len() as u64)?,
            None => offset,
        };
        self.write_handle(id, pos, data)?;
        crate::stats::captured(data.len());
        if at.is_none() {
            self.set_offset(fd, pos + data.len() as u64)?;
        }
        Ok(data.len())
    }

    /// A write at the offset of a description other processes share: its
    /// place comes from the shared offset (crate::shared::reserve_shared).
    fn write_shared(&mut self, fd: c_int, data: &[u8]) -> CResult<usize> {
        let (id, ofd) = self
            .fds
            .get(&fd)
            .map(|e| (e.handle, e.ofd))
            .ok_or(libc::EBADF)?;
        if !self.ofds.get(&ofd).ok_or(libc::EBADF)?.writable {
            return Err(libc::EBADF);
        }
        let pos = self.reserve_shared(id, ofd, data.len() as u64)?;
        self.write_handle(id, pos, data)?;
        crate::stats::captured(data.len());
        Ok(data.len())
    }

    /// A write into a handle at `pos` (through a descriptor, or with none
    /// for path operations and harvested bytes).
    pub fn write_handle(&mut self, id: u64, pos: u64, data: &[u8]) -> CResult<()> {
        self.changed(id);
        self.ensure_log(id)?;
        let h = self.handles.get_mut(&id).ok_or(libc::EBADF)?;
        log_of(h)?.write_at(pos, data).map_err(|e| {
            log_errno(
                &format!(
                    "writing {} bytes at offset {pos} of {}",
                    data.len(),
                    h.path.display()
                ),
                &e,
            )
        })?;
        h.size = h.size.max(pos + data.len() as u64);
        h.dirty = true;
        Ok(())
    }

    pub fn read(&mut self, fd: c_int, buf: &mut [u8], at: Option<u64>) -> CResult<usize> {
        self.harvest(fd)?;
        let e = self.ofd(fd)?;
        if !e.readable {
            return Err(libc::EBADF);
        }
        let (id, offset) = (e.handle, e.offset);
        let h = self.handles.get_mut(&id).ok_or(libc::EBADF)?;
        let pos = at.unwrap_or(offset);
        if pos >= h.size || buf.is_empty() {
            return Ok(0);
        }
        let n = (buf.len() as u64).min(h.size - pos) as usize;
        let (ranges, current) = match h.log.as_mut() {
            Some(log) => (
                log.read_own(pos, &mut buf[..n]).map_err(|e| {
                    log_errno(&format!("reading {} at offset {pos}", h.path.display()), &e)
                })?,
                log.epoch(),
            ),
            None => (
                vec![ReadRange {
                    off: pos,
                    len: n as u64,
                    source: ReadSource::NotOwn,
                }],
                0,
            ),
        };
        for r in ranges {
            if r.source == (ReadSource::Own { epoch: current }) {
                continue;
            }
            // Not written by this rank in this epoch: the committed state
            // answers (MPI shows other ranks' writes only after a sync),
            // except what this epoch truncated away, which reads as zeros.
            let lo = (r.off - pos) as usize;
            let dst = &mut buf[lo..lo + r.len as usize];
            let keep = h.cut.map_or(r.len, |c| c.saturating_sub(r.off).min(r.len)) as usize;
            dst[keep..].fill(0);
            if keep == 0 {
                continue;
            }
            // A data log may be drained and deleted between building the
            // view and reading it: then rebuild once and read again.
            let mut attempt = 0;
            loop {
                if h.view.is_none() {
                    let rel = h
                        .path
                        .strip_prefix(&self.cfg.prefix)
                        .map_err(|_| libc::EINVAL)?;
                    let rel = rel.as_os_str().as_bytes().to_vec();
                    let base = view::Base::of(&self.cfg, &rel)?;
                    let c = view::committed(&self.cfg.local, &self.cfg.job, &h.path, &rel, base)?;
                    h.view = Some(c.view);
                }
                let v = h.view.as_mut().expect("just built");
                if !v.complete {
                    report::line(&format!(
                        "read of bytes [{}, {}) of {}: they were written on another node, whose log is \
                         not here (reads across nodes are not supported under capture; docs/capture.md)",
                        r.off,
                        r.off + r.len,
                        h.path.display()
                    ));
                    return Err(libc::EIO);
                }
                match v.read(&h.path, r.off, &mut dst[..keep]) {
                    Err(libc::ENOENT) if attempt < 20 => {
                        h.view = None;
                        attempt += 1;
                    }
                    Err(libc::ENOENT) => {
                        report::line(&format!(
                            "{}: a data log vanished while reading it",
                            h.path.display()
                        ));
                        return Err(libc::EIO);
                    }
                    other => break other?,
                }
            }
            h.view_reads += 1;
        }
        if at.is_none() {
            self.set_offset(fd, pos + n as u64)?;
        }
        Ok(n)
    }

    pub fn set_size(&mut self, id: u64, size: u64) -> CResult<()> {
        self.changed(id);
        self.ensure_log(id)?;
        let h = self.handles.get_mut(&id).ok_or(libc::EBADF)?;
        log_of(h)?.set_size(size);
        h.size = size;
        h.cut = Some(h.cut.map_or(size, |c| c.min(size)));
        h.dirty = true;
        self.append_end_cut(id, size);
        Ok(())
    }

    /// `unlink` of the path of an open handle: the file is gone at the end
    /// of this epoch unless written again.
    pub fn delete(&mut self, id: u64) -> CResult<()> {
        self.changed(id);
        self.ensure_log(id)?;
        let h = self.handles.get_mut(&id).ok_or(libc::EBADF)?;
        log_of(h)?.delete();
        h.size = 0;
        h.cut = Some(0);
        h.dirty = true;
        self.append_end_cut(id, 0);
        Ok(())
    }

    /// `rename(source, this path)` on the handle of a path operation: the
    /// file becomes the source's content (`size` bytes) at the epoch `r`
    /// names, without a byte copied here.
    pub fn rename_from(&mut self, id: u64, r: RenameRef, size: u64) -> CResult<()> {
        self.changed(id);
        self.ensure_log(id)?;
        let h = self.handles.get_mut(&id).ok_or(libc::EBADF)?;
        log_of(h)?.rename_from(r);
        h.size = size;
        h.cut = Some(0);
        h.dirty = true;
        Ok(())
    }

    /// `rename(this path, target)`: gone under this name, as `delete`.
    pub fn renamed_to(&mut self, id: u64, r: RenameRef) -> CResult<()> {
        self.changed(id);
        self.ensure_log(id)?;
        let h = self.handles.get_mut(&id).ok_or(libc::EBADF)?;
        log_of(h)?.renamed_to(r);
        h.size = 0;
        h.cut = Some(0);
        h.dirty = true;
        Ok(())
    }

    /// `path_op_with`, and the epoch it committed.
    pub fn path_op_at(
        &mut self,
        abs: &Path,
        committed: Committed,
        op: impl FnOnce(&mut State, u64) -> CResult<()>,
    ) -> CResult<paralog_log::EpochId> {
        let id = self.new_handle(abs, Mode::Posix, 0, 1, None, committed)?;
        let r = op(self, id).and_then(|_| self.commit_single_at(id));
        self.maybe_release(id);
        r
    }

    /// A path operation (unlink, truncate) on a captured path that no
    /// handle has open: one epoch of a new open, committed at once, so it
    /// reaches the remote in order with everything else.
    pub fn path_op(
        &mut self,
        abs: &Path,
        op: impl FnOnce(&mut State, u64) -> CResult<()>,
    ) -> CResult<()> {
        let committed = self.committed(abs)?;
        self.path_op_with(abs, committed, op)
    }

    /// `path_op` with the committed state already at hand.
    pub fn path_op_with(
        &mut self,
        abs: &Path,
        committed: Committed,
        op: impl FnOnce(&mut State, u64) -> CResult<()>,
    ) -> CResult<()> {
        let id = self.new_handle(abs, Mode::Posix, 0, 1, None, committed)?;
        let r = op(self, id).and_then(|_| self.commit_single(id));
        self.maybe_release(id);
        r
    }

    /// `utimensat` and its family on the file of a handle: recorded in its
    /// epoch, and answered by stat in this process until the file changes.
    pub fn set_times(&mut self, id: u64, times: paralog_log::format::Times) -> CResult<()> {
        self.ensure_log(id)?;
        let h = self.handles.get_mut(&id).ok_or(libc::EBADF)?;
        log_of(h)?.set_times(times);
        h.dirty = true;
        let path = h.path.clone();
        let before = self.times.get(&path).copied();
        self.times
            .insert(path, before.unwrap_or_default().then(times));
        Ok(())
    }

    /// The file of a handle changed: the times a program set on it are
    /// gone (its log drops them too).
    fn changed(&mut self, id: u64) {
        if !self.times.is_empty() {
            if let Some(h) = self.handles.get(&id) {
                self.times.remove(&h.path);
            }
        }
    }

    pub fn preallocate(&mut self, id: u64, size: u64) -> CResult<()> {
        self.changed(id);
        self.ensure_log(id)?;
        let h = self.handles.get_mut(&id).ok_or(libc::EBADF)?;
        log_of(h)?.preallocate(size);
        h.size = h.size.max(size);
        h.dirty = true;
        Ok(())
    }
}
