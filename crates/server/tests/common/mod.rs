//! What the server's integration tests share (`service.rs`,
//! `conformance.rs`): a node-local log written by the log core's writer, a
//! one-node server over any remote, the read-back of what a remote holds
//! through that remote's own reader, and [`Faulty`], a backend that fails
//! chosen operations of a real one.

// Each test binary uses its own part of this module.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use paralog_backend::objstore::ObjStore;
use paralog_backend::{Backend, BackendError, EpochShape, EpochSink, ErrorKind, RemoteOp};
use paralog_log::{EpochId, FileIdent, FileInventory, RankLog, WriterConfig};
use paralog_server::remote::Remote;
use paralog_server::service::{Config, Server};
use paralog_server::status::{FileStatus, Status};
use paralog_server::watch::Watcher;

/// A fresh directory with an empty node-local root and an empty POSIX
/// remote: (the directory, root, remote).
pub fn dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let (root, remote) = (t.path().join("local"), t.path().join("remote"));
    std::fs::create_dir_all(&remote).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    (t, root, remote)
}

/// The job every test log belongs to.
pub const JOB: &str = "j";

/// The identity of `rel` (the program's path is `/app/<rel>`), first open.
pub fn ident(rel: &str) -> FileIdent {
    FileIdent {
        job: JOB.into(),
        path: format!("/app/{rel}").into_bytes(),
        rel: rel.as_bytes().to_vec(),
        gen: 1,
    }
}

/// The logs of `n` ranks of one open of `rel`.
pub fn ranks(root: &Path, rel: &str, n: u32) -> Vec<RankLog> {
    (0..n)
        .map(|r| RankLog::create(root, ident(rel), r, n, WriterConfig::default()).unwrap())
        .collect()
}

/// Two ranks, disjoint halves of a block per epoch, each epoch shifted so
/// that it overwrites part of the one before.
pub fn write_epoch(ranks: &mut [RankLog], e: u64, commit: bool) {
    for (r, log) in ranks.iter_mut().enumerate() {
        let off = e * 1000 + r as u64 * 5000;
        log.write_at(off, &vec![(e as u8) * 10 + r as u8; 5000])
            .unwrap();
        log.commit_local().unwrap();
    }
    if commit {
        self::commit(ranks);
    }
}

/// The agreement said every rank committed the current epoch.
pub fn commit(ranks: &mut [RankLog]) {
    for log in ranks.iter_mut() {
        log.complete_epoch().unwrap();
    }
}

/// The logical file `rel` at its last committed epoch: the undrained
/// epochs in the log over `base` (the remote file, holding what was
/// drained; `None`: nothing).
pub fn expected(root: &Path, rel: &str, base: Option<&Path>) -> Vec<u8> {
    let f = FileInventory::scan_path(root, JOB, rel.as_bytes())
        .unwrap()
        .unwrap();
    let lf = f.logical_file(None).unwrap();
    let out = root.parent().unwrap().join("expected");
    lf.materialize(&out, base).unwrap();
    std::fs::read(out).unwrap()
}

/// A POSIX remote at `dir`.
pub fn posix(dir: &Path) -> Remote {
    Remote::new(Some(paralog_backend::RemoteUrl::Posix(dir.to_path_buf()))).unwrap()
}

/// A one-node server of `root` draining to `remote`, with its watcher.
/// Small buffers, so that an epoch reaches the backend in several writes.
pub fn start(root: &Path, remote: Remote) -> Server {
    let server = Server::start(Config {
        root: root.to_path_buf(),
        job: None,
        remote,
        workers: 2,
        pool_bytes: 1 << 20,
        buf_bytes: 4096,
        max_rate: None,
        nice: 0,
        sets: None,
    });
    let w = Watcher::new(server.clone()).unwrap();
    std::thread::spawn(move || w.run());
    server
}

/// The status of the file the program knows as `/app/<rel>`.
pub fn file_status<'a>(st: &'a Status, rel: &str) -> &'a FileStatus {
    let path = format!("/app/{rel}");
    st.files
        .iter()
        .find(|f| f.path == path)
        .unwrap_or_else(|| panic!("no status for {path}: {st:?}"))
}

/// What a remote holds, read through that remote's own reader.
pub enum Store {
    /// Plain files under a directory.
    Posix(PathBuf),
    /// The object layout: the latest version, every block checked.
    Obj(ObjStore),
    /// S3: `S3Backend::get`; the object's metadata through the SDK.
    S3(S3Reader),
}

/// Reads objects of one bucket: their bytes with the backend's own
/// download, their metadata with a plain SDK client.
pub struct S3Reader {
    pub backend: paralog_s3::S3Backend,
    pub client: aws_sdk_s3::Client,
    pub rt: tokio::runtime::Runtime,
    pub bucket: String,
}

impl S3Reader {
    /// The S3 remote `url` (endpoint and credentials from the environment,
    /// path-style as the backend uses them).
    pub fn open(url: &paralog_backend::S3Url) -> S3Reader {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let client = rt.block_on(async {
            let shared = aws_config::load_from_env().await;
            let conf = aws_sdk_s3::config::Builder::from(&shared)
                .force_path_style(true)
                .build();
            aws_sdk_s3::Client::from_conf(conf)
        });
        S3Reader {
            backend: paralog_s3::S3Backend::open(url).unwrap(),
            client,
            rt,
            bucket: url.bucket.clone(),
        }
    }

    /// The `paralog-epoch` (`open:epoch`) and `paralog-size` metadata of
    /// the object of `rel`; `None` if there is none.
    pub fn metadata(&self, rel: &[u8]) -> Option<(EpochId, u64)> {
        let key = self.backend.key(rel);
        let h = self
            .rt
            .block_on(
                self.client
                    .head_object()
                    .bucket(&self.bucket)
                    .key(&key)
                    .send(),
            )
            .ok()?;
        let meta = h.metadata()?;
        let epoch = meta.get("paralog-epoch")?.parse().ok()?;
        let size = meta.get("paralog-size")?.parse().ok()?;
        Some((epoch, size))
    }
}

impl S3Reader {
    /// The unfinished multipart uploads of the object of `rel`: each with
    /// the number of its parts the remote holds.
    pub fn uploads(&self, rel: &[u8]) -> Vec<(String, usize)> {
        let key = self.backend.key(rel);
        let list = self
            .rt
            .block_on(
                self.client
                    .list_multipart_uploads()
                    .bucket(&self.bucket)
                    .prefix(&key)
                    .send(),
            )
            .unwrap();
        list.uploads()
            .iter()
            .filter(|u| u.key() == Some(key.as_str()))
            .filter_map(|u| u.upload_id())
            .map(|id| {
                let parts = self
                    .rt
                    .block_on(
                        self.client
                            .list_parts()
                            .bucket(&self.bucket)
                            .key(&key)
                            .upload_id(id)
                            .send(),
                    )
                    .map_or(0, |p| p.parts().len());
                (id.to_owned(), parts)
            })
            .collect()
    }
}

impl Store {
    /// The file's bytes; `None` when it does not exist (or was deleted).
    pub fn read(&self, rel: &[u8]) -> Option<Vec<u8>> {
        match self {
            Store::Posix(root) => {
                let p = root.join(std::str::from_utf8(rel).unwrap());
                match std::fs::read(&p) {
                    Ok(b) => Some(b),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                    Err(e) => panic!("{}: {e}", p.display()),
                }
            }
            Store::Obj(s) => {
                let v = s.version(rel, None).unwrap()?;
                self.read_version(rel, v.number)
            }
            Store::S3(r) => {
                let mut out = Vec::new();
                match r.backend.get(&r.backend.key(rel), &mut out) {
                    Ok(_) => Some(out),
                    Err(e) if e.message.contains("NoSuchKey") => None,
                    Err(e) => panic!("{e}"),
                }
            }
        }
    }

    /// Version `n` of an object of the object layout (`None`: deleted).
    pub fn read_version(&self, rel: &[u8], n: u64) -> Option<Vec<u8>> {
        let Store::Obj(s) = self else {
            panic!("only the object layout keeps versions")
        };
        let v = s.version(rel, Some(n)).unwrap().unwrap();
        if v.deleted {
            return None;
        }
        let mut out = Vec::new();
        s.read_version(&v, &mut out).unwrap();
        Some(out)
    }

    /// The version numbers kept of `rel`, where the remote keeps versions.
    pub fn versions(&self, rel: &[u8]) -> Option<Vec<u64>> {
        match self {
            Store::Obj(s) => Some(s.versions(rel).unwrap()),
            _ => None,
        }
    }

    /// The epoch the remote recorded with the current state of `rel`
    /// (object backends record it; POSIX files do not).
    pub fn epoch(&self, rel: &[u8]) -> Option<EpochId> {
        match self {
            Store::Posix(_) => None,
            Store::Obj(s) => s.version(rel, None).unwrap().map(|v| v.epoch),
            Store::S3(r) => r.metadata(rel).map(|(e, _)| e),
        }
    }
}

/// Which operation of a backend a [`Fault`] fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    /// `Backend::begin`.
    Begin,
    /// `EpochSink::apply` or `copy_from` (each call, whatever the op).
    Apply,
    /// `EpochSink::commit` (the real sink is then dropped uncommitted).
    Commit,
}

/// Fail the calls of one step that match, after letting `skip` of them
/// through, `times` times; later calls pass.
#[derive(Debug, Clone)]
pub struct Fault {
    pub step: Step,
    pub kind: ErrorKind,
    /// Only calls for this file (its path relative to the remote).
    pub rel: Option<Vec<u8>>,
    /// Only calls for this epoch (`EpochShape::epoch`).
    pub epoch: Option<EpochId>,
    pub skip: u32,
    pub times: u32,
    /// The failed sink is lost, not dropped: what it started stays on the
    /// remote, as when the remote refused its abort too (an S3 upload).
    pub lose: bool,
}

impl Fault {
    pub fn new(step: Step, kind: ErrorKind, times: u32) -> Fault {
        Fault {
            step,
            kind,
            rel: None,
            epoch: None,
            skip: 0,
            times,
            lose: false,
        }
    }

    pub fn file(mut self, rel: &str) -> Fault {
        self.rel = Some(rel.as_bytes().to_vec());
        self
    }

    pub fn epoch(mut self, id: EpochId) -> Fault {
        self.epoch = Some(id);
        self
    }

    pub fn after(mut self, skip: u32) -> Fault {
        self.skip = skip;
        self
    }

    pub fn lose(mut self) -> Fault {
        self.lose = true;
        self
    }
}

/// How one step went for one file, so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Calls {
    pub ok: u32,
    pub failed: u32,
}

/// A real backend whose operations fail as told: the server's retry, park
/// and abort paths without a real outage. Only the one-node service's
/// interface is wrapped: `parted` and `chunked` (the server job's) are
/// not offered, as they would bypass the faults.
#[derive(Debug)]
pub struct Faulty {
    inner: Arc<dyn Backend>,
    /// Each fault with the number of calls it matched.
    faults: Mutex<Vec<(Fault, u32)>>,
    calls: Mutex<BTreeMap<(Vec<u8>, Step), Calls>>,
}

impl Faulty {
    pub fn new(inner: Arc<dyn Backend>) -> Arc<Faulty> {
        Arc::new(Faulty {
            inner,
            faults: Mutex::new(Vec::new()),
            calls: Mutex::new(BTreeMap::new()),
        })
    }

    pub fn inject(&self, f: Fault) {
        self.faults.lock().unwrap().push((f, 0));
    }

    /// The calls of `step` for `rel` so far, by outcome.
    pub fn calls(&self, rel: &str, step: Step) -> Calls {
        self.calls
            .lock()
            .unwrap()
            .get(&(rel.as_bytes().to_vec(), step))
            .copied()
            .unwrap_or_default()
    }

    /// A call of `step`: fail it if a fault says so, and count it. The
    /// error, and whether the sink is to be lost.
    fn hit(&self, rel: &[u8], epoch: EpochId, step: Step) -> Result<(), (BackendError, bool)> {
        let mut fail = None;
        for (f, seen) in self.faults.lock().unwrap().iter_mut() {
            let matches = f.step == step
                && f.rel.as_deref().is_none_or(|r| r == rel)
                && f.epoch.is_none_or(|e| e == epoch);
            if matches {
                *seen += 1;
                if *seen > f.skip && *seen - f.skip <= f.times {
                    fail = Some((f.kind, f.lose));
                }
            }
        }
        let mut calls = self.calls.lock().unwrap();
        let c = calls.entry((rel.to_vec(), step)).or_default();
        match fail {
            None => {
                c.ok += 1;
                Ok(())
            }
            Some((kind, lose)) => {
                c.failed += 1;
                let e = BackendError {
                    kind,
                    target: self.inner.describe(rel),
                    op: "injected fault",
                    message: format!("{step:?} failed on purpose ({kind:?})"),
                };
                Err((e, lose))
            }
        }
    }
}

impl Backend for Faulty {
    fn begin(
        &self,
        rel: &[u8],
        shape: &EpochShape,
    ) -> Result<Box<dyn EpochSink + Send + '_>, BackendError> {
        self.hit(rel, shape.epoch, Step::Begin)
            .map_err(|(e, _)| e)?;
        Ok(Box::new(FaultySink {
            inner: Some(self.inner.begin(rel, shape)?),
            faulty: self,
            rel: rel.to_vec(),
            epoch: shape.epoch,
            lost: false,
        }))
    }

    fn describe(&self, rel: &[u8]) -> String {
        self.inner.describe(rel)
    }

    fn local_path(&self, rel: &[u8]) -> Option<PathBuf> {
        self.inner.local_path(rel)
    }

    fn root_dir(&self) -> Option<&Path> {
        self.inner.root_dir()
    }

    fn whole_opens(&self) -> bool {
        self.inner.whole_opens()
    }

    fn concurrent_writers(&self) -> bool {
        self.inner.concurrent_writers()
    }

    fn readable_by_capture(&self) -> bool {
        self.inner.readable_by_capture()
    }

    fn check(&self) -> Result<(), BackendError> {
        self.inner.check()
    }

    fn collect_garbage(&self) -> Result<usize, BackendError> {
        self.inner.collect_garbage()
    }

    fn probe(&self) -> Result<(), BackendError> {
        self.inner.probe()
    }

    fn abort_stale(&self, rel: &[u8]) -> Result<usize, BackendError> {
        self.inner.abort_stale(rel)
    }
}

struct FaultySink<'a> {
    /// `None` once committed.
    inner: Option<Box<dyn EpochSink + Send + 'a>>,
    faulty: &'a Faulty,
    rel: Vec<u8>,
    epoch: EpochId,
    /// Leak the real sink instead of dropping it.
    lost: bool,
}

impl<'a> FaultySink<'a> {
    fn hit(&mut self, step: Step) -> Result<(), BackendError> {
        self.faulty
            .hit(&self.rel, self.epoch, step)
            .map_err(|(e, lose)| {
                self.lost |= lose;
                e
            })
    }

    fn inner(&mut self) -> &mut (dyn EpochSink + Send + 'a) {
        self.inner.as_deref_mut().expect("not committed")
    }
}

impl Drop for FaultySink<'_> {
    fn drop(&mut self) {
        if self.lost {
            std::mem::forget(self.inner.take());
        }
    }
}

impl EpochSink for FaultySink<'_> {
    fn apply(&mut self, op: RemoteOp<'_>) -> Result<(), BackendError> {
        self.hit(Step::Apply)?;
        self.inner().apply(op)
    }

    fn copy_from(
        &mut self,
        src: &std::fs::File,
        src_off: u64,
        len: u64,
        off: u64,
    ) -> Result<bool, BackendError> {
        self.hit(Step::Apply)?;
        self.inner().copy_from(src, src_off, len, off)
    }

    fn commit(mut self: Box<Self>) -> Result<(), BackendError> {
        self.hit(Step::Commit)?;
        self.inner.take().expect("committed once").commit()
    }
}
