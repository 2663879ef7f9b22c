//! A recorded cut applied by the server job (docs/streams.md "Many
//! nodes"): each partition's frames gathered at its owner, one gather per
//! owner with events this round (a node's frames of a partition it owns
//! never leave it), the owners' batches written and fsynced, an
//! agreement, then the watermark published by the leader. Applying a
//! cut again writes the same bytes at the same positions.

use paralog_stream::format::Cut;
use paralog_stream::nodes;
use paralog_stream::{RoundWrite, StreamPlace, StreamRemote};

use super::mpi::MpiError;
use super::Coordinator;
use crate::retry::Failure;

/// The server that owns partition `p` of a stream: on a directory each
/// partition's own (`p mod servers`), so that the partitions' appends are
/// spread over the servers; on an object remote the leader, which PUTs
/// every object of the round and then the index that names them.
pub(super) fn owner(dir: bool, p: u32, servers: usize) -> usize {
    if dir {
        p as usize % servers
    } else {
        0
    }
}

impl Coordinator {
    /// Apply `cut` (which every server holds) of `stream`; `Some(why)` when
    /// it failed on some server (the same on every server).
    pub(super) fn apply_cut(
        &mut self,
        place: &StreamPlace,
        remote: &dyn StreamRemote,
        stream: &str,
        n: u32,
        cut: &Cut,
    ) -> Result<Option<String>, MpiError> {
        let (me, size) = (self.comm.rank(), self.comm.size());
        let dir = matches!(place, StreamPlace::Dir(_));
        let own = |p: u32| owner(dir, p, size);
        let rdir = remote.stream_dir(stream);
        let mut local: Option<String> = None;
        let (out, sent) = match self.share(stream).and_then(|s| s.pieces(cut, size, &own)) {
            Ok(x) => x,
            Err(e) => {
                // Still in every gather (with nothing), so that the
                // collectives match; the owners see the events missing.
                local = Some(e.to_string());
                (vec![Vec::new(); size], vec![0; size])
            }
        };
        let mut received = None;
        for (o, mine) in out.iter().enumerate() {
            let has = cut
                .parts
                .iter()
                .enumerate()
                .any(|(p, pc)| pc.count > 0 && own(p as u32) == o);
            if !has {
                continue;
            }
            let got = self.dog.watch(|| self.comm.gather_bytes(mine, Some(o)))?;
            if o == me {
                received = Some(got);
            }
        }
        let writes = !dir && me == 0 || received.is_some();
        if local.is_none() && writes {
            let (all, counts) = received.unwrap_or_default();
            let mut pieces = Vec::with_capacity(counts.len());
            let mut at = 0;
            for c in counts {
                pieces.push(&all[at..at + c]);
                at += c;
            }
            let r = nodes::assemble(cut, &pieces, &|p| own(p) == me, &rdir).and_then(|parts| {
                if dir {
                    for (p, b) in &parts {
                        let part = &cut.parts[*p as usize];
                        nodes::apply_part(&rdir, stream, n, *p, part, b)?;
                    }
                    Ok(())
                } else {
                    let mut bytes = vec![Vec::new(); n as usize];
                    for (p, b) in parts {
                        bytes[p as usize] = b;
                    }
                    let after = nodes::after(cut);
                    remote.apply(
                        stream,
                        n,
                        RoundWrite {
                            cut,
                            bytes: &bytes,
                            after: &after,
                        },
                    )
                }
            });
            local = r.err().map(|e| e.to_string());
        }
        if let Some(f) = self.agree(local.map(Failure::Retry))? {
            return Ok(Some(f.message().into()));
        }
        if dir {
            // Every owner's batch is durable: the round may be published.
            let published = if me == 0 {
                nodes::publish_watermark(&rdir, cut.round, &nodes::after(cut))
                    .err()
                    .map(|e| Failure::Retry(e.to_string()))
            } else {
                None
            };
            if let Some(f) = self.agree(published)? {
                return Ok(Some(f.message().into()));
            }
        }
        let between: u64 = sent
            .iter()
            .enumerate()
            .filter(|&(o, _)| o != me)
            .map(|(_, b)| b)
            .sum();
        let between = self.sum(between)?;
        self.streams_published(stream, cut.round);
        let t = &mut self.totals;
        t.stream_rounds += 1;
        t.stream_bytes_between_nodes += between;
        t.stream_events_by_node.resize(size, 0);
        for (p, pc) in cut.parts.iter().enumerate() {
            t.stream_events += pc.count;
            t.stream_events_by_node[own(p as u32)] += pc.count;
        }
        Ok(None)
    }
}
