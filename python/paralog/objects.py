"""Array objects from Python (docs/objects.md, "Python"): numpy arrays in
and out, through ctypes over the C API's library (libparalog_obj.so), so
every check and every file operation is the Rust library's.

    import numpy as np, paralog.objects as po
    s = po.Store("objstore:///scratch/objs?dirs=8")
    v = s.put("run7/t", np.arange(64 * 4096, dtype="i4").reshape(64, 4096), chunks=(16, 4096))
    a = s.get("run7/t", start=(8, 0), count=(16, 4096))   # the latest version
    # Chunked, by the ranks of an mpi4py communicator:
    w = s.begin_mpi(comm, "run7/t", "int32", (64, 4096), (16, 4096))
    w.write_chunk((comm.rank, 0), mine)
    v = s.commit_mpi(comm, w)

The library is found in $PARALOG_LIB_DIR, else in the source tree's
target/release (this file is python/paralog/objects.py), else by the
loader's search path. Errors raise ObjectError (its `code` is the C API's,
its message names the object, version and chunk)."""
import ctypes
import json
import os
from pathlib import Path

import numpy as np

DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64"]
MAX_NDIM = 32
ID_LEN = 33
_U64P = ctypes.POINTER(ctypes.c_uint64)


class ObjectError(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def _lib_dir():
    if os.environ.get("PARALOG_LIB_DIR"):
        return Path(os.environ["PARALOG_LIB_DIR"])
    return Path(__file__).resolve().parents[2] / "target" / "release"


def _load(name):
    p = _lib_dir() / f"lib{name}.so"
    return ctypes.CDLL(str(p) if p.exists() else f"lib{name}.so")


_lib = _load("paralog_obj")
_lib.paralog_obj_errmsg.restype = ctypes.c_char_p


class _Array(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("shape", ctypes.c_uint64 * MAX_NDIM), ("chunks", ctypes.c_uint64 * MAX_NDIM),
                ("version", ctypes.c_uint64), ("n_chunks", ctypes.c_uint64),
                ("chunk_bytes", ctypes.c_uint64), ("id", ctypes.c_char * ID_LEN)]


def _check(rc):
    if rc != 0:
        raise ObjectError(rc, _lib.paralog_obj_errmsg().decode(errors="replace"))


def _dims(v):
    v = [int(x) for x in v]
    return (ctypes.c_uint64 * len(v))(*v), len(v)


def _code(dtype):
    name = np.dtype(dtype).name
    if name not in DTYPES:
        raise ObjectError(1, f"element type {name}: one of {' '.join(DTYPES)}")
    return DTYPES.index(name) + 1


def _attrs(attrs):
    return None if attrs is None else json.dumps(attrs).encode()


def _le(a, dtype=None):
    """A C-contiguous little-endian array (the objects' byte order)."""
    dt = np.dtype(dtype or a.dtype).newbyteorder("<")
    return np.ascontiguousarray(a, dtype=dt)


class Writer:
    """One writer of a chunked put (Store.join, Store.begin_mpi)."""

    def __init__(self, store, name, handle, chunks, dtype):
        self.store, self.name, self._h = store, name, handle
        self.chunks, self.dtype = tuple(chunks), np.dtype(dtype)

    @property
    def id(self):
        buf = ctypes.create_string_buffer(ID_LEN)
        _check(_lib.paralog_obj_writer_id(self._h, buf))
        return buf.value.decode()

    def write_chunk(self, coords, values):
        """A whole chunk (an edge chunk padded to the chunk shape) at grid coordinates."""
        a = _le(values, self.dtype)
        c, _ = _dims(coords)
        _check(_lib.paralog_obj_write_chunk(self._h, c, a.ctypes.data_as(ctypes.c_void_p),
                                            ctypes.c_size_t(a.nbytes)))

    def write_part(self, start, values):
        """Any box of the array: `values` (its shape the box's) at `start`.
        Chunks it covers whole are written whole; of the others its part,
        which the commit puts together with the other writers' parts."""
        a = _le(values, self.dtype)
        s, n = _dims(start)
        c, m = _dims(a.shape)
        if n != m:
            raise ObjectError(1, f"{self.name}: start {tuple(start)} has {n} dimensions, the values {m}")
        _check(_lib.paralog_obj_write_part(self._h, s, c, a.ctypes.data_as(ctypes.c_void_p),
                                           ctypes.c_size_t(a.nbytes)))

    def finish(self):
        h, self._h = self._h, None
        _check(_lib.paralog_obj_finish(h))

    def discard(self):
        h, self._h = self._h, None
        if h:
            _lib.paralog_obj_discard(h)


class Store:
    """A store of array objects: objstore:///ROOT?dirs=N&keep=K, a
    directory, or s3://BUCKET/STORE (made by `paralog obj init`). With
    `local` (the node server's --local directory), puts are logged there
    and published by the node server: put and commit return 0, the version
    is numbered when published; begin_mpi/commit_mpi's ranks may be on
    several nodes, each with its own `local`."""

    def __init__(self, url, local=None):
        h = ctypes.c_void_p()
        if local is None:
            _check(_lib.paralog_obj_open(str(url).encode(), ctypes.byref(h)))
        else:
            _check(_lib.paralog_obj_open_logged(str(url).encode(), str(local).encode(), ctypes.byref(h)))
        self._h = h

    def close(self):
        if self._h:
            _lib.paralog_obj_close(self._h)
            self._h = None

    def wait_views(self):
        """Return once the Zarr and HDF5 views of every version this store
        committed are made (a thread makes them after each commit returns;
        close() and the interpreter's exit wait for them too)."""
        _check(_lib.paralog_obj_wait_views(self._h))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def put(self, name, array, chunks, attrs=None):
        """PUT a whole numpy array; returns the version number."""
        a = _le(array)
        shape, d = _dims(a.shape)
        ch, dc = _dims(chunks)
        if dc != d:
            raise ObjectError(1, f"{name}: chunk shape {tuple(chunks)} for an array of {d} dimensions")
        v = ctypes.c_uint64()
        _check(_lib.paralog_obj_put(self._h, name.encode(), _code(a.dtype), d, shape, ch, _attrs(attrs),
                                    a.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(a.nbytes),
                                    ctypes.byref(v)))
        return v.value

    def info(self, name, version=None):
        """dtype, shape, chunks, version, id, n_chunks, chunk_bytes."""
        i = _Array()
        _check(_lib.paralog_obj_info(self._h, name.encode(), ctypes.c_int64(-1 if version is None else version),
                                     ctypes.byref(i)))
        return {"dtype": DTYPES[i.dtype - 1], "shape": tuple(i.shape[:i.ndim]),
                "chunks": tuple(i.chunks[:i.ndim]), "version": i.version, "id": i.id.decode(),
                "n_chunks": i.n_chunks, "chunk_bytes": i.chunk_bytes}

    def get(self, name, version=None, start=None, count=None):
        """A version (default the latest), whole or the hyperslab (start, count), as numpy."""
        meta = self.info(name, version)
        version = meta["version"]  # read the version described, not a newer one
        if (start is None) != (count is None):
            raise ObjectError(1, f"{name}: start and count are both given or neither")
        shape = meta["shape"] if count is None else tuple(int(c) for c in count)
        out = np.empty(shape, dtype=np.dtype(meta["dtype"]).newbyteorder("<"))
        s = c = None
        if start is not None:
            s, _ = _dims(start)
            c, _ = _dims(count)
            if len(s) != len(meta["shape"]) or len(c) != len(meta["shape"]):
                raise ObjectError(1, f"{name} version {version}: start/count need {len(meta['shape'])} values")
        _check(_lib.paralog_obj_get(self._h, name.encode(), ctypes.c_int64(version), s, c,
                                    out.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(out.nbytes), None))
        return out

    # Chunked puts: one process begins, every writer joins, one commits.
    def begin(self, name, dtype, shape, chunks, attrs=None):
        sh, d = _dims(shape)
        ch, _ = _dims(chunks)
        buf = ctypes.create_string_buffer(ID_LEN)
        _check(_lib.paralog_obj_begin(self._h, name.encode(), _code(dtype), d, sh, ch, _attrs(attrs), buf))
        return buf.value.decode()

    def join(self, name, put_id, dtype, shape, chunks):
        sh, d = _dims(shape)
        ch, dc = _dims(chunks)
        h = ctypes.c_void_p()
        _check(_lib.paralog_obj_join(self._h, name.encode(), put_id.encode(), _code(dtype), d, sh, ch,
                                     ctypes.byref(h)))
        return Writer(self, name, h, chunks, dtype)

    def commit(self, name, put_id):
        v = ctypes.c_uint64()
        _check(_lib.paralog_obj_commit(self._h, name.encode(), put_id.encode(), ctypes.byref(v)))
        return v.value

    def abort(self, name, put_id):
        _check(_lib.paralog_obj_abort(self._h, name.encode(), put_id.encode()))

    # The same over an mpi4py communicator: the C API's MPI form
    # (libparalog_obj_mpi_<flavour>.so, the MPI mpi4py was built with).
    def begin_mpi(self, comm, name, dtype, shape, chunks, attrs=None):
        mpi, handle = _mpi(comm)
        sh, d = _dims(shape)
        ch, _ = _dims(chunks)
        h = ctypes.c_void_p()
        _check(mpi.paralog_obj_begin_mpi(handle, self._h, name.encode(), _code(dtype), d, sh, ch,
                                         _attrs(attrs), ctypes.byref(h)))
        return Writer(self, name, h, chunks, dtype)

    def commit_mpi(self, comm, writer):
        mpi, handle = _mpi(comm)
        h, writer._h = writer._h, None
        v = ctypes.c_uint64()
        _check(mpi.paralog_obj_commit_mpi(handle, self._h, writer.name.encode(), h, ctypes.byref(v)))
        return v.value


_MPI_LIBS = {}


def _mpi(comm):
    """The MPI form's library for mpi4py's MPI, and the communicator's C
    handle (MPICH: an int; Open MPI: a pointer)."""
    from mpi4py import MPI
    flavour = "mpich" if "MPICH" in MPI.Get_library_version() else "openmpi"
    if flavour not in _MPI_LIBS:
        comm_t = ctypes.c_int if flavour == "mpich" else ctypes.c_void_p
        _MPI_LIBS[flavour] = (_load(f"paralog_obj_mpi_{flavour}"), comm_t)
    lib, comm_t = _MPI_LIBS[flavour]
    return lib, comm_t(MPI._handleof(comm))
