//! When a version's views are made, and what is known when they are not
//! (docs/objects.md "Views"). Views are derived data: a commit returns
//! once its version is durable, and its Zarr and HDF5 views are made after
//! that, either right away by the same caller (the default: the node
//! server, the CLI) or by a background thread of the committing process
//! ([`Store::background_views`]: the C, Fortran and Python APIs, so an MPI
//! program computes while its views are made). A view that cannot be made
//! (the HDF5 view's program missing or failing) never fails the commit: the
//! version is published, and a mark `ROOT/views/<name>/v<n>` says why its
//! views are missing until `paralog obj view` (or, for logged puts, the
//! node server or `recover`) makes them.
//!
//! The mark holds `pending` and who makes the views (process id, node,
//! boot) while a background thread makes them, and the failure's message
//! once they failed. A pending mark whose process is gone (same node and
//! boot, no such process) is reported as "not made". It is never synced: a
//! crash loses at most a mark, and a version without views and without a
//! mark is reported as "not made" too.

use std::path::PathBuf;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, Once, Weak};
use std::thread::JoinHandle;

use crate::error::{io_err, Result};
use crate::h5serve::ViewServer;
use crate::read::ArrayVersion;
use crate::store::Store;

/// Whether a version's views are there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ViewState {
    /// The Zarr view is there (and the HDF5 view, if its program was found).
    Made,
    /// Queued to a background thread of the committing process.
    Pending,
    /// Not made, and why.
    Missing(String),
}

impl Store {
    /// Where the mark of version `n` of `name` is (pending or failed views).
    pub fn views_mark(&self, name: &str, n: u64) -> PathBuf {
        self.root()
            .join("views")
            .join(name)
            .join(format!("v{n:010}"))
    }

    /// Whether the views of version `n` of `name` are made, pending or
    /// missing (with the reason a failed attempt left).
    pub fn view_state(&self, name: &str, n: u64) -> ViewState {
        match std::fs::read(self.views_mark(name, n)) {
            Ok(b) if b.starts_with(PENDING.as_bytes()) => match maker_gone(&b) {
                Some(pid) => ViewState::Missing(format!(
                    "not made: the committing process ({pid}) ended before it made them; `paralog obj view` makes them"
                )),
                None => ViewState::Pending,
            },
            Ok(b) => ViewState::Missing(String::from_utf8_lossy(&b).into_owned()),
            Err(_) if self.view_dir(name, n).join("zarr.json").is_file() => ViewState::Made,
            Err(_) => ViewState::Missing(
                "not made: the committing process stopped before it made them; `paralog obj view` makes them".into(),
            ),
        }
    }
}

const PENDING: &str = "pending";

/// Who is making the views: this process, on this node, since this boot.
fn pending_text() -> String {
    format!(
        "{PENDING} pid {} node {} boot {}",
        std::process::id(),
        paralog_settings::node_name(None).unwrap_or_default(),
        boot_id()
    )
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// The process of a pending mark, if it is known to be gone (it ran on
/// this node since this boot, and no such process exists).
fn maker_gone(mark: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(mark);
    let f: Vec<&str> = text.split_whitespace().collect();
    let [_, "pid", pid, "node", node, "boot", boot] = f.as_slice() else {
        return None;
    };
    let here = paralog_settings::node_name(None).ok()? == *node && boot_id() == *boot;
    let alive = std::path::Path::new("/proc").join(pid).exists();
    (here && !alive).then(|| format!("pid {pid}"))
}

fn write_mark(store: &Store, av: &ArrayVersion, text: &str) -> Result<()> {
    let mark = store.views_mark(&av.name, av.number);
    let dir = mark.parent().expect("marks live in a directory");
    std::fs::create_dir_all(dir).map_err(io_err(dir, "create views mark directory"))?;
    std::fs::write(&mark, text).map_err(io_err(&mark, "write views mark"))
}

/// Make both views of a version now (`paralog obj view`), and remove its
/// mark; a failure is written in its mark and returned. The Zarr view's
/// directory, and the HDF5 view's file (none without its program).
pub fn make_views(store: &Store, av: &ArrayVersion) -> Result<(PathBuf, Option<PathBuf>)> {
    make_views_by(store, av, None)
}

/// [`make_views`], the HDF5 view by `h5`'s co-process if given.
fn make_views_by(
    store: &Store,
    av: &ArrayVersion,
    h5: Option<&ViewServer>,
) -> Result<(PathBuf, Option<PathBuf>)> {
    let made = crate::zarr::make_view(store, av)
        .and_then(|z| crate::hdf5::make_view(store, av, h5).map(|h| (z, h)));
    let mark = store.views_mark(&av.name, av.number);
    match made {
        Ok(m) => {
            match std::fs::remove_file(&mark) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(&mark, "remove views mark")(e)),
            }
            Ok(m)
        }
        Err(e) => {
            let text = format!(
                "{} version {}: views missing: {e}; `paralog obj view` makes them",
                av.name, av.number
            );
            let _ = write_mark(store, av, &text);
            Err(e)
        }
    }
}

/// The views of a version just committed, never an error of the commit:
/// the failure's message (also in the version's mark). A version that
/// retention dropped meanwhile needs none. `h5`: the caller's HDF5 view
/// co-process (a maker of many views), else the one-shot program.
pub(crate) fn make(
    store: &Store,
    av: &ArrayVersion,
    h5: Option<&ViewServer>,
) -> std::result::Result<(), String> {
    let made = make_views_by(store, av, h5).map(drop);
    let result = match made {
        Err(_) if matches!(store.record(&av.name, av.number), Ok(None)) => {
            let _ = std::fs::remove_file(store.views_mark(&av.name, av.number));
            Ok(())
        }
        Err(e) => Err(format!(
            "{} version {}: views missing: {e}; `paralog obj view` makes them",
            av.name, av.number
        )),
        Ok(()) => Ok(()),
    };
    let _ = prune_all(store, &av.name);
    result
}

/// Remove the views and marks of versions of `name` no longer kept: only
/// a store with retention drops versions.
pub(crate) fn prune_all(store: &Store, name: &str) -> Result<()> {
    if store.os.keep() == u64::MAX {
        return Ok(());
    }
    crate::zarr::prune_views(store, name)?;
    crate::hdf5::prune_views(store, name)?;
    crate::zarr::prune(store, name, "views", "", |p| std::fs::remove_file(p))
}

enum Job {
    Make(Box<Store>, Box<ArrayVersion>),
    /// Answer once every job before is done; `end`: and the HDF5 view's
    /// co-process ended (the process exits).
    Flush {
        done: Sender<()>,
        end: bool,
    },
}

/// The background thread of a store opened with
/// [`Store::background_views`]: makes the views of each version committed
/// through that store, in commit order. Dropping the last handle of the
/// store waits for it (the C API's `paralog_obj_close`).
pub(crate) struct Worker {
    tx: Mutex<Option<Sender<Job>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// The process the thread runs in: a child forked from it has the
    /// worker's memory but not its thread, and must neither wait for it
    /// nor join it.
    pid: u32,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("views::Worker")
    }
}

/// Every worker of this process, for [`flush_at_exit`].
static WORKERS: Mutex<Vec<Weak<Worker>>> = Mutex::new(Vec::new());
static AT_EXIT: Once = Once::new();

/// At the process's exit (`exit`, the end of `main`, of a Python
/// interpreter), the views still queued are made: a program that never
/// closes its store (the thread would die with it) loses no view. Only a
/// kill or `_exit` leaves a version pending (`paralog obj view`). Then
/// each thread's HDF5 view co-process is ended, so none outlives the
/// program.
extern "C" fn flush_at_exit() {
    let workers: Vec<Arc<Worker>> = WORKERS
        .lock()
        .map(|w| w.iter().filter_map(Weak::upgrade).collect())
        .unwrap_or_default();
    for w in workers {
        w.flush_then(true);
    }
}

impl Worker {
    pub(crate) fn start() -> Result<Arc<Worker>> {
        AT_EXIT.call_once(|| {
            // SAFETY: registers a plain function taking and returning
            // nothing, which catches no panic because it cannot raise one
            // (flush only sends on a channel and waits for the answer).
            unsafe { libc::atexit(flush_at_exit) };
        });
        let (tx, rx) = channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("paralog-views".into())
            .spawn(move || {
                // Owned by this thread, which a forked child does not
                // have: only this process talks to it. Dropped (ended)
                // when the thread ends.
                let h5 = ViewServer::new();
                for job in rx {
                    match job {
                        // The message is in the version's mark (`paralog
                        // obj info` shows it); this process has no log.
                        Job::Make(store, av) => {
                            if let Err(why) = make(&store, &av, Some(&h5)) {
                                eprintln!("paralog objects: {why}");
                            }
                        }
                        Job::Flush { done, end } => {
                            if end {
                                h5.end();
                            }
                            let _ = done.send(());
                        }
                    }
                }
            })
            .map_err(io_err(
                std::path::Path::new("paralog-views"),
                "start thread",
            ))?;
        let w = Arc::new(Worker {
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
            pid: std::process::id(),
        });
        if let Ok(mut all) = WORKERS.lock() {
            all.retain(|w| w.strong_count() > 0);
            all.push(Arc::downgrade(&w));
        }
        Ok(w)
    }

    fn send(&self, job: Job) -> bool {
        if self.pid != std::process::id() {
            return false; // a forked child: the thread is its parent's
        }
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        tx.as_ref().is_some_and(|tx| tx.send(job).is_ok())
    }

    /// Queue the views of a version of `store` (a handle without this
    /// worker: the thread must not hold the last handle of itself); its
    /// mark says "pending" meanwhile.
    pub(crate) fn queue(&self, store: &Store, av: ArrayVersion) {
        let queued = write_mark(store, &av, &pending_text()).is_ok()
            && self.send(Job::Make(Box::new(store.clone()), Box::new(av.clone())));
        if !queued {
            // No mark or no thread: made now, as without a worker.
            let _ = make(store, &av, None);
        }
    }

    /// Return once every view queued so far is made (or failed).
    pub(crate) fn flush(&self) {
        self.flush_then(false);
    }

    /// [`Worker::flush`], then, if `end`, the thread's co-process ended.
    fn flush_then(&self, end: bool) {
        let (done, rx) = channel();
        if self.send(Job::Flush { done, end }) {
            let _ = rx.recv();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        drop(self.tx.lock().unwrap_or_else(|p| p.into_inner()).take());
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            if self.pid == std::process::id() {
                let _ = t.join();
            } else {
                std::mem::forget(t); // a forked child: not its thread
            }
        }
    }
}
