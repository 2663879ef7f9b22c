//! An object version built by all servers (S3 multipart): the leader starts
//! the upload and shares its id and part boundaries; each part is owned by
//! the server that holds most of its bytes (parts the epoch does not write
//! go to the server with the fewest parts), the other servers send the
//! owner their bytes of it, each byte once, and the owner uploads it; the
//! leader completes the upload once every server reported its parts.

use paralog_backend::{EpochShape, PartDone, PartedBackend, PartedVersion};
use paralog_log::reader::SourceReader;
use paralog_log::LogicalFile;

use super::group::{pack_runs, starts, Agreed, Run, Target};
use super::mpi::Reduce;
use super::plan::{GlobalFile, Group};
use super::{ClusterError, Coordinator};
use crate::retry::Failure;

/// Who uploads which part, and from which bytes.
#[derive(Debug, PartialEq, Eq)]
pub struct PartPlan {
    /// The epoch's runs inside each part, in offset order.
    pub runs: Vec<Vec<Run>>,
    /// The node that uploads each part.
    pub owner: Vec<usize>,
}

/// Cut the epoch's pieces at part boundaries and choose every part's owner:
/// the node holding most of its bytes (ties: the node with fewer parts so
/// far, then the lower rank), so that bytes stay where they are; the parts
/// the epoch does not write are spread over the nodes with fewest parts.
/// Every server computes the same plan from the same pieces.
pub fn plan_parts(v: &PartedVersion, nodes: usize, pieces: impl Iterator<Item = Run>) -> PartPlan {
    let n = v.parts() as usize;
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); n];
    let mut held = vec![vec![0u64; nodes]; n];
    for Run {
        mut off,
        mut len,
        source,
        mut skip,
        node,
    } in pieces
    {
        // The final size may cut the epoch's last writes.
        len = len.min(v.size.saturating_sub(off));
        while len > 0 {
            let i = (off / v.part) as usize;
            let (_, end) = v.range(i as u64);
            let k = len.min(end - off);
            runs[i].push(Run {
                off,
                len: k,
                source,
                skip,
                node,
            });
            held[i][node] += k;
            off += k;
            skip += k;
            len -= k;
        }
    }
    let mut count = vec![0u64; nodes];
    let mut owner = vec![usize::MAX; n];
    for i in 0..n {
        if runs[i].is_empty() {
            continue;
        }
        let best = (0..nodes)
            .max_by_key(|&d| {
                (
                    held[i][d],
                    std::cmp::Reverse(count[d]),
                    std::cmp::Reverse(d),
                )
            })
            .expect("at least one node");
        owner[i] = best;
        count[best] += 1;
    }
    for o in owner.iter_mut().filter(|o| **o == usize::MAX) {
        let least = (0..nodes)
            .min_by_key(|&d| (count[d], d))
            .expect("at least one node");
        *o = least;
        count[least] += 1;
    }
    PartPlan { runs, owner }
}

impl Coordinator {
    /// Start the shared version (the leader) and tell every server. `None`:
    /// one part, which one server makes.
    fn start_shared_version(
        &self,
        f: &GlobalFile,
        shape: &EpochShape,
        parted: &dyn PartedBackend,
    ) -> Result<Result<Option<PartedVersion>, Failure>, ClusterError> {
        let mut bytes = Vec::new();
        let started = (|| -> Result<(), Failure> {
            if self.leader() {
                if let Some(v) = parted.start_parted(&f.rel, shape).map_err(Failure::from)? {
                    bytes = v.encode();
                }
            }
            Ok(())
        })();
        if let Some(e) = self.agree(started.err())? {
            return Ok(Err(e));
        }
        let mut len = [bytes.len() as i64];
        self.dog
            .watch(|| self.comm.allreduce(&mut len, Reduce::Max))?;
        if len[0] == 0 {
            return Ok(Ok(None));
        }
        bytes.resize(len[0] as usize, 0);
        self.dog.watch(|| self.comm.bcast(&mut bytes, 0))?;
        Ok(Ok(Some(PartedVersion::decode(&bytes).expect(
            "the leader's version, encoded by the same program",
        ))))
    }

    /// Drain a group into a version that every server helps upload.
    /// `Ok(None)`: the version is one part; the caller gathers it instead.
    pub(super) fn drain_parted(
        &mut self,
        t: Target<'_>,
        parted: &dyn PartedBackend,
        reader: &mut SourceReader,
    ) -> Result<Option<Result<u64, Failure>>, ClusterError> {
        let v = match self.start_shared_version(t.f, t.shape, parted)? {
            Ok(Some(v)) => v,
            Ok(None) => return Ok(None),
            Err(e) => return Ok(Some(Err(e))),
        };
        let outcome = self.upload_parts(t.g, t.lf, &v, parted, reader)?;
        if outcome.is_err() && self.leader() {
            parted.abort_parted(&v);
        }
        tracing::debug!(file = %t.backend.describe(&t.f.rel), parts = v.parts(), ok = outcome.is_ok(), "shared upload");
        Ok(Some(outcome))
    }

    fn upload_parts(
        &mut self,
        g: &Group,
        lf: &LogicalFile,
        v: &PartedVersion,
        parted: &dyn PartedBackend,
        reader: &mut SourceReader,
    ) -> Agreed<u64> {
        let me = self.comm.rank();
        let nodes = self.comm.size();
        let plan = plan_parts(
            v,
            nodes,
            lf.pieces().map(|(off, len, piece)| {
                let src = &lf.sources[piece.source];
                Run {
                    off,
                    len,
                    source: piece.source,
                    skip: piece.skip,
                    node: g.node_of(src).expect("every source has a holder"),
                }
            }),
        );
        let mut up = parted.part_uploader(v);
        // A local failure: this server stops reading and uploading, goes on
        // taking part in the gathers, and says so at the agreement.
        let mut failed: Option<Failure> = None;
        let mut total = 0u64;
        let mut sent_between = 0u64;
        let w = self.cfg.buf_bytes as u64;
        let mut pack: Vec<u8> = Vec::new();
        for (i, runs) in plan.runs.iter().enumerate() {
            let owner = plan.owner[i];
            let index = i as u64;
            crate::failpoint::hit("cluster.mid_write");
            if runs.is_empty() {
                if owner == me && failed.is_none() {
                    failed = up.upload_untouched(index).map_err(Failure::from).err();
                }
                continue;
            }
            let start = v.range(index).0;
            let mut part = Vec::new();
            if owner == me && failed.is_none() {
                match up.base(index) {
                    Ok(b) => part = b,
                    Err(e) => failed = Some(Failure::from(e)),
                }
            }
            // The owner reads its own runs in place; the others' come in
            // windows of at most `w` bytes, one gather each.
            let mut at = 0;
            while at < runs.len() {
                let mut end = at;
                let mut counts = vec![0i64; nodes];
                let mut window = 0u64;
                while end < runs.len() && (end == at || window + runs[end].len <= w) {
                    let r = runs[end];
                    if r.node != owner {
                        counts[r.node] += r.len as i64;
                        window += r.len;
                    }
                    end += 1;
                }
                let win = &runs[at..end];
                at = end;
                if owner == me && failed.is_none() {
                    for &Run {
                        off,
                        len: n,
                        source,
                        skip,
                        node,
                    } in win
                    {
                        if node != me {
                            continue;
                        }
                        let p = (off - start) as usize;
                        if let Err(e) =
                            reader.read(&lf.sources[source], skip, &mut part[p..p + n as usize])
                        {
                            failed = Some(Failure::damaged(e));
                            break;
                        }
                    }
                }
                if window == 0 {
                    continue;
                }
                sent_between += window;
                pack.clear();
                if owner != me {
                    pack_runs(win, me, lf, reader, &mut pack, &mut failed);
                }
                let got = self
                    .dog
                    .watch(|| self.comm.gather_known(&pack, &counts, Some(owner)))?;
                if owner == me && failed.is_none() {
                    let mut from = starts(&counts);
                    for &Run {
                        off, len: n, node, ..
                    } in win
                    {
                        if node == me {
                            continue;
                        }
                        let p = (off - start) as usize;
                        let q = from[node];
                        part[p..p + n as usize].copy_from_slice(&got[q..q + n as usize]);
                        from[node] += n as usize;
                    }
                }
            }
            total += runs.iter().map(|r| r.len).sum::<u64>();
            if owner == me && failed.is_none() {
                failed = up.upload(index, part).map_err(Failure::from).err();
            }
            // No agreement per part: a part that needs no other server's
            // bytes involves no collective, so the servers assemble and
            // upload their own parts side by side. A failure (rare: every
            // extent sent was verified in step 1) is agreed on at the end.
        }
        let reported = match failed {
            Some(e) => Err(e),
            None => up.finish().map_err(Failure::from),
        };
        let (mine, err) = match reported {
            Ok(parts) => (PartDone::encode_all(&parts), None),
            Err(e) => (Vec::new(), Some(e)),
        };
        if let Some(e) = self.agree(err)? {
            return Ok(Err(e));
        }
        let (all, _) = self.dog.watch(|| self.comm.gather_bytes(&mine, Some(0)))?;
        let done = (|| -> Result<(), Failure> {
            if !self.leader() {
                return Ok(());
            }
            let parts =
                PartDone::decode_all(&all).expect("part reports, encoded by the same program");
            parted.complete_parted(v, parts).map_err(Failure::from)
        })();
        if let Some(e) = self.agree(done.err())? {
            return Ok(Err(e));
        }
        self.totals.bytes_between_nodes += sent_between;
        if self.totals.parts_by_node.len() < nodes {
            self.totals.parts_by_node.resize(nodes, 0);
        }
        for &o in &plan.owner {
            self.totals.parts_by_node[o] += 1;
        }
        Ok(Ok(total))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(off: u64, len: u64, source: usize, skip: u64, node: usize) -> Run {
        Run {
            off,
            len,
            source,
            skip,
            node,
        }
    }

    fn version(size: u64, part: u64) -> PartedVersion {
        PartedVersion {
            rel: b"f".to_vec(),
            upload_id: "u".into(),
            size,
            part,
            base_tag: None,
            base_visible: 0,
            copies: false,
        }
    }

    #[test]
    fn parts_go_where_most_of_their_bytes_are() {
        // 4 parts of 10 bytes; node 1 holds most of part 0 and all of 2,
        // node 0 most of part 1; nobody writes part 3.
        let v = version(40, 10);
        let pieces = vec![
            run(0, 4, 0, 0, 0),
            run(4, 8, 1, 0, 1),   // 4..10 of part 0, 10..12 of part 1
            run(12, 8, 2, 0, 0),  // 12..20
            run(20, 10, 3, 0, 1), // part 2
        ];
        let p = plan_parts(&v, 2, pieces.into_iter());
        assert_eq!(p.owner, vec![1, 0, 1, 0]);
        assert_eq!(p.runs[0], vec![run(0, 4, 0, 0, 0), run(4, 6, 1, 0, 1)]);
        assert_eq!(p.runs[1], vec![run(10, 2, 1, 6, 1), run(12, 8, 2, 0, 0)]);
        assert!(p.runs[3].is_empty());
    }

    #[test]
    fn untouched_parts_and_ties_are_spread() {
        // Node 0 writes parts 0 and 1 in full; parts 2..6 are untouched:
        // they go to nodes 1 and 2 first.
        let v = version(60, 10);
        let p = plan_parts(&v, 3, vec![run(0, 20, 0, 0, 0)].into_iter());
        assert_eq!(p.owner, vec![0, 0, 1, 2, 1, 2]);
        // A tie goes to the node with fewer parts so far.
        let v = version(20, 10);
        let pieces = vec![
            run(0, 10, 0, 0, 0),
            run(10, 5, 1, 0, 0),
            run(15, 5, 2, 0, 1),
        ];
        let p = plan_parts(&v, 2, pieces.into_iter());
        assert_eq!(p.owner, vec![0, 1]);
    }

    #[test]
    fn writes_past_the_final_size_are_cut() {
        let v = version(15, 10);
        let p = plan_parts(&v, 1, vec![run(5, 20, 0, 0, 0)].into_iter());
        assert_eq!(p.runs[0], vec![run(5, 5, 0, 0, 0)]);
        assert_eq!(p.runs[1], vec![run(10, 5, 0, 5, 0)]);
    }
}
