"""Shared event streams from Python (docs/streams.md): ctypes over
libparalog_stream.so (paralog/stream.h), the same library as C.

    import paralog.stream as ps
    with ps.Producer("tele", partitions=4) as p:      # local: $PARALOG_LOCAL
        p.append(b"...", key=b"sensor-7")
        p.flush()                                     # durable: one fdatasync
    r = ps.Reader("/scratch/out", "tele", group="viz")
    ev = r.next(timeout=1.0)                          # None: nothing in 1 s
    r.ack(ev); r.commit(); r.leave()

With an mpi4py communicator (`comm=MPI.COMM_WORLD`), opening agrees on the
partition count and `flush()` is collective (each rank's flush, then one
allreduce), through libparalog_stream_mpi_<mpich|openmpi>.so. A reader
group over a communicator is `GroupReader(remote, stream, group, comm)`:
rank 0 reads, every rank gets its share (round-robin or by key).

The library is found at $PARALOG_STREAM_LIB, else beside this package in
a paralog build tree (target/release), else by the dynamic loader.
"""

import ctypes
import os
from collections import namedtuple
from pathlib import Path

(OK, TIMEDOUT, EINVAL, EUNKNOWN, EPARTITIONS, ETOOLARGE, ECORRUPT, EIO, EFULL, EPEER, EINTERNAL,
 ETRIMMED, NONE) = range(13)
ROUND_ROBIN, BY_KEY = -1, -2
MAX_EVENT = 16 << 20
_NOW = -(1 << 63)


class StreamError(Exception):
    """A failure of the library: `code` (the module's E* constants) and its message."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


Event = namedtuple("Event", "partition offset round producer seq time_ns key payload")


class _CEvent(ctypes.Structure):
    _fields_ = [("offset", ctypes.c_uint64), ("round", ctypes.c_uint64), ("producer", ctypes.c_uint64),
                ("seq", ctypes.c_uint64), ("time_ns", ctypes.c_int64), ("key", ctypes.c_void_p),
                ("key_len", ctypes.c_size_t), ("payload", ctypes.c_void_p), ("payload_len", ctypes.c_size_t),
                ("partition", ctypes.c_uint32), ("reserved", ctypes.c_uint32)]


def _find(name):
    tree = Path(__file__).resolve().parents[4] / "target" / "release" / name
    return str(tree) if tree.exists() else name


_lib = None
_mpi = None


def _load():
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(os.environ.get("PARALOG_STREAM_LIB") or _find("libparalog_stream.so"))
        P, I, U32, U64, I64, S = (ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_uint64,
                                  ctypes.c_int64, ctypes.c_size_t)
        C = ctypes.c_char_p
        sig = {
            "paralog_stream_last_error": (C, []),
            "paralog_stream_open": (I, [C, C, U32, ctypes.POINTER(P)]),
            "paralog_stream_append": (I, [P, C, S, C, S, I64, ctypes.c_int32, ctypes.POINTER(U32),
                                          ctypes.POINTER(U64)]),
            "paralog_stream_flush": (I, [P, ctypes.POINTER(U64)]),
            "paralog_stream_set_quota": (I, [P, U64, I]),
            "paralog_stream_set_roll": (I, [P, U64]),
            "paralog_stream_close": (I, [P]),
            "paralog_stream_partitions": (U32, [P]),
            "paralog_stream_id": (U64, [P]),
            "paralog_stream_join": (I, [C, C, C, I, I, ctypes.POINTER(P)]),
            "paralog_stream_join_time": (I, [C, C, C, I64, I, ctypes.POINTER(P)]),
            "paralog_stream_next": (I, [P, I, ctypes.POINTER(_CEvent)]),
            "paralog_stream_set_idle": (I, [P, I64]),
            "paralog_stream_ack": (I, [P, U32, U64]),
            "paralog_stream_commit": (I, [P]),
            "paralog_stream_leave": (I, [P]),
            "paralog_stream_reader_partitions": (U32, [P]),
        }
        for name, (res, args) in sig.items():
            f = getattr(lib, name)
            f.restype, f.argtypes = res, args
        _lib = lib
    return _lib


def _load_mpi():
    """The collective helper built by the MPI that mpi4py uses."""
    global _mpi
    if _mpi is None:
        from mpi4py import MPI
        flavour = "openmpi" if "Open MPI" in MPI.Get_library_version() else "mpich"
        _load()
        lib = ctypes.CDLL(_find(f"libparalog_stream_mpi_{flavour}.so"))
        P = ctypes.c_void_p
        lib.paralog_stream_open_all_p.restype = ctypes.c_int
        lib.paralog_stream_open_all_p.argtypes = [P, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint32,
                                                  ctypes.POINTER(P)]
        lib.paralog_stream_flush_all_p.restype = ctypes.c_int
        lib.paralog_stream_flush_all_p.argtypes = [P, P]
        C, I = ctypes.c_char_p, ctypes.c_int
        for name, args in {"paralog_stream_join_all_p": [P, C, C, C, I, I, I, ctypes.POINTER(P)],
                           "paralog_stream_next_all": [P, I, ctypes.POINTER(_CEvent)],
                           "paralog_stream_group_ack": [P, ctypes.c_uint32, ctypes.c_uint64],
                           "paralog_stream_commit_all": [P],
                           "paralog_stream_leave_all": [P]}.items():
            f = getattr(lib, name)
            f.restype, f.argtypes = I, args
        _mpi = (lib, MPI)
    return _mpi


def _check(rc):
    if rc not in (OK, TIMEDOUT):
        raise StreamError(rc, _lib.paralog_stream_last_error().decode(errors="replace"))
    return rc


def _enc(s):
    return None if s is None else os.fsencode(s)


class _Handle:
    """A handle of the C library, given back once (`_release`); a use
    after that is refused with `_gone`, naming the stream."""

    _h = None
    _gone = ""  # each kind says what a released handle is

    def _release(self, give_back):
        if self._h is not None:
            h, self._h = self._h, None
            _check(give_back(h))

    def _handle(self):
        if self._h is None:
            raise StreamError(EINVAL, f"stream {self.stream}: {self._gone}")
        return self._h


class Producer(_Handle):
    """This process's segment of a stream under the node-local root."""

    _gone = "the producer is closed"

    def __init__(self, stream, partitions, local=None, comm=None, quota=None, quota_wait=0.0, roll=None):
        """quota: the stream's undrained bytes on this node past which
        append waits up to quota_wait seconds for the drain, then raises
        StreamError(EFULL) (docs/streams.md, "Backpressure"). roll: the
        segment size past which a flush starts a new segment (64 MiB by
        default, 0: never; docs/streams.md, "Local retention")."""
        lib = _load()
        self._comm = comm
        h = ctypes.c_void_p()
        if comm is None:
            _check(lib.paralog_stream_open(_enc(local), stream.encode(), partitions, ctypes.byref(h)))
        else:
            mlib, MPI = _load_mpi()
            self._caddr = MPI._addressof(comm)
            _check(mlib.paralog_stream_open_all_p(self._caddr, _enc(local), stream.encode(), partitions,
                                                  ctypes.byref(h)))
        self._h = h
        self.stream = stream
        self.partitions = lib.paralog_stream_partitions(h)
        self._id = f"{lib.paralog_stream_id(h):016x}"
        if roll is not None:
            _check(lib.paralog_stream_set_roll(h, roll))
        if quota:
            _check(lib.paralog_stream_set_quota(h, quota, int(quota_wait * 1000)))

    @property
    def id(self):
        """As events name their producer (and `paralog stream cat` does): a
        new id after each segment roll; once closed, the last one."""
        if self._h is not None:
            self._id = f"{_lib.paralog_stream_id(self._h):016x}"
        return self._id

    def append(self, payload, key=None, time_ns=None, partition=ROUND_ROBIN):
        """(partition, seq) of the event; durable after the next flush."""
        payload = bytes(payload)
        key = None if key is None else bytes(key)
        part, seq = ctypes.c_uint32(), ctypes.c_uint64()
        _check(_lib.paralog_stream_append(self._handle(), payload, len(payload), key, len(key or b""),
                                          _NOW if time_ns is None else time_ns, partition,
                                          ctypes.byref(part), ctypes.byref(seq)))
        return part.value, seq.value

    def flush(self):
        """Every event appended so far is durable (with a communicator: on
        every rank). Returns this producer's durable count."""
        if self._comm is None:
            n = ctypes.c_uint64()
            _check(_lib.paralog_stream_flush(self._handle(), ctypes.byref(n)))
            return n.value
        mlib, _ = _load_mpi()
        _check(mlib.paralog_stream_flush_all_p(self._caddr, self._handle()))
        return None

    def close(self):
        """Flush (this rank's), then let the handle go."""
        self._release(_lib.paralog_stream_close)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Reader(_Handle):
    """A stream on a remote (a directory), alone or as a reader group."""

    _gone = "the reader has left"

    def __init__(self, remote, stream, group=None, start="committed", order="cut", idle=None):
        """order: "cut", "time" or "watermark" (strict event time; a
        partition with nothing new for `idle` seconds, default 1, is no
        longer waited for)."""
        lib = _load()
        froms, orders = {"earliest": 0, "committed": 1}, {"cut": 0, "time": 1, "watermark": 2}
        timed = isinstance(start, int)
        if not (timed or start in froms) or order not in orders:
            raise StreamError(EINVAL, f"start {start!r} (earliest|committed|ns), order {order!r} (cut|time|watermark)")
        h = ctypes.c_void_p()
        args = (_enc(str(remote)), stream.encode(), _enc(group))
        if timed:  # per partition, from the first event at or after this time
            _check(lib.paralog_stream_join_time(*args, start, orders[order], ctypes.byref(h)))
        else:
            _check(lib.paralog_stream_join(*args, froms[start], orders[order], ctypes.byref(h)))
        self._h = h
        self.stream = stream
        self.partitions = lib.paralog_stream_reader_partitions(h)
        self._ev = _CEvent()
        if idle is not None:
            try:
                _check(lib.paralog_stream_set_idle(h, int(idle * 1000)))
            except StreamError:
                self.leave()
                raise

    def next(self, timeout=None):
        """The next event, waiting up to `timeout` seconds (None: forever;
        0: not at all) for the drain to publish one; None if none came."""
        ms = -1 if timeout is None else int(timeout * 1000)
        if _check(_lib.paralog_stream_next(self._handle(), ms, ctypes.byref(self._ev))) == TIMEDOUT:
            return None
        e = self._ev
        key = None if not e.key else ctypes.string_at(e.key, e.key_len)
        payload = ctypes.string_at(e.payload, e.payload_len) if e.payload_len else b""
        return Event(e.partition, e.offset, e.round, f"{e.producer:016x}", e.seq, e.time_ns, key, payload)

    def ack(self, event):
        """The event, and the earlier events of its partition, are processed."""
        _check(_lib.paralog_stream_ack(self._handle(), event.partition, event.offset))

    def commit(self):
        """Store the group's offsets: everything acknowledged."""
        _check(_lib.paralog_stream_commit(self._handle()))

    def leave(self):
        """Commit (with a group), then let the handle go."""
        self._release(_lib.paralog_stream_leave)

    def __iter__(self):
        """Events until none comes for a second."""
        while (ev := self.next(timeout=1.0)) is not None:
            yield ev

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.leave()


class GroupReader(_Handle):
    """A reader group over an mpi4py communicator: rank 0 reads the remote
    and hands each rank its share of the events, round-robin (`spread=
    "round-robin"`) or by key (`"key"`: one key, one rank). `next`,
    `commit`, `leave` and iteration are collective; `ack` is not."""

    _gone = "the group reader has left"

    def __init__(self, remote, stream, group, comm, start="committed", order="cut", spread="round-robin"):
        mlib, MPI = _load_mpi()
        froms, orders, spreads = {"earliest": 0, "committed": 1}, {"cut": 0, "time": 1}, {"round-robin": 0,
                                                                                          "key": 1}
        if start not in froms or order not in orders or spread not in spreads:
            raise StreamError(EINVAL, f"start {start!r} (earliest|committed), order {order!r} (cut|time), "
                                      f"spread {spread!r} (round-robin|key)")
        h = ctypes.c_void_p()
        self._caddr = MPI._addressof(comm)
        _check(mlib.paralog_stream_join_all_p(self._caddr, _enc(str(remote)), stream.encode(), _enc(group),
                                              froms[start], orders[order], spreads[spread], ctypes.byref(h)))
        self._h, self.stream, self._ev, self._mlib = h, stream, _CEvent(), mlib

    def next(self, timeout=None):
        """One round (collective): this rank's event, or None. `None` with
        `self.done` set: no event came for the whole group within `timeout`
        seconds (the same on every rank)."""
        ms = -1 if timeout is None else int(timeout * 1000)
        rc = self._mlib.paralog_stream_next_all(self._handle(), ms, ctypes.byref(self._ev))
        self.done = rc == TIMEDOUT
        if rc in (TIMEDOUT, NONE):
            return None
        _check(rc)
        e = self._ev
        key = None if not e.key else ctypes.string_at(e.key, e.key_len)
        payload = ctypes.string_at(e.payload, e.payload_len) if e.payload_len else b""
        return Event(e.partition, e.offset, e.round, f"{e.producer:016x}", e.seq, e.time_ns, key, payload)

    def ack(self, event):
        """The event, and the earlier events of its partition handed to
        this rank, are processed."""
        _check(self._mlib.paralog_stream_group_ack(self._handle(), event.partition, event.offset))

    def commit(self):
        """Store the group's offsets (collective)."""
        _check(self._mlib.paralog_stream_commit_all(self._handle()))

    def leave(self):
        """Commit, then let the handle go (collective)."""
        self._release(self._mlib.paralog_stream_leave_all)

    def __iter__(self):
        """This rank's events until a round brings the group none for a
        second (every rank stops at the same round)."""
        while True:
            ev = self.next(timeout=1.0)
            if self.done:
                return
            if ev is not None:
                yield ev

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.leave()
