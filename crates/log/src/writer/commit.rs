//! The commit protocol of a [`RankLog`] (docs/format.md, "Commit protocol
//! and what is durable"), format 2:
//! 1. append the epoch's manifest and its commit trailer to the data log
//!    (with what is left in the coalescing buffer, in one write) and
//!    `fdatasync` the data log once: this is the *local commit*. No other
//!    file, rename or directory fsync (on a journaling file system; under
//!    [`CommitSync::Explicit`] the data is made durable before the record,
//!    and the directories that changed after it);
//! 2. after the agreement (run by the caller) says every rank committed,
//!    create `e<N>.commit` (the *commit mark*; no fsync, it can be re-derived).
//!
//! A communicator of one commits each epoch as a generation of its own
//! instead (`single.rs`). Also here: the manifest built from the epoch's
//! extent map and size operations, and the close marker.

use std::collections::BTreeMap;

use super::{CommitSync, EpochState, LocalCommit, RankLog};
use crate::durable;
use crate::error::{IoContext, Result};
use crate::extent_map::ExtentMap;
use crate::format::{
    CommitMark, CommitTrailer, DataHeader, Extent, Manifest, Op, DATA_HEADER_USED,
};
use crate::layout::{self, EpochFileKind};

impl RankLog {
    /// Make the current epoch durable with its manifest (local commit).
    /// May be called again for the same epoch if the agreement failed and the
    /// program went on: the new commit record, appended after everything
    /// written since, covers it all.
    pub fn commit_local(&mut self) -> Result<LocalCommit> {
        if self.staged.is_some() {
            return self.commit_single();
        }
        let done = self.append_commit_record()?;
        // Closed: the server's watcher sees it (CLOSE_WRITE), and a
        // committed data log is not written again.
        self.cur.data = None;
        Ok(done)
    }

    /// The local commit of a communicator of one: the next generation of
    /// the file, reserved and filled under the file's commit lock
    /// (`single.rs`). Its commit is also its global commit.
    fn commit_single(&mut self) -> Result<LocalCommit> {
        let _lock = crate::single::lock(&self.paths.file_dir)?;
        let gen = crate::single::reserve_generation(&self.paths.file_dir)?;
        if self.sync == CommitSync::Explicit {
            self.unsynced_dirs.push(self.paths.file_dir.clone());
        }
        self.ident.gen = gen;
        self.ensure_data()?;
        let data_path = self.data_path();
        let f = self.cur.data.as_ref().expect("opened by ensure_data");
        crate::single::stamp_header(f, &data_path, self.header())?;
        let before = self.cur.records;
        let done = self.append_commit_record()?;
        // The fdatasync made `g<G>` durable too (journal) or it was synced
        // (explicit): a crash from here on leaves the epoch committed in
        // its staging directory, which readers take as generation G's.
        match crate::single::publish(&self.paths, gen) {
            Ok(paths) => self.paths = paths,
            Err(e) => {
                // Told it failed: the next commit reserves another
                // generation; this record must not be taken for G's.
                let len = self.cur.records - before;
                self.withdraw_record(self.cur.log_end - len, len);
                return Err(e);
            }
        }
        self.cur.data = None;
        Ok(done)
    }

    /// This epoch's data log header, as it is (or will be) on disk.
    fn header(&self) -> DataHeader {
        DataHeader {
            rank: self.rank,
            comm_size: self.comm_size,
            gen: self.ident.gen,
            epoch: self.epoch,
        }
    }

    /// Step 1 of the protocol: the commit record after the data (a data log
    /// is created for an epoch without data: it holds just the record),
    /// made durable as the policy says.
    fn append_commit_record(&mut self) -> Result<LocalCommit> {
        self.settle();
        self.ensure_data()?;
        let explicit = self.sync == CommitSync::Explicit;
        if explicit {
            // No order between the pages of one fdatasync: the data first,
            // so that a valid record always has its data.
            self.flush()?;
            self.sync_data()?;
        }
        let manifest = self.build_manifest()?;
        let header = self.header().encode();
        let at = self.cur.log_end;
        let record = CommitTrailer::record(&header[..DATA_HEADER_USED], &manifest.encode(), at);
        let path = self.data_path();
        let f = self.cur.data.as_ref().expect("opened by ensure_data");
        // What the buffer holds and the record, in one write.
        let buffered = self.cur.buf.len();
        let from = self.cur.buf_pos();
        if self.cur.tail_unknown {
            f.set_len(from).ctx("cut the data log back", &path)?;
            self.cur.tail_unknown = false;
        }
        self.cur.buf.extend_from_slice(&record);
        if let Err(e) = durable::pwrite_all(f, &self.cur.buf, from, &path) {
            // Keep the data for a retry, and no half record at the end.
            self.cur.buf.truncate(buffered);
            if f.set_len(from).is_err() {
                self.cur.tail_unknown = true;
            }
            return Err(e);
        }
        self.cur.buf.clear();
        self.cur.log_end = at + record.len() as u64;
        self.cur.records += record.len() as u64;
        let synced = self.sync_data().and_then(|()| {
            if explicit {
                for dir in &self.unsynced_dirs {
                    durable::sync_dir(dir)?;
                }
                self.unsynced_dirs.clear();
            }
            Ok(())
        });
        if let Err(e) = synced {
            // The program is told the commit failed: no record may say
            // otherwise (another rank's, or a one-process writer's staging
            // directory, would make it count).
            self.withdraw_record(at, record.len() as u64);
            return Err(e);
        }
        Ok(LocalCommit {
            epoch: self.epoch,
            extents: manifest.extents().count(),
            data_bytes: manifest.data_len - crate::format::DATA_HEADER_LEN,
        })
    }

    /// Remove the commit record just appended at `at` (its commit failed
    /// after the write): the log ends with its data again.
    fn withdraw_record(&mut self, at: u64, len: u64) {
        if let Some(f) = &self.cur.data {
            let _ = f.set_len(at);
        }
        self.cur.log_end = at;
        self.cur.records -= len;
    }

    fn sync_data(&self) -> Result<()> {
        let f = self.cur.data.as_ref().expect("a data log to sync");
        f.sync_data().ctx("fdatasync data log", &self.data_path())
    }

    /// A communicator of one starts its next epoch in a new staging place
    /// (made when the epoch first writes: most closed files never do);
    /// its earlier bytes are read back through the committed state.
    fn restage(&mut self) {
        let next = crate::single::staging_paths(&self.paths.file_dir, &self.paths.job_dir);
        let committed = std::mem::replace(&mut self.paths, next);
        self.staged = Some(Some(committed.rank_dir));
        self.ident.gen = crate::single::STAGED_GEN;
        self.epoch = 1;
        self.own = ExtentMap::new();
        self.dirs_ready = false;
    }

    /// After the agreement said every rank committed the current epoch: write
    /// the commit mark and start the next epoch.
    pub fn complete_epoch(&mut self) -> Result<u64> {
        let mark_path = self.paths.epoch_file(self.epoch, EpochFileKind::Mark);
        let mark = CommitMark {
            rank: self.rank,
            comm_size: self.comm_size,
            gen: self.ident.gen,
            epoch: self.epoch,
        };
        // No fsync: a lost mark is re-derived from the manifests (design).
        // Nor is one that cannot be written (a full disk) an error: the
        // agreement made the epoch committed, and the rank must move on
        // (writing on into the committed data log would tear its record).
        let _ = durable::write_private(&mark_path, &mark.encode(), "write commit mark");
        // The own-bytes map keeps the epoch's writes (its commit settled
        // the run already; this is for a caller that did not commit).
        self.settle();
        let done = self.epoch;
        self.epoch += 1;
        self.cur = EpochState::default();
        if self.staged.is_some() {
            self.restage();
        }
        Ok(done)
    }

    /// Record that this open ended (after its last consistency point). No
    /// fsync: a lost marker only delays an upload that waits for the end
    /// of the open until the job ends or the file is opened again.
    pub fn mark_closed(&self) -> Result<()> {
        if let Some(last) = &self.staged {
            // The staging place of an epoch that never came holds nothing.
            if self.dirs_ready
                && !self.cur.created
                && self.cur.buf.is_empty()
                && self.cur.size_ops.is_empty()
            {
                crate::single::remove_staging(&self.paths.gen_dir);
            }
            let Some(last) = last else { return Ok(()) };
            return durable::write_private(
                &last.join(layout::CLOSED_FILE),
                b"",
                "write close marker",
            );
        }
        let p = self.paths.rank_dir.join(layout::CLOSED_FILE);
        durable::write_private(&p, b"", "write close marker")
    }

    fn build_manifest(&self) -> Result<Manifest> {
        let mut by_phase: BTreeMap<u32, Vec<Extent>> = BTreeMap::new();
        for (off, len, piece) in self.cur.map.iter() {
            let crc = match piece.crc {
                Some(c) => c,
                None => self.crc_from_log(piece.log_pos, len)?,
            };
            by_phase.entry(piece.phase).or_default().push(Extent {
                file_off: off,
                len,
                log_pos: piece.log_pos,
                crc,
            });
        }
        let mut ops = Vec::with_capacity(self.cur.map.len() + self.cur.size_ops.len() + 1);
        ops.extend(self.create_mode.map(Op::Mode));
        // The phase a reader infers (each size operation ends one); a phase
        // operation says where the next extents belong when it differs.
        let mut implied = 0u32;
        let mut size_ops = self.cur.size_ops.iter().peekable();
        let mut groups = by_phase.into_iter().peekable();
        loop {
            let next_size = size_ops.peek().map(|(p, _)| *p);
            let next_group = groups.peek().map(|(p, _)| *p);
            let p = match (next_group, next_size) {
                (None, None) => break,
                (Some(g), Some(s)) => g.min(s),
                (Some(g), None) => g,
                (None, Some(s)) => s,
            };
            if p != implied {
                ops.push(Op::Phase(u64::from(p)));
                implied = p;
            }
            if next_group == Some(p) {
                let (_, extents) = groups.next().expect("peeked");
                ops.extend(extents.into_iter().map(Op::Extent));
            }
            if next_size == Some(p) {
                let (_, op) = size_ops.next().expect("peeked");
                ops.push(*op);
                implied = p + 1;
            }
        }
        ops.extend(self.cur.times.map(Op::Times));
        Ok(Manifest {
            ident: self.ident.clone(),
            rank: self.rank,
            comm_size: self.comm_size,
            epoch: self.epoch,
            // Where the data ends and the commit record will begin.
            data_len: self.cur.log_end,
            ops,
        })
    }

    /// Checksum of a range cut out of a write, read back from the log or the
    /// coalescing buffer (it was just written: the page cache answers).
    fn crc_from_log(&self, log_pos: u64, len: u64) -> Result<u32> {
        let mut crc = 0;
        let mut chunk = vec![0u8; (len as usize).min(1 << 20)];
        let mut done = 0;
        while done < len {
            let n = ((len - done) as usize).min(chunk.len());
            self.read_current(log_pos + done, &mut chunk[..n])?;
            crc = paralog_checksum::crc32c_append(crc, &chunk[..n]);
            done += n as u64;
        }
        Ok(crc)
    }
}
