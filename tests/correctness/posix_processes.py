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
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "target/release/paralog"
WRITER = ROOT / "tests/correctness/posix_writer.py"
PY = "/usr/bin/python3"
OMPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "OMPI_MCA_rmaps_base_oversubscribe": "1"}


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
    env = {**os.environ, **OMPI_ENV}
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
    a, b = (direct / "shared.dat").read_bytes(), (prefix / "shared.dat").read_bytes()
    if a != b:
        diff = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        return f"remote differs from direct at byte {diff} (sizes {len(a)} vs {len(b)})"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", action="store_true")
    opts = ap.parse_args()
    cases = [("processes", 2), ("processes", 4), ("mpich", 3), ("openmpi", 2)]
    passed = failed = 0
    for kind, n in cases:
        work = Path(tempfile.mkdtemp(prefix="paralog-posixproc-"))
        try:
            why = run_case(kind, n, work)
        except subprocess.TimeoutExpired as e:
            why = f"timed out: {e}"
        name = f"{kind} x{n}: one file written through POSIX"
        if why:
            failed += 1
            print(f"FAIL {name}: {why}", flush=True)
        else:
            passed += 1
            print(f"PASS {name}: equal to the direct run", flush=True)
        if not opts.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"posix processes: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
