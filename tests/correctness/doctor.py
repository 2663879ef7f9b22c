#!/usr/bin/python3
"""`paralog doctor` (issue 19): on a good setup it says a run would work and
exits 0; on each broken setup it names the fault in a FAIL line and exits 1.

  good            a POSIX remote, a private local directory, --mpi none
  local read-only the node-local directory on a read-only tmpfs
  local public    the node-local directory is mode 0755
  remote missing  a POSIX remote directory and an object root that do not exist
  wrong mpi       --mpi mpich for a program linked with Open MPI
  typo            PARALOG_LOCL in the environment

Usage: python3 -m tests.correctness.doctor
Ends with "doctor: N passed, N failed".
"""
import os
import sys

from tests.lib.check import Failed, Suite, check
from tests.lib.mpi import mpi_env
from tests.lib.paths import BIN
from tests.lib.proc import run

ENV = mpi_env()


def doctor(args, env=None, wrap=None):
    cmd = [str(BIN), "doctor", *map(str, args)]
    if wrap:
        cmd = wrap(cmd)
    return run(cmd, env=env or ENV, check=False, timeout=120)


def setup(work):
    prefix, local, remote = work / "prefix", work / "local", work / "remote"
    for d in (prefix, remote):
        d.mkdir()
    local.mkdir(mode=0o700)
    return prefix, local, remote


def expect_fail(r, *words):
    out = r.stdout + r.stderr
    check(r.returncode == 1, f"exit {r.returncode}, expected 1: {out[-600:]}")
    fails = [l for l in out.splitlines() if l.startswith("FAIL")]
    check(any(all(w in l for w in words) for l in fails), f"no FAIL line naming {words}: {out[-600:]}")
    check("Traceback" not in out and "panicked" not in out, f"a stack trace: {out[-600:]}")


def case_good(work):
    prefix, local, remote = setup(work)
    r = doctor(["--prefix", prefix, "--local", local, "--remote", remote, "--mpi", "none"])
    check(r.returncode == 0 and "a run would work" in r.stdout and "FAIL" not in r.stdout,
          f"exit {r.returncode}: {r.stdout[-800:]}{r.stderr[-300:]}")
    check("fsync" in r.stdout and "MB/s" in r.stdout, f"no speed measured: {r.stdout[-500:]}")


def case_local_read_only(work):
    prefix, local, remote = setup(work)
    wrap = lambda cmd: ["unshare", "-m", "sh", "-c",
                        f"mount -t tmpfs -o ro,mode=700 paralog-test {local} && exec \"$@\"", "sh", *cmd]
    r = doctor(["--prefix", prefix, "--local", local, "--remote", remote, "--mpi", "none"], wrap=wrap)
    expect_fail(r, "node-local directory", str(local), "not writable")


def case_local_public(work):
    prefix, local, remote = setup(work)
    os.chmod(local, 0o755)
    r = doctor(["--prefix", prefix, "--local", local, "--remote", remote, "--mpi", "none"])
    expect_fail(r, "node-local directory", "not private")


def case_remote_missing(work):
    prefix, local, _ = setup(work)
    for remote in (work / "absent", f"objstore://{work}/absent-store"):
        r = doctor(["--prefix", prefix, "--local", local, "--remote", remote, "--mpi", "none"])
        try:
            expect_fail(r, "remote", "absent")
        except Failed as e:
            raise Failed(f"{remote}: {e}")


def case_wrong_mpi(work):
    prefix, local, remote = setup(work)
    r = doctor(["--prefix", prefix, "--local", local, "--remote", remote, "--mpi", "mpich", "--",
                "mpirun.openmpi", "-n", "2", "/bin/true"])
    expect_fail(r, "MPI", "openmpi", "--mpi mpich")


def case_typo(work):
    prefix, local, remote = setup(work)
    r = doctor(["--prefix", prefix, "--local", local, "--remote", remote, "--mpi", "none"],
               env={**ENV, "PARALOG_LOCL": str(local)})
    expect_fail(r, "settings", "PARALOG_LOCL")


if __name__ == "__main__":
    sys.exit(Suite("doctor").run([
        ("good setup: a run would work", case_good),
        ("local read-only: named", case_local_read_only),
        ("local public: named", case_local_public),
        ("remote missing: named (POSIX and object root)", case_remote_missing),
        ("wrong mpi: named", case_wrong_mpi),
        ("typo in a PARALOG_* name: named", case_typo),
    ]))
