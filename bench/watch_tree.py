#!/usr/bin/python3
"""The server's epoch watcher, one build against another (docs/benchmarks.md
section 3, "The epoch watcher"). A job directory of FILES files, one
committed 4 KiB epoch each (written by a Python loop under the capture
library, no server running), is drained by `paralog server --local L --job
J --remote R` in two ways:

  event    the server runs on an empty root; the job directory is renamed
           into it: one inotify event, then the watcher's subtree add
           (a watch and a listing of every directory, every file queued);
           timed from the rename until status counts every epoch drained;
  startup  the job directory is there first; timed from the server's spawn
           until status counts every epoch drained (the start-up scan);
  scan     the same, timed only until the server answers status: the
           start-up scan (a watch and a listing of every directory) is
           done before the status socket is served (crates/server/src/
           node.rs), so this is the scan and the process start, with the
           drain that the queued files begin meanwhile.

Each round runs every (mode, build) once, the builds' order alternating
from round to round; the table gives each one's median, min and max.
Both builds are copied first (a rebuild during the run changes nothing).

Usage: bench/watch_tree.py --before PARALOG [--after PARALOG]
       [--files 1000] [--rounds 5] [--modes event,startup,scan]
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from benchlib import request  # noqa: E402
from tests.lib.paralog import capture_env  # noqa: E402

JOB = "b"
WRITER = ("import sys\n"
          "for i in range(int(sys.argv[2])):\n"
          "    with open(f'{sys.argv[1]}/f{i}', 'wb') as f:\n"
          "        f.write(b'x' * 4096)\n")


def make_log(work, files):
    """The job directory of a node-local log of `files` files."""
    prefix, stage = work / "prefix", work / "stage"
    prefix.mkdir()
    env = capture_env(str(prefix), str(stage), "none", JOB)
    subprocess.run([sys.executable, "-c", WRITER, str(prefix), str(files)], env=env, check=True)
    return stage / JOB


def answering(sock):
    while True:
        try:
            request(sock, {"cmd": "status"}, timeout=5)
            return
        except OSError:
            time.sleep(0.002)


def all_drained(sock, files):
    while sum(f["epochs_drained"] for f in request(sock, {"cmd": "status"})["files"]) < files:
        time.sleep(0.005)


def one(paralog, mode, files):
    work = Path(tempfile.mkdtemp(prefix="watch-tree-"))
    try:
        job_dir = make_log(work, files)
        root, remote = work / "local", work / "remote"
        root.mkdir(mode=0o700)
        remote.mkdir()
        if mode != "event":
            job_dir.rename(root / JOB)
        sock = root / f".paralog-server-{JOB}.sock"
        t0 = time.perf_counter()
        with open(work / "server.log", "wb") as log:
            p = subprocess.Popen([paralog, "server", "--local", root, "--job", JOB, "--remote", remote],
                                 stdout=subprocess.DEVNULL, stderr=log)
        while not sock.exists():
            time.sleep(0.002)
        answering(sock)
        if mode == "scan":
            dt = time.perf_counter() - t0
            all_drained(sock, files)
        if mode == "event":
            t0 = time.perf_counter()
            os.rename(job_dir, root / JOB)
        if mode != "scan":
            all_drained(sock, files)
            dt = time.perf_counter() - t0
        request(sock, {"cmd": "stop"})
        p.wait(timeout=60)
        return dt
    finally:
        shutil.rmtree(work)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="the paralog binary to compare with")
    ap.add_argument("--after", default=str(ROOT / "target/release/paralog"))
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--modes", default="event,startup,scan")
    a = ap.parse_args()
    bins_dir = Path(tempfile.mkdtemp(prefix="watch-tree-bin-"))
    builds = {}
    for name in ("before", "after"):
        builds[name] = bins_dir / name
        shutil.copy2(getattr(a, name), builds[name])
    modes = a.modes.split(",")
    times = {(m, b): [] for m in modes for b in builds}
    try:
        for r in range(a.rounds):
            order = list(builds) if r % 2 == 0 else list(builds)[::-1]
            for mode in modes:
                for b in order:
                    times[(mode, b)].append(one(builds[b], mode, a.files))
            load = " ".join(open("/proc/loadavg").read().split()[:3])
            print(f"round {r + 1}: " + ", ".join(f"{m} {b} {v[-1]:.3f} s" for (m, b), v in times.items())
                  + f"; load {load}", flush=True)
    finally:
        shutil.rmtree(bins_dir)
    print(f"\n{a.files} files, {a.rounds} rounds: seconds until every epoch is drained (scan: until status answers)")
    print("| mode | build | median | min | max |\n|---|---|---:|---:|---:|")
    for (m, b), v in times.items():
        v = sorted(v)
        print(f"| {m} | {b} | {v[len(v) // 2]:.3f} | {v[0]:.3f} | {v[-1]:.3f} |")


if __name__ == "__main__":
    main()
