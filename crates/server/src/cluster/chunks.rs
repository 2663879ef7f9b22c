//! A version of the object layout built by all servers: each server stores
//! the winning bytes whose logs it holds in a chunk of its own, makes it
//! durable and sends the leader only where they lie (64 bytes a piece);
//! the leader cuts, places every server's pieces over the previous
//! version, sets the size and publishes. No byte of the file travels
//! between servers.

use paralog_backend::{Backend, ChunkedBackend, EpochShape, RemoteOp};
use paralog_log::reader::SourceReader;
use paralog_log::LogicalFile;

use super::mpi::Reduce;
use super::plan::{GlobalFile, Group};
use super::{remote_error, ClusterError, Coordinator, StepError};

impl Coordinator {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn drain_chunked(
        &self,
        f: &GlobalFile,
        g: &Group,
        lf: &LogicalFile,
        shape: &EpochShape,
        backend: &dyn Backend,
        chunked: &dyn ChunkedBackend,
        reader: &mut SourceReader,
    ) -> Result<Result<u64, StepError>, ClusterError> {
        let me = self.comm.rank();
        let mut mine = 0u64;
        let stored = (|| -> Result<Vec<u8>, StepError> {
            if lf.deleted {
                return Ok(Vec::new());
            }
            let mut sink = None;
            let mut buf = Vec::new();
            for (off, len, piece) in lf.pieces() {
                let src = &lf.sources[piece.source];
                if g.owner.get(&(src.epoch.0, src.rank)) != Some(&me) {
                    continue;
                }
                let s = match &mut sink {
                    Some(s) => s,
                    None => sink.insert(chunked.chunk_writer().map_err(remote_error)?),
                };
                let mut done = 0;
                while done < len {
                    crate::failpoint::hit("cluster.mid_write");
                    let n = (len - done).min(self.cfg.buf_bytes as u64);
                    buf.resize(n as usize, 0);
                    reader
                        .read(src, piece.skip + done, &mut buf)
                        .map_err(|e| StepError::Park(e.to_string()))?;
                    s.write(off + done, &buf).map_err(remote_error)?;
                    done += n;
                    mine += n;
                }
            }
            match sink {
                Some(s) => s.finish().map_err(remote_error),
                None => Ok(Vec::new()),
            }
        })();
        let (pieces, err) = match stored {
            Ok(p) => (p, None),
            Err(e) => (Vec::new(), Some(e)),
        };
        if let Some(e) = self.agree(err)? {
            return Ok(Err(e));
        }
        let (all, _) = self
            .dog
            .watch(|| self.comm.gather_bytes(&pieces, Some(0)))?;
        let published = (|| -> Result<(), StepError> {
            if !self.leader() {
                return Ok(());
            }
            let mut s = backend.begin(&f.rel, shape).map_err(remote_error)?;
            if lf.deleted {
                s.apply(RemoteOp::Delete).map_err(remote_error)?;
            } else {
                if let Some(c) = lf.size.base_cut {
                    s.apply(RemoteOp::SetSize(c)).map_err(remote_error)?;
                }
                s.place(&all).map_err(remote_error)?;
                s.apply(if lf.size.size_set {
                    RemoteOp::SetSize(lf.size.min_size)
                } else {
                    RemoteOp::Preallocate(lf.size.min_size)
                })
                .map_err(remote_error)?;
            }
            s.commit().map_err(remote_error)
        })();
        if let Some(e) = self.agree(published.err())? {
            return Ok(Err(e));
        }
        let mut v = [mine as i64];
        self.dog
            .watch(|| self.comm.allreduce(&mut v, Reduce::Sum))?;
        Ok(Ok(v[0] as u64))
    }
}
