//! A version of the object layout built by all servers: each server stores
//! the winning bytes whose logs it holds in a chunk of its own, makes it
//! durable and sends the leader only where they lie (64 bytes a piece);
//! the leader cuts, places every server's pieces over the previous
//! version, sets the size and publishes. No byte of the file travels
//! between servers.

use paralog_backend::ChunkedBackend;
use paralog_log::reader::SourceReader;

use super::group::{Agreed, Target};
use super::Coordinator;
use crate::retry::Failure;

impl Coordinator {
    pub(super) fn drain_chunked(
        &self,
        t: Target<'_>,
        chunked: &dyn ChunkedBackend,
        reader: &mut SourceReader,
    ) -> Agreed<u64> {
        let mut mine = 0u64;
        let stored = (|| -> Result<Vec<u8>, Failure> {
            if t.lf.deleted {
                return Ok(Vec::new());
            }
            let mut sink = None;
            let mut buf = Vec::new();
            for r in t.my_runs(self.cfg.buf_bytes as u64) {
                crate::failpoint::hit("cluster.mid_write");
                let s = match &mut sink {
                    Some(s) => s,
                    None => sink.insert(chunked.chunk_writer().map_err(Failure::from)?),
                };
                buf.resize(r.len as usize, 0);
                reader
                    .read(&t.lf.sources[r.source], r.skip, &mut buf)
                    .map_err(Failure::damaged)?;
                s.write(r.off, &buf).map_err(Failure::from)?;
                mine += r.len;
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
            super::group::shape_version(t.backend, &t.f.rel, t.shape, t.lf, Some(&all))
        } else {
            Ok(())
        };
        if let Some(e) = self.agree(published.err())? {
            return Ok(Err(e));
        }
        Ok(Ok(self.sum(mine)?))
    }
}
