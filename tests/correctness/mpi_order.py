#!/usr/bin/python3
"""Issue 12, points 1 and 3, with real MPIs under `paralog run`:

  reopen     tests/correctness/progs/reopen_read.c: 30 iterations of write,
             close, reopen, read everything back, on 2 and 4 ranks,
             collective and independent writes, with the server draining
             at full speed and with its deletion slowed
             (PARALOG_FAILPOINT_DELETE_DELAY_MS): zero errors, zero stale
             reads, no hang (every run has a time limit), and the remote
             equals the direct run
  overlap    tests/correctness/progs/overlap.c: overlapping writes of
             different ranks in one epoch separated by a barrier, an
             allreduce, a broadcast, collective writes, and rounds with a
             size change: byte-identical to direct MPI-IO
  read after write  tests/correctness/progs/read_after_write.c: every
             rank writes, then all read back every rank's bytes with a
             collective read and no sync (read_at_all, read_all, split,
             nonblocking), as PnetCDF's examples do
  second handle  tests/correctness/progs/second_handle.c: a second handle
             of the open file on MPI_COMM_SELF (PnetCDF's independent data
             mode), written and read back between collective writes
  pnetcdf    tests/correctness/progs/pnetcdf_layouts.c: fill mode, then
             column-wise and block-cyclic writes over the fill values in
             one epoch, read back and checked by the program, and
             byte-identical to direct MPI-IO (Open MPI: Debian's PnetCDF)

in MPICH/ROMIO, Open MPI/OMPIO and Open MPI/ROMIO 3.2.1.
Usage: python3 -m tests.correctness.mpi_order [--only SUBSTRING] [--iterations N]
Ends with "mpi order: N passed, N failed".
"""
import argparse
import sys

from tests.lib.check import Suite, check, fail
from tests.lib.compare import same_bytes
from tests.lib.mpi import MODES, compile_program, io_env, launcher, mpi_env
from tests.lib.paralog import paralog_run
from tests.lib.paths import ROOT, TARGET
from tests.lib.proc import Timeout, run

SRC = ROOT / "tests/correctness/progs"
BUILD = TARGET / "correctness"


def build(prog, flavour):
    libs = ["-lpnetcdf"] if prog.startswith("pnetcdf") else []
    return compile_program(f"mpicc.{flavour}", SRC / f"{prog}.c", BUILD / f"{prog}.{flavour}", "-O2", "-Wall",
                           "-Werror", libs=libs)


def run_pair(mode, ranks, prog, args, delay, work):
    """Direct, then under paralog; None if both succeed with equal files."""
    flavour, _ = MODES[mode]
    env = mpi_env(io_env(mode))
    exe = build(prog, flavour)
    mpirun = launcher(flavour, ranks)
    direct, prefix, local = work / "direct", work / "prefix", work / "local"
    direct.mkdir()
    prefix.mkdir()
    r = run([*mpirun, exe, direct / "out.dat", *args], env=env, check=False, timeout=180)
    check(r.returncode == 0, f"direct run failed ({r.returncode}): {r.stdout[-300:]}{r.stderr[-300:]}")
    penv = dict(env)
    if delay is not None:
        penv["PARALOG_FAILPOINT_DELETE_DELAY_MS"] = str(delay)
    try:
        r = paralog_run(local, prefix, [*mpirun, exe, prefix / "out.dat", *args], mpi=flavour, env=penv,
                        check=False, timeout=300)
    except Timeout:
        fail("paralog run hung (no exit within 300 s)")
    check(r.returncode == 0, f"paralog run exited {r.returncode}: {r.stdout[-400:]}{r.stderr[-600:]}")
    same_bytes(direct / "out.dat", prefix / "out.dat", "out.dat", ("direct", "paralog"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only")
    ap.add_argument("--iterations", type=int, default=30)
    opts = ap.parse_args()
    cases = []
    for mode in MODES:
        for ranks, how, delay in [(2, "collective", None), (4, "collective", 20), (4, "independent", None), (2, "independent", 20)]:
            args = [str(opts.iterations)] + (["--independent"] if how == "independent" else [])
            slow = f", deletion slowed {delay} ms" if delay else ""
            cases.append((f"{mode} reopen {ranks} ranks {how}{slow}", mode, ranks, "reopen_read", args, delay))
        for case in ("barrier", "allreduce", "bcast", "collective", "rounds"):
            cases.append((f"{mode} overlap {case}", mode, 2 if case != "rounds" else 3, "overlap", [case], None))
        # Open MPI 4.1.4's split and nonblocking collective reads return
        # wrong bytes (OMPIO) or crash (ROMIO 3.2.1) without paralog too.
        reads = ("read_at_all", "read_all") + (("begin_end", "iread") if mode == "mpich" else ())
        for how in reads:
            cases.append((f"{mode} read after write {how}", mode, 3, "read_after_write", ["6", how], None))
        cases.append((f"{mode} second handle on MPI_COMM_SELF", mode, 3, "second_handle", ["4"], None))
        # PnetCDF is built for Open MPI only on Debian.
        if MODES[mode][0] == "openmpi":
            for layout, ranks in (("colwise", 4), ("blockcyclic", 3)):
                cases.append((f"{mode} pnetcdf fill mode {layout}", mode, ranks, "pnetcdf_layouts", [layout], None))
    return Suite("mpi order").run([(name, lambda w, c=(mode, ranks, prog, args, delay): run_pair(*c, w))
                                   for name, mode, ranks, prog, args, delay in cases], only=opts.only)


if __name__ == "__main__":
    sys.exit(main())
