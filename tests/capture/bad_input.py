#!/usr/bin/python3
"""Bad input to the capture library: each case gives one clear line on
stderr naming the problem, an error to the program on every rank (never a
hang: each run has a time limit), and loses nothing already committed.

Cases run a real MPI program (tests/capture/progs/errors.c, MPICH, 2 ranks)
and a plain POSIX program (python) with the settings a batch script could
get wrong. Prints one line per case and "N passed, N failed".
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "target/release/paralog"
LIBDIR = ROOT / "target/release"
PROG = ROOT / "target/mpi-tests/errors-mpich"
TIMEOUT = 60


def preload():
    return f"{LIBDIR}/libparalog_mpi_mpich.so:{LIBDIR}/libparalog_capture.so"


def base_env(prefix, local, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARALOG_")}
    env.update(LD_PRELOAD=preload(), PARALOG_PREFIX=str(prefix), PARALOG_JOB="bad")
    if local is not None:
        env["PARALOG_LOCAL"] = str(local)
    env.update(extra)
    return env


def mpirun(args, env, wrap=None):
    if len(args) == 1:
        args = [*args, 4096, 4096]
    cmd = ["mpirun.mpich", "-n", "2", str(PROG), *map(str, args)]
    if wrap:
        cmd = wrap(cmd)
    try:
        return subprocess.run(cmd, env=env, text=True, capture_output=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return None


def expect_failure(r, stderr_has, failed_call):
    """Every rank must report the failed call; stderr must name the problem."""
    if r is None:
        return f"the program hung (no answer in {TIMEOUT} s)"
    if r.returncode != 3:
        return f"exit status {r.returncode}, expected 3 (a failure reported to the program)\n{r.stdout}{r.stderr}"
    for rank in (0, 1):
        if f"rank {rank}: {failed_call}: failed" not in r.stdout:
            return f"rank {rank} did not learn that {failed_call} failed:\n{r.stdout}"
    lines = [l for l in r.stderr.splitlines() if l.startswith("paralog: ")]
    if not any(stderr_has in l for l in lines):
        return f"no stderr line containing {stderr_has!r}; paralog said: {lines}"
    return None


def case_unknown_setting(work):
    return expect_failure(
        mpirun([work / "pfs/out"], base_env(work / "pfs", work / "local", PARALOG_BOGUS="1")),
        "unknown setting PARALOG_BOGUS",
        "MPI_File_open",
    )


def case_local_missing(work):
    return expect_failure(
        mpirun([work / "pfs/out"], base_env(work / "pfs", None)),
        "PARALOG_LOCAL is not set",
        "MPI_File_open",
    )


def case_prefix_missing(work):
    missing = work / "no-such-dir"
    return expect_failure(
        mpirun([missing / "out"], base_env(missing, work / "local")),
        f"PARALOG_PREFIX={missing}: No such file or directory",
        "MPI_File_open",
    )


def case_remote_escapes(work):
    return expect_failure(
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
    return expect_failure(r, f"PARALOG_LOCAL={local}/log: cannot create it: Read-only file system", "MPI_File_open")


def case_local_full(work):
    """ENOSPC in epoch 2: every rank's sync fails; epoch 1 stays readable."""
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
    try:
        r = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
            env=base_env(work / "pfs", local),
            text=True,
            capture_output=True,
            timeout=TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        r = None
    if r is not None and r.returncode == 99:
        return f"the committed epoch 1 could not be read back after ENOSPC:\n{r.stderr}"
    problem = expect_failure(r, "No space left on device", "MPI_File_sync 2")
    if problem:
        return problem
    if "rank 0: MPI_File_sync 1: failed" in r.stdout or "rank 1: MPI_File_sync 1: failed" in r.stdout:
        return f"epoch 1 should have committed:\n{r.stdout}"
    expected = b"a" * 65536 + b"b" * 65536
    if out.read_bytes() != expected:
        return "epoch 1 read back from the full log is not what the program committed"
    return None


def case_posix_errno(work):
    """A plain POSIX program gets an errno (EINVAL) and the same line."""
    code = "import os\ntry:\n    open(%r, 'w')\nexcept OSError as e:\n    print('errno', e.errno)\n" % str(work / "pfs/x")
    env = base_env(work / "pfs", work / "local", PARALOG_BOGUS="1")
    r = subprocess.run(["/usr/bin/python3", "-c", code], env=env, text=True, capture_output=True, timeout=TIMEOUT)
    if f"errno {22}" not in r.stdout:
        return f"expected errno 22 (EINVAL), got: {r.stdout}{r.stderr}"
    if "paralog: capture is misconfigured, opens under the prefix fail: unknown setting PARALOG_BOGUS" not in r.stderr:
        return f"missing the stderr line: {r.stderr}"
    # Outside the prefix the same process works normally.
    code = "open(%r, 'w').write('ok')\n" % str(work / "elsewhere.txt")
    r = subprocess.run(["/usr/bin/python3", "-c", code], env=env, text=True, capture_output=True, timeout=TIMEOUT)
    if r.returncode != 0 or (work / "elsewhere.txt").read_text() != "ok":
        return f"a file outside the prefix was affected: {r.stderr}"
    return None


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
    PROG.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mpicc.mpich", "-O2", "-Wall", "-o", PROG, ROOT / "tests/capture/progs/errors.c"], check=True
    )
    passed = failed = 0
    for name, fn in CASES:
        work = Path(tempfile.mkdtemp(prefix="paralog-bad-"))
        (work / "pfs").mkdir()
        try:
            problem = fn(work)
        except Exception as e:
            problem = f"test error: {e}"
        if problem:
            failed += 1
            print(f"FAIL {name}: {problem}  [kept in {work}]", flush=True)
        else:
            passed += 1
            print(f"PASS {name}", flush=True)
            shutil.rmtree(work)
    print(f"bad input: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
