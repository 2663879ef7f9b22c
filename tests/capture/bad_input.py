#!/usr/bin/python3
"""Bad input to the capture library: each case gives one clear line on
stderr naming the problem, an error to the program on every rank (never a
hang: each run has a time limit), and loses nothing already committed.

Cases run a real MPI program (tests/capture/progs/errors.c, MPICH, 2 ranks)
and a plain POSIX program (python) with the settings a batch script could
get wrong. Usage: python3 -m tests.capture.bad_input
Prints one line per case and "bad input: N passed, N failed".
"""

import sys

from tests.lib.check import Suite, check, fail
from tests.lib.mpi import compile_program
from tests.lib.paralog import clean_env
from tests.lib.paths import BIN, MPI_TESTS, PY, RELEASE, ROOT
from tests.lib.proc import Timeout, run

PROG = MPI_TESTS / "errors-mpich"
TIMEOUT = 60


def preload():
    return f"{RELEASE}/libparalog_mpi_mpich.so:{RELEASE}/libparalog_capture.so"


def base_env(prefix, local, **extra):
    env = clean_env(drop=("PARALOG_",))
    env.update(LD_PRELOAD=preload(), PARALOG_PREFIX=str(prefix), PARALOG_JOB="bad")
    if local is not None:
        env["PARALOG_LOCAL"] = str(local)
    env.update(extra)
    return env


def limited(cmd, env):
    """cmd's result, or None if it hung (killed after TIMEOUT s)."""
    try:
        return run(cmd, env=env, check=False, timeout=TIMEOUT)
    except Timeout:
        return None


def mpirun(args, env, wrap=None):
    if len(args) == 1:
        args = [*args, 4096, 4096]
    cmd = ["mpirun.mpich", "-n", "2", str(PROG), *map(str, args)]
    if wrap:
        cmd = wrap(cmd)
    return limited(cmd, env)


def expect_failure(r, stderr_has, failed_call):
    """Every rank must report the failed call; stderr must name the problem."""
    check(r is not None, f"the program hung (no answer in {TIMEOUT} s)")
    check(r.returncode == 3,
          f"exit status {r.returncode}, expected 3 (a failure reported to the program)\n{r.stdout}{r.stderr}")
    for rank in (0, 1):
        check(f"rank {rank}: {failed_call}: failed" in r.stdout,
              f"rank {rank} did not learn that {failed_call} failed:\n{r.stdout}")
    lines = [l for l in r.stderr.splitlines() if l.startswith("paralog: ")]
    check(any(stderr_has in l for l in lines), f"no stderr line containing {stderr_has!r}; paralog said: {lines}")


def case_unknown_setting(work):
    expect_failure(
        mpirun([work / "pfs/out"], base_env(work / "pfs", work / "local", PARALOG_BOGUS="1")),
        "unknown setting PARALOG_BOGUS",
        "MPI_File_open",
    )


def case_local_missing(work):
    expect_failure(
        mpirun([work / "pfs/out"], base_env(work / "pfs", None)),
        "PARALOG_LOCAL is not set",
        "MPI_File_open",
    )


def case_prefix_missing(work):
    missing = work / "no-such-dir"
    expect_failure(
        mpirun([missing / "out"], base_env(missing, work / "local")),
        f"PARALOG_PREFIX={missing}: No such file or directory",
        "MPI_File_open",
    )


def case_remote_escapes(work):
    expect_failure(
        mpirun([work / "pfs/out"], base_env(work / "pfs", work / "local", PARALOG_REMOTE="/remote/../../etc")),
        "contains '..': a remote path may not escape its root",
        "MPI_File_open",
    )


def in_private_tmpfs(mountpoint, options):
    """Run a command in a private mount namespace with a tmpfs at mountpoint."""

    def wrap(cmd):
        inner = f"mount -t tmpfs -o {options} paralog-test {mountpoint} && exec \"$@\""
        return ["unshare", "-m", "--propagation", "private", "sh", "-c", inner, "sh", *cmd]

    return wrap


def case_local_read_only(work):
    local = work / "ro-local"
    local.mkdir()
    r = mpirun([work / "pfs/out"], base_env(work / "pfs", local / "log"), wrap=in_private_tmpfs(local, "size=1m,ro"))
    expect_failure(r, f"PARALOG_LOCAL={local}/log: cannot create it: Read-only file system", "MPI_File_open")


def case_local_full(work):
    """ENOSPC in epoch 2: every rank's write fails and says so; epoch 1 stays
    readable. The failed write leaves nothing in the log (format 2 cuts the
    data log back, as its commit record must end it), so the syncs after it
    commit what was recorded, as MPI_File_sync does without paralog after a
    failed write."""
    local = work / "small-local"
    local.mkdir()
    out = work / "epoch1.dat"
    # Inside the namespace: run the program, then materialize from the log
    # (the tmpfs vanishes with the namespace).
    script = (
        f"mount -t tmpfs -o size=1m paralog-test {local} && "
        f"mpirun.mpich -n 2 {PROG} {work}/pfs/out 65536 2097152; rc=$?; "
        f"env -u LD_PRELOAD {BIN} materialize --local {local} {work}/pfs/out {out} >&2 || rc=99; exit $rc"
    )
    r = limited(["unshare", "-m", "--propagation", "private", "sh", "-c", script], base_env(work / "pfs", local))
    if r is not None and r.returncode == 99:
        fail(f"the committed epoch 1 could not be read back after ENOSPC:\n{r.stderr}")
    expect_failure(r, "No space left on device", "MPI_File_write_at")
    check("rank 0: MPI_File_sync 1: failed" not in r.stdout and "rank 1: MPI_File_sync 1: failed" not in r.stdout,
          f"epoch 1 should have committed:\n{r.stdout}")
    expected = b"a" * 65536 + b"b" * 65536
    check(out.read_bytes() == expected, "epoch 1 read back from the full log is not what the program committed")


def case_posix_errno(work):
    """A plain POSIX program gets an errno (EINVAL) and the same line."""
    code = "import os\ntry:\n    open(%r, 'w')\nexcept OSError as e:\n    print('errno', e.errno)\n" % str(work / "pfs/x")
    env = base_env(work / "pfs", work / "local", PARALOG_BOGUS="1")
    r = run([PY, "-c", code], env=env, check=False, timeout=TIMEOUT)
    check(f"errno {22}" in r.stdout, f"expected errno 22 (EINVAL), got: {r.stdout}{r.stderr}")
    check("paralog: capture is misconfigured, opens under the prefix fail: unknown setting PARALOG_BOGUS" in r.stderr,
          f"missing the stderr line: {r.stderr}")
    # Outside the prefix the same process works normally.
    code = "open(%r, 'w').write('ok')\n" % str(work / "elsewhere.txt")
    r = run([PY, "-c", code], env=env, check=False, timeout=TIMEOUT)
    check(r.returncode == 0 and (work / "elsewhere.txt").read_text() == "ok",
          f"a file outside the prefix was affected: {r.stderr}")


CASES = [
    ("unknown PARALOG_* setting", case_unknown_setting),
    ("PARALOG_LOCAL not set", case_local_missing),
    ("prefix does not exist", case_prefix_missing),
    ("remote path escapes its root", case_remote_escapes),
    ("node-local directory read-only", case_local_read_only),
    ("node-local directory full mid-epoch", case_local_full),
    ("POSIX program gets errno", case_posix_errno),
]


def main():
    compile_program("mpicc.mpich", ROOT / "tests/capture/progs/errors.c", PROG, "-O2", "-Wall", always=True)
    suite = Suite("bad input")

    def in_pfs(fn):
        def case(work):
            (work / "pfs").mkdir()
            fn(work)
        return case

    return suite.run([(name, in_pfs(fn)) for name, fn in CASES])


if __name__ == "__main__":
    sys.exit(main())
