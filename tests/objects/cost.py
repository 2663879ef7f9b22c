#!/usr/bin/python3
"""What a version costs, and views made after the commit (docs/objects.md
"What a version costs" and "Views"; issue 18's fsync and views work).

  fsyncs     strace of `paralog obj put` (one writer, 4 chunks, on a
             plain directory already holding 5 versions): at most one
             fsync per chunk file, one per storage directory, and the
             commit's 4 (array record and its directory, version record
             and its directory); on ext4, xfs or tmpfs, where a file's
             fsync makes its name durable, no storage directory's: one
             per chunk file and 3; no version record read back; at most
             2 files created per chunk (its file, its claim's temporary
             name) and 5 per put (`begin`, `name`, the writer's mark,
             the array record, the version record's temporary name),
             views aside. A logged put: at most one per chunk + 4 (its
             commit record, one file, in place of every claim); its
             publish (`paralog obj publish`) as a direct put, reading
             no version record (no search for its id), making no remote
             staging (a file per chunk, the array record and the version
             record's temporary name)
  no-sync    a store opened with sync=0 (durability left to the page cache,
             as HDF5 and zarr-python do): a direct put makes no fsync at
             all and reads back; a logged put to it, and a drain to it
             (`paralog run --remote objstore://...?sync=0`), are refused
             naming sync=0 (they delete node-local copies once published)
  no-h5view  PARALOG_H5VIEW naming a program that does not exist: the put
             succeeds (a warning on stderr) and its version reads back,
             `obj info` says the views are missing naming the setting and
             the program, `obj verify` refuses saying so, `obj view
             --missing` (the program found) makes them, `obj info` says made
  background a Python program (paralog.objects, the C API: views on a
             thread) with an HDF5 view program that takes 8 s: its put
             returns before, `obj info` says pending while it runs, and
             once it exits (without closing its store) the views are made
             and verified; one that leaves by os._exit right after its put
             leaves them "not made" naming its process, and `obj view`
             makes them

Usage: python3 -m tests.objects.cost [--only SUBSTRING] [--keep]
Ends with "objects-cost: N passed, N failed"."""
import json
import os
import re
import shutil
import subprocess
import sys
import time

from tests.lib.check import Suite, check, suite_options
from tests.lib.paths import BIN, ROOT
from tests.lib.proc import run
from tests.objects.run import at, info, obj, store

SHAPE, CHUNKS = "64,4096", "16,4096"
N_CHUNKS = 4
PY_ENV = dict(os.environ, PYTHONPATH=str(ROOT / "python"))


def traced(work, label, cmd, env=None):
    """Run cmd under strace; the fsyncs it made and the files it opened."""
    strace = shutil.which("strace")
    check(strace, "strace is not installed (scripts/setup.sh installs it)")
    out = work / f"{label}.strace"
    run([strace, "-f", "-y", "-o", out, "-e", "trace=fsync,fdatasync,openat", *cmd], env=env)
    lines = out.read_text().splitlines()
    fsyncs = [ln for ln in lines if re.search(r"\b(fsync|fdatasync)\(", ln)]
    opens = [ln for ln in lines if "openat(" in ln]
    return fsyncs, opens


def case_fsyncs(work):
    root = work / "store"
    root.mkdir()
    obj("init", root)
    data = work / "a.bin"
    data.write_bytes(os.urandom(64 * 4096 * 4))
    put = ["put", at(str(root), "t"), data, "--dtype", "int32", "--shape", SHAPE, "--chunks", CHUNKS]
    for _ in range(5):
        obj(*put)
    fsyncs, opens = traced(work, "direct", [BIN, "obj", *put])
    # Where the file system journals its names in order, a chunk's fsync
    # makes its name durable: no storage directory is fsynced.
    journaled = subprocess.run(["stat", "-f", "-c", "%T", root], capture_output=True, text=True,
                               check=True).stdout.strip() in ("ext2/ext3", "xfs", "tmpfs")
    data_dirs = [ln for ln in fsyncs if re.search(r"/data/\d+>\)", ln)]
    if journaled:
        check(not data_dirs, "storage directories fsynced on a journaled file system:\n" + "\n".join(data_dirs))
    budget = N_CHUNKS + 3 if journaled else N_CHUNKS + 1 + 4
    check(len(fsyncs) <= budget, f"direct put: {len(fsyncs)} fsyncs, at most {budget}:\n" + "\n".join(fsyncs))
    made = [ln for ln in opens if "O_CREAT" in ln and str(root) in ln
            and not re.search(r"/(zarr|hdf5|views)/", ln)]
    budget = 2 * N_CHUNKS + 5
    check(len(made) <= budget, f"direct put: {len(made)} files created, at most {budget}:\n" + "\n".join(made))
    reread = [ln for ln in opens if re.search(r"/meta/t/v\d{10}\"", ln)]
    check(not reread, "the commit read version records back:\n" + "\n".join(reread))
    local = work / "local"
    local.mkdir()
    fsyncs, _ = traced(work, "logged", [BIN, "obj", *put, "--local", local])
    # Each chunk file, the storage directory once, then the commit record,
    # its directory and staging/.
    budget = N_CHUNKS + 1 + 3
    check(len(fsyncs) <= budget, f"logged put: {len(fsyncs)} fsyncs, at most {budget}:\n" + "\n".join(fsyncs))
    fsyncs, opens = traced(work, "publish", [BIN, "obj", "publish", local])
    budget = N_CHUNKS + 3 if journaled else N_CHUNKS + 1 + 4
    check(len(fsyncs) <= budget, f"publish: {len(fsyncs)} fsyncs, at most {budget}:\n" + "\n".join(fsyncs))
    # A first publish of a put that never reached the remote's commit
    # reads none of the 6 versions kept (before: every one, at every
    # publish, each a round trip on sshfs).
    reread = [ln for ln in opens if re.search(r"/meta/t/v\d{10}\"", ln)]
    check(not reread, "the publish searched the version records:\n" + "\n".join(reread))
    # Its writers all on this node: published from its claims, with no
    # remote put's staging (before: `begin`, `name`, a claim per chunk and
    # the writer's mark, 2 * chunks + 5 files): its chunk files, the array
    # record and the version record's temporary name.
    made = [ln for ln in opens if "O_CREAT" in ln and str(root) in ln
            and not re.search(r"/(zarr|hdf5|views)/", ln)]
    staged = [ln for ln in made if "/staging/" in ln]
    check(not staged, "the publish made a remote put's staging:\n" + "\n".join(staged))
    budget = N_CHUNKS + 2
    check(len(made) <= budget, f"publish: {len(made)} files created, at most {budget}:\n" + "\n".join(made))
    got = work / "got.bin"
    obj("get", at(str(root), "t"), got, "--version", "7")
    check(got.read_bytes() == data.read_bytes(), "the published logged put is not its data")
    obj("verify", at(str(root), "t"), "--all")
    return "direct, logged and publish within their fsync budgets"


def case_no_sync(work):
    root = work / "store"
    root.mkdir()
    obj("init", root)
    url = f"objstore://{root}?sync=0"
    data = work / "a.bin"
    data.write_bytes(os.urandom(64 * 4096 * 4))
    put = ["put", at(url, "t"), data, "--dtype", "int32", "--shape", SHAPE, "--chunks", CHUNKS]
    obj(*put)
    fsyncs, _ = traced(work, "nosync", [BIN, "obj", *put])
    check(not fsyncs, f"a sync=0 put made {len(fsyncs)} fsyncs:\n" + "\n".join(fsyncs))
    got = work / "got.bin"
    obj("get", at(url, "t"), got, "--version", "2")
    check(got.read_bytes() == data.read_bytes(), "the sync=0 version does not read back")
    obj("verify", at(url, "t"), "--all")
    local = work / "local"
    local.mkdir()
    r = obj(*put, "--local", local, check=False)
    check(r.returncode != 0 and "sync=0" in r.stderr, f"a logged put to a sync=0 store: {r.returncode} {r.stderr}")
    prefix = work / "prefix"
    prefix.mkdir()
    r = run([BIN, "run", "--mpi", "none", "--prefix", prefix, "--local", work / "runlocal", "--remote", url,
             "--", "/bin/true"], check=False, timeout=120)
    check(r.returncode != 0 and "sync=0" in r.stderr, f"a drain to a sync=0 store: {r.returncode} {r.stderr}")
    return "no fsync in a sync=0 put, its version reads back; logged puts and drains to it refused"


def views_state(url):
    return info(url)["views"]


def case_no_h5view(work):
    url = store(work, "plain")
    data = work / "a.bin"
    data.write_bytes(os.urandom(64 * 4096 * 4))
    missing = work / "no" / "paralog-h5view"
    r = run([BIN, "obj", "put", at(url, "t"), data, "--dtype", "int32", "--shape", SHAPE, "--chunks", CHUNKS],
            env=dict(os.environ, PARALOG_H5VIEW=str(missing)), check=False)
    check(r.returncode == 0 and "t version 1" in r.stdout, f"the put failed: {r.stdout}{r.stderr}")
    check("warning" in r.stderr and "PARALOG_H5VIEW" in r.stderr, f"no warning on stderr: {r.stderr!r}")
    got = work / "got.bin"
    obj("get", at(url, "t"), got)
    check(got.read_bytes() == data.read_bytes(), "version 1 is not the put")
    said = views_state(at(url, "t"))
    check(said.startswith("missing") and "PARALOG_H5VIEW" in said and str(missing) in said,
          f"obj info does not say why the views are missing: {said!r}")
    text = obj("info", at(url, "t")).stdout
    check("views: missing" in text, text)
    r = obj("verify", at(url, "t"), check=False)
    check(r.returncode == 1 and "views are missing" in r.stderr, f"obj verify: {r.stdout}{r.stderr}")
    said = obj("view", at(url, "t"), "--missing").stdout
    check("v0000000001" in said, f"obj view --missing: {said}")
    check(views_state(at(url, "t")) == "made", views_state(at(url, "t")))
    said = obj("verify", at(url, "t")).stdout
    check("HDF5 view" in said and "complete" in said, said)
    said = obj("view", at(url, "t"), "--missing").stdout
    check("no version kept misses its views" in said, said)
    # Two objects missing their views: `obj view STORE --missing` makes both.
    for name in ("a/x", "b"):
        run([BIN, "obj", "put", at(url, name), data, "--dtype", "int32", "--shape", SHAPE, "--chunks", CHUNKS],
            env=dict(os.environ, PARALOG_H5VIEW=str(missing)))
    said = obj("view", url, "--missing").stdout
    check(all(views_state(at(url, n)) == "made" for n in ("a/x", "b", "t")),
          f"obj view STORE --missing: {said}")
    check(obj("view", url, check=False).returncode != 0, "obj view of a store without --missing")
    return "published, reported missing, made by obj view --missing (one object, then a store)"


PROGRAM = """
import os, sys, time
import numpy as np
import paralog.objects as po
s = po.Store(sys.argv[1])
t = time.monotonic()
s.put("t", np.arange(64 * 4096, dtype="<i4").reshape(64, 4096), chunks=(16, 4096))
print(f"committed {time.monotonic() - t:.3f}", flush=True)
if sys.argv[2] == "_exit":
    os._exit(0)
sys.stdin.readline()
"""


def case_background(work):
    url = store(work, "plain")
    slow = work / "slow-h5view"
    slow.write_text(f"#!/bin/sh\nsleep 8\nexec {BIN.with_name('paralog-h5view')} \"$@\"\n")
    slow.chmod(0o755)
    env = dict(PY_ENV, PARALOG_H5VIEW=str(slow))
    p = subprocess.Popen([sys.executable, "-c", PROGRAM, url, "wait"], env=env, text=True,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = p.stdout.readline()
        m = re.match(r"committed ([\d.]+)", line)
        check(m, f"the program said {line!r}: {p.stderr.read() if p.poll() is not None else ''}")
        check(float(m[1]) < 8, f"the put took {m[1]} s: it waited for the views")
        said = views_state(at(url, "t"))
        check(said.startswith("pending"), f"while the program runs: {said!r}")
        started = time.monotonic()
        out, err = p.communicate("\n", timeout=120)
        check(p.returncode == 0, f"the program: exit {p.returncode}: {err}")
    finally:
        if p.poll() is None:
            p.kill()
    check(views_state(at(url, "t")) == "made", views_state(at(url, "t")))
    said = obj("verify", at(url, "t")).stdout
    check("HDF5 view" in said and "complete" in said, said)
    waited = time.monotonic() - started
    # A process leaving by _exit: its thread dies with it.
    r = run([sys.executable, "-c", PROGRAM, url, "_exit"], env=env)
    check(r.stdout.startswith("committed"), r.stdout + r.stderr)
    said = views_state(at(url, "t"))
    check(said.startswith("missing") and "ended before it made them" in said, f"after _exit: {said!r}")
    obj("view", at(url, "t"))
    check(views_state(at(url, "t")) == "made", views_state(at(url, "t")))
    obj("verify", at(url, "t"), "--all")
    return f"put returned in {m[1]} s, exit waited {waited:.1f} s for the views"


def main():
    a = suite_options().parse_args()
    suite = Suite("objects-cost", keep=a.keep)
    cases = [("fsyncs", case_fsyncs), ("no-sync", case_no_sync), ("no-h5view", case_no_h5view), ("background", case_background)]
    return suite.run(cases, only=a.only)


if __name__ == "__main__":
    sys.exit(main())
