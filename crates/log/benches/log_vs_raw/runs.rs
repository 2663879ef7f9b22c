//! One timed run of each side: raw `pwrite` and the log writer, in a scratch directory.

use super::*;

/// A scratch directory under the file system's directory, removed at the end.
pub(crate) struct Scratch {
    dir: PathBuf,
    log_root: PathBuf,
    next: u64,
}

impl Scratch {
    pub(crate) fn new(base: &Path) -> Scratch {
        let dir = base.join(format!("paralog-bench-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let log_root = dir.join("log");
        fs::create_dir(&log_root).expect("create log root");
        Scratch {
            dir,
            log_root,
            next: 0,
        }
    }

    pub(crate) fn name(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    pub(crate) fn raw_file(&mut self) -> (PathBuf, File) {
        let n = self.name();
        let path = self.dir.join(format!("raw{n}.dat"));
        let f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
        (path, f)
    }

    pub(crate) fn drop_raw(&self, path: &Path) {
        fs::remove_file(path).expect("remove raw file");
        syncfs(&self.dir);
    }

    pub(crate) fn log(&mut self) -> (String, RankLog) {
        let job = format!("job{}", self.name());
        let ident = FileIdent {
            job: job.clone(),
            path: b"/bench/out.dat".to_vec(),
            rel: b"out.dat".to_vec(),
            gen: 1,
        };
        let log =
            RankLog::create(&self.log_root, ident, 0, 1, writer_config()).expect("create rank log");
        (job, log)
    }

    pub(crate) fn drop_log(&self, job: &str, log: RankLog) {
        drop(log);
        fs::remove_dir_all(self.log_root.join(job)).expect("remove log");
        syncfs(&self.dir);
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

// ---------------------------------------------------------------- one run

/// open(create) + pwrite of every write + fdatasync + close.
pub(crate) fn raw_run(s: &mut Scratch, src: &[u8], size: usize, offs: &[u64]) -> Duration {
    let n = s.name();
    let path = s.dir.join(format!("raw{n}.dat"));
    let t = Instant::now();
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .expect("create raw file");
    for (i, &off) in offs.iter().enumerate() {
        f.write_all_at(chunk(src, i, size), off).expect("pwrite");
    }
    f.sync_data().expect("fdatasync");
    drop(f);
    let d = t.elapsed();
    s.drop_raw(&path);
    d
}

/// write_at of every write + commit_local (the log creates its data file on
/// the first write, so its open is timed too, like the raw side's).
pub(crate) fn log_run(s: &mut Scratch, src: &[u8], size: usize, offs: &[u64]) -> Duration {
    let (job, mut log) = s.log();
    let t = Instant::now();
    for (i, &off) in offs.iter().enumerate() {
        log.write_at(off, chunk(src, i, size)).expect("write_at");
    }
    log.commit_local().expect("commit_local");
    let d = t.elapsed();
    s.drop_log(&job, log);
    d
}

pub(crate) struct EpochTimes {
    pub(crate) total: Duration,
    /// fdatasync (raw) or commit_local + complete_epoch (log).
    pub(crate) sync: Duration,
}

/// One file, `epochs` times: pwrite `epoch` bytes in 1 MiB writes, fdatasync.
pub(crate) fn raw_epochs(s: &mut Scratch, src: &[u8], epoch: usize, epochs: usize) -> EpochTimes {
    let (path, f) = s.raw_file();
    let w = epoch.min(MIB);
    let mut sync = Duration::ZERO;
    let t = Instant::now();
    for e in 0..epochs {
        for k in 0..epoch / w {
            f.write_all_at(chunk(src, k, w), (e * epoch + k * w) as u64)
                .expect("pwrite");
        }
        let ts = Instant::now();
        f.sync_data().expect("fdatasync");
        sync += ts.elapsed();
    }
    let total = t.elapsed();
    drop(f);
    s.drop_raw(&path);
    EpochTimes { total, sync }
}

/// One rank log, `epochs` times: write_at `epoch` bytes in 1 MiB writes,
/// commit_local, complete_epoch. `epoch == 0`: empty epochs.
pub(crate) fn log_epochs(s: &mut Scratch, src: &[u8], epoch: usize, epochs: usize) -> EpochTimes {
    let (job, mut log) = s.log();
    let w = epoch.clamp(1, MIB);
    let mut sync = Duration::ZERO;
    let t = Instant::now();
    for e in 0..epochs {
        for k in 0..epoch / w {
            log.write_at((e * epoch + k * w) as u64, chunk(src, k, w))
                .expect("write_at");
        }
        let ts = Instant::now();
        log.commit_local().expect("commit_local");
        log.complete_epoch().expect("complete_epoch");
        sync += ts.elapsed();
    }
    let total = t.elapsed();
    s.drop_log(&job, log);
    EpochTimes { total, sync }
}

/// Run `fs` in order on even runs and in reverse order on odd runs (to cancel
/// drift), `runs` times; the times of each, in the order given.
pub(crate) fn alternate<T>(runs: usize, fs: &mut [&mut dyn FnMut() -> T]) -> Vec<Vec<T>> {
    let mut out: Vec<Vec<T>> = (0..fs.len()).map(|_| Vec::new()).collect();
    for r in 0..runs {
        let order: Vec<usize> = if r % 2 == 0 {
            (0..fs.len()).collect()
        } else {
            (0..fs.len()).rev().collect()
        };
        for i in order {
            out[i].push(fs[i]());
        }
    }
    out
}

// ---------------------------------------------------------------- sections
