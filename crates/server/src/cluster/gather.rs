//! An object remote whose versions one server makes (S3 objects of one
//! part, remotes without shared uploads): every server sends the leader
//! its winning bytes window by window, each byte once, and the leader
//! writes them into the new version while the next window is gathered.

use paralog_backend::RemoteOp;
use paralog_log::reader::SourceReader;

use super::group::{pack_runs, starts, windows, Run};
use super::group::{Agreed, Target};
use super::{ClusterError, Coordinator};
use crate::retry::Failure;
use crate::step;

impl Coordinator {
    /// An object remote: the leader makes the new version from bytes that
    /// every server sends it, window by window, each byte once.
    pub(super) fn drain_gathered(
        &mut self,
        t: Target<'_>,
        reader: &mut SourceReader,
    ) -> Agreed<u64> {
        let nodes = self.comm.size();
        let windows = windows(t.g, t.lf, self.cfg.buf_bytes as u64, None);
        let mut sink = None;
        let begin = (|| -> Result<(), Failure> {
            if self.leader() {
                sink = Some(step::begin(t.backend, &t.f.rel, t.shape, t.lf)?);
            }
            Ok(())
        })();
        if let Some(e) = self.agree(begin.err())? {
            return Ok(Err(e));
        }
        // The leader writes window k on its own thread while the servers
        // gather window k+1 (at most one more waits in between). A failure
        // (rare: every extent sent was verified in step 1) does not stop
        // the gathers; it is agreed on once, before the version is made.
        let leader = self.leader();
        let mut local: Option<Failure> = None;
        let mut total = 0u64;
        let mut between = 0u64;
        std::thread::scope(|scope| -> Result<(), ClusterError> {
            let (tx, rx) = std::sync::mpsc::sync_channel::<(Vec<(u64, usize, usize)>, Vec<u8>)>(1);
            let writer = sink.take().map(|mut s| {
                scope.spawn(move || {
                    let mut err = None;
                    for (ops, data) in rx {
                        if err.is_some() {
                            continue;
                        }
                        for (off, p, n) in ops {
                            let op = RemoteOp::Write {
                                off,
                                data: &data[p..p + n],
                            };
                            if let Err(e) = s.apply(op) {
                                err = Some(Failure::from(e));
                                break;
                            }
                        }
                    }
                    (s, err)
                })
            });
            let mut pack = Vec::new();
            for win in windows.iter().filter(|_| !t.lf.deleted) {
                crate::failpoint::hit("cluster.mid_write");
                let mut counts = vec![0i64; nodes];
                for c in win {
                    counts[c.node] += c.len as i64;
                }
                pack_runs(win, t.me, t.lf, reader, &mut pack, &mut local);
                let all = self
                    .dog
                    .watch(|| self.comm.gather_known(&pack, &counts, Some(0)))?;
                total += counts.iter().sum::<i64>() as u64;
                between += counts[1..].iter().sum::<i64>() as u64;
                if leader {
                    let mut at = starts(&counts);
                    let ops = win
                        .iter()
                        .map(
                            |&Run {
                                 off,
                                 len: n,
                                 node: owner,
                                 ..
                             }| {
                                let p = at[owner];
                                at[owner] += n as usize;
                                (off, p, n as usize)
                            },
                        )
                        .collect();
                    // The writer only stops early by panicking, which the
                    // join below reports.
                    let _ = tx.send((ops, all));
                }
            }
            drop(tx);
            if let Some(h) = writer {
                let (s, err) = h.join().expect("the leader's writer thread panicked");
                sink = Some(s);
                if local.is_none() {
                    local = err;
                }
            }
            Ok(())
        })?;
        self.totals.bytes_between_nodes += between;
        if let Some(e) = self.agree(local)? {
            return Ok(Err(e));
        }
        let finish = match sink.take() {
            Some(s) => step::finish(s, t.lf).map_err(Failure::from),
            None => Ok(()),
        };
        if let Some(e) = self.agree(finish.err())? {
            return Ok(Err(e));
        }
        Ok(Ok(total))
    }
}
