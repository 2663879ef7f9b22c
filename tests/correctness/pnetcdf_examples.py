#!/usr/bin/python3
"""PnetCDF's own example programs (examples/C of the libpnetcdf-dev Debian
installs; scripts/setup.sh --test fetches its source), which we did not
write, run on 4 ranks directly and under `paralog run`, with Open MPI's
OMPIO and ROMIO (Debian's libpnetcdf is built with Open MPI); and PnetCDF's
own test programs (test/testcases and test/nonblocking, each checking what
it reads back and printing "pass"), with OMPIO.

The test programs open a second MPI handle of a file they have open
(independent data mode: MPI_File_open on MPI_COMM_SELF; record,
test_vard, mcoll_perf), which paralog refused before. Two of them are run
with ROMIO instead, or compared in part, for reasons of their own:
add_var's CDF-1 file grows by the count OMPIO's collective read (fcoll
vulcan) reports past the end of the file, which paralog's OMPIO (fcoll
individual, as ROMIO) does not (docs/capture.md, "Which MPI-IO semantics
paralog reproduces"); check_type writes two uninitialized padding bytes
(two direct runs differ there). The pthread example is not run (NOT_RUN).

Each case passes when the program exits as in the direct run and every
file it wrote equals the direct run's byte for byte (after the drain, on a
separate remote). Several examples read back what other ranks just wrote,
without a sync (bput_varn_int64, i_varn_int64): docs/capture.md, "Reads
while writing".

global_attributes stores the time of day as an attribute: the two runs'
`asctime` strings are blanked (at the same offset in both) before the
comparison. get_vara reads a file made by another example: it runs on
put_vara's output, in the prefix, after put_vara's own run.

Usage: python3 -m tests.correctness.pnetcdf_examples [--only NAME]
Ends with "pnetcdf examples: N passed, N failed".
"""
import argparse
import re
import sys

from tests.lib.check import Suite, check
from tests.lib.mpi import OPENMPI, compile_program, io_env, launcher, mpi_env
from tests.lib.paralog import paralog_run
from tests.lib.paths import TARGET
from tests.lib.proc import run

SOURCE = TARGET / "pnetcdf-1.12.3" / "examples" / "C"
TESTS = TARGET / "pnetcdf-1.12.3" / "test"
BUILD = TARGET / "pnetcdf-examples"
# Test programs and the one mode each runs in (default: OMPIO).
TEST_MODES = {"add_var": "romio321"}
# Bytes a program leaves uninitialized: (file, offset, length) blanked in
# both runs before the comparison.
UNSET = {"check_type": [("out.nc", 7170, 2)]}
ASCTIME = re.compile(rb"[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\n")
# Programs that need something other than an output file name.
NOT_ALONE = {"get_vara"}
# Examples not run: examples/C/pthread calls PnetCDF from 6 threads at once,
# which PnetCDF supports only when configured --enable-thread-safe (its
# Makefile.am builds the example only then). Debian's libpnetcdf is not
# (PNETCDF_THREAD_SAFE is 0 in pnetcdf.h), so the example races inside
# PnetCDF even directly: with ROMIO 5 of 40 direct runs crashed, and a CI
# run's direct OMPIO run failed with "NetCDF: Variable not found" then a
# segfault. (tst_pthread, the test program, checks this itself and skips.)
NOT_RUN = {"pthread"}


def build(name, src=None):
    # Two test programs have an example's name (i_varn_int64, req_all).
    exe = BUILD / name if src is None else BUILD / "tests" / name
    if src is None:
        compile_program("mpicc.openmpi", SOURCE / f"{name}.c", exe, "-O1", libs=("-lpnetcdf", "-lpthread", "-lm"))
    else:
        # The test programs share PnetCDF's test/common/testutils.c.
        compile_program("mpicc.openmpi", src, exe, "-O1", f"-I{TESTS / 'common'}", str(TESTS / "common" / "testutils.c"),
                        libs=("-lpnetcdf", "-lpthread", "-lm"))
    return exe


def blank_times(data):
    return ASCTIME.sub(lambda m: b"#" * len(m.group(0)), data)


def blank(data, ranges):
    data = bytearray(data)
    for off, n in ranges:
        data[off:off + n] = b"#" * len(data[off:off + n])
    return bytes(data)


def same_files(direct, remote, unset=()):
    """Every file of the direct run equals the remote's, and no other."""
    want = sorted(p.name for p in direct.iterdir())
    got = sorted(p.name for p in remote.iterdir())
    check(want == got, f"files differ: direct {want}, remote {got}")
    for name in want:
        ranges = [(off, n) for f, off, n in unset if f == name]
        a, b = (blank(blank_times((d / name).read_bytes()), ranges) for d in (direct, remote))
        if a != b:
            at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            check(False, f"{name} differs from the direct run at byte {at} (sizes {len(a)}, {len(b)})")


def case(name, mode, work, src=None):
    exe = build(name, src)
    # The examples take -q and the file; the test programs the file alone.
    args = [] if src else ["-q"]
    flavour = "openmpi"
    env = mpi_env(io_env(mode))
    mpirun = launcher(flavour, 4)
    direct, prefix, remote = work / "direct", work / "prefix", work / "remote"
    for d in (direct, prefix, remote):
        d.mkdir()
    d = run([*mpirun, exe, *args, direct / "out.nc"], env=env, check=False, timeout=120)
    check(d.returncode == 0, f"direct run exited {d.returncode}: {d.stdout[-300:]}{d.stderr[-300:]}")
    p = paralog_run(work / "local", prefix, [*mpirun, exe, *args, prefix / "out.nc"], remote=remote, mpi=flavour,
                    env=env, check=False, timeout=300)
    check(p.returncode == 0, f"paralog run exited {p.returncode}: {p.stdout[-600:]}{p.stderr[-600:]}")
    check(d.stdout in p.stdout,
          f"the program printed something else under paralog: {p.stdout[:300]!r} vs {d.stdout[:300]!r}")
    # A test program prints "pass" (or "skip": tst_pthread and
    # tst_max_var_dims do not apply to this build), under paralog as directly.
    check(not src or "pass" in d.stdout or "skip" in d.stdout, f"the test program failed directly: {d.stdout[-300:]!r}")
    same_files(direct, remote, UNSET.get(name, ()))
    if name == "put_vara":
        # get_vara checks the values put_vara wrote: read the drained file
        # back through capture, from the prefix.
        reader = build("get_vara")
        g = run([*mpirun, reader, "-q", direct / "out.nc"], env=env, check=False, timeout=120)
        check(g.returncode == 0, f"get_vara on the direct file exited {g.returncode}: {g.stdout[-300:]}")
        g = paralog_run(work / "local2", remote, [*mpirun, reader, "-q", remote / "out.nc"], mpi=flavour, env=env,
                        check=False, timeout=300)
        check(g.returncode == 0, f"get_vara under paralog exited {g.returncode}: {g.stdout[-300:]}{g.stderr[-300:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", help="one example's or test program's name")
    opts = ap.parse_args()
    suite = Suite("pnetcdf examples")
    if not SOURCE.is_dir():
        suite.fail_case("setup", f"{SOURCE} missing (scripts/setup.sh --test fetches it)")
        return suite.finish()
    names = sorted(p.stem for p in SOURCE.glob("*.c") if p.stem not in NOT_ALONE | NOT_RUN)
    if opts.only:
        names = [n for n in names if n == opts.only]
    cases = [(f"{m} {n}", lambda w, n=n, m=m: case(n, m, w)) for m in OPENMPI for n in names]
    tests = sorted(p for d in ("testcases", "nonblocking") for p in (TESTS / d).glob("*.c"))
    if opts.only:
        tests = [p for p in tests if p.stem == opts.only]
    cases += [(f"{TEST_MODES.get(p.stem, 'ompio')} test {p.stem}",
               lambda w, p=p: case(p.stem, TEST_MODES.get(p.stem, "ompio"), w, p)) for p in tests]
    return suite.run(cases)


if __name__ == "__main__":
    sys.exit(main())
