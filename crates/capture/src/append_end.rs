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
//! processes on the node find it: a ledger (crate::ledger) named by the
//! hash of the path, holding the end after the last append, read and moved
//! under its record lock. The place is the furthest of that end and the
//! file's size as this process knows it (its own writes through other
//! descriptions, and what was committed before it opened the file).
//! A truncation (`ftruncate`, `truncate`, an `O_TRUNC` open, `unlink`)
//! moves a ledger that exists to the new size.
//!
//! Processes on other nodes do not share a ledger (as `O_APPEND` on NFS,
//! their appends are not ordered against these). An append that is never
//! committed (its process was killed) leaves its place as a hole of zeros
//! when a later append is drained past it.

use crate::inherit::Keep;
use crate::ledger::Ledger;
use crate::state::{CResult, State};

/// The ledger name of `path`'s append end (beside the placeholders'
/// ledgers, which are named by inode numbers, all digits).
fn name(path: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    format!(
        "append-{:016x}",
        paralog_log::layout::path_hash(path.as_os_str().as_bytes())
    )
}

impl State {
    /// The append end's ledger of handle `id`, locked: opened (created if
    /// `create`) at its first use and kept with the handle.
    pub(crate) fn append_ledger(&mut self, id: u64, create: bool) -> Option<Ledger> {
        let h = self.handles.get_mut(&id)?;
        if let Some(l) = Ledger::lock(h.append_end) {
            return Some(l);
        }
        h.append_end.close();
        h.append_end =
            crate::ledger::open_named(&self.cfg, &name(&h.path), create).unwrap_or(Keep::NONE);
        Ledger::lock(h.append_end)
    }

    /// Reserve `n` bytes at the end of handle `id`'s file for an append
    /// through a description of this process's own; returns their place.
    pub(crate) fn append_place(&mut self, id: u64, n: u64) -> CResult<u64> {
        let ledger = self.append_ledger(id, true);
        let known = self.handles.get(&id).ok_or(libc::EBADF)?.size;
        let pos = ledger
            .as_ref()
            .and_then(Ledger::get)
            .map_or(known, |end| end.max(known));
        if let Some(l) = &ledger {
            l.set(pos + n);
        }
        Ok(pos)
    }

    /// Handle `id`'s file was truncated to `size` (or deleted: 0): later
    /// appends start there.
    pub(crate) fn append_end_cut(&mut self, id: u64, size: u64) {
        if let Some(l) = self.append_ledger(id, false) {
            l.set(size);
        }
    }
}
