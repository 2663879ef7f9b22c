//! Local retention in a server job (docs/streams.md "Local retention",
//! "Many nodes"), its steps run here for two node-local roots without MPI
//! (tests/common/job.rs): each node deletes its own ended producers'
//! segments that published rounds took whole, then every node writes the
//! same base; a job stopped between any two steps, started again,
//! converges, and its remote stays byte for byte that of the same job
//! that never released anything (a twin fed the same segment files).

use std::path::{Path, PathBuf};

use paralog_stream::format::Watermark;
use paralog_stream::nodes::{release_due, NodeRelease, NodeShare};
use paralog_stream::{layout, DrainOptions, DrainReport, Producer};

mod common;

use common::job::{files, job_apply, job_cut, job_release, job_round};
use common::{dirs, round_robin, S};

const NODES: usize = 2;

/// A producer on `local` that appends `n` events and flushes; alive.
fn live(local: &Path, n: usize) -> Producer {
    let mut p = round_robin(local, 3);
    for i in 0..n {
        p.append(None, format!("{:016x}:{i}", p.id()).as_bytes(), None)
            .unwrap();
    }
    p.flush().unwrap();
    p
}

/// The same, ended; its id.
fn ended(local: &Path, n: usize) -> u64 {
    live(local, n).id()
}

fn sdir(local: &Path) -> PathBuf {
    layout::stream_dir(local, S)
}

fn seg_ids(local: &Path) -> Vec<u64> {
    let mut out: Vec<u64> = std::fs::read_dir(sdir(local))
        .unwrap()
        .filter_map(|e| layout::parse_segment_name(&e.unwrap().file_name().to_string_lossy()))
        .collect();
    out.sort();
    out
}

fn cuts(local: &Path) -> Vec<u8> {
    std::fs::read(sdir(local).join("cuts")).unwrap()
}

/// A job that releases (`a`: roots, remote, shares) and its twin that
/// never does (`b`), whose roots get a copy of every segment file of
/// `a`'s before each round: the same cuts, so the same remote.
struct Twin {
    a: Vec<PathBuf>,
    b: Vec<PathBuf>,
    ra: PathBuf,
    rb: PathBuf,
    sa: Vec<NodeShare>,
    sb: Vec<NodeShare>,
    _t: tempfile::TempDir,
}

fn open(roots: &[PathBuf]) -> Vec<NodeShare> {
    roots
        .iter()
        .map(|r| NodeShare::open(r, S, NODES).unwrap())
        .collect()
}

impl Twin {
    fn new() -> Twin {
        let (t, _, ra) = dirs();
        let rb = t.path().join("rb");
        std::fs::create_dir(&rb).unwrap();
        let root = |n: String| {
            let d = t.path().join(n);
            std::fs::create_dir(&d).unwrap();
            d
        };
        let a: Vec<PathBuf> = (0..NODES).map(|i| root(format!("a{i}"))).collect();
        let b: Vec<PathBuf> = (0..NODES).map(|i| root(format!("b{i}"))).collect();
        let (sa, sb) = (open(&a), open(&b));
        Twin {
            a,
            b,
            ra,
            rb,
            sa,
            sb,
            _t: t,
        }
    }

    /// One round of both jobs.
    fn round(&mut self) {
        self.copy_segments();
        job_round(&mut self.sa, &self.ra);
        job_round(&mut self.sb, &self.rb);
    }

    fn copy_segments(&self) {
        for (a, b) in self.a.iter().zip(&self.b) {
            for id in seg_ids(a) {
                let name = layout::segment_name(id);
                std::fs::copy(sdir(a).join(&name), sdir(b).join(&name)).unwrap();
            }
        }
    }

    /// The job that releases stopped (its shares and locks dropped) and
    /// started again: every share opened from its cut log.
    fn restart(&mut self) {
        self.sa.clear();
        self.sa = open(&self.a);
    }

    fn logs_equal(&self) -> Vec<u8> {
        let l = cuts(&self.a[0]);
        assert_eq!(cuts(&self.a[1]), l, "the nodes' cut logs differ");
        l
    }

    fn remotes_equal(&self) {
        let (a, b) = (files(&self.ra), files(&self.rb));
        assert_eq!(a.len(), b.len());
        assert!(
            a == b,
            "the remote differs from a job's that never released"
        );
    }

    fn watermark(&self) -> Watermark {
        let p = layout::stream_dir(&self.ra, S).join("watermark");
        Watermark::decode(&std::fs::read(&p).unwrap(), &p).unwrap()
    }
}

/// Every node deletes its own ended producers' segments, the nodes' logs
/// become the same base (keeping a live producer's position), and the
/// job goes on from it: the remote is the never-releasing twin's.
#[test]
fn a_job_releases_every_nodes_ended_segments_with_one_base() {
    let mut j = Twin::new();
    let (e0, e1) = (ended(&j.a[0], 20), ended(&j.a[0], 25));
    let e2 = ended(&j.a[1], 30);
    let mut l = live(&j.a[1], 10);
    j.round();
    let (base, mut gone) = job_release(&mut j.sa);
    gone.sort();
    let mut want = vec![e0, e1, e2];
    want.sort();
    assert_eq!((base.round, gone), (1, want));
    assert_eq!(
        base.parts,
        j.watermark().parts,
        "the base is round 1's state"
    );
    let lpos = std::fs::metadata(sdir(&j.a[1]).join(layout::segment_name(l.id())))
        .unwrap()
        .len();
    assert_eq!(
        base.producers,
        vec![(l.id(), lpos)],
        "the live producer kept"
    );
    assert!(seg_ids(&j.a[0]).is_empty());
    assert_eq!(seg_ids(&j.a[1]), vec![l.id()]);
    assert!(j.logs_equal().starts_with(b"PLSTBASE"));
    // The job goes on after the base: the live producer from where it was.
    for i in 0..15 {
        l.append(None, format!("more:{i}").as_bytes(), None)
            .unwrap();
    }
    l.flush().unwrap();
    let e3 = ended(&j.a[0], 12);
    j.round();
    j.logs_equal();
    j.remotes_equal();
    // The live producer ends: the next release takes it and e3.
    let lid = l.id();
    drop(l);
    let (base, mut gone) = job_release(&mut j.sa);
    gone.sort();
    let mut want = vec![e3, lid];
    want.sort();
    assert_eq!((base.round, gone, base.producers), (2, want, vec![]));
    assert!(seg_ids(&j.a[0]).is_empty() && seg_ids(&j.a[1]).is_empty());
    j.round_if_any();
    assert_eq!(j.watermark().parts.iter().map(|p| p.next).sum::<u64>(), 112);
    j.remotes_equal();
}

impl Twin {
    /// A round only if some node has a new batch (a job cuts nothing
    /// otherwise).
    fn round_if_any(&mut self) {
        if self.a.iter().any(|r| !seg_ids(r).is_empty()) {
            self.round();
        }
    }
}

/// Stopped after one node deleted its segments and before any base: the
/// logs are still equal (naming deleted segments in published rounds
/// only); the job goes on, and its next base keeps no position of a
/// producer no node holds.
#[test]
fn a_job_stopped_after_some_deletions_goes_on() {
    let mut j = Twin::new();
    let e0 = ended(&j.a[0], 20);
    let e1 = ended(&j.a[1], 20);
    j.round();
    let found: Vec<_> = j.sa.iter().map(|s| s.releasable().unwrap()).collect();
    let mut found = found.into_iter();
    let first = found.next().unwrap();
    j.sa[0].delete_released(first).unwrap();
    drop(found);
    j.restart();
    assert!(seg_ids(&j.a[0]).is_empty() && seg_ids(&j.a[1]) == vec![e1]);
    j.logs_equal();
    let e2 = ended(&j.a[0], 7);
    j.round();
    j.remotes_equal();
    let (base, mut gone) = job_release(&mut j.sa);
    gone.sort();
    let mut want = vec![e1, e2];
    want.sort();
    assert_eq!(gone, want);
    assert!(
        base.producers.iter().all(|(id, _)| *id != e0),
        "a deleted producer's position kept: {:?}",
        base.producers
    );
    ended(&j.a[1], 9);
    j.round();
    j.logs_equal();
    j.remotes_equal();
}

/// Stopped between two nodes' rebases: the next job finds one log a base
/// and one the cuts, at the same round; the node not rebased copies the
/// base (checked against its own log), the logs are equal again, and a
/// cut recorded after it and not applied (stopped again) is applied
/// again from the log that starts at the base: the same remote bytes.
#[test]
fn a_job_stopped_between_rebases_converges() {
    let mut j = Twin::new();
    ended(&j.a[0], 20);
    ended(&j.a[1], 20);
    let l = live(&j.a[1], 5);
    j.round();
    let found: Vec<_> = j.sa.iter().map(|s| s.releasable().unwrap()).collect();
    let held = found.iter().flat_map(|r| r.held.clone()).collect();
    for (s, r) in j.sa.iter_mut().zip(found) {
        s.delete_released(r).unwrap();
    }
    j.sa[0].rebase(&held).unwrap();
    j.restart();
    assert!(j.sa[0].based() && !j.sa[1].based());
    assert_eq!(j.sa[0].rounds(), j.sa[1].rounds());
    let rec = j.sa[0].last_record();
    j.sa[1].catch_up(&rec).unwrap();
    assert!(j.sa[1].based());
    j.logs_equal();
    // A new cut recorded everywhere, not applied: a new job applies it
    // again from the log (its base, then the cut).
    ended(&j.a[0], 11);
    j.copy_segments();
    let cut = job_cut(&mut j.sa);
    j.restart();
    let rdir = layout::stream_dir(&j.ra, S);
    j.sa[0].check_watermark(&j.watermark(), &rdir).unwrap();
    let again = j.sa[0].cut(cut.round).unwrap();
    assert_eq!(again, cut);
    job_apply(&j.sa, &again, &j.ra);
    job_round(&mut j.sb, &j.rb);
    j.remotes_equal();
    drop(l);
}

/// A base that does not stand for a node's log is refused when copied:
/// another round or state, or one that drops a producer whose segment
/// the node still holds (its events would be taken again).
#[test]
fn a_base_that_does_not_fit_is_refused() {
    let mut j = Twin::new();
    ended(&j.a[0], 20);
    let e1 = ended(&j.a[1], 20);
    j.round();
    // Node 0 rebases as if node 1 had deleted its segment; it did not.
    let base = j.sa[0].rebase(&Default::default()).unwrap();
    assert!(base.producers.is_empty());
    let e = j.sa[1].catch_up(&base.encode()).unwrap_err().to_string();
    assert!(
        e.contains("still here") && e.contains(&layout::segment_name(e1)),
        "{e}"
    );
    let mut other = base.clone();
    other.round = 2;
    let e = j.sa[1].catch_up(&other.encode()).unwrap_err().to_string();
    assert!(e.contains("ends at round 1"), "{e}");
    assert!(!j.sa[1].based(), "node 1's log is as it was");
}

/// What each node tells the others in a round with nothing new, taken
/// as the server does with local retention's `threshold`
/// (`NodeShare::take_new`: one listing of its segments for the new
/// batches and what a release would delete: counted exactly when the
/// node's segments taken whole and its log reach the threshold, else 0).
fn views(shares: &mut [NodeShare], threshold: u64) -> Vec<NodeRelease> {
    shares
        .iter_mut()
        .map(|s| {
            let opts = DrainOptions {
                release_bytes: threshold,
                ..DrainOptions::default()
            };
            let new = s.take_new(&opts, &mut DrainReport::default()).unwrap();
            assert!(new.ranges.is_empty(), "a batch not cut yet");
            let exact = s.releasable().unwrap().bytes();
            assert!(
                new.releasable == exact || (new.releasable == 0 && exact + s.log_len() < threshold),
                "releasable {} of {exact}, log {}, threshold {threshold}",
                new.releasable,
                s.log_len()
            );
            NodeRelease {
                rounds: s.rounds(),
                based: s.based(),
                releasable: new.releasable,
                log_len: s.log_len(),
            }
        })
        .collect()
}

/// The threshold counts each node by itself (docs/streams.md "Local
/// retention", "Many nodes"): two nodes that together hold more than it
/// of drained segments, each less, do not release; once one node alone
/// reaches it the job releases, and every node deletes its own. A
/// function of the views: every server decides alike.
#[test]
fn a_release_is_due_when_one_node_reaches_the_threshold() {
    let mut j = Twin::new();
    // Node 1's share well below node 0's: still below the threshold
    // after the next round's cut record lengthens the logs.
    ended(&j.a[0], 80);
    ended(&j.a[1], 20);
    j.round();
    // Exact counts (a threshold of 1 byte: every node looks).
    let v = views(&mut j.sa, 1);
    assert!(v.iter().all(|x| x.releasable > 0), "{v:?}");
    let each =
        |v: &[NodeRelease]| -> Vec<u64> { v.iter().map(|x| x.releasable + x.log_len).collect() };
    let t = each(&v).into_iter().max().unwrap() + 1;
    let together = v.iter().map(|x| x.releasable).sum::<u64>() + v[0].log_len;
    assert!(together >= t, "{v:?}");
    assert!(!release_due(&v, t), "released for the nodes' sum: {v:?}");
    assert!(release_due(&v, t - 1));
    // The views the servers take with the threshold decide alike (a node
    // below it looks at nothing and says 0).
    assert!(!release_due(&views(&mut j.sa, t), t));
    assert!(release_due(&views(&mut j.sa, t - 1), t - 1));
    // Node 0 alone passes it, node 1 stays below: due, and node 1's
    // ended segment goes with node 0's.
    ended(&j.a[0], 400);
    j.round();
    let v = views(&mut j.sa, 1);
    let e = each(&v);
    assert!(e[0] >= t && e[1] < t, "{v:?}");
    assert!(release_due(&v, t));
    let vt = views(&mut j.sa, t);
    assert!(
        vt[0].releasable == v[0].releasable && vt[1].releasable == 0,
        "{vt:?}"
    );
    assert!(release_due(&vt, t));
    let (base, gone) = job_release(&mut j.sa);
    assert_eq!((base.round, gone.len()), (2, 3));
    assert!(seg_ids(&j.a[0]).is_empty() && seg_ids(&j.a[1]).is_empty());
    // Rebased with nothing left to delete: not due again.
    let v = views(&mut j.sa, 1);
    assert!(v.iter().all(|x| x.based && x.releasable == 0), "{v:?}");
    assert!(!release_due(&v, 1));
    j.logs_equal();
}
