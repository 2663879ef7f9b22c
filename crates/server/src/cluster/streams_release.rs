//! Local retention in the server job (docs/streams.md "Local retention"):
//! after a stream's round that left every node's cut log at the same
//! round, every cut of it published, and enough to give up on some node
//! (each round's views say how much: streams_view::release_due), the
//! servers release together: each node's segments that may go and the
//! producers it keeps exchanged (one allgather), each node deletes its
//! own (an agreement; counted in its status), then every node writes the
//! same base (an agreement). The node's steps
//! are the one-node drain's (`paralog_stream::nodes::NodeShare`, over
//! `paralog_stream::release`); a crash between them is repaired by the
//! next job (a node whose log was not rebased copies the others' base).

use std::collections::BTreeSet;

use super::wire::{In, Out};
use super::{ClusterError, Coordinator};
use crate::retry::Failure;

impl Coordinator {
    /// Release `stream` on every node (every server calls it alike);
    /// `Some(why)` when it failed on some server (the same on all).
    pub(super) fn release_stream(&mut self, stream: &str) -> Result<Option<String>, ClusterError> {
        // 1. What each node gives up, and the producers of the log it keeps.
        let mine = self.share(stream).and_then(|s| s.releasable());
        let local = mine.as_ref().err().map(|e| Failure::Retry(e.to_string()));
        if let Some(f) = self.agree(local)? {
            return Ok(Some(f.message().into()));
        }
        let mine = mine.expect("every server found its share after the agreement");
        let mut o = Out::default();
        for list in [mine.gone(), mine.held.clone()] {
            o.u64(list.len() as u64);
            for id in list {
                o.u64(id);
            }
        }
        let (all, counts) = self.dog.watch(|| self.comm.gather_bytes(&o.0, None))?;
        let (mut held, mut gone) = (BTreeSet::new(), 0usize);
        let mut at = 0;
        for (node, c) in counts.iter().enumerate() {
            let mut i = In::new(&all[at..at + c], node);
            gone += i.list(|i| i.u64())?.len();
            held.extend(i.list(|i| i.u64())?);
            i.done()?;
            at += c;
        }
        let bytes = self.sum(mine.bytes())?;
        // 2. Every node deletes its own; all must have before any rebases
        // (a base drops the positions of the producers deleted).
        let deleted = self.share(stream).and_then(|s| s.delete_released(mine));
        let local = match deleted {
            Ok(d) => {
                // This node's own, for its status (counted once deleted,
                // whatever the job does next).
                let b = d.iter().map(|x| x.1).sum();
                self.ctl
                    .lock()
                    .stream_released
                    .add(stream, d.len() as u64, b);
                None
            }
            Err(e) => Some(Failure::Retry(e.to_string())),
        };
        if let Some(f) = self.agree(local)? {
            return Ok(Some(f.message().into()));
        }
        // 3. The same base on every node.
        let based = self.share(stream).and_then(|s| s.rebase(&held));
        let round = based.as_ref().map(|b| b.round).unwrap_or_default();
        let local = based.err().map(|e| Failure::Retry(e.to_string()));
        if let Some(f) = self.agree(local)? {
            return Ok(Some(f.message().into()));
        }
        tracing::info!(stream = %stream, segments = gone, bytes, base = round, "drained segments released on every node; the cut logs rebased");
        Ok(None)
    }
}
