"""The skeleton program of bench/objects/skeleton.c written with zarr-python
3 (run by the objects' virtual environment's Python, one process per rank
under mpirun, which has no mpi4py: ranks come from the launcher's
environment and barriers are files in --sync, a tmpfs directory).

Per output phase: rank 0 creates DIR/out_NNNNN.zarr (a Zarr v3 array of
int32, shape [ROWS * ranks, 4096], chunks [ROWS, 4096], no compressor:
the same bytes as the other methods), a barrier, each rank assigns its
rows (one chunk), a barrier. The values and the compute are the C
program's (element g of phase p: (uint32)(g * 2654435761 + p * 40503));
the compute is numpy's, for the same seconds per cycle. The last line of
rank 0 is the C program's JSON summary.

Usage: python zarr_skeleton.py --out DIR --sync DIR --rows R --cycles C
         --every K --compute-s S"""
import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import zarr

COLS = 4096


def env_int(*names):
    for n in names:
        if n in os.environ:
            return int(os.environ[n])
    raise SystemExit(f"zarr_skeleton: none of {names} is set: run it under mpirun")


class Barrier:
    def __init__(self, d, rank, size):
        self.d, self.rank, self.size, self.n = Path(d), rank, size, 0

    def __call__(self):
        self.n += 1
        (self.d / f"{self.n}.{self.rank}").touch()
        want = [self.d / f"{self.n}.{r}" for r in range(self.size)]
        while not all(p.exists() for p in want):
            time.sleep(0.0002)


def values(first, n, phase):
    g = np.arange(first, first + n, dtype=np.uint64)
    return ((g * np.uint64(2654435761) + np.uint64(phase * 40503)) & np.uint64(0xFFFFFFFF)).astype(
        np.uint32).view(np.int32)


def main():
    ap = argparse.ArgumentParser()
    for k in ("--out", "--sync"):
        ap.add_argument(k, required=True)
    for k in ("--rows", "--cycles", "--every"):
        ap.add_argument(k, type=int, required=True)
    ap.add_argument("--compute-s", type=float, required=True)
    a = ap.parse_args()
    rank = env_int("PMI_RANK", "OMPI_COMM_WORLD_RANK")
    size = env_int("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")
    barrier = Barrier(a.sync, rank, size)
    n = a.rows * COLS
    block = np.arange(n, dtype=np.uint32)
    compute = output = 0.0
    phases = []
    barrier()
    start = time.monotonic()
    p = 0
    for c in range(a.cycles):
        t0 = time.monotonic()
        while True:
            block = block * np.uint32(1664525) + np.uint32(1013904223 + c)
            if time.monotonic() - t0 >= a.compute_s:
                break
        barrier()
        compute += time.monotonic() - t0
        if (c + 1) % a.every:
            continue
        out = values(rank * n, n, p).reshape(a.rows, COLS)
        o0 = time.monotonic()
        path = f"{a.out}/out_{p:05d}.zarr"
        if rank == 0:
            zarr.create_array(store=path, shape=(a.rows * size, COLS), chunks=(a.rows, COLS), dtype="int32",
                              compressors=None, fill_value=0)
        barrier()
        arr = zarr.open_array(path, mode="r+")
        arr[rank * a.rows:(rank + 1) * a.rows, :] = out
        barrier()
        o1 = time.monotonic()
        output += o1 - o0
        phases.append([o0, o1])
        p += 1
    end = time.monotonic()
    if rank == 0:
        print(json.dumps({"api": "zarr", "ranks": size, "rows": a.rows, "outputs": p, "compute_s": compute,
                          "output_s": output, "start": start, "end": end, "sink": int(block[0] & 1),
                          "phases": phases}))


if __name__ == "__main__":
    main()
