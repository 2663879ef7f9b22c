#!/usr/bin/python3
"""A wrong --mpi flavour (issue 12, point 4): `paralog run --mpi mpich` of an
Open MPI program and the reverse must stop with one line that names both
MPIs and the fix, and a non-zero exit status, never a segfault of the shim.

Usage: tests/correctness/mpi_flavour.py
Ends with "mpi flavour: N passed, N failed".
"""
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "target/release/paralog"
PROGS = ROOT / "target/mpi-tests"
ENV = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
       "OMPI_MCA_rmaps_base_oversubscribe": "1"}

CASES = [
    # (shim given, the program's MPI, launcher, program dir, words the line must hold)
    ("mpich", "openmpi", "mpirun.openmpi", "openmpi", ["built for MPICH", "runs Open MPI", "--mpi openmpi"]),
    ("openmpi", "mpich", "mpirun.mpich", "mpich", ["built for Open MPI", "runs MPICH", "--mpi mpich"]),
]


def main():
    subprocess.run(["make", "-s", "-C", ROOT / "tests/mpi", f"OUT={PROGS}"], check=True)
    passed = failed = 0
    for given, real, launcher, progdir, words in CASES:
        work = Path(tempfile.mkdtemp(prefix="paralog-flavour-"))
        (work / "p").mkdir()
        try:
            r = subprocess.run(
                [BIN, "run", "--prefix", work / "p", "--local", work / "l", "--mpi", given, "--",
                 launcher, "-n", "2", PROGS / progdir / "epochs", work / "p", "--epochs=2", "--kib=16"],
                env=ENV, capture_output=True, text=True, timeout=120)
            out = r.stdout + r.stderr
            lines = [l for l in out.splitlines() if all(w in l for w in words)]
            problems = []
            if r.returncode == 0:
                problems.append("paralog run exited 0")
            if not lines:
                problems.append(f"no line naming {words}")
            if "Segmentation fault" in out or "signal 11" in out:
                problems.append("the program crashed")
            name = f"--mpi {given} for an {real} program"
            if problems:
                failed += 1
                print(f"FAIL {name}: {'; '.join(problems)}: {out[-600:]}", flush=True)
            else:
                passed += 1
                print(f"PASS {name}: refused with: {lines[0].strip()[:160]}", flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print(f"mpi flavour: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
