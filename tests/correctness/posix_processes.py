#!/usr/bin/python3
"""Several processes writing one file through plain POSIX (issue 12, point
2): independent processes, and MPI ranks using open/pwrite, under
`paralog run`. Every process is its own writer in the log (each fsync and
last close an epoch of its own, ordered by when it became durable on the
node), so the remote file must equal the direct run byte for byte, with no
acknowledged byte lost and no process failing.

Usage: python3 -m tests.correctness.posix_processes [--keep]
Ends with "posix processes: N passed, N failed".
"""
import argparse
import sys

from tests.lib.check import Suite, check
from tests.lib.compare import same_bytes
from tests.lib.mpi import mpi_env
from tests.lib.paralog import paralog_run
from tests.lib.paths import PY, ROOT
from tests.lib.proc import run

WRITER = ROOT / "tests/correctness/posix_writer.py"


def launch_cmd(kind, n, target, tokens):
    """The command that starts n writers of `target`."""
    if kind == "processes":
        # `wait` alone returns 0 even if a child failed: collect every status.
        script = (f"pids=''; for i in $(seq 0 {n - 1}); do {PY} {WRITER} {target} $i {n} {tokens} & pids=\"$pids $!\"; done; "
                  "rc=0; for p in $pids; do wait $p || rc=1; done; exit $rc")
        return ["/bin/bash", "-c", script], None
    if kind == "mpich":
        return ["mpirun.mpich", "-n", str(n), PY, str(WRITER), str(target), "-1", str(n), str(tokens)], "mpich"
    return ["mpirun.openmpi", "-n", str(n), PY, str(WRITER), str(target), "-1", str(n), str(tokens)], "openmpi"


def run_case(kind, n, work):
    direct, prefix, local = work / "direct", work / "prefix", work / "local"
    for d in (direct, prefix, work / "tok-direct", work / "tok-paralog"):
        d.mkdir(parents=True)
    env = mpi_env()
    cmd, _ = launch_cmd(kind, n, direct / "shared.dat", work / "tok-direct")
    r = run(cmd, env=env, check=False, timeout=120)
    check(r.returncode == 0, f"direct run failed: {r.stderr[-500:]}")
    cmd, mpi = launch_cmd(kind, n, prefix / "shared.dat", work / "tok-paralog")
    r = paralog_run(local, prefix, cmd, mpi=mpi, env=env, check=False, timeout=300)
    check(r.returncode == 0, f"paralog run exited {r.returncode}: {r.stderr[-800:]}")
    same_bytes(direct / "shared.dat", prefix / "shared.dat", "shared.dat", ("direct", "paralog"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", action="store_true")
    opts = ap.parse_args()
    cases = [("processes", 2), ("processes", 4), ("mpich", 3), ("openmpi", 2)]
    return Suite("posix processes", keep=opts.keep).run(
        [(f"{kind} x{n}: one file written through POSIX equals the direct run",
          lambda w, kind=kind, n=n: run_case(kind, n, w)) for kind, n in cases])


if __name__ == "__main__":
    sys.exit(main())
