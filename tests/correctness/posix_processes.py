#!/usr/bin/python3
"""Several processes writing one file through plain POSIX (issue 12, point
2): independent processes, and MPI ranks using open/pwrite, under
`paralog run`. Every process is its own writer in the log (each fsync and
last close an epoch of its own, ordered by when it became durable on the
node), so the remote file must equal the direct run byte for byte, with no
acknowledged byte lost and no process failing.

Usage: tests/correctness/posix_processes.py [--keep]
Ends with "posix processes: N passed, N failed".
"""
import argparse
import subprocess

from common import BIN, ENV, PY, ROOT, first_difference, run_cases

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
    env = ENV
    cmd, _ = launch_cmd(kind, n, direct / "shared.dat", work / "tok-direct")
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        return f"direct run failed: {r.stderr[-500:]}"
    cmd, mpi = launch_cmd(kind, n, prefix / "shared.dat", work / "tok-paralog")
    args = [BIN, "run", "--prefix", prefix, "--local", local, "--job", "t"]
    if mpi:
        args += ["--mpi", mpi]
    r = subprocess.run([*map(str, args), "--", *map(str, cmd)], env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return f"paralog run exited {r.returncode}: {r.stderr[-800:]}"
    return first_difference((direct / "shared.dat").read_bytes(), (prefix / "shared.dat").read_bytes())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", action="store_true")
    opts = ap.parse_args()
    cases = [("processes", 2), ("processes", 4), ("mpich", 3), ("openmpi", 2)]
    run_cases("posix processes", [(f"{kind} x{n}: one file written through POSIX equals the direct run",
                                   lambda w, kind=kind, n=n: run_case(kind, n, w)) for kind, n in cases], opts.keep)


if __name__ == "__main__":
    main()
