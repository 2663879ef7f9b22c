//! The backend conformance suite: one contract run over every remote a
//! drain writes to: a POSIX directory, the object layout, and S3 (a MinIO
//! this test starts on loopback when `MINIO_TEST_BINARY` names its
//! binary, as `make test-rust` does; without it the S3 run is skipped and
//! says so).
//!
//! Every epoch goes through the drain's own first and last operations
//! (`step::begin`: the delete or the cut; `step::finish`: the size, then
//! the commit), and what the remote then holds is read back through that
//! remote's own reader (plain files, `ObjStore::read_version`,
//! `S3Backend::get`) and compared byte for byte with a model: the file as
//! the program left it, by the log's size rule (`SizeState`). Every epoch
//! is applied twice, as a drain that crashed before its progress record
//! applies it again, and must leave the same bytes.
//!
//! Where backends differ by design, the contract names the difference as a
//! capability ([`Caps`]) and checks what each one promises instead.
//!
//! Over S3 the one-node service also runs once with `common::Faulty`
//! losing an upload (`retry_removes_a_lost_upload`); the other service
//! paths under injected failures are in `service.rs`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::{Calls, Fault, Faulty, S3Reader, Step, Store};
use paralog_backend::objstore::ObjStore;
use paralog_backend::{
    Backend, BackendError, EpochSink, ErrorKind, RemoteOp, RemoteUrl, SizeState,
};
use paralog_log::{EpochId, LogicalFile};
use paralog_server::remote::Remote;
use paralog_server::step;

const MIB: u64 = 1 << 20;

/// How publishers of one name at the same moment end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Publish {
    /// Every publish is a version of its own, none replaces another, and
    /// the later one is the latest (the object layout).
    Versions,
    /// Last writer wins, whole: the object is exactly one publisher's. A
    /// publisher whose previous object changed under it fails, retryably
    /// (`PreconditionFailed`), and its retry succeeds (S3).
    WholeObject,
    /// Last writer wins, write by write: every byte is one publisher's;
    /// there is no publish step (POSIX writes in place).
    InPlace,
}

/// What a backend promises beyond the common contract.
#[derive(Debug, Clone, Copy)]
struct Caps {
    /// A commit publishes a complete new version at once: an epoch whose
    /// sink is dropped or lost before its commit leaves nothing visible.
    /// Otherwise (POSIX) operations land as they are applied, and only
    /// the whole epoch applied again makes the file right.
    atomic: bool,
    publish: Publish,
    /// An upload lost in a crash stays on the remote until `abort_stale`
    /// removes it (S3's multipart uploads); elsewhere it returns 0.
    stale_uploads: bool,
    /// A file's first drain in a job (`EpochShape::fresh`) starts from
    /// nothing, whatever the remote holds: the program could not read the
    /// old object (S3, not `readable_by_capture`).
    fresh_starts_empty: bool,
    /// The remote records the epoch each state came from (object version
    /// records, S3 metadata).
    records_epoch: bool,
}

const POSIX: Caps = Caps {
    atomic: false,
    publish: Publish::InPlace,
    stale_uploads: false,
    fresh_starts_empty: false,
    records_epoch: false,
};

const OBJSTORE: Caps = Caps {
    atomic: true,
    publish: Publish::Versions,
    stale_uploads: false,
    fresh_starts_empty: false,
    records_epoch: true,
};

const S3: Caps = Caps {
    atomic: true,
    publish: Publish::WholeObject,
    stale_uploads: true,
    fresh_starts_empty: true,
    records_epoch: true,
};

/// A backend under test, the reader of what it holds, its capabilities.
struct Under {
    name: &'static str,
    backend: Arc<dyn Backend>,
    store: Store,
    caps: Caps,
}

/// An operation of the program, in program order within an epoch.
#[derive(Debug, Clone)]
enum Op {
    Write(u64, Vec<u8>),
    SetSize(u64),
    Prealloc(u64),
    Delete,
}
use Op::{Delete, Prealloc, SetSize, Write as W};

/// An epoch as the drain hands it to a backend: what the log's merge
/// makes of the program's operations (the writes that survive, in offset
/// order and not overlapping; the size rule; deleted or not).
#[derive(Debug, Clone)]
struct Epoch {
    deleted: bool,
    size: SizeState,
    writes: Vec<(u64, Vec<u8>)>,
}

impl Epoch {
    /// The log's rule, restated: a later write wins; a set-size drops what
    /// lies past it and cuts the base there; a delete drops everything and
    /// later operations recreate the file.
    fn of(ops: &[Op]) -> Epoch {
        let mut data: Vec<Option<u8>> = Vec::new();
        let mut size = SizeState::default();
        let mut deleted = false;
        for op in ops {
            match op {
                W(off, bytes) => {
                    let (off, end) = (*off as usize, *off as usize + bytes.len());
                    if data.len() < end {
                        data.resize(end, None);
                    }
                    for (d, &b) in data[off..end].iter_mut().zip(bytes) {
                        *d = Some(b);
                    }
                    size.min_size = size.min_size.max(end as u64);
                    deleted = false;
                }
                SetSize(n) => {
                    data.truncate(*n as usize);
                    size.min_size = *n;
                    size.size_set = true;
                    size.base_cut = Some(size.base_cut.map_or(*n, |c| c.min(*n)));
                    deleted = false;
                }
                Prealloc(n) => {
                    size.min_size = size.min_size.max(*n);
                    deleted = false;
                }
                Delete => {
                    data.clear();
                    size = SizeState {
                        min_size: 0,
                        size_set: true,
                        base_cut: Some(0),
                    };
                    deleted = true;
                }
            }
        }
        let mut writes: Vec<(u64, Vec<u8>)> = Vec::new();
        for (i, d) in data.iter().enumerate() {
            let Some(b) = d else { continue };
            match writes.last_mut() {
                Some((off, run)) if *off as usize + run.len() == i => run.push(*b),
                _ => writes.push((i as u64, vec![*b])),
            }
        }
        Epoch {
            deleted,
            size,
            writes,
        }
    }

    /// What the file becomes: `base` (`None`: absent) under this epoch.
    fn apply(&self, base: Option<&[u8]>) -> Option<Vec<u8>> {
        if self.deleted {
            return None;
        }
        let base = base.unwrap_or(&[]);
        let len = base.len() as u64;
        let mut out = base[..self.size.base_visible(len) as usize].to_vec();
        out.resize(self.size.final_size(len) as usize, 0);
        for (off, d) in &self.writes {
            out[*off as usize..*off as usize + d.len()].copy_from_slice(d);
        }
        Some(out)
    }

    /// As the drain's step holds it.
    fn logical(&self) -> LogicalFile {
        LogicalFile {
            deleted: self.deleted,
            size: self.size,
            ..LogicalFile::default()
        }
    }
}

/// `len` bytes that differ from offset to offset and from seed to seed,
/// so that a byte in the wrong place shows.
fn pattern(seed: u8, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let x = (i as u32).wrapping_mul(2_654_435_761) ^ (seed as u32).wrapping_mul(40_503);
            (x >> 13) as u8
        })
        .collect()
}

/// The largest piece the drain hands a sink at once is one buffer; the
/// contract uses 1 MiB.
const CHUNK: usize = MIB as usize;

/// Begin epoch `id` of `rel` and apply its first `writes` pieces; the
/// caller commits, drops or loses the sink.
fn begin_partial<'b>(
    u: &'b Under,
    rel: &str,
    id: EpochId,
    origin: [u8; 16],
    fresh: bool,
    e: &Epoch,
    writes: usize,
) -> Result<Box<dyn EpochSink + Send + 'b>, BackendError> {
    let lf = e.logical();
    let shape = step::shape(id, origin, &lf, fresh);
    let mut sink = step::begin(u.backend.as_ref(), rel.as_bytes(), &shape, &lf)?;
    if !e.deleted {
        let pieces = e
            .writes
            .iter()
            .flat_map(|(off, d)| {
                d.chunks(CHUNK)
                    .enumerate()
                    .map(move |(k, c)| (off + (k * CHUNK) as u64, c))
            })
            .take(writes);
        for (off, data) in pieces {
            sink.apply(RemoteOp::Write { off, data })?;
        }
    }
    Ok(sink)
}

/// One epoch of `rel` applied as the drain applies it.
fn publish(
    u: &Under,
    rel: &str,
    id: EpochId,
    origin: [u8; 16],
    fresh: bool,
    e: &Epoch,
) -> Result<(), BackendError> {
    let sink = begin_partial(u, rel, id, origin, fresh, e, usize::MAX)?;
    step::finish(sink, &e.logical())
}

/// `got` is `want`, or what differs.
fn compare(got: &Option<Vec<u8>>, want: &Option<Vec<u8>>) -> Result<(), String> {
    match (got, want) {
        (None, None) => Ok(()),
        (Some(g), None) => Err(format!("exists ({} bytes), expected absent", g.len())),
        (None, Some(w)) => Err(format!("absent, expected {} bytes", w.len())),
        (Some(g), Some(w)) if g == w => Ok(()),
        (Some(g), Some(w)) => Err(match g.iter().zip(w).position(|(a, b)| a != b) {
            Some(i) => format!(
                "{} bytes, expected {}; first difference at byte {i} (got {}, expected {})",
                g.len(),
                w.len(),
                g[i],
                w[i]
            ),
            None => format!(
                "{} bytes, expected {}; the first {} agree",
                g.len(),
                w.len(),
                g.len().min(w.len())
            ),
        }),
    }
}

/// Which log the contract's epochs come from, and another run's.
const ORIGIN: [u8; 16] = [0x5a; 16];
const OTHER_RUN: [u8; 16] = [0xa5; 16];

/// The contract over one backend: the files as the program left them,
/// and the next epoch number.
struct Run<'a> {
    u: &'a Under,
    files: BTreeMap<String, Option<Vec<u8>>>,
    next: u64,
}

impl<'a> Run<'a> {
    fn new(u: &'a Under) -> Run<'a> {
        Run {
            u,
            files: BTreeMap::new(),
            next: 1,
        }
    }

    fn id(&mut self) -> EpochId {
        self.next += 1;
        EpochId::new(1, self.next - 1)
    }

    fn model(&self, rel: &str) -> Option<Vec<u8>> {
        self.files.get(rel).cloned().flatten()
    }

    fn versions(&self, rel: &str) -> Option<usize> {
        self.u.store.versions(rel.as_bytes()).map(|v| v.len())
    }

    /// The remote holds the model of `rel`, and (where it records one)
    /// epoch `id` with it.
    fn check(&self, rel: &str, id: Option<EpochId>, what: &str) {
        let name = self.u.name;
        let want = self.model(rel);
        let got = self.u.store.read(rel.as_bytes());
        if let Err(e) = compare(&got, &want) {
            panic!("{name}: {rel}: {what}: {e}");
        }
        if let (Some(id), true, true) = (id, self.u.caps.records_epoch, want.is_some()) {
            assert_eq!(
                self.u.store.epoch(rel.as_bytes()),
                Some(id),
                "{name}: {rel}: {what}: the epoch recorded"
            );
        }
    }

    /// Nothing of an upload stays behind.
    fn no_leftovers(&self, rel: &str, what: &str) {
        assert_eq!(
            self.u.backend.abort_stale(rel.as_bytes()).unwrap(),
            0,
            "{}: {rel}: {what}: an upload was left behind",
            self.u.name
        );
    }

    /// The next epoch of `rel`.
    fn epoch(&mut self, rel: &str, ops: &[Op], what: &str) {
        let id = self.id();
        self.apply(rel, id, &Epoch::of(ops), false, what);
    }

    /// Apply epoch `id` twice, the second time as a drain that crashed
    /// before its progress record: each time the remote holds exactly the
    /// model, records the epoch, and leaves nothing behind; the second
    /// adds no version.
    fn apply(&mut self, rel: &str, id: EpochId, e: &Epoch, fresh: bool, what: &str) {
        let name = self.u.name;
        let base = if fresh && self.u.caps.fresh_starts_empty {
            None
        } else {
            self.model(rel)
        };
        self.files.insert(rel.into(), e.apply(base.as_deref()));
        let before = self.versions(rel);
        for pass in ["applied", "applied again"] {
            publish(self.u, rel, id, ORIGIN, fresh, e)
                .unwrap_or_else(|err| panic!("{name}: {rel}: {what}: {pass}: {err}"));
            self.check(rel, Some(id), &format!("{what}, {pass}"));
            self.no_leftovers(rel, &format!("{what}, {pass}"));
            assert_eq!(
                self.versions(rel),
                before.map(|n| n + 1),
                "{name}: {rel}: {what}, {pass}: one version per epoch, however often applied"
            );
        }
    }

    /// Writes at offsets, holes between them read as zeros; an epoch
    /// without operations (an open) changes nothing, and makes an empty
    /// file of a new name.
    fn writes_with_holes(&mut self) {
        let rel = "dir/holes.dat";
        self.epoch(
            rel,
            &[
                W(0, pattern(1, 100)),
                W(4096, pattern(2, 100)),
                W(10_000, pattern(3, 10)),
                Prealloc(12_000),
            ],
            "writes with holes, preallocated past them",
        );
        assert_eq!(self.model(rel).unwrap().len(), 12_000);
        self.epoch(
            rel,
            &[W(50, pattern(4, 100)), W(11_990, pattern(5, 20))],
            "overwrite across a hole, extend",
        );
        self.epoch(rel, &[], "an epoch of an open without writes");
        self.epoch(
            rel,
            &[W(20_000, pattern(6, 1)), W(19_999, pattern(7, 1))],
            "a later write of the epoch wins",
        );
        self.epoch("dir/empty.dat", &[], "a new file opened, nothing written");
        assert_eq!(self.model("dir/empty.dat"), Some(Vec::new()));
    }

    /// A cut (`base_cut`, applied first) then growth: bytes past the cut
    /// read as zeros, never as the old bytes.
    fn cut_and_regrow(&mut self) {
        let rel = "cut.dat";
        self.epoch(rel, &[W(0, pattern(10, 1000))], "1000 bytes");
        self.epoch(
            rel,
            &[SetSize(300), W(600, pattern(11, 100))],
            "cut at 300, write at 600",
        );
        self.epoch(
            rel,
            &[SetSize(200), SetSize(800)],
            "cut at 200, regrow to 800",
        );
        let m = self.model(rel).unwrap();
        assert!(m.len() == 800 && m[200..].iter().all(|&b| b == 0));
        self.epoch(
            rel,
            &[SetSize(100), W(50, pattern(12, 10)), Prealloc(400)],
            "cut at 100, write below it, preallocate",
        );
        self.epoch(
            rel,
            &[W(1000, pattern(13, 10)), SetSize(500)],
            "a write the epoch's own set-size drops",
        );
        self.epoch(rel, &[SetSize(0)], "cut to nothing");
        assert_eq!(self.model(rel), Some(Vec::new()));
    }

    /// `Preallocate` makes the file at least that long, `SetSize` exactly.
    fn preallocate_or_set_size(&mut self) {
        let rel = "size.dat";
        self.epoch(rel, &[W(0, pattern(20, 1000))], "1000 bytes");
        self.epoch(
            rel,
            &[Prealloc(500)],
            "preallocate below the end: unchanged",
        );
        assert_eq!(self.model(rel).unwrap().len(), 1000);
        self.epoch(rel, &[Prealloc(1500)], "preallocate past the end: zeros");
        self.epoch(rel, &[SetSize(1200)], "set-size shrinks");
        self.epoch(rel, &[SetSize(2000)], "set-size grows: zeros");
        self.epoch(
            rel,
            &[Prealloc(3000), SetSize(2500)],
            "the last size operation decides",
        );
        assert_eq!(self.model(rel).unwrap().len(), 2500);
    }

    /// Delete; delete what is gone; recreate without the old bytes, in a
    /// later epoch or in the deleting one.
    fn delete_and_recreate(&mut self) {
        let rel = "gone.dat";
        self.epoch(rel, &[W(0, pattern(30, 500))], "500 bytes");
        self.epoch(rel, &[Delete], "delete");
        self.epoch(rel, &[Delete], "delete a deleted file");
        self.epoch(rel, &[W(100, pattern(31, 10))], "recreate");
        assert_eq!(self.model(rel).unwrap().len(), 110);
        self.epoch(
            rel,
            &[Delete, W(0, pattern(32, 5))],
            "delete and recreate in one epoch",
        );
        assert_eq!(self.model(rel).unwrap().len(), 5);
        self.epoch("never.dat", &[Delete], "delete a name never created");
    }

    /// A file of several S3 parts (5 MiB): holes that fill whole parts, an
    /// epoch that changes one part (the others copied server-side on S3),
    /// a cut inside a part, sparse growth.
    fn large(&mut self) {
        let rel = "big.dat";
        self.epoch(
            rel,
            &[
                W(0, pattern(40, MIB)),
                W(6 * MIB, pattern(41, MIB)),
                W(11 * MIB, pattern(42, MIB + 17)),
            ],
            "12 MiB with holes",
        );
        self.epoch(
            rel,
            &[W(6 * MIB + 100, pattern(43, 1000))],
            "one part changed",
        );
        self.epoch(
            rel,
            &[SetSize(6 * MIB + 512), W(9 * MIB, pattern(44, 10))],
            "cut inside a part, write past it",
        );
        self.epoch(rel, &[Prealloc(16 * MIB)], "sparse growth");
    }

    /// Another run's epoch of the same number (another origin) is a new
    /// state, not taken for one already applied: the object layout adds
    /// a version.
    fn another_run_same_epoch(&mut self) {
        let rel = "again.dat";
        let id = self.id();
        let e = Epoch::of(&[W(0, pattern(50, 300))]);
        self.apply(rel, id, &e, false, "first run");
        let before = self.versions(rel);
        let e2 = Epoch::of(&[W(100, pattern(51, 300))]);
        self.files
            .insert(rel.into(), e2.apply(self.model(rel).as_deref()));
        publish(self.u, rel, id, OTHER_RUN, false, &e2).unwrap();
        self.check(rel, Some(id), "another run's epoch of the same number");
        assert_eq!(self.versions(rel), before.map(|n| n + 1), "{}", self.u.name);
    }

    /// A sink dropped after some operations (a failed epoch): an atomic
    /// backend shows nothing of it and leaves nothing behind; the whole
    /// epoch applied again is exact everywhere.
    fn dropped_sink(&mut self) {
        for (rel, ops) in [
            (
                "cut.dat",
                vec![W(0, pattern(60, 700)), SetSize(400), W(900, pattern(61, 9))],
            ),
            (
                "big.dat",
                vec![
                    SetSize(2 * MIB),
                    W(0, pattern(62, MIB)),
                    W(6 * MIB, pattern(63, MIB)),
                ],
            ),
        ] {
            let before = self.u.store.read(rel.as_bytes());
            let versions = self.versions(rel);
            let id = self.id();
            let e = Epoch::of(&ops);
            // The cut, and writes in two parts (an S3 upload is started).
            let sink = begin_partial(self.u, rel, id, ORIGIN, false, &e, 2).unwrap();
            drop(sink);
            if self.u.caps.atomic {
                let got = self.u.store.read(rel.as_bytes());
                if let Err(err) = compare(&got, &before) {
                    panic!(
                        "{}: {rel}: a dropped sink changed the file: {err}",
                        self.u.name
                    );
                }
                assert_eq!(
                    self.versions(rel),
                    versions,
                    "{}: a dropped sink",
                    self.u.name
                );
            }
            self.no_leftovers(rel, "a dropped sink");
            self.apply(rel, id, &e, false, "the epoch of a dropped sink, whole");
        }
    }

    /// A sink lost in a crash (never dropped: nothing cleans up): S3's
    /// upload stays until `abort_stale` removes it; the file is unchanged
    /// on an atomic backend; the epoch applied again is exact.
    fn stale_upload(&mut self) {
        let rel = "big.dat";
        let before = self.u.store.read(rel.as_bytes());
        let id = self.id();
        let e = Epoch::of(&[W(MIB, pattern(70, MIB)), W(7 * MIB, pattern(71, MIB))]);
        let sink = begin_partial(self.u, rel, id, ORIGIN, false, &e, 2).unwrap();
        std::mem::forget(sink);
        if let Store::S3(r) = &self.u.store {
            // A crash ends the lost drain's requests with it; here its part
            // upload still runs in the backend's runtime. Wait for its end,
            // or it could land after the cleanup and bring the upload back
            // (MinIO does).
            let deadline = Instant::now() + Duration::from_secs(60);
            while !r
                .uploads(rel.as_bytes())
                .iter()
                .any(|&(_, parts)| parts > 0)
            {
                assert!(Instant::now() < deadline, "s3: the lost part never arrived");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let removed = self.u.backend.abort_stale(rel.as_bytes()).unwrap();
        let name = self.u.name;
        if self.u.caps.stale_uploads {
            assert!(removed >= 1, "{name}: the crashed upload was not found");
        } else {
            assert_eq!(removed, 0, "{name}: nothing to clean up");
        }
        self.no_leftovers(rel, "after abort_stale");
        if self.u.caps.atomic {
            if let Err(err) = compare(&self.u.store.read(rel.as_bytes()), &before) {
                panic!("{name}: {rel}: a lost upload changed the file: {err}");
            }
        }
        self.apply(rel, id, &e, false, "the epoch of a lost upload, whole");
    }

    /// The first drain of a file in a job (`fresh`): S3 starts from
    /// nothing, the others from what the remote holds.
    fn fresh(&mut self) {
        let rel = "fresh.dat";
        self.epoch(rel, &[W(0, vec![1; 100])], "an older job's file");
        let id = self.id();
        let e = Epoch::of(&[W(10, vec![2; 5])]);
        self.apply(rel, id, &e, true, "a job's first epoch of the file");
        let mut want = vec![1u8; 100];
        want[10..15].fill(2);
        if self.u.caps.fresh_starts_empty {
            want = vec![0; 10];
            want.extend([2; 5]);
        }
        assert_eq!(self.model(rel), Some(want));
    }

    /// Publishers of one name at the same moment (2 to 4 threads, each
    /// another run's epoch that writes the whole file): each succeeds
    /// (where retryable failures are the contract, after retries), and
    /// the result is what `Publish` promises.
    fn concurrent_publish(&mut self) {
        const LEN: u64 = 3000;
        let rel = "race.dat";
        let name = self.u.name;
        for (round, n) in [2u8, 3, 4, 4, 4].into_iter().enumerate() {
            let first = self.next;
            self.next += n as u64;
            let before = self.u.store.versions(rel.as_bytes());
            let tags: BTreeSet<u8> = (0..n).map(|k| 1 + round as u8 * 4 + k).collect();
            let barrier = Barrier::new(n as usize);
            let u = self.u;
            std::thread::scope(|sc| {
                for (k, &tag) in tags.iter().enumerate() {
                    let barrier = &barrier;
                    sc.spawn(move || {
                        let e = Epoch::of(&[W(0, vec![tag; LEN as usize])]);
                        let id = EpochId::new(1, first + k as u64);
                        barrier.wait();
                        for attempt in 1.. {
                            match publish(u, rel, id, [tag; 16], false, &e) {
                                Ok(()) => return,
                                Err(err)
                                    if u.caps.publish == Publish::WholeObject
                                        && err.retryable()
                                        && attempt < 20 =>
                                {
                                    std::thread::sleep(Duration::from_millis(10 * attempt))
                                }
                                Err(err) => panic!("{name}: publisher {tag}: {err}"),
                            }
                        }
                    });
                }
            });
            let now = self.u.store.read(rel.as_bytes()).expect("published");
            let whole = |b: &[u8]| {
                b.len() as u64 == LEN && tags.contains(&b[0]) && b.iter().all(|&x| x == b[0])
            };
            match self.u.caps.publish {
                Publish::Versions => {
                    let before = before.unwrap();
                    let after = self.u.store.versions(rel.as_bytes()).unwrap();
                    let new: Vec<u64> = after.into_iter().filter(|v| !before.contains(v)).collect();
                    assert_eq!(new.len(), n as usize, "{name}: every publish is a version");
                    let seen: BTreeSet<u8> = new
                        .iter()
                        .map(|&v| {
                            let b = self.u.store.read_version(rel.as_bytes(), v).unwrap();
                            assert!(whole(&b), "{name}: version {v} is not one publisher's");
                            b[0]
                        })
                        .collect();
                    assert_eq!(seen, tags, "{name}: no publish lost");
                    assert!(whole(&now));
                }
                Publish::WholeObject => {
                    assert!(whole(&now), "{name}: the object is not one publisher's");
                }
                Publish::InPlace => {
                    assert_eq!(now.len() as u64, LEN, "{name}");
                    assert!(
                        now.iter().all(|b| tags.contains(b)),
                        "{name}: a byte no publisher wrote"
                    );
                }
            }
            self.files.insert(rel.into(), Some(now));
        }
        self.epoch(rel, &[W(100, pattern(80, 50))], "an epoch after the race");
    }

    /// Garbage collection removes nothing a reader needs: every file
    /// still reads as the model.
    fn garbage(&mut self) {
        self.u.backend.collect_garbage().unwrap();
        for rel in self.files.keys() {
            self.check(rel, None, "after collect_garbage");
        }
    }
}

fn contract(u: &Under) {
    u.backend.check().unwrap();
    u.backend.probe().unwrap();
    assert_eq!(
        u.backend.readable_by_capture(),
        !u.caps.fresh_starts_empty,
        "{}: a remote capture cannot read is one whose first upload starts empty",
        u.name
    );
    let mut run = Run::new(u);
    run.writes_with_holes();
    run.cut_and_regrow();
    run.preallocate_or_set_size();
    run.delete_and_recreate();
    run.large();
    run.another_run_same_epoch();
    run.dropped_sink();
    run.stale_upload();
    run.fresh();
    run.concurrent_publish();
    run.garbage();
}

fn open(url: &str) -> (RemoteUrl, Arc<dyn Backend>) {
    let url: RemoteUrl = url.parse().unwrap();
    let b = paralog_server::remote::open(&url).unwrap();
    (url, b)
}

#[test]
fn posix_meets_the_contract() {
    let d = tempfile::tempdir().unwrap();
    let (_, backend) = open(d.path().to_str().unwrap());
    contract(&Under {
        name: "posix",
        backend,
        store: Store::Posix(d.path().to_path_buf()),
        caps: POSIX,
    });
}

#[test]
fn objstore_meets_the_contract() {
    let d = tempfile::tempdir().unwrap();
    // Every version kept, so that each can be read back.
    let (url, backend) = open(&format!(
        "objstore://{}?dirs=3&keep=100000",
        d.path().display()
    ));
    let RemoteUrl::ObjStore(o) = &url else {
        unreachable!()
    };
    contract(&Under {
        name: "objstore",
        backend,
        store: Store::Obj(ObjStore::new(o)),
        caps: OBJSTORE,
    });
}

/// Set in the environment of the child that runs the S3 checks: the
/// bucket to use.
const S3_CHILD: &str = "PARALOG_TEST_S3_BUCKET";
const S3_PASSED: &str = "S3 checks: passed";

/// The contract over S3, and the service's retry over S3, in a child
/// process of this test binary: the AWS settings of the MinIO this test
/// starts reach the SDK through the environment, which a multi-threaded
/// test process must not change (`set_var`), so the child has them from
/// its start.
#[test]
fn s3_against_minio() {
    if let Ok(bucket) = std::env::var(S3_CHILD) {
        s3_checks(&bucket);
        println!("{S3_PASSED}");
        return;
    }
    let Some(bin) = std::env::var_os("MINIO_TEST_BINARY") else {
        // Written past the test harness's capture, so that a plain
        // `cargo test` shows it.
        let _ = writeln!(
            std::io::stderr(),
            "skipped S3: set MINIO_TEST_BINARY to a MinIO binary (make test-rust does) to run the conformance suite over S3"
        );
        return;
    };
    let minio = Minio::start(Path::new(&bin))
        .unwrap_or_else(|e| panic!("MINIO_TEST_BINARY is set, but MinIO did not start: {e}"));
    let mut child = std::process::Command::new(std::env::current_exe().unwrap());
    child.args([
        "s3_against_minio",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ]);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("AWS_") {
            child.env_remove(k);
        }
    }
    let out = child
        .envs(minio.env())
        .env(S3_CHILD, "paralog-conformance")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Shown with --nocapture.
    println!("the S3 checks' run:\n{text}");
    assert!(
        out.status.success() && text.contains(S3_PASSED),
        "the S3 checks failed ({}):\n{text}\nMinIO's log ends:\n{}",
        out.status,
        minio.log_tail()
    );
}

/// In the child, with MinIO's settings in the environment.
fn s3_checks(bucket: &str) {
    let (url, backend) = open(&format!("s3://{bucket}/conformance?part_size=5M"));
    let RemoteUrl::S3(s3) = &url else {
        unreachable!()
    };
    let reader = S3Reader::open(s3);
    reader
        .rt
        .block_on(reader.client.create_bucket().bucket(bucket).send())
        .unwrap();
    contract(&Under {
        name: "s3",
        backend,
        store: Store::S3(reader),
        caps: S3,
    });
    retry_removes_a_lost_upload(bucket);
}

/// The one-node service over S3: an epoch whose commit fails and whose
/// upload stays behind (its abort refused too). The retry removes that
/// upload before it uploads the epoch again, as the warning of a failed
/// abort promises, and the object is exact.
fn retry_removes_a_lost_upload(bucket: &str) {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("local");
    std::fs::create_dir(&root).unwrap();
    let (url, backend) = open(&format!("s3://{bucket}/service?part_size=5M"));
    let RemoteUrl::S3(s3) = &url else {
        unreachable!()
    };
    let reader = S3Reader::open(s3);
    let rel = "lost.dat";
    let mut r = common::ranks(&root, rel, 1);
    r[0].write_at(0, &pattern(90, 12 * MIB)).unwrap();
    r[0].commit_local().unwrap();
    common::commit(&mut r);
    let want = common::expected(&root, rel, None);
    let faulty = Faulty::new(backend);
    faulty.inject(
        Fault::new(Step::Commit, ErrorKind::Retryable, 1)
            .file(rel)
            .lose(),
    );
    let server = common::start(&root, Remote::Url(url, faulty.clone()));
    let st = server.wait_idle(Some(Duration::from_secs(120))).unwrap();
    assert_eq!(st.epochs_drained, 1, "{st:?}");
    assert_eq!(faulty.calls(rel, Step::Commit), Calls { ok: 1, failed: 1 });
    assert_eq!(
        reader.uploads(rel.as_bytes()),
        Vec::new(),
        "s3: the lost upload is still there"
    );
    let store = Store::S3(reader);
    if let Err(e) = compare(&store.read(rel.as_bytes()), &Some(want)) {
        panic!("s3: {rel} after a retry: {e}");
    }
    server.request_stop();
}

/// A MinIO server on a free loopback port with a temporary data
/// directory, killed when dropped.
struct Minio {
    child: std::process::Child,
    dir: tempfile::TempDir,
    port: u16,
    secret: String,
}

const MINIO_USER: &str = "paralogtest";

fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Minio {
    fn start(bin: &Path) -> Result<Minio, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let log = std::fs::File::create(dir.path().join("minio.log")).map_err(|e| e.to_string())?;
        let port = free_port();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let secret = format!("plsecret-{}-{nanos:x}", std::process::id());
        let mut cmd = std::process::Command::new(bin);
        cmd.arg("server")
            .arg(dir.path().join("data"))
            .arg("--quiet")
            .arg("--address")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--console-address")
            .arg(format!("127.0.0.1:{}", free_port()))
            .env_clear()
            .env("MINIO_ROOT_USER", MINIO_USER)
            .env("MINIO_ROOT_PASSWORD", &secret)
            .env("MINIO_BROWSER", "off")
            .env("MINIO_UPDATE", "off")
            .env("HOME", dir.path())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        if let Some(path) = std::env::var_os("PATH") {
            cmd.env("PATH", path);
        }
        let child = cmd.spawn().map_err(|e| format!("{}: {e}", bin.display()))?;
        let mut m = Minio {
            child,
            dir,
            port,
            secret,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Some(status) = m.child.try_wait().map_err(|e| e.to_string())? {
                return Err(format!("it exited ({status}): {}", m.log_tail()));
            }
            if m.live() {
                return Ok(m);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!("no answer in 60 s: {}", m.log_tail()))
    }

    /// MinIO answers its health check.
    fn live(&self) -> bool {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let mut answer = String::new();
        s.write_all(b"GET /minio/health/live HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .and_then(|_| s.read_to_string(&mut answer))
            .is_ok()
            && answer.lines().next().is_some_and(|l| l.contains(" 200 "))
    }

    /// The AWS settings that reach it (and no configuration file of the
    /// user's).
    fn env(&self) -> Vec<(String, String)> {
        let nothing = self.dir.path().join("empty-aws-config");
        std::fs::write(&nothing, b"").unwrap();
        let nothing = nothing.display().to_string();
        [
            ("AWS_ACCESS_KEY_ID", MINIO_USER.to_string()),
            ("AWS_SECRET_ACCESS_KEY", self.secret.clone()),
            ("AWS_REGION", "us-east-1".into()),
            (
                "AWS_ENDPOINT_URL",
                format!("http://127.0.0.1:{}", self.port),
            ),
            ("AWS_CONFIG_FILE", nothing.clone()),
            ("AWS_SHARED_CREDENTIALS_FILE", nothing),
            ("AWS_EC2_METADATA_DISABLED", "true".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read(self.dir.path().join("minio.log")).unwrap_or_default();
        let log = String::from_utf8_lossy(&log);
        let start = log.len().saturating_sub(800);
        log.get(start..).unwrap_or(&log).to_string()
    }
}

impl Drop for Minio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
