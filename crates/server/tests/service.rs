//! The server library end to end on a real node-local log written by the
//! log core's writer: the start-up scan, inotify for epochs committed while
//! it runs, a remote that is missing at first (retried, then drained), the
//! order of epochs, and invariant 1 (an uncommitted epoch never drains).

use std::path::Path;
use std::time::Duration;

use paralog_log::{FileIdent, FileInventory, RankLog, WriterConfig};
use paralog_server::remote::Remote;
use paralog_server::service::{Config, Server};
use paralog_server::status::FileState;
use paralog_server::watch::Watcher;

fn ident() -> FileIdent {
    FileIdent {
        job: "j".into(),
        path: b"/app/out.dat".to_vec(),
        rel: b"sub/out.dat".to_vec(),
        gen: 1,
    }
}

/// Two ranks, disjoint halves of a block per epoch, each epoch shifted so
/// that it overwrites part of the one before.
fn write_epoch(ranks: &mut [RankLog], e: u64, commit: bool) {
    for (r, log) in ranks.iter_mut().enumerate() {
        let off = e * 1000 + r as u64 * 5000;
        log.write_at(off, &vec![(e as u8) * 10 + r as u8; 5000])
            .unwrap();
        log.commit_local().unwrap();
    }
    if commit {
        for log in ranks.iter_mut() {
            log.complete_epoch().unwrap();
        }
    }
}

/// The logical file at the last committed epoch: the undrained epochs in
/// the log over `base` (the remote file, holding what was drained).
fn expected(root: &Path, base: Option<&Path>) -> Vec<u8> {
    let f = FileInventory::scan_path(root, "j", b"sub/out.dat")
        .unwrap()
        .unwrap();
    let lf = f.logical_file(None).unwrap();
    let out = root.parent().unwrap().join("expected");
    lf.materialize(&out, base).unwrap();
    std::fs::read(out).unwrap()
}

fn start(root: &Path, remote: &Path) -> Server {
    let server = Server::start(Config {
        root: root.to_path_buf(),
        job: None,
        remote: Remote::new(Some(paralog_backend::RemoteUrl::Posix(
            remote.to_path_buf(),
        )))
        .unwrap(),
        workers: 2,
        pool_bytes: 1 << 20,
        buf_bytes: 4096,
        max_rate: None,
        nice: 0,
    });
    let w = Watcher::new(server.clone()).unwrap();
    std::thread::spawn(move || w.run());
    server
}

#[test]
fn scans_watches_retries_and_keeps_order() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("local");
    std::fs::create_dir(&root).unwrap();
    let remote = d.path().join("remote");
    let cfg = WriterConfig::default();
    let mut ranks: Vec<RankLog> = (0..2)
        .map(|r| RankLog::create(&root, ident(), r, 2, cfg).unwrap())
        .collect();
    write_epoch(&mut ranks, 1, true);
    write_epoch(&mut ranks, 2, true);
    let after_two = expected(&root, None);

    // The remote root does not exist yet: the server must retry, keep the
    // local data, and say why.
    let server = start(&root, &remote);
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
    for log in ranks.iter_mut() {
        log.complete_epoch().unwrap();
    }
    let want = expected(&root, Some(&remote.join("sub/out.dat")));
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
