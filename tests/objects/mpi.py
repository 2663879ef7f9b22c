#!/usr/bin/python3
"""The C API's chunked PUT by real MPI programs (docs/objects.md "C"):
tests/objects/mpi_put.c, compiled by MPICH's and Open MPI's own mpicc and
linked with libparalog_obj_mpi_<flavour>.so, puts the seed's int32 chunks
(16x4096, 32x4096, 64x4096 per rank) on 1, 2 and 4 ranks, on objstore://
and a plain directory; rank 0 reads the array back through the C API, and
zarr-python, tensorstore (the Zarr view), h5py, h5dump and a C program (the
HDF5 view) read each version equal to the array, and `obj verify` passes.
Refusals: a rank joining with another shape or type, a chunk outside the
grid: every rank fails with the same message naming the rank, the object
and the put or chunk, and nothing is published or left staged.

Usage: python3 -m tests.objects.mpi [--only SUBSTRING] [--keep]
Ends with "objects-mpi: N passed, N failed"."""
import argparse
import random
import sys

from tests.lib.check import Suite, check
from tests.lib.mpi import compile_program, launcher, mpi_env
from tests.lib.paths import RELEASE, ROOT, TARGET
from tests.lib.proc import run
from tests.objects.run import at, hdf5_read, info, obj, slab, store, zarr_read

SRC = ROOT / "tests/objects/mpi_put.c"
INCLUDE = ROOT / "crates/objects-c/include"
FLAVOURS = ("mpich", "openmpi")


def program(flavour):
    return compile_program(f"mpicc.{flavour}", SRC, TARGET / "objects-mpi" / flavour / "mpi_put",
                           "-O2", "-Wall", "-Werror", f"-I{INCLUDE}",
                           libs=[f"-L{RELEASE}", f"-lparalog_obj_mpi_{flavour}", "-lparalog_obj",
                                 f"-Wl,-rpath,{RELEASE}"])


def mpi_put(flavour, np, url, name, rows, salt, mode="ok", check_rc=True):
    r = run([*launcher(flavour, np), program(flavour), url, name, str(rows), str(salt), mode],
            env=mpi_env(), check=False, timeout=300)
    if check_rc:
        check(r.returncode == 0, f"{flavour} x{np} {name}: exit {r.returncode}: {r.stdout}{r.stderr}")
    return r


def case_seed(flavour, kind):
    def go(work):
        import numpy as np
        url = store(work, kind)
        rng = random.Random(18)
        checks = []
        for rows in (16, 32, 64):
            for ranks in (1, 2, 4):
                name, salt = f"seed/{rows}/{ranks}", rng.randrange(1 << 20)
                out = mpi_put(flavour, ranks, url, name, rows, salt).stdout
                check("version 1" in out and "read back equal" in out, out)
                obj("verify", at(url, name))
                shape = [rows * ranks, 4096]
                want = work / f"{rows}-{ranks}.bin"
                (np.arange(shape[0] * 4096, dtype="<i4") + salt).tofile(want)
                views = info(at(url, name))
                checks.append({"view": views["zarr"], "file": views["hdf5"], "expect": str(want),
                               "dtype": "int32", "shape": shape, "chunks": [rows, 4096],
                               "attrs": {"writer": "mpi_put"},
                               "slabs": [slab(rng, shape) for _ in range(4)]})
        zarr_read(work, checks)
        hdf5_read(work, checks)
    return go


def case_refusals(flavour, kind):
    def go(work):
        url = store(work, kind)
        cases = (("mismatch", 2, "rank 1: bad: put ", "is not the put's (int32 [32, 4096]"),
                 ("dtype", 2, "rank 1: bad: put ", "float32 [32, 4096]"),
                 ("outside", 4, "rank 3: write error 1: bad: chunk [4, 0] is outside the chunk grid [4, 1]",
                  "1 of 4 chunks were not written (first: [[3, 0]]); nothing was published"))
        for mode, ranks, said, also in cases:
            r = mpi_put(flavour, ranks, url, "bad", 16, 0, mode, check_rc=False)
            check(r.returncode != 0, f"{mode}: the program succeeded: {r.stdout}")
            check(said in r.stdout and also in r.stdout, f"{mode}: {r.stdout}")
            errors = [line for line in r.stdout.splitlines() if ": error " in line]
            check(len(errors) == ranks and len({e.split(": ", 1)[1] for e in errors}) == 1,
                  f"{mode}: not the same error on every rank: {errors}")
        check(obj("ls", url).stdout == "", "a refused put published something")
        staging = work / "store" / "staging"
        left = list(staging.iterdir()) if staging.exists() else []
        check(left == [], f"refused puts left staged: {left}")
    return go


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    suite = Suite("objects-mpi", keep=a.keep)
    cases = []
    for flavour in FLAVOURS:
        for kind in ("objstore", "plain"):
            cases.append((f"seed [{flavour}, {kind}]", case_seed(flavour, kind)))
        cases.append((f"refusals [{flavour}]", case_refusals(flavour, "objstore")))
    return suite.run(cases, only=a.only)


if __name__ == "__main__":
    sys.exit(main())
