#!/usr/bin/python3
"""Test suites that ship with the libraries, run under `paralog run` with
their temporary files under the prefix (issue 13): h5py's own test suite
(Debian's python3-h5py, serial build, run by pytest with TMPDIR under the
prefix; it creates, reopens, renames, chmods and removes thousands of HDF5
files and directories). Every test must end the same way as in a run
without paralog (some fail without paralog too on these machines: as root
a read-only file is still writable, and there is no network for ROS3).
Run with the prefix as the remote, and with a separate remote directory.

Usage: python3 -m tests.correctness.library_suites [--keep]
Ends with "library suites: N passed, N failed".
"""
import argparse
import re
import sys

from tests.lib.check import Suite, check
from tests.lib.mpi import mpi_env
from tests.lib.paralog import paralog_run
from tests.lib.paths import PY
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", action="store_true")
    opts = ap.parse_args()
    return Suite("library suites", keep=opts.keep).run([
        ("h5py's test suite, TMPDIR under the prefix (the prefix is the remote): same outcomes as without paralog",
         lambda w: case_h5py(w, False)),
        ("h5py's test suite, TMPDIR under the prefix, a separate remote: same outcomes as without paralog",
         lambda w: case_h5py(w, True)),
    ])


if __name__ == "__main__":
    sys.exit(main())
