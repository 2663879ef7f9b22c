//! The end of a file for every process that appends to it: `O_APPEND`
//! across descriptions and processes (`echo >> log` from the loops of a
//! shell script, `make -j` recipes, several programs appending to one
//! journal).
//!
//! The kernel appends at the file's size, which every writer sees at once.
//! Here every process is a writer of its own, logging its bytes where the
//! file's end was *as it knew it*: two processes appending at once would
//! log their lines at the same place, one over the other in the drained
//! file. So the place of an append is reserved where all of the job's
//! processes on the node find it: 8 bytes in a file of the job's ledger
//! directory (crate::ledger) named by the hash of the path, holding the end
//! after the last append, mapped shared by every appending process and
//! moved with one atomic compare-and-swap (no system call: a record lock
//! around a read and a write cost 4.5 us an append, docs/benchmarks.md §7).
//! The place is the furthest of that end and the
//! file's size as this process knows it (its own writes through other
//! descriptions, and what was committed before it opened the file).
//! A truncation (`ftruncate`, `truncate`, an `O_TRUNC` open, `unlink`)
//! moves a ledger that exists to the new size.
//!
//! Processes on other nodes do not share a ledger (as `O_APPEND` on NFS,
//! their appends are not ordered against these). An append that is never
//! committed (its process was killed) leaves its place as a hole of zeros
//! when a later append is drained past it.

use std::os::unix::ffi::OsStrExt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::state::{CResult, State};

/// The ledger name of `path`'s append end (beside the placeholders'
/// ledgers, which are named by inode numbers, all digits).
fn name(path: &std::path::Path) -> String {
    format!(
        "append-{:016x}",
        paralog_log::layout::path_hash(path.as_os_str().as_bytes())
    )
}

/// A file's append end, mapped shared: the same 8 bytes in every process
/// that maps it (0: nothing appended yet, or cut to 0).
pub struct EndMap(NonNull<AtomicU64>);

// SAFETY: the mapping belongs to the handle that holds it; the value is
// only touched atomically.
unsafe impl Send for EndMap {}

impl EndMap {
    /// Map the append end of `path` (creating its file if `create`); `None`
    /// if it does not exist or cannot be mapped (then the process goes by
    /// the size it knows). Raw system calls: `open` and `mmap` are
    /// capture's own wrappers.
    fn open(
        cfg: &paralog_settings::Config,
        path: &std::path::Path,
        create: bool,
    ) -> Option<EndMap> {
        let fd = crate::ledger::open_file(cfg, &name(path), create)?;
        // SAFETY: raw system calls on the descriptor opened here, closed here.
        unsafe {
            // A new file is grown to 8 bytes (zeros); growing an 8-byte one
            // to 8 changes nothing another process wrote.
            let mut sb: libc::stat = std::mem::zeroed();
            let sized = libc::syscall(libc::SYS_fstat, fd, &mut sb) == 0
                && (sb.st_size >= 8 || libc::syscall(libc::SYS_ftruncate, fd, 8i64) == 0);
            let p = if sized {
                libc::syscall(
                    libc::SYS_mmap,
                    std::ptr::null_mut::<libc::c_void>(),
                    8usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    0i64,
                ) as *mut libc::c_void
            } else {
                libc::MAP_FAILED
            };
            libc::syscall(libc::SYS_close, fd);
            if p == libc::MAP_FAILED {
                return None;
            }
            NonNull::new(p.cast::<AtomicU64>()).map(EndMap)
        }
    }

    fn end(&self) -> &AtomicU64 {
        // SAFETY: a page-aligned shared mapping of at least 8 bytes, alive
        // as long as `self`.
        unsafe { self.0.as_ref() }
    }
}

impl Drop for EndMap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`, unmapped once.
        unsafe {
            libc::syscall(libc::SYS_munmap, self.0.as_ptr(), 8usize);
        }
    }
}

impl State {
    /// The append end of handle `id`'s file: mapped (its file created if
    /// `create`) at its first use and kept with the handle.
    fn end_map(&mut self, id: u64, create: bool) -> Option<&EndMap> {
        let h = self.handles.get_mut(&id)?;
        if h.append_end.is_none() {
            h.append_end = EndMap::open(&self.cfg, &h.path, create);
        }
        h.append_end.as_ref()
    }

    /// Reserve `n` bytes at the end of handle `id`'s file for an append;
    /// returns their place.
    pub(crate) fn append_place(&mut self, id: u64, n: u64) -> CResult<u64> {
        let known = self.handles.get(&id).ok_or(libc::EBADF)?.size;
        let Some(m) = self.end_map(id, true) else {
            return Ok(known);
        };
        let end = m.end();
        let mut seen = end.load(Ordering::SeqCst);
        loop {
            let pos = seen.max(known);
            match end.compare_exchange(seen, pos + n, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return Ok(pos),
                Err(now) => seen = now,
            }
        }
    }

    /// Handle `id`'s file was truncated to `size` (or deleted: 0): later
    /// appends start there.
    pub(crate) fn append_end_cut(&mut self, id: u64, size: u64) {
        if let Some(m) = self.end_map(id, false) {
            m.end().store(size, Ordering::SeqCst);
        }
    }
}
