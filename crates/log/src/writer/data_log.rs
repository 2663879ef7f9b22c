//! The current epoch's data log: opened (created with its header) at the
//! first bytes that reach it, written at its end, the coalescing buffer
//! flushed into it.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use crate::durable::{self, FILE_MODE};
use crate::error::{IoContext, Result};
use crate::format::{DataHeader, DATA_HEADER_LEN};
use crate::layout::EpochFileKind;

use super::{CommitSync, RankLog};

/// Bytes of a large write checksummed and written per step
/// ([`RankLog::write_log_checked`]): well inside a core's L2 cache (1 MiB
/// on the project's machines), large enough that the extra `pwrite` calls
/// cost nothing measurable (docs/benchmarks.md §1).
const DIRECT_PIECE: usize = 256 << 10;

impl RankLog {
    pub(super) fn data_path(&self) -> PathBuf {
        self.paths.epoch_file(self.epoch, EpochFileKind::Data)
    }

    pub(super) fn ensure_data(&mut self) -> Result<()> {
        if self.cur.data.is_some() {
            return Ok(());
        }
        if !self.dirs_ready {
            let (file_dir, rank_dir) = (self.paths.file_dir.clone(), self.paths.rank_dir.clone());
            self.create_dirs(&file_dir, &rank_dir)?;
            self.dirs_ready = true;
        }
        let path = self.data_path();
        if self.cur.created {
            // Committed, then the agreement failed: the epoch goes on.
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .ctx("open data log", &path)?;
            self.cur.data = Some(f);
            return Ok(());
        }
        // create_new: a data log that exists belongs to someone else's epoch.
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(&path)
            .ctx("create data log", &path)?;
        let header = DataHeader {
            rank: self.rank,
            comm_size: self.comm_size,
            gen: self.ident.gen,
            epoch: self.epoch,
        };
        durable::pwrite_all(&f, &header.encode(), 0, &path)?;
        self.cur.data = Some(f);
        self.cur.created = true;
        self.cur.log_end = DATA_HEADER_LEN;
        if self.sync == CommitSync::Explicit {
            // The data log's own name.
            self.unsynced_dirs.push(self.paths.rank_dir.clone());
        }
        Ok(())
    }

    /// Write the coalescing buffer to the log. On failure the buffer is kept,
    /// so a later commit can retry (ENOSPC that cleared up, say).
    pub(super) fn flush(&mut self) -> Result<()> {
        if self.cur.buf.is_empty() {
            return Ok(());
        }
        let at = self.cur.buf_pos();
        let buf = std::mem::take(&mut self.cur.buf);
        let written = self.write_log(&buf, at);
        self.cur.buf = buf;
        written?;
        self.cur.buf.clear();
        Ok(())
    }

    /// `pwrite` bytes at `at`, where the data log ends. A write that fails
    /// (a full disk) may have written part of them: the log is cut back to
    /// `at`, so that it still ends where the writer thinks (the commit
    /// record must end the file: bytes left after it would tear it).
    pub(super) fn write_log(&mut self, bytes: &[u8], at: u64) -> Result<()> {
        let path = self.data_path();
        let f = self.cur.data.as_ref().expect("a data log to write");
        let written = durable::pwrite_all(f, bytes, at, &path);
        if written.is_err() && f.set_len(at).is_err() {
            self.cur.tail_unknown = true;
        }
        written
    }

    /// `pwrite` a large write at `at`, where the data log ends, straight
    /// from the caller's buffer, and return its CRC-32C continued from
    /// `seed`. It goes in pieces, each checksummed just before its
    /// `pwrite`: the `pwrite`'s copy then reads it from the cache, where a
    /// checksum of the whole write first would read a write larger than
    /// the cache twice from memory. On failure the log is cut back to `at`.
    pub(super) fn write_log_checked(&mut self, bytes: &[u8], at: u64, seed: u32) -> Result<u32> {
        let path = self.data_path();
        let f = self.cur.data.as_ref().expect("a data log to write");
        let mut crc = seed;
        let mut done = 0u64;
        for piece in bytes.chunks(DIRECT_PIECE) {
            crc = paralog_checksum::crc32c_append(crc, piece);
            if let Err(e) = durable::pwrite_all(f, piece, at + done, &path) {
                if f.set_len(at).is_err() {
                    self.cur.tail_unknown = true;
                }
                return Err(e);
            }
            done += piece.len() as u64;
        }
        Ok(crc)
    }
}
