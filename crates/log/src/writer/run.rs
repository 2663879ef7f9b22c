//! The coalesced run: small writes that continue each other in the file and
//! in the log (a checkpoint's appends) are copied into the coalescing buffer
//! (`paralog_checksum::crc32c_extend`: checksummed just before the copy,
//! which then reads them from the cache) and gathered into one pending
//! range. The range is recorded in the epoch's extent map and the own-bytes
//! map once, when the run breaks or before anything uses the maps (a read
//! of own bytes, a size operation, a commit, a direct write), instead of
//! two map updates per write (docs/benchmarks.md §1).

use super::own_reads::OwnPiece;
use super::{LogPiece, RankLog};

/// Small writes not yet in the maps: `len` bytes at file offset `off`,
/// contiguous in the log from `log_pos`, all in phase `phase`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Run {
    off: u64,
    len: u64,
    log_pos: u64,
    phase: u32,
    /// CRC-32C of the run's bytes, or, when `joined`, of the map's range
    /// that the run continues followed by the run's bytes (its CRC was
    /// continued rather than combined, as in `LogPiece::joined_crc`).
    crc: u32,
    joined: bool,
}

impl RankLog {
    /// Copy a small write at file offset `off` into the coalescing buffer
    /// (which has room for it), continuing the pending run when the write
    /// continues it, else starting a new one.
    pub(super) fn buffer_write(&mut self, off: u64, data: &[u8]) {
        let pos = self.cur.log_end;
        let phase = self.cur.phase;
        let len = data.len() as u64;
        let cur = &mut self.cur;
        match &mut cur.run {
            Some(run)
                if run.off + run.len == off
                    && run.log_pos + run.len == pos
                    && run.phase == phase =>
            {
                run.crc = paralog_checksum::crc32c_extend(run.crc, &mut cur.buf, data);
                run.len += len;
            }
            _ => {
                self.settle();
                let seed = self.cur.continued_crc(off, pos);
                let crc =
                    paralog_checksum::crc32c_extend(seed.unwrap_or(0), &mut self.cur.buf, data);
                self.cur.run = Some(Run {
                    off,
                    len,
                    log_pos: pos,
                    phase,
                    crc,
                    joined: seed.is_some(),
                });
            }
        }
        self.cur.log_end += len;
    }

    /// Record the pending run in the epoch's map and the own-bytes map.
    /// Everything that reads or changes either map calls this first: the
    /// run is the newest of the rank's writes.
    pub(super) fn settle(&mut self) {
        let Some(run) = self.cur.run.take() else {
            return;
        };
        let (crc, joined_crc) = if run.joined {
            (None, Some(run.crc))
        } else {
            (Some(run.crc), None)
        };
        self.cur.map.insert(
            run.off,
            run.len,
            LogPiece {
                log_pos: run.log_pos,
                crc,
                phase: run.phase,
                joined_crc,
            },
        );
        self.own.insert(
            run.off,
            run.len,
            OwnPiece {
                epoch: self.epoch,
                log_pos: run.log_pos,
            },
        );
    }
}

/// A run with `joined` set that the map did not glue to its left range
/// would have no CRC of its own: `LogPiece` then says `None` and the
/// commit reads the bytes back (correct, only slower). This checks the
/// map glues exactly where `buffer_write` seeded the CRC.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::extent_map::Piece as _;

    #[test]
    fn seeded_run_is_glued() {
        let left = LogPiece {
            log_pos: 100,
            crc: Some(7),
            phase: 0,
            joined_crc: None,
        };
        let run = LogPiece {
            log_pos: 110,
            crc: None,
            phase: 0,
            joined_crc: Some(9),
        };
        let glued = left.join(10, &run, 5).expect("contiguous, same phase");
        assert_eq!(glued.crc, Some(9));
        assert_eq!(glued.log_pos, 100);
    }
}
