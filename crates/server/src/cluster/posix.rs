//! A POSIX remote, where several writers may write one file: the leader
//! gives the file its shape, then every server writes the winning bytes
//! whose logs it holds (independently, or with collective MPI-IO:
//! collective.rs), with an agreement after each step.

use paralog_backend::RemoteOp;
use paralog_log::reader::SourceReader;

use super::group::Run;
use super::group::{Agreed, Target};
use super::{Coordinator, PosixWrites};
use crate::retry::Failure;

impl Coordinator {
    /// Several servers write one POSIX file: its shape, then everyone's bytes.
    pub(super) fn drain_shared(&self, t: Target<'_>, reader: &mut SourceReader) -> Agreed<u64> {
        let collective = match t.backend.local_path(&t.f.rel) {
            Some(p) if self.cfg.posix_writes == PosixWrites::Collective && !t.lf.deleted => Some(p),
            _ => None,
        };
        // The leader gives the file its shape before anyone writes: bytes
        // past the cut gone, then the epoch's size (every winning byte
        // lies below it), or the deletion. One step and one fsync; the
        // writes that follow only fill bytes in. The file (and its
        // directories) exist before MPI_File_open, which makes neither,
        // and every collective write lands inside the file: ROMIO's
        // two-phase write fills a hole past the end with stale buffer
        // bytes (tests/mpi/README.md), inside the file it reads zeros.
        let shaped = if self.leader() {
            super::group::shape_version(t.backend, &t.f.rel, t.shape, t.lf, None)
        } else {
            Ok(())
        };
        if let Some(e) = self.agree(shaped.err())? {
            return Ok(Err(e));
        }
        let mut mine = 0u64;
        let mut writes = (|| -> Result<(), Failure> {
            if t.lf.deleted || collective.is_some() {
                return Ok(());
            }
            let mut sink = None;
            let mut buf: Vec<u8> = Vec::new();
            let mut copy = true;
            for Run {
                off,
                len: n,
                source,
                skip,
                ..
            } in t.my_runs(self.cfg.buf_bytes as u64)
            {
                let src = &t.lf.sources[source];
                let s = match &mut sink {
                    Some(s) => s,
                    None => sink.insert(t.backend.begin(&t.f.rel, t.shape).map_err(Failure::from)?),
                };
                if copy {
                    let file = reader.verified_file(src).map_err(Failure::damaged)?;
                    let at = src.extent.log_pos + skip;
                    copy = s.copy_from(file, at, n, off).map_err(Failure::from)?;
                }
                if !copy {
                    buf.resize(n as usize, 0);
                    reader.read(src, skip, &mut buf).map_err(Failure::damaged)?;
                    s.apply(RemoteOp::Write { off, data: &buf })
                        .map_err(Failure::from)?;
                }
                crate::failpoint::hit("cluster.mid_write");
                mine += n;
            }
            if let Some(s) = sink {
                s.commit().map_err(Failure::from)?;
            }
            Ok(())
        })();
        if let Some(path) = &collective {
            let (wrote, failed) = self.write_collective(path, t.g, t.lf, reader)?;
            mine = wrote;
            if let Some(e) = failed {
                writes = Err(e);
            }
        }
        if let Some(e) = self.agree(writes.err())? {
            return Ok(Err(e));
        }
        // Collective writes are no sink of ours, which would set the
        // file's times at its commit: the leader sets them once every
        // server's writes are in (the agreement above), so the drained
        // file has the times `stat` answered before the drain.
        if let (Some(path), Some(times)) = (&collective, t.shape.times) {
            let set = if self.leader() {
                paralog_backend::posix::set_path_times(path, times).map_err(Failure::from)
            } else {
                Ok(())
            };
            if let Some(e) = self.agree(set.err())? {
                return Ok(Err(e));
            }
        }
        Ok(Ok(self.sum(mine)?))
    }
}
