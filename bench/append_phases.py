#!/usr/bin/python3
"""Where a large append's time goes under capture (docs/benchmarks.md §7,
"Where the disk appends' last 12% go"): bench/micro.c's `append` case (N
writes of SIZE bytes to a new file, fsync, close), raw and with the capture
library preloaded and no server (the program alone: the log written and
committed, nothing drained), alternated ROUNDS times in one directory (the order rotated each round). It
prints, per side, the median of each phase the program times (the open,
the writes, the fsync, which under capture is the consistency point, and
the close) and of the whole, and capture/raw for each.

`--before LIB`: another build's capture library (a copy of an older
target/release/libparalog_capture.so) run as a third side, alternated
with the others: before/after in one sitting.

Usage: /usr/bin/python3 bench/append_phases.py [--dir /var/tmp] [--size 1M]
         [--rounds 20] [--before LIB]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "target/release/libparalog_capture.so"
PHASES = ["open", "writes", "fsync", "close", "seconds"]


def parse_size(s):
    return int(s[:-1]) << {"K": 10, "M": 20}[s[-1]] if s[-1] in "KM" else int(s)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/var/tmp")
    ap.add_argument("--size", default="1M")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--before", type=Path, help="an older build's libparalog_capture.so")
    a = ap.parse_args()
    if not CAPTURE.exists():
        raise SystemExit(f"{CAPTURE} is missing: run `make build` first")
    size = parse_size(a.size)
    n = max(4, (32 << 20) // size)  # as bench/micro.py
    work = Path(tempfile.mkdtemp(prefix="paralog-phases-", dir=a.dir))
    try:
        prog = work / "micro"
        subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-o", prog, ROOT / "bench/micro.c"], check=True)
        raw, prefix, local = work / "raw", work / "prefix", work / "local"
        libs = {"capture": CAPTURE, **({"before": a.before.resolve()} if a.before else {})}
        got = {"raw": [], **{side: [] for side in libs}}
        sides = list(got)
        for r in range(a.rounds):
            # Rotated: a side run right after another reuses the pages the
            # other's files just freed, which favours it.
            for side in sides[r % len(sides):] + sides[:r % len(sides)]:
                for d in (raw, prefix, local):
                    shutil.rmtree(d, ignore_errors=True)
                    d.mkdir(mode=0o700)
                env = dict(os.environ)
                target = raw / "f"
                if side in libs:
                    env.update(LD_PRELOAD=str(libs[side]), PARALOG_PREFIX=str(prefix), PARALOG_LOCAL=str(local),
                               PARALOG_JOB="phases")
                    target = prefix / "f"
                r = subprocess.run([prog, "append", target, str(size), str(n)], env=env, check=True,
                                   capture_output=True, text=True)
                got[side].append(json.loads(r.stdout.strip().splitlines()[-1]))
        med = {s: {p: statistics.median(x[p] for x in v) for p in PHASES} for s, v in got.items()}
        print(f"append {a.size} x {n} in {a.dir}, {a.rounds} rounds alternated; medians, ms")
        print(f"{'side':8s}" + "".join(f"{p:>10s}" for p in PHASES))
        for s in got:
            print(f"{s:8s}" + "".join(f"{med[s][p] * 1e3:10.2f}" for p in PHASES))
        best = {s: min(x["seconds"] for x in v) for s, v in got.items()}
        for side in libs:
            print(f"{side} - raw".ljust(8) + "".join(f"{(med[side][p] - med['raw'][p]) * 1e3:10.2f}"
                                                     for p in PHASES))
        for side in libs:
            print(f"raw/{side}: median {med['raw']['seconds'] / med[side]['seconds']:.3f}, "
                  f"best {best['raw'] / best[side]:.3f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
