#!/usr/bin/python3
"""The HDF5 view's co-process (docs/objects.md "Views", docs/objects-format.md
"The HDF5 view's co-process"): a program's views thread keeps one
`paralog-h5view serve` for all its versions. PARALOG_H5VIEW names a wrapper
that logs each start of the program (its pid and mode) and execs it.

  many         40 versions through one co-process (one start), every view
               read equal by h5py, the first and last also by h5dump and
               the C reader; `obj verify --all`
  killed       the co-process killed (kill -9) between two versions: the
               next views are made by a new one (two starts), no version
               without its views (`obj verify --all`), all read by h5py
  failed       the view directory unusable for one version (a file where
               its directory goes: root ignores permission bits): its mark
               holds the reason, the next version's views are made by the
               same co-process, `obj view --missing` makes the failed one
  protocol     `paralog-h5view serve` by hand: a request that fails (its
               view's directory missing) answers "fail" with HDF5's reason,
               the next request is made, a request that is none ends it
               (exit 1), "quit" ends it (exit 0)
  exit-thread  a program that calls exit() from a thread other than main
               right after its put: the atexit flush makes the views, and
               no co-process outlives the program
  fork         a child forked after a put makes its own version's views
               with the one-shot program (never the parent's co-process)
  older        a program that does not serve (an older paralog-h5view, as
               a wrapper refusing `serve`): tried once, then every view
               made by the one-shot program
  mpi          an mpi4py program (2 ranks, Open MPI): its views made, no
               co-process left once mpirun returns

Usage: python3 -m tests.objects.views [--only SUBSTRING] [--keep]
Ends with "objects-views: N passed, N failed"."""
import os
import signal
import subprocess
import sys
import time
import uuid

import numpy as np

from tests.lib.check import Suite, check, suite_options
from tests.lib.mpi import launcher, mpi_env
from tests.lib.paths import BIN, ROOT
from tests.lib.proc import run
from tests.objects.run import H5_READER_PY, at, hdf5_read, info, obj, store

H5VIEW = BIN.with_name("paralog-h5view")
SHAPE = (16, 64)

PROGRAM = """
import ctypes, os, sys, threading
import numpy as np
import paralog.objects as po
s = po.Store(sys.argv[1])
base = np.arange(16 * 64, dtype="<i4").reshape(16, 64)
v = 0  # the versions put, each base + its number
for cmd in sys.stdin:
    op, *a = cmd.split()
    if op == "put":  # NAME N: N versions
        for _ in range(int(a[1])):
            v += 1
            s.put(a[0], base + v, chunks=(8, 64))
        s.wait_views()
    elif op == "exit-thread":  # a put, then exit() from another thread
        s.put(a[0], base + 1, chunks=(8, 64))
        threading.Thread(target=lambda: ctypes.CDLL(None).exit(0)).start()
        threading.Event().wait()
    elif op == "fork":  # a put in a forked child, then one here
        pid = os.fork()
        if pid == 0:
            s.put(a[0], base + 2, chunks=(8, 64))
            os._exit(0)
        os.waitpid(pid, 0)
        s.put(a[0], base + 3, chunks=(8, 64))
        s.wait_views()
    print("done", flush=True)
"""


class Program:
    """The program above, fed one command at a time."""

    def __init__(self, work, url):
        self.mark = uuid.uuid4().hex
        self.log = work / "starts.log"
        wrapper = work / "h5view"
        wrapper.write_text(f"#!/bin/sh\necho \"$$ $1\" >> {self.log}\nexec {H5VIEW} \"$@\"\n")
        wrapper.chmod(0o755)
        self.env = dict(os.environ, PYTHONPATH=str(ROOT / "python"), PARALOG_H5VIEW=str(wrapper),
                        PARALOG_VIEWS_TEST=self.mark)
        self.p = subprocess.Popen([sys.executable, "-c", PROGRAM, url], env=self.env, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def do(self, cmd):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if line != "done\n":
            check(False, f"{cmd}: the program said {line!r}: {self.end()}")

    def end(self):
        """Close its input; what it said on stderr."""
        try:
            _, err = self.p.communicate(timeout=120)
        finally:
            if self.p.poll() is None:
                self.p.kill()
        return err

    def ended_clean(self, err):
        """It exited 0 and no co-process of it is left."""
        check(self.p.returncode == 0, f"the program: exit {self.p.returncode}: {err}")
        check(not coprocs(self.mark), f"co-processes left after the program: {coprocs(self.mark)}")

    def starts(self, mode="serve"):
        """The program's starts in `mode`, their pids."""
        lines = self.log.read_text().split("\n") if self.log.exists() else []
        return [ln.split()[0] for ln in lines if ln.split()[1:] == [mode]]


def coprocs(mark):
    """The living paralog-h5view processes started with `mark` in their
    environment (a zombie's environment reads empty)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv0 = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0]
            environ = open(f"/proc/{pid}/environ", "rb").read()
        except OSError:
            continue
        if argv0.endswith(b"paralog-h5view") and f"PARALOG_VIEWS_TEST={mark}".encode() in environ:
            found.append(int(pid))
    return found


def view_file(root, name, n):
    return root / "hdf5" / name / f"v{n:010d}.h5"


def expect(work, n):
    """The raw file of version n's array (base + n)."""
    f = work / f"want{n}.bin"
    (np.arange(SHAPE[0] * SHAPE[1], dtype="<i4") + n).tofile(f)
    return str(f)


def h5_checks(work, root, name, versions):
    return [{"file": str(view_file(root, name, n)), "expect": expect(work, n), "dtype": "int32",
             "shape": list(SHAPE), "attrs": {}, "slabs": [[[3, 5], [9, 40]]]} for n in versions]


def h5py_read(work, root, name, versions):
    """h5py reads every version's view equal to its array."""
    import json
    spec = work / "h5py-checks.json"
    spec.write_text(json.dumps(h5_checks(work, root, name, versions)))
    with open(spec) as f:
        r = run([sys.executable, H5_READER_PY], stdin=f, check=False, timeout=300)
    check(r.returncode == 0 and r.stdout.count("\nok ") + r.stdout.startswith("ok ") == len(versions),
          f"h5py: {(r.stdout + r.stderr).strip()[-1500:]}")


def new_store(work):
    url = store(work, "plain")
    return url, work / "store"


def case_many(work):
    url, root = new_store(work)
    p = Program(work, url)
    try:
        p.do("put t 40")
        alive = coprocs(p.mark)
    finally:
        err = p.end()
    p.ended_clean(err)
    check(len(p.starts()) == 1 and not p.starts("make"),
          f"40 versions: {len(p.starts())} co-process starts, {len(p.starts('make'))} one-shot (want 1, 0)")
    check(len(alive) == 1 and str(alive[0]) == p.starts()[0], f"co-process {p.starts()} while running: {alive}")
    obj("verify", at(url, "t"), "--all")
    h5py_read(work, root, "t", range(1, 41))
    hdf5_read(work, h5_checks(work, root, "t", [1, 40]))
    return "40 views, one co-process, all read equal"


def case_killed(work):
    url, root = new_store(work)
    p = Program(work, url)
    try:
        p.do("put t 1")
        first = coprocs(p.mark)
        check(len(first) == 1, f"co-processes after version 1: {first}")
        os.kill(first[0], signal.SIGKILL)
        p.do("put t 2")
        second = coprocs(p.mark)
    finally:
        err = p.end()
    p.ended_clean(err)
    check(len(p.starts()) == 2, f"co-process starts: {p.starts()} (want 2: the first killed)")
    check(len(second) == 1 and second != first, f"after the kill: {second} (killed {first})")
    obj("verify", at(url, "t"), "--all")
    h5py_read(work, root, "t", [1, 2, 3])
    return "versions 2 and 3 made by a second co-process; every view verified"


def case_failed(work):
    url, root = new_store(work)
    p = Program(work, url)
    views = root / "hdf5" / "t"
    try:
        p.do("put t 1")
        views.rename(root / "hdf5" / "t.away")
        views.write_text("not a directory")
        p.do("put t 1")
        said = info(at(url, "t"))["views"]
        views.unlink()
        (root / "hdf5" / "t.away").rename(views)
        p.do("put t 1")
        made = info(at(url, "t"))["views"]
    finally:
        err = p.end()
    p.ended_clean(err)
    check(said.startswith("missing") and "version 2" in said and str(views) in said
          and "create view directory" in said, f"version 2's views: {said!r}")
    check("version 2" in err, f"the program did not say version 2's views are missing: {err!r}")
    check(made == "made", f"version 3's views: {made!r}")
    check(len(p.starts()) == 1, f"co-process starts: {p.starts()} (want 1: the failure is not its end)")
    r = obj("verify", at(url, "t"), "--all", check=False)
    check(r.returncode == 1 and "version 2" in r.stderr and "views are missing" in r.stderr,
          f"obj verify --all with version 2's views missing: {r.stdout}{r.stderr}")
    check("v0000000002" in obj("view", at(url, "t"), "--missing").stdout, "obj view --missing")
    obj("verify", at(url, "t"), "--all")
    h5py_read(work, root, "t", [1, 2, 3])
    return "version 2's mark says why, version 3 made by the same co-process"


def request(out, chunk):
    args = [str(out), "int32", "2", *map(str, SHAPE), *map(str, SHAPE)]
    return f"make {len(args)} 2\n" + "".join(a + "\n" for a in args) + "{}\n" + f"{chunk}\n"


def case_protocol(work):
    chunk = work / "chunk"
    (np.arange(SHAPE[0] * SHAPE[1], dtype="<i4") + 5).tofile(chunk)
    p = subprocess.Popen([H5VIEW, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        check(p.stdout.readline() == b"paralog-h5view serve 1\n", "no hello")
        p.stdin.write(request(work / "missing" / "v.h5", chunk).encode())
        p.stdin.flush()
        head = p.stdout.readline().split()
        check(head[0] == b"fail", f"a view in a missing directory: {head}")
        said = p.stdout.read(int(head[1])).decode()
        check("cannot create the view file" in said and "No such file or directory" in said, said)
        p.stdin.write(request(work / "v.h5", chunk).encode())
        p.stdin.flush()
        check(p.stdout.readline() == b"ok\n", "the request after a failure")
        p.stdin.write(b"quit\n")
        p.stdin.flush()
        check(p.wait(timeout=60) == 0, f"quit: exit {p.returncode}")
    finally:
        if p.poll() is None:
            p.kill()
    import h5py
    with h5py.File(work / "v.h5", "r") as f:
        check(f["data"][...].tobytes() == open(chunk, "rb").read(), "the served view reads its chunk")
    r = subprocess.run([H5VIEW, "serve"], input=b"make x\n", capture_output=True, timeout=60)
    check(r.returncode == 1 and r.stdout == b"paralog-h5view serve 1\n", f"not a request: {r}")
    return "a failed request answered with its reason, the next made, quit and garbage end it"


def case_exit_thread(work):
    url, root = new_store(work)
    p = Program(work, url)
    p.p.stdin.write("exit-thread t\n")
    p.p.stdin.flush()
    err = p.end()
    p.ended_clean(err)
    check(info(at(url, "t"))["views"] == "made", info(at(url, "t"))["views"])
    check(len(p.starts()) == 1, f"starts: {p.starts()}")
    h5py_read(work, root, "t", [1])
    return "views made by the atexit flush, the co-process ended with the program"


def case_fork(work):
    url, root = new_store(work)
    p = Program(work, url)
    try:
        p.do("put t 1")
        p.do("fork t")
    finally:
        err = p.end()
    p.ended_clean(err)
    check(len(p.starts()) == 1 and len(p.starts("make")) == 1,
          f"starts: serve {p.starts()}, make {p.starts('make')} (want 1 and the child's 1)")
    obj("verify", at(url, "t"), "--all")
    h5py_read(work, root, "t", [1, 2, 3])
    return "the child's view by the one-shot program, the parent's by its co-process"


def case_older(work):
    url, root = new_store(work)
    p = Program(work, url)
    older = work / "older-h5view"
    older.write_text(f"#!/bin/sh\necho \"$$ $1\" >> {p.log}\n"
                     f"[ \"$1\" = serve ] && {{ echo 'usage: make|list' >&2; exit 1; }}\nexec {H5VIEW} \"$@\"\n")
    older.chmod(0o755)
    (work / "h5view").write_text(f"#!/bin/sh\nexec {older} \"$@\"\n")
    try:
        p.do("put t 3")
    finally:
        err = p.end()
    p.ended_clean(err)
    check(len(p.starts()) == 1 and len(p.starts("make")) == 3,
          f"starts: serve {p.starts()}, make {p.starts('make')} (want 1 and 3)")
    obj("verify", at(url, "t"), "--all")
    h5py_read(work, root, "t", [1, 2, 3])
    return "serve tried once, 3 views by the one-shot program"


def case_mpi(work):
    url, root = new_store(work)
    mark = uuid.uuid4().hex
    env = mpi_env({"PYTHONPATH": str(ROOT / "python"), "PARALOG_VIEWS_TEST": mark})
    r = run([*launcher("openmpi", 2), sys.executable, ROOT / "tests/objects/py_writer.py", url, "m", "16", "3"],
            env=env, check=False, timeout=300)
    check(r.returncode == 0 and "read back equal" in r.stdout, f"mpi4py x2: {r.stdout}{r.stderr}")
    check(not coprocs(mark), f"co-processes left after mpirun: {coprocs(mark)}")
    check(info(at(url, "m"))["views"] == "made", info(at(url, "m"))["views"])
    obj("verify", at(url, "m"), "--all")
    return "views made, no co-process left"


def main():
    a = suite_options().parse_args()
    suite = Suite("objects-views", keep=a.keep)
    cases = [("many", case_many), ("killed", case_killed), ("failed", case_failed), ("protocol", case_protocol),
             ("exit-thread", case_exit_thread), ("fork", case_fork), ("older", case_older), ("mpi", case_mpi)]
    return suite.run(cases, only=a.only)


if __name__ == "__main__":
    sys.exit(main())
