//! The commit protocol of a [`RankLog`] (docs/format.md, "Commit protocol
//! and what is durable"):
//! 1. flush the coalescing buffer, `fdatasync` the data log once;
//! 2. write the manifest to `e<N>.manifest.tmp`, fsync, rename to
//!    `e<N>.manifest`, fsync the directory (this is the *local commit*);
//! 3. after the agreement (run by the caller) says every rank committed,
//!    create `e<N>.commit` (the *commit mark*; no fsync, it can be re-derived).
//!
//! A communicator of one commits each epoch as a generation of its own
//! instead (`single.rs`). Also here: the manifest built from the epoch's
//! extent map and size operations, and the close marker.

use std::collections::BTreeMap;

use super::{EpochState, LocalCommit, RankLog};
use crate::durable;
use crate::error::{IoContext, Result};
use crate::extent_map::ExtentMap;
use crate::format::{CommitMark, DataHeader, Extent, Manifest, Op};
use crate::layout::{self, EpochFileKind};

impl RankLog {
    /// Make the current epoch durable and write its manifest (local commit).
    /// May be called again for the same epoch if the agreement failed and the
    /// program went on: the new manifest then covers everything written.
    pub fn commit_local(&mut self) -> Result<LocalCommit> {
        self.flush()?;
        if self.staged.is_some() {
            return self.commit_single();
        }
        let data_path = self.data_path();
        if let Some(f) = &self.cur.data {
            // One fdatasync per epoch, not per write.
            f.sync_data().ctx("fdatasync data log", &data_path)?;
        }
        let manifest = self.build_manifest()?;
        let bytes = manifest.encode();
        durable::write_atomic(
            &self.paths.epoch_file(self.epoch, EpochFileKind::Manifest),
            &self
                .paths
                .epoch_file(self.epoch, EpochFileKind::ManifestTmp),
            &bytes,
        )?;
        Ok(LocalCommit {
            epoch: self.epoch,
            extents: manifest.extents().count(),
            data_bytes: self.epoch_data_bytes(),
        })
    }

    /// The local commit of a communicator of one: the next generation of
    /// the file, reserved and filled under the file's commit lock
    /// (`single.rs`). Its commit is also its global commit.
    fn commit_single(&mut self) -> Result<LocalCommit> {
        let _lock = crate::single::lock(&self.paths.file_dir)?;
        let gen = crate::single::reserve_generation(&self.paths.file_dir)?;
        self.ident.gen = gen;
        let data_path = self.data_path();
        if let Some(f) = &self.cur.data {
            let header = DataHeader {
                rank: self.rank,
                comm_size: self.comm_size,
                gen,
                epoch: self.epoch,
            };
            crate::single::stamp_header(f, &data_path, header)?;
            f.sync_data().ctx("fdatasync data log", &data_path)?;
        }
        let manifest = self.build_manifest()?;
        durable::write_atomic(
            &self.paths.epoch_file(self.epoch, EpochFileKind::Manifest),
            &self
                .paths
                .epoch_file(self.epoch, EpochFileKind::ManifestTmp),
            &manifest.encode(),
        )?;
        self.paths = crate::single::publish(&self.paths, gen)?;
        Ok(LocalCommit {
            epoch: self.epoch,
            extents: manifest.extents().count(),
            data_bytes: self.epoch_data_bytes(),
        })
    }

    /// A communicator of one starts its next epoch in a new staging place;
    /// its earlier bytes are read back through the committed state.
    fn restage(&mut self) -> Result<()> {
        let next = crate::single::staging_paths(&self.paths.file_dir, &self.paths.job_dir);
        let committed = std::mem::replace(&mut self.paths, next);
        self.staged = Some(Some(committed.rank_dir));
        self.ident.gen = crate::single::STAGED_GEN;
        self.epoch = 1;
        self.own = ExtentMap::new();
        durable::create_dirs_below(&self.paths.file_dir, &self.paths.rank_dir)
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
        durable::write_private(&mark_path, &mark.encode(), "write commit mark")?;
        let done = self.epoch;
        self.epoch += 1;
        self.cur = EpochState::default();
        if self.staged.is_some() {
            self.restage()?;
            return Ok(done);
        }
        Ok(done)
    }

    /// Record that this open ended (after its last consistency point). No
    /// fsync: a lost marker only delays an upload that waits for the end
    /// of the open until the job ends or the file is opened again.
    pub fn mark_closed(&self) -> Result<()> {
        if let Some(last) = &self.staged {
            // The staging place of an epoch that never came holds nothing.
            if self.cur.data.is_none() && self.cur.buf.is_empty() && self.cur.size_ops.is_empty() {
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
        let mut ops = Vec::with_capacity(self.cur.map.len() + self.cur.size_ops.len());
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
        Ok(Manifest {
            ident: self.ident.clone(),
            rank: self.rank,
            comm_size: self.comm_size,
            epoch: self.epoch,
            data_len: if self.cur.data.is_some() {
                self.cur.log_end
            } else {
                0
            },
            ops,
        })
    }

    /// Checksum of a range cut out of a write, read back from the log (it
    /// was just written: the page cache answers).
    fn crc_from_log(&self, log_pos: u64, len: u64) -> Result<u32> {
        let f = self.cur.data.as_ref().expect("extents imply a data log");
        let path = self.data_path();
        let mut crc = 0;
        let mut chunk = vec![0u8; (len as usize).min(1 << 20)];
        let mut done = 0;
        while done < len {
            let n = ((len - done) as usize).min(chunk.len());
            durable::pread_exact(f, &mut chunk[..n], log_pos + done, &path)?;
            crc = paralog_checksum::crc32c_append(crc, &chunk[..n]);
            done += n as u64;
        }
        Ok(crc)
    }
}
