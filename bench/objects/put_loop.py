#!/usr/bin/python3
"""A direct put loop through the Python API (the C API's library: views
made by its thread), one rank: VERSIONS versions of a 64 x 4096 int32
array in one chunk, on a plain directory with sync=0 and sync=1; each
build's library (`--lib DIR`, repeatable: DIR holds libparalog_obj.so and
paralog-h5view) and without the HDF5 view (PARALOG_H5VIEW naming nothing),
alternated, ROUNDS rounds. Per version: the puts alone, and the puts then
`wait_views` (every view made). docs/benchmarks.md section 11, issue 18's
"HDF5 view program started once".

Usage: python3 bench/objects/put_loop.py --lib DIR [--lib DIR...] [--versions 40] [--rounds 5] [--work DIR]"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
import sys, time
import numpy as np
import paralog.objects as po
s = po.Store(sys.argv[1])
a = np.arange(64 * 4096, dtype="<i4").reshape(64, 4096)
n = int(sys.argv[2])
t = time.monotonic()
for i in range(n):
    s.put("t", a + i, chunks=(64, 4096))
puts = time.monotonic() - t
s.wait_views()
print(puts / n * 1000, (time.monotonic() - t) / n * 1000)
"""


def one(lib, work, sync, versions, h5view):
    store = Path(tempfile.mkdtemp(dir=work))
    subprocess.run([str(lib / "paralog"), "obj", "init", str(store)], check=True, capture_output=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"), PARALOG_LIB_DIR=str(lib))
    if not h5view:
        env["PARALOG_H5VIEW"] = str(work / "no-such-h5view")
    r = subprocess.run([sys.executable, "-c", PROGRAM, f"objstore://{store}?sync={sync}", str(versions)],
                       env=env, capture_output=True, text=True, check=True)
    puts, total = map(float, r.stdout.split())
    subprocess.run(["rm", "-rf", str(store)], check=True)
    return puts, total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", action="append", required=True, type=Path)
    ap.add_argument("--versions", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--work", type=Path, default=Path("/var/tmp"))
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="put-loop.", dir=a.work))
    runs = [(lib, True) for lib in a.lib] + [(a.lib[-1], False)]
    got = {}
    print(f"load before: {os.getloadavg()}")
    for _ in range(a.rounds):
        for sync in (0, 1):
            for lib, h5 in runs:
                got.setdefault((sync, str(lib), h5), []).append(one(lib, work, sync, a.versions, h5))
    print(f"load after: {os.getloadavg()}")
    print("| sync | build | HDF5 view | puts, ms/version (median; min-max) | puts + wait_views, ms/version |")
    print("|---:|---|---|---|---|")
    for (sync, lib, h5), v in got.items():
        p, t = [x[0] for x in v], [x[1] for x in v]
        print(f"| {sync} | {lib} | {'yes' if h5 else 'none'} | {statistics.median(p):.2f} ({min(p):.2f}-{max(p):.2f}) "
              f"| {statistics.median(t):.2f} ({min(t):.2f}-{max(t):.2f}) |")
    subprocess.run(["rm", "-rf", str(work)], check=True)


if __name__ == "__main__":
    main()
