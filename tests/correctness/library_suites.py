#!/usr/bin/python3
"""Test suites that ship with the libraries, run under `paralog run` with
their temporary files under the prefix (issue 13): h5py's own test suite
(Debian's python3-h5py, serial build, run by pytest with TMPDIR under the
prefix; it creates, reopens, renames, chmods and removes thousands of HDF5
files and directories). Every test must end the same way as in a run
without paralog (some fail without paralog too on these machines: as root
a read-only file is still writable, and there is no network for ROS3).
Run with the prefix as the remote, and with a separate remote directory.

h5py's suite again in its MPI build (python3-h5py-mpi, with pytest-mpi's
--with-mpi, so its driver='mpio' tests run too) on 2 ranks of Open MPI:
each rank's pass/fail/skip counts as without paralog.

And mpi4py's own MPI-IO tests (test_io.py, test_file.py of the sdist of
the version Debian's python3-mpi4py is; scripts/setup.sh --test fetches
it) on 2 ranks of Open MPI, with OMPIO (test_file.py also with ROMIO
3.2.1, which crashes in test_io.py without paralog), TMPDIR under the
prefix: every rank's unittest summary as without paralog.

Usage: python3 -m tests.correctness.library_suites [--keep] [--only SUBSTRING]
Ends with "library suites: N passed, N failed".
"""
import re
import sys

from tests.lib.check import Suite, check, fail, suite_options
from tests.lib.mpi import OPENMPI, io_env, launcher, mpi_env
from tests.lib.paralog import paralog_run
from tests.lib.paths import PY, TARGET
from tests.lib.proc import run

ENV = mpi_env()

H5PY_TESTS = "/usr/lib/python3/dist-packages/h5py/_debian_h5py_serial/tests"
OUTCOME = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)")


def outcomes(text):
    """{test id: outcome} from pytest's -rA summary."""
    out = {}
    for line in text.splitlines():
        m = OUTCOME.match(line)
        if m:
            out[m.group(2)] = m.group(1)
    return out


def pytest_cmd():
    return [PY, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", H5PY_TESTS]


def case_h5py(work, separate_remote):
    base = work / "base-tmp"
    base.mkdir()
    r = run(pytest_cmd(), env={**ENV, "TMPDIR": str(base)}, check=False, timeout=600)
    want = outcomes(r.stdout)
    check(len(want) >= 500, f"the suite did not run directly ({len(want)} outcomes): {r.stdout[-500:]}{r.stderr[-500:]}")
    prefix = work / "prefix"
    (prefix / "tmp").mkdir(parents=True)
    remote = None
    if separate_remote:
        remote = work / "remote"
        remote.mkdir()
    p = paralog_run(work / "local", prefix, pytest_cmd(), remote=remote, env={**ENV, "TMPDIR": str(prefix / "tmp")},
                    job="h5py", check=False, timeout=900)
    got = outcomes(p.stdout)
    differ = [f"{t}: {want.get(t, 'absent')} directly, {got.get(t, 'absent')} under paralog"
              for t in sorted(set(want) | set(got)) if want.get(t) != got.get(t)]
    check(not differ, f"{len(differ)} tests end differently, e.g. {differ[:3]}")
    check("REFUSED" not in p.stderr, f"an epoch was refused: {p.stderr[-500:]}")


H5PY_MPI_TESTS = "/usr/lib/python3/dist-packages/h5py/_debian_h5py_mpi/tests"
PYTEST_COUNTS = re.compile(r"(\d+ (?:passed|failed|skipped|errors?|xfailed|xpassed))")


def case_h5py_mpi(work):
    """h5py's suite, its MPI build (driver='mpio' tests included), on 2
    ranks: each rank's counts as without paralog."""
    env = mpi_env()
    cmd = [*launcher("openmpi", 2), PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--with-mpi",
           H5PY_MPI_TESTS]
    base = work / "base-tmp"
    base.mkdir()
    d = run(cmd, env={**env, "TMPDIR": str(base)}, check=False, timeout=600)
    want = sorted(PYTEST_COUNTS.findall(d.stdout))
    check(any("passed" in c and int(c.split()[0]) >= 500 for c in want),
          f"the suite did not run directly: {want} {d.stdout[-400:]}{d.stderr[-400:]}")
    prefix = work / "prefix"
    (prefix / "tmp").mkdir(parents=True)
    p = paralog_run(work / "local", prefix, cmd, mpi="openmpi", env={**env, "TMPDIR": str(prefix / "tmp")},
                    job="h5pympi", check=False, timeout=900)
    got = sorted(PYTEST_COUNTS.findall(p.stdout))
    check(got == want, f"under paralog: {got}, directly: {want}; {p.stderr[-600:]}")
    check("REFUSED" not in p.stderr, f"an epoch was refused: {p.stderr[-500:]}")


MPI4PY_TESTS = TARGET / "mpi4py-3.1.4" / "test"
# Each rank's unittest verdict, found wherever it starts: mpirun forwards
# the two ranks' output and may join a line of one to the other's (in CI a
# rank's "OK" followed the other's dots, and later the other's "Ran 14
# tests in 0.052s": a line-anchored match, then one that wanted no letter
# before it, saw one). No capital letter before it, no letter after it.
SUMMARY = re.compile(r"(?<![A-Z])(OK(?: \([^)\n]*\))?|FAILED \([^)\n]*\))(?![A-Za-z])")


def case_mpi4py(work, script, mode):
    if not (MPI4PY_TESTS / script).exists():
        fail(f"{MPI4PY_TESTS / script} missing (scripts/setup.sh --test fetches it)")
    env = mpi_env(io_env(mode))
    cmd = [*launcher("openmpi", 2), PY, MPI4PY_TESTS / script]
    base = work / "base-tmp"
    base.mkdir()
    d = run(cmd, env={**env, "TMPDIR": str(base)}, check=False, timeout=300)
    want = sorted(SUMMARY.findall(d.stderr + d.stdout))
    check(d.returncode == 0 and want.count("OK") == 2, f"the tests did not pass directly: {want} {d.stderr[-400:]}")
    prefix = work / "prefix"
    (prefix / "tmp").mkdir(parents=True)
    p = paralog_run(work / "local", prefix, cmd, mpi="openmpi", env={**env, "TMPDIR": str(prefix / "tmp")},
                    job="mpi4py", check=False, timeout=600)
    got = sorted(SUMMARY.findall(p.stderr + p.stdout))
    check(p.returncode == 0 and got == want,
          f"under paralog (exit {p.returncode}): {got}, directly: {want}; {p.stderr[-600:]}")
    check("REFUSED" not in p.stderr, f"an epoch was refused: {p.stderr[-500:]}")


def main():
    opts = suite_options().parse_args()
    return Suite("library suites", keep=opts.keep).run([
        ("h5py's test suite, TMPDIR under the prefix (the prefix is the remote): same outcomes as without paralog",
         lambda w: case_h5py(w, False)),
        ("h5py's test suite, TMPDIR under the prefix, a separate remote: same outcomes as without paralog",
         lambda w: case_h5py(w, True)),
        ("h5py's test suite, MPI build, 2 ranks of Open MPI, TMPDIR under the prefix: same counts as without paralog",
         case_h5py_mpi),
        *[(f"mpi4py's {script} on 2 ranks, {mode}, TMPDIR under the prefix: same outcomes as without paralog",
           lambda w, s=script, m=mode: case_mpi4py(w, s, m))
          # ROMIO 3.2.1 of Open MPI 4.1.4 crashes in test_io's nonblocking
          # collectives without paralog too.
          for script, modes in (("test_io.py", ("ompio",)), ("test_file.py", OPENMPI)) for mode in modes],
    ], only=opts.only)


if __name__ == "__main__":
    sys.exit(main())
