//! Reads of the rank's own bytes: its newest bytes at an offset from any
//! of its epochs still held locally, the current one's from the data log or
//! the coalescing buffer.

use std::fs::File;
use std::io;

use crate::durable;
use crate::error::{IoContext, Result};
use crate::extent_map::position_piece;
use crate::layout::EpochFileKind;

use super::RankLog;

/// The rank's own bytes across all its epochs of this open (for reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct OwnPiece {
    pub(super) epoch: u64,
    pub(super) log_pos: u64,
}

position_piece!(OwnPiece { epoch, log_pos });

/// How a range asked of [`RankLog::read_own`] was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadSource {
    /// The rank's own newest bytes, written in `epoch`, copied into the
    /// buffer. Bytes of an earlier epoch than the current one may since have
    /// been overwritten by another rank: only a one-rank communicator, or
    /// the current epoch (where MPI requires ranks to write disjoint bytes),
    /// makes them authoritative. The caller decides.
    Own { epoch: u64 },
    /// This rank never wrote these bytes (they may be another rank's, a
    /// hole, or the remote's): the log cannot answer.
    NotOwn,
    /// This rank wrote them in an epoch whose local data is gone (drained).
    Evicted { epoch: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRange {
    pub off: u64,
    pub len: u64,
    pub source: ReadSource,
}

impl RankLog {
    /// Fill `buf` with this rank's own newest bytes at `off`, from any of its
    /// epochs still held locally, and say which ranges could not be answered.
    pub fn read_own(&mut self, off: u64, buf: &mut [u8]) -> Result<Vec<ReadRange>> {
        // The pending run holds the newest bytes.
        self.settle();
        // The data log is closed after a local commit; a read between it
        // and the end of the epoch opens it again.
        if self.cur.created {
            self.ensure_data()?;
        }
        let mut out = Vec::new();
        for c in self.own.lookup(off, buf.len() as u64) {
            let dst = &mut buf[(c.off - off) as usize..(c.off - off + c.len) as usize];
            let Some(piece) = c.value else {
                out.push(ReadRange {
                    off: c.off,
                    len: c.len,
                    source: ReadSource::NotOwn,
                });
                continue;
            };
            let source = if piece.epoch == self.epoch {
                self.read_current(piece.log_pos, dst)?;
                ReadSource::Own { epoch: piece.epoch }
            } else {
                let path = self.paths.epoch_file(piece.epoch, EpochFileKind::Data);
                match File::open(&path) {
                    Ok(f) => {
                        durable::pread_exact(&f, dst, piece.log_pos, &path)?;
                        ReadSource::Own { epoch: piece.epoch }
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        ReadSource::Evicted { epoch: piece.epoch }
                    }
                    Err(e) => return Err(e).ctx("open data log", &path),
                }
            };
            out.push(ReadRange {
                off: c.off,
                len: c.len,
                source,
            });
        }
        Ok(out)
    }

    pub(super) fn read_current(&self, log_pos: u64, dst: &mut [u8]) -> Result<()> {
        let buf_pos = self.cur.buf_pos();
        let end = log_pos + dst.len() as u64;
        // The range may straddle the flushed part and the buffer.
        if log_pos < buf_pos {
            let n = (buf_pos.min(end) - log_pos) as usize;
            let f = self.cur.data.as_ref().expect("own bytes imply a data log");
            durable::pread_exact(f, &mut dst[..n], log_pos, &self.data_path())?;
        }
        if end > buf_pos {
            let from = log_pos.max(buf_pos);
            let d0 = (from - log_pos) as usize;
            let b0 = (from - buf_pos) as usize;
            let n = (end - from) as usize;
            dst[d0..].copy_from_slice(&self.cur.buf[b0..b0 + n]);
        }
        Ok(())
    }
}
