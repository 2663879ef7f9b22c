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
  pnetcdf    tests/correctness/progs/pnetcdf_layouts.c: fill mode, then
             column-wise and block-cyclic writes over the fill values in
             one epoch, read back and checked by the program, and
             byte-identical to direct MPI-IO (Open MPI: Debian's PnetCDF)

in MPICH/ROMIO, Open MPI/OMPIO and Open MPI/ROMIO 3.2.1.
Usage: tests/correctness/mpi_order.py [--only SUBSTRING] [--iterations N]
Ends with "mpi order: N passed, N failed".
"""
import argparse
import subprocess

from common import BIN, ENV, ROOT, first_difference, run_cases

SRC = ROOT / "tests/correctness/progs"
BUILD = ROOT / "target/correctness"
MODES = {  # mode: (flavour, launcher, extra environment)
    "mpich": ("mpich", "mpirun.mpich", {}),
    "ompio": ("openmpi", "mpirun.openmpi", {"OMPI_MCA_io": "ompio"}),
    "romio321": ("openmpi", "mpirun.openmpi", {"OMPI_MCA_io": "romio321"}),
}


def build(prog, flavour):
    BUILD.mkdir(parents=True, exist_ok=True)
    exe = BUILD / f"{prog}.{flavour}"
    src = SRC / f"{prog}.c"
    if not exe.exists() or exe.stat().st_mtime < src.stat().st_mtime:
        libs = ["-lpnetcdf"] if prog.startswith("pnetcdf") else []
        subprocess.run([f"mpicc.{flavour}", "-O2", "-Wall", "-Werror", "-o", exe, src, *libs], check=True)
    return exe


def run_pair(mode, ranks, prog, args, delay, work):
    """Direct, then under paralog; None if both succeed with equal files."""
    flavour, launcher, extra = MODES[mode]
    env = {**ENV, **extra}
    exe = build(prog, flavour)
    direct, prefix, local = work / "direct", work / "prefix", work / "local"
    direct.mkdir()
    prefix.mkdir()
    r = subprocess.run([launcher, "-n", str(ranks), exe, direct / "out.dat", *args], env=env,
                       capture_output=True, text=True, timeout=180)
    if r.returncode != 0:
        return f"direct run failed ({r.returncode}): {r.stdout[-300:]}{r.stderr[-300:]}"
    penv = dict(env)
    if delay is not None:
        penv["PARALOG_FAILPOINT_DELETE_DELAY_MS"] = str(delay)
    cmd = [BIN, "run", "--prefix", prefix, "--local", local, "--job", "t", "--mpi", flavour, "--",
           launcher, "-n", str(ranks), exe, prefix / "out.dat", *args]
    try:
        r = subprocess.run(list(map(str, cmd)), env=penv, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return "paralog run hung (no exit within 300 s)"
    if r.returncode != 0:
        return f"paralog run exited {r.returncode}: {r.stdout[-400:]}{r.stderr[-600:]}"
    return first_difference((direct / "out.dat").read_bytes(), (prefix / "out.dat").read_bytes())


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
        # PnetCDF is built for Open MPI only on Debian.
        if MODES[mode][0] == "openmpi":
            for layout, ranks in (("colwise", 4), ("blockcyclic", 3)):
                cases.append((f"{mode} pnetcdf fill mode {layout}", mode, ranks, "pnetcdf_layouts", [layout], None))
    chosen = [c for c in cases if not opts.only or opts.only in c[0]]
    run_cases("mpi order", [(name, lambda w, c=(mode, ranks, prog, args, delay): run_pair(*c, w))
                            for name, mode, ranks, prog, args, delay in chosen])

if __name__ == "__main__":
    main()
