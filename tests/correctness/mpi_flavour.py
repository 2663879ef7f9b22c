#!/usr/bin/python3
"""A wrong --mpi flavour (issue 12, point 4): `paralog run --mpi mpich` of an
Open MPI program and the reverse must stop with one line that names both
MPIs and the fix, and a non-zero exit status, never a segfault of the shim.

Usage: python3 -m tests.correctness.mpi_flavour
Ends with "mpi flavour: N passed, N failed".
"""
import sys

from tests.lib.check import Suite, check
from tests.lib.mpi import build_tests, mpi_env
from tests.lib.paralog import paralog_run
from tests.lib.paths import MPI_TESTS

CASES = [
    # (shim given, the program's MPI, launcher, program dir, words the line must hold)
    ("mpich", "openmpi", "mpirun.openmpi", "openmpi", ["built for MPICH", "runs Open MPI", "--mpi openmpi"]),
    ("openmpi", "mpich", "mpirun.mpich", "mpich", ["built for Open MPI", "runs MPICH", "--mpi mpich"]),
]


def refused(given, launcher, progdir, words, work):
    (work / "p").mkdir()
    r = paralog_run(work / "l", work / "p", [launcher, "-n", "2", MPI_TESTS / progdir / "epochs", work / "p",
                                             "--epochs=2", "--kib=16"],
                    mpi=given, job=None, env=mpi_env(), check=False, timeout=120)
    out = r.stdout + r.stderr
    problems = []
    if r.returncode == 0:
        problems.append("paralog run exited 0")
    if not any(all(w in line for w in words) for line in out.splitlines()):
        problems.append(f"no line naming {words}")
    if "Segmentation fault" in out or "signal 11" in out:
        problems.append("the program crashed")
    check(not problems, f"{'; '.join(problems)}: {out[-600:]}")


def main():
    build_tests()
    return Suite("mpi flavour").run([(f"--mpi {given} for an {real} program is refused with the fix named",
                                      lambda w, c=(given, launcher, progdir, words): refused(*c, w))
                                     for given, real, launcher, progdir, words in CASES])


if __name__ == "__main__":
    sys.exit(main())
