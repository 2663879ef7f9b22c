#!/usr/bin/python3
"""A wrong --mpi flavour (issue 12, point 4): `paralog run --mpi mpich` of an
Open MPI program and the reverse must stop with one line that names both
MPIs and the fix, and a non-zero exit status, never a segfault of the shim.

Usage: tests/correctness/mpi_flavour.py
Ends with "mpi flavour: N passed, N failed".
"""
import subprocess

from common import BIN, ENV, ROOT, run_cases

PROGS = ROOT / "target/mpi-tests"

CASES = [
    # (shim given, the program's MPI, launcher, program dir, words the line must hold)
    ("mpich", "openmpi", "mpirun.openmpi", "openmpi", ["built for MPICH", "runs Open MPI", "--mpi openmpi"]),
    ("openmpi", "mpich", "mpirun.mpich", "mpich", ["built for Open MPI", "runs MPICH", "--mpi mpich"]),
]


def refused(given, launcher, progdir, words, work):
    (work / "p").mkdir()
    r = subprocess.run(
        list(map(str, [BIN, "run", "--prefix", work / "p", "--local", work / "l", "--mpi", given, "--",
                       launcher, "-n", "2", PROGS / progdir / "epochs", work / "p", "--epochs=2", "--kib=16"])),
        env=ENV, capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    problems = []
    if r.returncode == 0:
        problems.append("paralog run exited 0")
    if not any(all(w in line for w in words) for line in out.splitlines()):
        problems.append(f"no line naming {words}")
    if "Segmentation fault" in out or "signal 11" in out:
        problems.append("the program crashed")
    return f"{'; '.join(problems)}: {out[-600:]}" if problems else None


def main():
    subprocess.run(["make", "-s", "-C", ROOT / "tests/mpi", f"OUT={PROGS}"], check=True)
    run_cases("mpi flavour", [(f"--mpi {given} for an {real} program is refused with the fix named",
                               lambda w, c=(given, launcher, progdir, words): refused(*c, w))
                              for given, real, launcher, progdir, words in CASES])

if __name__ == "__main__":
    main()
