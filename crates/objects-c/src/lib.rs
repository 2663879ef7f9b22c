//! The C API of array objects (`paralog/objects.h`, docs/objects.md "C"):
//! thin functions over [`paralog_objects::Store`]. Arguments are checked
//! here (null pointers, types, dimensions, buffer sizes) so that nothing a
//! C caller passes can make the library read out of bounds or panic; the
//! MPI form lives in `mpi/paralog_obj_mpi.c`, which only calls these.
//!
//! The functions are `unsafe`: their pointers' contract is the header's
//! (include/paralog/objects.h), which is where C callers read it.
#![allow(clippy::missing_safety_doc)]

mod direct;
mod errors;

use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::Path;

use direct::{Direct, Writer};
use errors::{guard, invalid, Failure};
use paralog_backend::RemoteUrl;
use paralog_objects::{id_hex, parse_id, ArrayMeta, Attrs, DType, LoggedStore, VersionId};

const MAX_NDIM: usize = 32;
const ID_LEN: usize = 33;

/// `paralog_obj_store`: a store opened from a URL; with `logged`, its puts
/// are logged on this node and published by the node server (reads go to
/// the store itself).
pub struct ObjStore {
    direct: Direct,
    logged: Option<LoggedStore>,
}

/// `paralog_obj_writer`: one writer of a chunked put. It borrows its store,
/// which the C caller keeps open until the writer is finished or discarded
/// (the header says so).
pub struct ObjWriter {
    put: Writer,
    /// A logged store's writer: its `finish` also commits a share on a
    /// node other than the put's committing one (docs/objects.md "Logged
    /// mode across nodes").
    logged: Option<&'static LoggedStore>,
}

/// The `paralog_obj_array` struct of the header (what `paralog_obj_info` fills).
#[repr(C)]
pub struct ObjInfo {
    dtype: c_int,
    ndim: c_int,
    shape: [u64; MAX_NDIM],
    chunks: [u64; MAX_NDIM],
    version: u64,
    n_chunks: u64,
    chunk_bytes: u64,
    id: [c_char; ID_LEN],
}

fn text<'a>(p: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err(invalid(format!("{what} is NULL")));
    }
    // SAFETY: a NUL-terminated string from the caller (the header's contract).
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| invalid(format!("{what} is not UTF-8")))
}

fn dims<'a>(p: *const u64, n: usize, what: &str) -> Result<&'a [u64], Failure> {
    if p.is_null() {
        return Err(invalid(format!("{what} is NULL")));
    }
    // SAFETY: the caller passes `n` values (n checked to be 1..=32 first).
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

fn ndim(n: c_int, name: &str) -> Result<usize, Failure> {
    if n < 1 || n as usize > MAX_NDIM {
        return Err(invalid(format!("{name}: {n} dimensions (1 to {MAX_NDIM})")));
    }
    Ok(n as usize)
}

fn handle<'a>(s: *mut ObjStore) -> Result<&'a ObjStore, Failure> {
    if s.is_null() {
        return Err(invalid("the store is NULL"));
    }
    // SAFETY: a pointer paralog_obj_open returned and not yet closed.
    Ok(unsafe { &*s })
}

fn store<'a>(s: *mut ObjStore) -> Result<&'a Direct, Failure> {
    Ok(&handle(s)?.direct)
}

/// The array a caller describes: type code, dimensions, attributes.
#[allow(clippy::too_many_arguments)]
fn meta(
    name: &str,
    dtype: c_int,
    nd: c_int,
    shape: *const u64,
    chunks: *const u64,
    attrs: *const c_char,
) -> Result<ArrayMeta, Failure> {
    let d = ndim(nd, name)?;
    let dt = u8::try_from(dtype)
        .ok()
        .and_then(DType::from_code)
        .ok_or_else(|| {
            invalid(format!(
                "{name}: element type {dtype} (1 to 10, PARALOG_OBJ_INT8 ...)"
            ))
        })?;
    let attrs: Attrs = if attrs.is_null() {
        Attrs::new()
    } else {
        serde_json::from_str(text(attrs, "attrs_json")?)
            .map_err(|e| invalid(format!("{name}: attributes are not a JSON object: {e}")))?
    };
    Ok(ArrayMeta::new(dt, dims(shape, d, "shape")?, dims(chunks, d, "chunks")?).with_attrs(attrs))
}

fn id_arg(p: *const c_char, name: &str) -> Result<VersionId, Failure> {
    let s = text(p, "id")?;
    parse_id(s).ok_or_else(|| invalid(format!("{name}: put id {s:?} is not 32 hex digits")))
}

fn out<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: the caller's out-parameter (NULL: not wanted).
        unsafe { p.write(v) }
    }
}

/// Free a handle this library boxed for C (a store or a writer; NULL:
/// nothing to do).
///
/// # Safety
/// `p` is NULL or a pointer this library returned, freed once.
unsafe fn free_handle<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: the caller's contract above.
        drop(unsafe { Box::from_raw(p) });
    }
}

/// The directory of this library, where `paralog-h5view` is installed
/// beside it (target/release): the HDF5 views of puts made from C.
fn locate_helper() {
    // SAFETY: dladdr reads the address of a function of this library.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(locate_helper as *const c_void, &mut info) != 0 && !info.dli_fname.is_null()
        {
            if let Ok(p) = CStr::from_ptr(info.dli_fname).to_str() {
                if let Some(dir) = Path::new(p).parent() {
                    paralog_objects::hdf5::set_helper_dir(dir);
                }
            }
        }
    }
}

#[no_mangle]
pub extern "C" fn paralog_obj_errmsg() -> *const c_char {
    errors::message()
}

#[no_mangle]
pub unsafe extern "C" fn paralog_obj_set_error(msg: *const c_char) {
    if !msg.is_null() {
        // SAFETY: a NUL-terminated string from the caller.
        let s = unsafe { CStr::from_ptr(msg) }.to_string_lossy();
        let _ = std::panic::catch_unwind(|| errors::set_message(&s));
    }
}

#[no_mangle]
pub unsafe extern "C" fn paralog_obj_open(
    url: *const c_char,
    out_store: *mut *mut ObjStore,
) -> c_int {
    open_with(out_store, || {
        let url = text(url, "url")?;
        let parsed: RemoteUrl = url
            .parse()
            .map_err(|e| Failure(errors::EURL, format!("{url}: {e}")))?;
        Ok(ObjStore {
            direct: Direct::open(&parsed)?,
            logged: None,
        })
    })
}

/// The opens' common part: `make` builds the store, handed out in
/// `out_store` (checked first).
fn open_with(
    out_store: *mut *mut ObjStore,
    make: impl FnOnce() -> Result<ObjStore, Failure>,
) -> c_int {
    guard(|| {
        if out_store.is_null() {
            return Err(invalid("store is NULL"));
        }
        locate_helper();
        let s = make()?;
        out(out_store, Box::into_raw(Box::new(s)));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn paralog_obj_open_logged(
    url: *const c_char,
    local: *const c_char,
    out_store: *mut *mut ObjStore,
) -> c_int {
    open_with(out_store, || {
        let (url, local) = (text(url, "url")?, text(local, "local")?);
        let logged = LoggedStore::open(url, Path::new(local))?;
        let parsed: RemoteUrl = url
            .parse()
            .map_err(|e| Failure(errors::EURL, format!("{url}: {e}")))?;
        Ok(ObjStore {
            direct: Direct::open(&parsed)?,
            logged: Some(logged),
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn paralog_obj_close(s: *mut ObjStore) {
    // SAFETY: NULL or a pointer paralog_obj_open returned, closed once.
    unsafe { free_handle(s) }
}

/// Wait until the views of every version this store committed are made
/// (they are made by a thread after each commit returns; docs/objects.md
/// "Views"). A failure to make them is not an error here: `paralog obj
/// info` says why a version has none.
#[no_mangle]
pub unsafe extern "C" fn paralog_obj_wait_views(s: *mut ObjStore) -> c_int {
    guard(|| {
        if let Direct::Layout(st) = &handle(s)?.direct {
            st.wait_views();
        }
        Ok(())
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn paralog_obj_put(
    s: *mut ObjStore,
    name: *const c_char,
    dtype: c_int,
    nd: c_int,
    shape: *const u64,
    chunks: *const u64,
    attrs: *const c_char,
    data: *const c_void,
    nbytes: usize,
    version: *mut u64,
) -> c_int {
    guard(|| {
        let (h, name) = (handle(s)?, text(name, "name")?);
        let m = meta(name, dtype, nd, shape, chunks, attrs)?;
        if data.is_null() {
            return Err(invalid(format!("{name}: data is NULL")));
        }
        // SAFETY: the caller's buffer of nbytes.
        let buf = unsafe { std::slice::from_raw_parts(data as *const u8, nbytes) };
        let number = match &h.logged {
            Some(l) => l.put(name, &m, buf).map(|_| 0)?,
            None => h.direct.put(name, &m, buf)?.number,
        };
        out(version, number);
        Ok(())
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn paralog_obj_begin(
    s: *mut ObjStore,
    name: *const c_char,
    dtype: c_int,
    nd: c_int,
    shape: *const u64,
    chunks: *const u64,
    attrs: *const c_char,
    id: *mut c_char,
) -> c_int {
    guard(|| {
        let (h, name) = (handle(s)?, text(name, "name")?);
        let m = meta(name, dtype, nd, shape, chunks, attrs)?;
        if id.is_null() {
            return Err(invalid(format!("{name}: id is NULL")));
        }
        let put_id = match &h.logged {
            Some(l) => l.begin(name, &m)?.id(),
            None => h.direct.begin(name, &m)?,
        };
        // SAFETY: the caller's buffer of PARALOG_OBJ_ID_LEN bytes. The
        // beginner is not a writer: it joins like the others.
        unsafe { copy_id(id, &put_id) };
        Ok(())
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn paralog_obj_join(
    s: *mut ObjStore,
    name: *const c_char,
    id: *const c_char,
    dtype: c_int,
    nd: c_int,
    shape: *const u64,
    chunks: *const u64,
    writer: *mut *mut ObjWriter,
) -> c_int {
    guard(|| {
        let (h, name) = (handle(s)?, text(name, "name")?);
        let id = id_arg(id, name)?;
        let m = meta(name, dtype, nd, shape, chunks, std::ptr::null())?;
        if writer.is_null() {
            return Err(invalid(format!("{name}: writer is NULL")));
        }
        // SAFETY: the store outlives its writers (the header's contract).
        let h: &'static ObjStore = unsafe { &*(h as *const ObjStore) };
        let put = match &h.logged {
            Some(l) => Writer::Layout(l.join_as(name, &id, &m)?),
            None => h.direct.join_as(name, &id, &m)?,
        };
        let logged = h.logged.as_ref();
        out(writer, Box::into_raw(Box::new(ObjWriter { put, logged })));
        Ok(())
    })
}

/// The MPI form's join: on a logged store, the put when it was begun on
/// this node, else this node's share of it (with the put's attributes,
/// which rank 0 broadcast); on a direct store, `paralog_obj_join`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn paralog_obj_join_any(
    s: *mut ObjStore,
    name: *const c_char,
    id: *const c_char,
    dtype: c_int,
    nd: c_int,
    shape: *const u64,
    chunks: *const u64,
    attrs: *const c_char,
    writer: *mut *mut ObjWriter,
) -> c_int {
    guard(|| {
        let (h, name) = (handle(s)?, text(name, "name")?);
        let id = id_arg(id, name)?;
        let m = meta(name, dtype, nd, shape, chunks, attrs)?;
        if writer.is_null() {
            return Err(invalid(format!("{name}: writer is NULL")));
        }
        // SAFETY: the store outlives its writers (the header's contract).
        let h: &'static ObjStore = unsafe { &*(h as *const ObjStore) };
        let put = match &h.logged {
            Some(l) => Writer::Layout(l.join_share(name, &id, &m)?),
            None => h.direct.join_as(name, &id, &m)?,
        };
        let logged = h.logged.as_ref();
        out(writer, Box::into_raw(Box::new(ObjWriter { put, logged })));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn paralog_obj_write_chunk(
    w: *mut ObjWriter,
    coords: *const u64,
    data: *const c_void,
    nbytes: usize,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's writer and buffer, as the header says.
        let (w, buf) = unsafe { writer_data(w, data, nbytes) }?;
        let c = dims(coords, w.put.meta().ndim(), "coords")?;
        w.put.write_chunk(c, buf)?;
        Ok(())
    })
}

/// A write's writer and buffer, checked not NULL.
///
/// # Safety
/// `w`: a writer paralog_obj_join returned, not yet finished; `data`:
/// `nbytes` readable bytes, alive while the returned slice is.
unsafe fn writer_data<'a>(
    w: *mut ObjWriter,
    data: *const c_void,
    nbytes: usize,
) -> Result<(&'a mut ObjWriter, &'a [u8]), Failure> {
    if w.is_null() {
        return Err(invalid("the writer is NULL"));
    }
    if data.is_null() {
        return Err(invalid("data is NULL"));
    }
    // SAFETY: the caller's promise.
    unsafe {
        Ok((
            &mut *w,
            std::slice::from_raw_parts(data as *const u8, nbytes),
        ))
    }
}

#[no_mangle]
pub unsafe extern "C" fn paralog_obj_write_part(
    w: *mut ObjWriter,
    start: *const u64,
    count: *const u64,
    data: *const c_void,
    nbytes: usize,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's writer and buffer, as the header says.
        let (w, buf) = unsafe { writer_data(w, data, nbytes) }?;
        let d = w.put.meta().ndim();
        let (s, c) = (dims(start, d, "start")?, dims(count, d, "count")?);
        w.put.write_part(s, c, buf)?;
        Ok(())
    })
}

/// Copy a put's id, 32 hex digits and a NUL, into `id`.
unsafe fn copy_id(id: *mut c_char, v: &VersionId) {
    let hex = id_hex(v);
    std::ptr::copy_nonoverlapping(hex.as_ptr() as *const c_char, id, 32);
    *id.add(32) = 0;
}

#[no_mangle]
pub unsafe extern "C" fn paralog_obj_writer_id(w: *const ObjWriter, id: *mut c_char) -> c_int {
    guard(|| {
        if w.is_null() || id.is_null() {
            return Err(invalid("the writer or id is NULL"));
        }
        // SAFETY: a live writer, and the caller's PARALOG_OBJ_ID_LEN bytes.
        unsafe { copy_id(id, &(*w).put.id()) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn paralog_obj_finish(w: *mut ObjWriter) -> c_int {
    guard(|| {
        if w.is_null() {
            return Err(invalid("the writer is NULL"));
        }
        // SAFETY: a writer paralog_obj_join returned, freed here once.
        let w = unsafe { Box::from_raw(w) };
        finish(*w)?;
        Ok(())
    })
}

/// Finish a writer; a logged share's record (None otherwise).
fn finish(w: ObjWriter) -> paralog_objects::Result<Option<Vec<u8>>> {
    match (w.logged, w.put) {
        (Some(l), Writer::Layout(p)) => l.finish(p),
        (_, p) => p.finish().map(|()| None),
    }
}

/// The MPI form's finish: `paralog_obj_finish`, and the writer's share
/// record (a logged put's writer on another node than the committing
/// one's) in `*share` (`*len` bytes; NULL and 0 otherwise), for the
/// commit's gather; freed by `paralog_obj_share_free`.
#[no_mangle]
pub unsafe extern "C" fn paralog_obj_finish_share(
    w: *mut ObjWriter,
    share: *mut *mut u8,
    len: *mut usize,
) -> c_int {
    guard(|| {
        if w.is_null() || share.is_null() || len.is_null() {
            return Err(invalid("the writer, share or len is NULL"));
        }
        out(share, std::ptr::null_mut());
        out(len, 0);
        // SAFETY: a writer paralog_obj_join returned, freed here once.
        let w = unsafe { Box::from_raw(w) };
        if let Some(bytes) = finish(*w)? {
            out(len, bytes.len());
            out(share, Box::into_raw(bytes.into_boxed_slice()) as *mut u8);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn paralog_obj_share_free(share: *mut u8, len: usize) {
    if !share.is_null() {
        // SAFETY: what paralog_obj_finish_share handed out, freed once.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(share, len)) });
    }
}

/// The MPI form's clean-up after a refused commit, on every rank: this
/// node's share of a logged put removed (best effort); nothing otherwise.
#[no_mangle]
pub unsafe extern "C" fn paralog_obj_discard_share(
    s: *mut ObjStore,
    name: *const c_char,
    id: *const c_char,
) {
    let _ = guard(|| {
        let (h, name) = (handle(s)?, text(name, "name")?);
        let id = id_arg(id, name)?;
        if let Some(l) = &h.logged {
            l.discard_share(name, &id);
        }
        Ok(())
    });
}

/// The MPI form's commit (rank 0): `paralog_obj_commit`, with the share
/// records of the put's writers on other nodes (`len` bytes, one after
/// the other, as gathered) on a logged store; on a direct store `len` is 0.
#[no_mangle]
pub unsafe extern "C" fn paralog_obj_commit_shares(
    s: *mut ObjStore,
    name: *const c_char,
    id: *const c_char,
    shares: *const u8,
    len: usize,
    version: *mut u64,
) -> c_int {
    guard(|| {
        let (h, name) = (handle(s)?, text(name, "name")?);
        let id = id_arg(id, name)?;
        let bytes: &[u8] = if len == 0 {
            &[]
        } else if shares.is_null() {
            return Err(invalid(format!("{name}: shares is NULL")));
        } else {
            // SAFETY: the caller's buffer of len bytes.
            unsafe { std::slice::from_raw_parts(shares, len) }
        };
        let number = match &h.logged {
            Some(l) => l.commit_shares(name, &id, bytes).map(|()| 0)?,
            None if bytes.is_empty() => h.direct.commit(name, &id)?.number,
            None => {
                return Err(invalid(format!(
                    "{name}: shares given for a direct store (only logged puts have shares)"
                )))
            }
        };
        out(version, number);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn paralog_obj_discard(w: *mut ObjWriter) {
    // SAFETY: NULL or a writer paralog_obj_join returned, freed once.
    unsafe { free_handle(w) }
}

#[no_mangle]
pub unsafe extern "C" fn paralog_obj_commit(
    s: *mut ObjStore,
    name: *const c_char,
    id: *const c_char,
    version: *mut u64,
) -> c_int {
    guard(|| {
        let (h, name) = (handle(s)?, text(name, "name")?);
        let id = id_arg(id, name)?;
        let number = match &h.logged {
            Some(l) => l.commit(name, &id).map(|()| 0)?,
            None => h.direct.commit(name, &id)?.number,
        };
        out(version, number);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn paralog_obj_abort(
    s: *mut ObjStore,
    name: *const c_char,
    id: *const c_char,
) -> c_int {
    guard(|| {
        let (h, name) = (handle(s)?, text(name, "name")?);
        let id = id_arg(id, name)?;
        match &h.logged {
            Some(l) => l.abort(name, &id)?,
            None => h.direct.abort(name, &id)?,
        }
        Ok(())
    })
}

fn version_arg(v: i64) -> Option<u64> {
    (v >= 0).then_some(v as u64)
}

#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn paralog_obj_get(
    s: *mut ObjStore,
    name: *const c_char,
    version: i64,
    start: *const u64,
    count: *const u64,
    buf: *mut c_void,
    nbytes: usize,
    got: *mut u64,
) -> c_int {
    guard(|| {
        let (s, name) = (store(s)?, text(name, "name")?);
        let av = s.array(name, version_arg(version))?;
        let d = av.meta.ndim();
        let (start, count) = match (start.is_null(), count.is_null()) {
            (true, true) => (vec![0; d], av.meta.shape.clone()),
            (false, false) => (
                dims(start, d, "start")?.to_vec(),
                dims(count, d, "count")?.to_vec(),
            ),
            _ => {
                return Err(invalid(format!(
                    "{name}: start and count are both NULL or neither"
                )))
            }
        };
        let want = count
            .iter()
            .try_fold(av.meta.dtype.size() as u64, |a, &c| a.checked_mul(c));
        if want != Some(nbytes as u64) {
            return Err(invalid(format!(
                "{name} version {}: a buffer of {nbytes} bytes for {count:?} {} ({want:?} bytes)",
                av.number,
                av.meta.dtype.name()
            )));
        }
        if buf.is_null() {
            return Err(invalid(format!("{name}: buf is NULL")));
        }
        let bytes = s.read(&av, &start, &count)?;
        // SAFETY: the caller's buffer of nbytes, equal to bytes.len().
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf as *mut u8, bytes.len()) };
        out(got, av.number);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn paralog_obj_info(
    s: *mut ObjStore,
    name: *const c_char,
    version: i64,
    info: *mut ObjInfo,
) -> c_int {
    guard(|| {
        let (s, name) = (store(s)?, text(name, "name")?);
        if info.is_null() {
            return Err(invalid(format!("{name}: info is NULL")));
        }
        let av = s.array(name, version_arg(version))?;
        let m = &av.meta;
        let mut i = ObjInfo {
            dtype: m.dtype.code() as c_int,
            ndim: m.ndim() as c_int,
            shape: [0; MAX_NDIM],
            chunks: [0; MAX_NDIM],
            version: av.number,
            n_chunks: m.n_chunks(),
            chunk_bytes: m.chunk_len(),
            id: [0; ID_LEN],
        };
        i.shape[..m.ndim()].copy_from_slice(&m.shape);
        i.chunks[..m.ndim()].copy_from_slice(&m.chunks);
        for (d, b) in i.id.iter_mut().zip(id_hex(&av.id).bytes()) {
            *d = b as c_char;
        }
        out(info, i);
        Ok(())
    })
}

#[cfg(test)]
mod tests;
