#!/usr/bin/python3
"""What an O_APPEND write costs under capture (docs/benchmarks.md §7,
"Appends"): N writes of 64 bytes by one process through an O_APPEND
descriptor and through a plain one, best of 3, directly into a directory
and under `paralog run --mpi none` (the log in the same file system), side
by side; the ratios against the direct run. Every append reserves its
place in the append-end ledger (docs/capture.md, "Appends"); a plain write
goes to the coalescing buffer.

Usage: /usr/bin/python3 bench/append_cost.py [--writes N] [--dir DIR]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / "target/release/paralog"

WRITER = """import os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
line = b"x" * 63 + b"\\n"
for mode, flags in (("append", os.O_APPEND), ("plain", 0)):
    best = None
    for rep in range(3):
        fd = os.open(f"{d}/{mode}{rep}.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | flags, 0o644)
        t = time.perf_counter()
        for _ in range(n):
            os.write(fd, line)
        dt = time.perf_counter() - t
        os.close(fd)
        best = dt if best is None else min(best, dt)
    print(mode, best / n * 1e6)
"""


def measure(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return {l.split()[0]: float(l.split()[1]) for l in out.splitlines() if l.split()[:1] in (["append"], ["plain"])}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--writes", type=int, default=100_000)
    ap.add_argument("--dir", default=None, help="where the files and the log go (default: a temporary directory)")
    a = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="paralog-append-", dir=a.dir))
    try:
        direct, prefix, remote = base / "direct", base / "prefix", base / "remote"
        for d in (direct, prefix, remote):
            d.mkdir()
        raw = measure([sys.executable, "-c", WRITER, str(direct), str(a.writes)])
        cap = measure([str(BIN), "run", "--mpi", "none", "--prefix", str(prefix), "--remote", str(remote),
                       "--local", str(base / "local"), "--", sys.executable, "-c", WRITER, str(prefix),
                       str(a.writes)])
        print(f"{a.writes} writes of 64 bytes, us per write (best of 3), in {base}")
        print(f"{'':8} {'direct':>8} {'paralog':>8} {'ratio':>6}")
        for mode in ("append", "plain"):
            print(f"{mode:8} {raw[mode]:8.2f} {cap[mode]:8.2f} {cap[mode] / raw[mode]:6.2f}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
