//! The servers' MPI: the functions of `libparalog_coord_<flavour>.so`
//! (crates/server/mpi/paralog_coord.c), loaded at run time with the MPI library the job
//! was launched with. Only the coordinator thread calls these.

use std::ffi::{c_char, c_int, c_void, CString};
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum MpiError {
    #[error("loading {lib}: {message}")]
    Load { lib: String, message: String },
    #[error("MPI {op} failed: {message}")]
    Call { op: &'static str, message: String },
}

type InitFn = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;
type FinalizeFn = unsafe extern "C" fn() -> c_int;
type AbortFn = unsafe extern "C" fn(c_int);
type ErrStrFn = unsafe extern "C" fn(c_int, *mut c_char, c_int);
type BarrierFn = unsafe extern "C" fn() -> c_int;
type AllreduceFn = unsafe extern "C" fn(*mut i64, c_int, c_int) -> c_int;
type AllgatherFn = unsafe extern "C" fn(i64, *mut i64) -> c_int;
type BcastFn = unsafe extern "C" fn(*mut c_void, i64, c_int) -> c_int;
type GathervFn =
    unsafe extern "C" fn(*const c_void, i64, *mut c_void, *const i64, *const i64, c_int) -> c_int;
type FileOpenFn = unsafe extern "C" fn(*const c_char, *mut *mut c_void) -> c_int;
type FileWriteAllFn =
    unsafe extern "C" fn(*mut c_void, *const i64, *const i64, c_int, *const c_void) -> c_int;
type FileFn = unsafe extern "C" fn(*mut c_void) -> c_int;
type SendFn = unsafe extern "C" fn(*const c_void, i64, c_int, c_int) -> c_int;
type RecvFn =
    unsafe extern "C" fn(*mut c_void, i64, c_int, c_int, *mut c_int, *mut c_int, *mut i64) -> c_int;

/// Reduction operations of [`Comm::allreduce`].
#[derive(Debug, Clone, Copy)]
pub enum Reduce {
    Sum = 0,
    Max = 1,
    Min = 2,
}

/// The servers' communicator (a duplicate of MPI_COMM_WORLD of the server
/// job). Not `Send`: MPI was initialised for this thread only.
pub struct Comm {
    rank: usize,
    size: usize,
    finalize: FinalizeFn,
    abort: AbortFn,
    err_str: ErrStrFn,
    barrier: BarrierFn,
    allreduce: AllreduceFn,
    allgather: AllgatherFn,
    bcast: BcastFn,
    gatherv: GathervFn,
    file_open: FileOpenFn,
    file_write_all: FileWriteAllFn,
    file_sync: FileFn,
    file_close: FileFn,
    send: SendFn,
    recv: RecvFn,
    _not_send: std::marker::PhantomData<*const ()>,
}

fn dl_error() -> String {
    // SAFETY: dlerror returns a thread-local string or null.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: a NUL-terminated string owned by libdl.
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    }
}

impl Comm {
    /// Load the coordination library (which pulls in its MPI library) and
    /// initialise MPI.
    pub fn init(lib: &Path) -> Result<Comm, MpiError> {
        let load = |message: String| MpiError::Load {
            lib: lib.display().to_string(),
            message,
        };
        let c = CString::new(lib.as_os_str().as_encoded_bytes())
            .map_err(|_| load("path contains a NUL byte".into()))?;
        // RTLD_GLOBAL: Open MPI's components, loaded later by libmpi itself,
        // resolve libmpi's symbols globally.
        // SAFETY: dlopen with a valid C string.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if h.is_null() {
            return Err(load(dl_error()));
        }
        let sym = |name: &str| -> Result<*mut c_void, MpiError> {
            let n = CString::new(name).expect("symbol names have no NUL");
            // SAFETY: a live handle and a valid C string.
            let p = unsafe { libc::dlsym(h, n.as_ptr()) };
            if p.is_null() {
                Err(load(format!("{name}: {}", dl_error())))
            } else {
                Ok(p)
            }
        };
        // SAFETY (all transmutes): the symbols are the C functions of
        // crates/server/mpi/paralog_coord.c, whose signatures the types above copy.
        unsafe {
            let init: InitFn = std::mem::transmute(sym("pl_init")?);
            let mut comm = Comm {
                rank: 0,
                size: 0,
                finalize: std::mem::transmute::<*mut c_void, FinalizeFn>(sym("pl_finalize")?),
                abort: std::mem::transmute::<*mut c_void, AbortFn>(sym("pl_abort")?),
                err_str: std::mem::transmute::<*mut c_void, ErrStrFn>(sym("pl_error_string")?),
                barrier: std::mem::transmute::<*mut c_void, BarrierFn>(sym("pl_barrier")?),
                allreduce: std::mem::transmute::<*mut c_void, AllreduceFn>(sym(
                    "pl_allreduce_i64",
                )?),
                allgather: std::mem::transmute::<*mut c_void, AllgatherFn>(sym(
                    "pl_allgather_i64",
                )?),
                bcast: std::mem::transmute::<*mut c_void, BcastFn>(sym("pl_bcast")?),
                gatherv: std::mem::transmute::<*mut c_void, GathervFn>(sym("pl_gatherv")?),
                file_open: std::mem::transmute::<*mut c_void, FileOpenFn>(sym("pl_file_open")?),
                file_write_all: std::mem::transmute::<*mut c_void, FileWriteAllFn>(sym(
                    "pl_file_write_all",
                )?),
                file_sync: std::mem::transmute::<*mut c_void, FileFn>(sym("pl_file_sync")?),
                file_close: std::mem::transmute::<*mut c_void, FileFn>(sym("pl_file_close")?),
                send: std::mem::transmute::<*mut c_void, SendFn>(sym("pl_send")?),
                recv: std::mem::transmute::<*mut c_void, RecvFn>(sym("pl_recv")?),
                _not_send: std::marker::PhantomData,
            };
            let (mut r, mut s) = (0, 0);
            let rc = init(&mut r, &mut s);
            comm.check("MPI_Init", rc)?;
            comm.rank = r as usize;
            comm.size = s as usize;
            Ok(comm)
        }
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn size(&self) -> usize {
        self.size
    }

    fn check(&self, op: &'static str, rc: c_int) -> Result<(), MpiError> {
        if rc == 0 {
            return Ok(());
        }
        let mut buf = [0 as c_char; 512];
        // SAFETY: the buffer and its length.
        unsafe { (self.err_str)(rc, buf.as_mut_ptr(), buf.len() as c_int) };
        // SAFETY: pl_error_string NUL-terminates within the length.
        let message = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        Err(MpiError::Call {
            op,
            message: format!("{message} (code {rc})"),
        })
    }

    pub fn barrier(&self) -> Result<(), MpiError> {
        // SAFETY: no arguments.
        let rc = unsafe { (self.barrier)() };
        self.check("barrier", rc)
    }

    pub fn allreduce(&self, vals: &mut [i64], op: Reduce) -> Result<(), MpiError> {
        // SAFETY: a valid buffer of vals.len() elements.
        let rc = unsafe { (self.allreduce)(vals.as_mut_ptr(), vals.len() as c_int, op as c_int) };
        self.check("allreduce", rc)
    }

    /// One value from every process, in rank order.
    pub fn allgather(&self, mine: i64) -> Result<Vec<i64>, MpiError> {
        let mut all = vec![0i64; self.size];
        // SAFETY: `all` holds one value per process.
        let rc = unsafe { (self.allgather)(mine, all.as_mut_ptr()) };
        self.check("allgather", rc)?;
        Ok(all)
    }

    /// Root's bytes to every process (every process passes a buffer of the
    /// same length).
    pub fn bcast(&self, buf: &mut [u8], root: usize) -> Result<(), MpiError> {
        // SAFETY: a valid buffer of buf.len() bytes.
        let rc = unsafe { (self.bcast)(buf.as_mut_ptr().cast(), buf.len() as i64, root as c_int) };
        self.check("bcast", rc)
    }

    /// Every process's bytes, to every process (`root: None`) or to one:
    /// the concatenation in rank order, and each process's length.
    pub fn gather_bytes(
        &self,
        mine: &[u8],
        root: Option<usize>,
    ) -> Result<(Vec<u8>, Vec<usize>), MpiError> {
        let counts = self.allgather(mine.len() as i64)?;
        self.gather_known(mine, &counts, root)
            .map(|all| (all, counts.iter().map(|&c| c as usize).collect()))
    }

    /// Like [`Self::gather_bytes`] when every process already knows every
    /// length (one collective instead of two).
    pub fn gather_known(
        &self,
        mine: &[u8],
        counts: &[i64],
        root: Option<usize>,
    ) -> Result<Vec<u8>, MpiError> {
        assert_eq!(counts.len(), self.size);
        let mut displs = Vec::with_capacity(self.size);
        let mut total = 0i64;
        for &c in counts {
            displs.push(total);
            total += c;
        }
        let receives = root.is_none_or(|r| r == self.rank);
        let mut all = vec![0u8; if receives { total as usize } else { 0 }];
        // SAFETY: the send buffer and its length; a receive buffer of the
        // total length where this process receives; counts and displs hold
        // one entry per process.
        let rc = unsafe {
            (self.gatherv)(
                mine.as_ptr().cast(),
                mine.len() as i64,
                if receives {
                    all.as_mut_ptr().cast()
                } else {
                    std::ptr::null_mut()
                },
                counts.as_ptr(),
                displs.as_ptr(),
                root.map_or(-1, |r| r as c_int),
            )
        };
        self.check(
            if root.is_some() {
                "gatherv"
            } else {
                "allgatherv"
            },
            rc,
        )?;
        Ok(all)
    }

    /// One blocking point-to-point send of `buf` to `dest` with `tag`.
    pub fn send(&self, buf: &[u8], dest: usize, tag: i32) -> Result<(), MpiError> {
        // SAFETY: a valid buffer of buf.len() bytes.
        let rc = unsafe { (self.send)(buf.as_ptr().cast(), buf.len() as i64, dest as c_int, tag) };
        self.check("send", rc)
    }

    /// One blocking receive into `buf` from `src` (`None`: any sender) with
    /// any tag: the sender, the tag and the length received.
    pub fn recv(
        &self,
        buf: &mut [u8],
        src: Option<usize>,
    ) -> Result<(usize, i32, usize), MpiError> {
        let (mut s, mut t, mut n) = (0 as c_int, 0 as c_int, 0i64);
        // SAFETY: a valid buffer of buf.len() bytes and three out places.
        let rc = unsafe {
            (self.recv)(
                buf.as_mut_ptr().cast(),
                buf.len() as i64,
                src.map_or(-1, |s| s as c_int),
                -1,
                &mut s,
                &mut t,
                &mut n,
            )
        };
        self.check("recv", rc)?;
        Ok((s as usize, t, n as usize))
    }

    /// Open `path` for collective writes by every server (collective).
    pub fn file_open(&self, path: &Path) -> Result<MpiFile<'_>, MpiError> {
        let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| MpiError::Call {
            op: "MPI_File_open",
            message: format!("{}: the path contains a NUL byte", path.display()),
        })?;
        let mut h = std::ptr::null_mut();
        // SAFETY: a valid C string and a place for the handle.
        let rc = unsafe { (self.file_open)(c.as_ptr(), &mut h) };
        self.check("MPI_File_open", rc)?;
        Ok(MpiFile { comm: self, h })
    }

    /// End the whole server job now (a peer failed, or this one cannot go
    /// on): every server stops; the local logs stay.
    pub fn abort(&self, code: i32) -> ! {
        // SAFETY: no preconditions; does not return in practice.
        unsafe { (self.abort)(code) };
        std::process::exit(code)
    }

    pub fn finalize(self) -> Result<(), MpiError> {
        // SAFETY: called once, from the thread that initialised MPI.
        let rc = unsafe { (self.finalize)() };
        self.check("MPI_Finalize", rc)
    }
}

/// A file every server opened together; closed (collectively) by
/// [`MpiFile::close`], which every server must call.
pub struct MpiFile<'a> {
    comm: &'a Comm,
    h: *mut c_void,
}

impl MpiFile<'_> {
    /// One collective write: this server's `blocks` (file offset, length;
    /// ascending, disjoint), whose bytes lie back to back in `data`.
    pub fn write_all(&self, blocks: &[(u64, u64)], data: &[u8]) -> Result<(), MpiError> {
        assert_eq!(
            blocks.iter().map(|b| b.1).sum::<u64>(),
            data.len() as u64,
            "the blocks' bytes"
        );
        let offs: Vec<i64> = blocks.iter().map(|b| b.0 as i64).collect();
        let lens: Vec<i64> = blocks.iter().map(|b| b.1 as i64).collect();
        // SAFETY: the handle from file_open; arrays of blocks.len() entries
        // and the bytes they describe.
        let rc = unsafe {
            (self.comm.file_write_all)(
                self.h,
                offs.as_ptr(),
                lens.as_ptr(),
                blocks.len() as c_int,
                data.as_ptr().cast(),
            )
        };
        self.comm.check("MPI_File_write_all", rc)
    }

    pub fn sync(&self) -> Result<(), MpiError> {
        // SAFETY: the handle from file_open.
        let rc = unsafe { (self.comm.file_sync)(self.h) };
        self.comm.check("MPI_File_sync", rc)
    }

    pub fn close(self) -> Result<(), MpiError> {
        // SAFETY: the handle from file_open, closed once (self is consumed).
        let rc = unsafe { (self.comm.file_close)(self.h) };
        self.comm.check("MPI_File_close", rc)
    }
}
