//! A version of the object layout built by all servers: each server stores
//! the winning bytes whose logs it holds in a chunk of its own, makes it
//! durable and sends the leader only where they lie (64 bytes a piece);
//! the leader cuts, places every server's pieces over the previous
//! version, sets the size and publishes. No byte of the file travels
//! between servers.

use paralog_backend::ChunkedBackend;
use paralog_log::reader::SourceReader;

use super::group::Run;
use super::group::Target;
use super::{ClusterError, Coordinator};
use crate::retry::Failure;

impl Coordinator {
    pub(super) fn drain_chunked(
        &self,
        t: Target<'_>,
        chunked: &dyn ChunkedBackend,
        reader: &mut SourceReader,
    ) -> Result<Result<u64, Failure>, ClusterError> {
        let Target {
            f,
            g,
            lf,
            shape,
            backend,
        } = t;
        let me = self.comm.rank();
        let mut mine = 0u64;
        let stored = (|| -> Result<Vec<u8>, Failure> {
            if lf.deleted {
                return Ok(Vec::new());
            }
            let mut sink = None;
            let mut buf = Vec::new();
            let w = self.cfg.buf_bytes as u64;
            for &Run {
                off,
                len: n,
                source,
                skip,
                ..
            } in super::group::windows(g, lf, w, Some(me)).iter().flatten()
            {
                crate::failpoint::hit("cluster.mid_write");
                let s = match &mut sink {
                    Some(s) => s,
                    None => sink.insert(chunked.chunk_writer().map_err(Failure::from)?),
                };
                buf.resize(n as usize, 0);
                reader
                    .read(&lf.sources[source], skip, &mut buf)
                    .map_err(Failure::damaged)?;
                s.write(off, &buf).map_err(Failure::from)?;
                mine += n;
            }
            match sink {
                Some(s) => s.finish().map_err(Failure::from),
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
        let published = if self.leader() {
            super::group::shape_version(backend, &f.rel, shape, lf, Some(&all))
        } else {
            Ok(())
        };
        if let Some(e) = self.agree(published.err())? {
            return Ok(Err(e));
        }
        Ok(Ok(self.sum(mine)?))
    }
}
