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
        let written = self.write_log(&buf, at, at);
        self.cur.buf = buf;
        written?;
        self.cur.buf.clear();
        Ok(())
    }

    /// `pwrite` bytes at `at`, at or past `end`, where the data log ends. A
    /// write that fails (a full disk) may have written part of them: the log
    /// is cut back to `end`, so that it still ends where the writer thinks
    /// (the commit record must end the file: bytes left after it would tear
    /// it).
    pub(super) fn write_log(&mut self, bytes: &[u8], at: u64, end: u64) -> Result<()> {
        let path = self.data_path();
        let f = self.cur.data.as_ref().expect("a data log to write");
        let written = durable::pwrite_all(f, bytes, at, &path);
        if written.is_err() && f.set_len(end).is_err() {
            self.cur.tail_unknown = true;
        }
        written
    }
}
