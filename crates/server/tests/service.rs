//! The server library end to end on a real node-local log written by the
//! log core's writer: the start-up scan, inotify for epochs committed while
//! it runs, a remote that is missing at first (retried, then drained), the
//! order of epochs, and invariant 1 (an uncommitted epoch never drains);
//! then failures of the remote injected by `common::Faulty`: retried,
//! parked, aborted midway.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

mod common;

use common::{expected, file_status, posix, ranks, start, write_epoch, Fault, Faulty, Step, Store};
use paralog_backend::objstore::ObjStore;
use paralog_backend::{ErrorKind, RemoteUrl};
use paralog_log::{EpochId, FileInventory, RankLog, WriterConfig};
use paralog_server::remote::Remote;
use paralog_server::service::Server;
use paralog_server::status::FileState;

#[test]
fn scans_watches_retries_and_keeps_order() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("local");
    std::fs::create_dir(&root).unwrap();
    let remote = d.path().join("remote");
    let mut ranks = ranks(&root, "sub/out.dat", 2);
    write_epoch(&mut ranks, 1, true);
    write_epoch(&mut ranks, 2, true);
    let after_two = expected(&root, "sub/out.dat", None);

    // The remote root does not exist yet: the server must retry, keep the
    // local data, and say why.
    let server = start(&root, posix(&remote));
    let st = server.wait_idle(Some(Duration::from_millis(1500))).unwrap();
    assert_eq!(st.epochs_drained, 0);
    let f = &st.files[0];
    assert_eq!(f.state, FileState::Retrying, "{st:?}");
    assert!(f.message.as_deref().unwrap().contains("remote"), "{f:?}");
    assert_eq!(f.epochs_pending, 2);
    assert!(!remote.exists());

    std::fs::create_dir(&remote).unwrap();
    let st = server.wait_idle(Some(Duration::from_secs(60))).unwrap();
    assert_eq!(st.epochs_drained, 2, "{st:?}");
    assert_eq!(
        std::fs::read(remote.join("sub/out.dat")).unwrap(),
        after_two
    );

    // Epoch 3 is committed locally by every rank but not globally (no
    // agreement yet): nothing of it may reach the remote... unless every
    // rank's manifest is here, which is the global commit rule. So keep one
    // rank from committing locally: write on rank 0 only.
    ranks[0].write_at(0, b"uncommitted").unwrap();
    ranks[0].commit_local().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let st = server.wait_idle(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(st.epochs_drained, 2);
    assert_eq!(
        std::fs::read(remote.join("sub/out.dat")).unwrap(),
        after_two
    );

    // Rank 1 commits too and the agreement marks it: found by inotify.
    ranks[1].write_at(20_000, b"late").unwrap();
    ranks[1].commit_local().unwrap();
    common::commit(&mut ranks);
    // Epoch 3 on top of epoch 2, built here: the server may already be
    // draining (and deleting) the epoch's log, which `expected` would read.
    let mut want = after_two.clone();
    for (off, data) in [(0usize, &b"uncommitted"[..]), (20_000, &b"late"[..])] {
        if want.len() < off + data.len() {
            want.resize(off + data.len(), 0);
        }
        want[off..off + data.len()].copy_from_slice(data);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while server.status().epochs_drained < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "epoch 3 not drained by the watcher"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = server.wait_idle(Some(Duration::from_secs(30))).unwrap();
    assert!(st.idle);
    assert_eq!(std::fs::read(remote.join("sub/out.dat")).unwrap(), want);
    server.request_stop();
}

/// Issue 15: the directories of a new file (file, staging, generation,
/// rank) queue no scan by themselves; its commit does, and is never
/// missed. `a`'s directories are made first (nothing written: a data log
/// the watch lists in a new rank directory counts as an event, since it
/// may have been closed before the watch), then `b` by a one-process
/// writer (staging directory renamed into its generation) with a committed
/// epoch: the watcher handles events in order and the queue is first in,
/// first out, so once `b` is drained and the server idle, a scan `a`'s
/// directories had queued has run, and shows.
#[test]
fn a_new_files_directories_queue_no_scan_its_commit_does() {
    let (_t, root, remote) = common::dirs();
    let server = start(&root, posix(&remote));
    let mut a = ranks(&root, "a", 2);
    let mut b =
        vec![RankLog::create_single(&root, common::ident("b"), WriterConfig::default()).unwrap()];
    write_epoch(&mut b, 1, true);
    let drained = |n: u64| {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let st = server.status();
            if st.epochs_drained >= n && st.idle {
                return st;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "not drained by the watcher: {st:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let st = drained(1);
    assert_eq!(st.files.len(), 1, "a's directories were scanned: {st:?}");
    assert!(file_status(&st, "b").scans >= 1, "{st:?}");

    // a commits: found by the watcher alone (no drain request, no rescan).
    write_epoch(&mut a, 1, true);
    let st = drained(2);
    assert!(file_status(&st, "a").scans >= 1, "{st:?}");
    assert_eq!(std::fs::read(remote.join("a")).unwrap(), expected_bytes());
    server.request_stop();
}

/// What `write_epoch(_, 1, _)` of two ranks leaves in a new file.
fn expected_bytes() -> Vec<u8> {
    let mut want = vec![0u8; 11_000];
    want[1000..6000].fill(10);
    want[6000..].fill(11);
    want
}

// Failures of the remote, injected by `common::Faulty` around a real
// backend (a POSIX directory, the object layout): the retry, park and
// abort paths of the service, each checked on the bytes the remote holds.

#[derive(Debug, Clone, Copy)]
enum Kind {
    Posix,
    ObjStore,
}

/// A node-local root, and a remote of `kind` behind a `Faulty`.
struct Setup {
    _dir: tempfile::TempDir,
    root: PathBuf,
    url: RemoteUrl,
    faulty: Arc<Faulty>,
    store: Store,
}

impl Setup {
    fn new(kind: Kind) -> Setup {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("local");
        let remote = d.path().join("remote");
        std::fs::create_dir(&root).unwrap();
        std::fs::create_dir(&remote).unwrap();
        let url: RemoteUrl = match kind {
            Kind::Posix => format!("{}", remote.display()),
            Kind::ObjStore => format!("objstore://{}?keep=100", remote.display()),
        }
        .parse()
        .unwrap();
        let store = match &url {
            RemoteUrl::Posix(p) => Store::Posix(p.clone()),
            RemoteUrl::ObjStore(o) => Store::Obj(ObjStore::new(o)),
            RemoteUrl::S3(_) => unreachable!(),
        };
        let faulty = Faulty::new(paralog_server::remote::open(&url).unwrap());
        Setup {
            _dir: d,
            root,
            url,
            faulty,
            store,
        }
    }

    fn start(&self) -> Server {
        start(
            &self.root,
            Remote::Url(self.url.clone(), self.faulty.clone()),
        )
    }

    /// Two ranks, two committed epochs of `rel`; the file they make.
    fn two_epochs(&self, rel: &str) -> Vec<u8> {
        let mut r = ranks(&self.root, rel, 2);
        write_epoch(&mut r, 1, true);
        write_epoch(&mut r, 2, true);
        expected(&self.root, rel, None)
    }

    /// The committed epochs of `rel` still in the node-local log.
    fn pending(&self, rel: &str) -> usize {
        FileInventory::scan_path(&self.root, common::JOB, rel.as_bytes())
            .unwrap()
            .map_or(0, |f| f.pending_epochs().unwrap().len())
    }
}

/// Retryable failures of each step, twice each: the file shows
/// `retrying` with its attempts counted, keeps its local records, then
/// drains exactly once the remote works again.
fn retries_then_drains(kind: Kind) {
    let s = Setup::new(kind);
    let files = [
        ("begin.dat", Step::Begin),
        ("apply.dat", Step::Apply),
        ("commit.dat", Step::Commit),
    ];
    let mut want = Vec::new();
    for (rel, step) in files {
        want.push(s.two_epochs(rel));
        s.faulty
            .inject(Fault::new(step, ErrorKind::Retryable, 2).file(rel));
    }
    let server = s.start();
    // Every file is seen retrying after its second failure (the third
    // attempt waits 0.5 s or more).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut seen = [false; 3];
    while !seen.iter().all(|&x| x) {
        assert!(
            std::time::Instant::now() < deadline,
            "{kind:?}: not every file was seen retrying twice: {:?}",
            server.status()
        );
        let st = server.status();
        for (k, (rel, _)) in files.iter().enumerate() {
            if st.files.iter().any(|f| f.path.ends_with(rel)) {
                let f = file_status(&st, rel);
                if f.state == FileState::Retrying && f.attempts == 2 {
                    assert!(f.message.as_deref().unwrap().contains("injected"), "{f:?}");
                    assert_eq!((f.epochs_drained, f.epochs_pending), (0, 2), "{f:?}");
                    seen[k] = true;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let st = server.wait_idle(Some(Duration::from_secs(60))).unwrap();
    assert_eq!(
        (st.epochs_drained, st.retrying, st.damaged),
        (6, 0, 0),
        "{kind:?}: {st:?}"
    );
    for ((rel, step), want) in files.iter().zip(&want) {
        let f = file_status(&st, rel);
        assert_eq!((f.state, f.attempts), (FileState::Idle, 0), "{f:?}");
        assert_eq!(s.faulty.calls(rel, *step).failed, 2, "{kind:?} {rel}");
        assert_eq!(
            s.store.read(rel.as_bytes()).as_ref(),
            Some(want),
            "{kind:?} {rel}"
        );
        assert_eq!(s.pending(rel), 0, "{kind:?} {rel}: drained records deleted");
        if let Some(v) = s.store.versions(rel.as_bytes()) {
            assert_eq!(v.len(), 2, "{kind:?} {rel}: one version per epoch");
        }
    }
    server.request_stop();
}

/// The case `f` as one test per remote kind: POSIX and the object layout.
macro_rules! per_kind {
    ($f:ident: $posix:ident, $objstore:ident) => {
        #[test]
        fn $posix() {
            $f(Kind::Posix);
        }

        #[test]
        fn $objstore() {
            $f(Kind::ObjStore);
        }
    };
}

per_kind!(retries_then_drains:
    retryable_failures_are_retried_then_drained_posix,
    retryable_failures_are_retried_then_drained_objstore);

/// A remote that refuses a file for good parks that file (`refused`, no
/// retry, every local record kept); the other files drain.
#[test]
fn a_permanent_failure_parks_the_file_and_others_drain() {
    let s = Setup::new(Kind::Posix);
    s.two_epochs("refused.dat");
    let fine = s.two_epochs("fine.dat");
    s.faulty
        .inject(Fault::new(Step::Begin, ErrorKind::Permanent, 1).file("refused.dat"));
    let server = s.start();
    let st = server.wait_idle(Some(Duration::from_secs(30))).unwrap();
    let f = file_status(&st, "refused.dat");
    assert_eq!(f.state, FileState::Refused, "{st:?}");
    assert!(f.message.as_deref().unwrap().contains("injected"), "{f:?}");
    assert_eq!((st.damaged, st.epochs_drained), (1, 2), "{st:?}");
    assert_eq!(s.pending("refused.dat"), 2, "local records kept");
    assert_eq!(s.store.read(b"refused.dat"), None);
    assert_eq!(s.store.read(b"fine.dat"), Some(fine));
    // Parked for good: a later scan does not try it again.
    let st = server.wait_idle(Some(Duration::from_secs(30))).unwrap();
    assert_eq!(file_status(&st, "refused.dat").state, FileState::Refused);
    assert_eq!(
        s.faulty.calls("refused.dat", Step::Begin),
        common::Calls { ok: 0, failed: 1 }
    );
    server.request_stop();
}

/// A flipped byte in the data log of a file's first epoch: the file is
/// `damaged`, nothing of it reaches the remote (not the damaged epoch, nor
/// the later one, which may depend on it), its records stay; the other
/// files drain.
#[test]
fn a_damaged_record_is_never_applied() {
    let s = Setup::new(Kind::Posix);
    let mut r = ranks(&s.root, "damaged.dat", 2);
    write_epoch(&mut r, 1, true);
    write_epoch(&mut r, 2, true);
    let data = r[1].rank_dir().join(paralog_log::layout::epoch_file_name(
        1,
        paralog_log::layout::EpochFileKind::Data,
    ));
    let mut b = std::fs::read(&data).unwrap();
    *b.last_mut().unwrap() ^= 0x40;
    std::fs::write(&data, b).unwrap();
    let fine = s.two_epochs("fine.dat");
    let server = s.start();
    let st = server.wait_idle(Some(Duration::from_secs(30))).unwrap();
    let f = file_status(&st, "damaged.dat");
    assert_eq!(f.state, FileState::Damaged, "{st:?}");
    assert!(
        f.message.as_deref().unwrap().contains("damaged epoch"),
        "{f:?}"
    );
    assert_eq!(
        s.faulty.calls("damaged.dat", Step::Begin),
        common::Calls::default()
    );
    assert_eq!(s.store.read(b"damaged.dat"), None);
    assert_eq!(s.pending("damaged.dat"), 2, "local records kept");
    assert_eq!(s.store.read(b"fine.dat"), Some(fine));
    server.request_stop();
}

/// An epoch that fails after some of its writes reached the remote (its
/// sink dropped uncommitted), and one whose commit fails: the retry
/// applies each whole epoch again, and the remote ends exact.
fn aborted_epochs_are_reapplied_whole(kind: Kind) {
    let s = Setup::new(kind);
    let rel = "abort.dat";
    let mut r = ranks(&s.root, rel, 2);
    write_epoch(&mut r, 1, true);
    // Epoch 2 cuts the file, then writes past the cut.
    for (k, log) in r.iter_mut().enumerate() {
        log.set_size(3000);
        log.write_at(8000 + k as u64 * 5000, &vec![0xa0 + k as u8; 5000])
            .unwrap();
        log.commit_local().unwrap();
    }
    common::commit(&mut r);
    write_epoch(&mut r, 3, true);
    let want = expected(&s.root, rel, None);
    // The cut and two writes pass, the third write fails.
    s.faulty.inject(
        Fault::new(Step::Apply, ErrorKind::Retryable, 1)
            .file(rel)
            .epoch(EpochId::new(1, 2))
            .after(3),
    );
    s.faulty.inject(
        Fault::new(Step::Commit, ErrorKind::Retryable, 1)
            .file(rel)
            .epoch(EpochId::new(1, 3)),
    );
    let server = s.start();
    let st = server.wait_idle(Some(Duration::from_secs(60))).unwrap();
    assert_eq!(st.epochs_drained, 3, "{kind:?}: {st:?}");
    assert_eq!(s.store.read(rel.as_bytes()), Some(want), "{kind:?}");
    assert_eq!(s.faulty.calls(rel, Step::Apply).failed, 1);
    assert_eq!(s.faulty.calls(rel, Step::Commit).failed, 1);
    assert_eq!(
        s.faulty.calls(rel, Step::Begin),
        common::Calls { ok: 5, failed: 0 },
        "three epochs, two of them twice"
    );
    if let Some(v) = s.store.versions(rel.as_bytes()) {
        assert_eq!(
            v,
            vec![1, 2, 3],
            "{kind:?}: an aborted attempt publishes nothing"
        );
    }
    server.request_stop();
}

per_kind!(aborted_epochs_are_reapplied_whole:
    aborted_epochs_are_reapplied_whole_posix,
    aborted_epochs_are_reapplied_whole_objstore);
