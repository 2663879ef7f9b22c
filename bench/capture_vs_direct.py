#!/usr/bin/python3
"""Capture versus direct MPI-IO for the output phases of an IOR-like program.

Direct: the program writes the shared file into DIR (a local directory).
Capture: the same program under paralog, its node-local log in another
directory on the same file system. Same process count (4, MPICH), runs
alternated, medians of REPEAT runs. Prints a table with the ratio
direct/capture of output-phase throughput (>1: capture is faster).

Usage: bench/capture_vs_direct.py [--dir DIR] [--repeat N] [--mpi mpich|openmpi]
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
BIN = ROOT / "target/release/paralog"

CASES = [
    # name, xfer, segments per epoch, epochs, mode
    ("1 MiB collective", 1 << 20, 32, 2, "collective"),
    ("16 MiB collective", 16 << 20, 2, 2, "collective"),
    ("4 KiB strided independent", 4096, 2048, 2, "strided"),
]


def run(prog, mpi, path, case, env):
    _, xfer, segs, epochs, mode = case
    launcher = ["mpirun.mpich", "-n", "4"] if mpi == "mpich" else ["mpirun.openmpi", "-n", "4", "--oversubscribe"]
    args = [str(path), str(xfer), str(segs), str(epochs)] + (["strided"] if mode == "strided" else [])
    r = subprocess.run(launcher + [str(prog)] + args, env=env, text=True, capture_output=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/var/tmp", help="file system for both the direct file and the log")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--mpi", default="mpich", choices=["mpich", "openmpi"])
    a = ap.parse_args()
    prog = ROOT / f"target/bench/ior_like-{a.mpi}"
    prog.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([f"mpicc.{a.mpi}", "-O2", "-o", prog, ROOT / "bench/ior_like.c"], check=True)
    base = Path(tempfile.mkdtemp(prefix="paralog-bench-", dir=a.dir))
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    print(f"output phases, 4 ranks, {a.mpi}, {a.repeat} runs each (median), files in {a.dir}")
    print(f"{'case':28} {'MiB':>6} {'direct MB/s':>12} {'capture MB/s':>13} {'capture/direct':>15}")
    try:
        for case in CASES:
            direct, captured = [], []
            for i in range(a.repeat):
                for kind in (["direct", "capture"] if i % 2 == 0 else ["capture", "direct"]):
                    work = base / f"{kind}-{i}"
                    (work / "pfs").mkdir(parents=True)
                    e = dict(env)
                    if kind == "capture":
                        out = subprocess.run(
                            [BIN, "env", "--mpi", a.mpi, "--prefix", work / "pfs", "--local", work / "local", "--job", "b"],
                            text=True, capture_output=True, check=True).stdout
                        for line in out.splitlines():
                            k, _, v = line.removeprefix("export ").partition("=")
                            e[k] = v.strip("'")
                    res = run(prog, a.mpi, work / "pfs/out.dat", case, e)
                    (captured if kind == "capture" else direct).append(res["bytes"] / res["output_seconds"] / 1e6)
                    shutil.rmtree(work)
            d, c = statistics.median(direct), statistics.median(captured)
            mib = case[1] * case[2] * case[3] * 4 / (1 << 20)
            print(f"{case[0]:28} {mib:6.0f} {d:12.0f} {c:13.0f} {c / d:14.2f}x", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
