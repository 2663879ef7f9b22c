#!/usr/bin/python3
"""What `paralog run` says at the end (issue 12, point 4):

  refused    a program that writes past capture (a raw write syscall on a
             captured descriptor) and ignores the error: run names the file
             and exits non-zero, although the program exited 0
  abort      an MPI job whose ranks commit an epoch and then MPI_Abort:
             the summary counts the bytes captured (the counters are
             written at every consistency point, not only at exit)
  status     `paralog status --local L` finds the server that `paralog
             run` started without --job (its job is run-<time>-<pid>)
  private    while a run goes on, everything under the node-local root
             (logs, records, the server's log, lock, socket, snapshot and
             timeline) is the user's alone: directories 0700, files 0600
  records    a finished job's records leave the root: the job directory at
             once, its trash (removed by a detached rm, so the end of the
             run does not wait for the file system) soon after; trash an
             earlier run left (its rm killed) is removed by the next run

Usage: python3 -m tests.correctness.run_summary
Ends with "run summary: N passed, N failed".
"""
import os
import re
import stat
import subprocess
import sys
import time

from tests.lib.check import Suite, check, fail
from tests.lib.mpi import mpi_env
from tests.lib.paralog import jobs_left, paralog_run
from tests.lib.paths import BIN, PY
from tests.lib.proc import kill_tree, run

ENV = mpi_env()

BYPASS = r'''
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)
os.write(fd, b"through capture\n")
libc.syscall(1, fd, b"past capture\n", 13)  # write(2), not through any wrapper
try:
    os.close(fd)
except OSError:
    pass  # the program ignores the error, as a shell redirection would
'''

ABORT = r'''
import sys
from mpi4py import MPI
fh = MPI.File.Open(MPI.COMM_WORLD, sys.argv[1], MPI.MODE_CREATE | MPI.MODE_WRONLY)
fh.Write_at(MPI.COMM_WORLD.rank * 100000, bytes([65 + MPI.COMM_WORLD.rank]) * 100000)
fh.Sync()
MPI.COMM_WORLD.Barrier()
MPI.COMM_WORLD.Abort(7)
'''


def run_in(work, cmd, mpi):
    prefix = work / "p"
    prefix.mkdir()
    return paralog_run(work / "l", prefix, cmd(prefix), mpi=mpi, env=ENV, check=False, timeout=120)


def case_refused(work):
    r = run_in(work, lambda p: [PY, "-c", BYPASS, p / "f.txt"], "none")
    out = r.stdout + r.stderr
    check(r.returncode != 0, f"paralog run exited 0: {out[-500:]}")
    check(re.search(r"REFUSED: .*f\.txt", out), f"no line naming the refused file: {out[-500:]}")


def case_abort(work):
    r = run_in(work, lambda p: ["mpirun.openmpi", "-n", "2", PY, "-c", ABORT, p / "out.dat"], "openmpi")
    out = r.stdout + r.stderr
    check(r.returncode != 0, "paralog run exited 0 for an aborted job")
    m = re.search(r"captured\s+(\S+) (\S+) by (\d+) process", out)
    check(m, f"no 'captured' line in the summary: {out[-500:]}")
    check(float(m.group(1)) != 0 and m.group(3) != "0", f"the summary counted nothing: {m.group(0)}")


def case_status(work):
    prefix, local = work / "p", work / "l"
    prefix.mkdir()
    env = {k: v for k, v in ENV.items() if k != "PARALOG_JOB"}
    proc = subprocess.Popen([str(BIN), "run", "--prefix", str(prefix), "--local", str(local), "--mpi", "none", "--",
                             "/bin/bash", "-c", f"sleep 4; echo hi > {prefix}/x"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        deadline, last = time.time() + 3.5, None
        while time.time() < deadline:
            last = run([BIN, "status", "--local", local, "--once"], env=env, check=False, timeout=30)
            if last.returncode == 0 and "job run-" in last.stdout:
                return
            time.sleep(0.2)
        fail(f"status did not find run's server: {last.returncode}: {last.stdout}{last.stderr}")
    finally:
        try:
            proc.communicate(timeout=60)
        finally:
            kill_tree(proc)


def case_private(work):
    prefix, local = work / "p", work / "l"
    prefix.mkdir()
    proc = subprocess.Popen([str(BIN), "run", "--prefix", str(prefix), "--local", str(local), "--mpi", "none",
                             "--job", "priv", "--", "/bin/bash", "-c",
                             f"echo data > {prefix}/x; sync; sleep 3; echo more >> {prefix}/x"],
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        deadline, seen = time.time() + 2.5, {}
        while time.time() < deadline:
            for p in [local, *local.rglob("*")]:
                try:
                    st = os.lstat(p)
                except FileNotFoundError:
                    continue  # removed by the drain meanwhile
                if not stat.S_ISLNK(st.st_mode):
                    seen[p] = st.st_mode
            time.sleep(0.2)
        kinds = {".paralog-server-priv.log", ".paralog-server-priv.sock", "path"}
        names = {p.name for p in seen}
        check(kinds <= names, f"the run's files were not all seen: {sorted(kinds - names)}")
        loose = [f"{p.relative_to(local)} {oct(m & 0o777)}" for p, m in seen.items()
                 if m & 0o077 and p != local]
        check(not loose, f"node-local entries others can read or write: {loose[:6]}")
        return f"{len(seen)} entries, none readable by others"
    finally:
        try:
            proc.communicate(timeout=60)
        finally:
            kill_tree(proc)


def case_records(work):
    prefix, local = work / "p", work / "l"
    prefix.mkdir()
    left = local / ".paralog-trash-earlier" / "records" / "f-0" / "g000001"
    left.mkdir(parents=True, mode=0o700)
    (left / "e0000000001.data").write_bytes(b"x" * 4096)
    os.chmod(local, 0o700)
    script = f"for i in 1 2 3; do head -c 3000000 /dev/urandom > {prefix}/out.$i; done"
    paralog_run(local, prefix, ["/bin/bash", "-c", script], mpi="none", env=ENV, timeout=120)
    check(not jobs_left(local), f"job directories left after the run: {jobs_left(local)}")
    deadline = time.time() + 20
    trash = None
    while time.time() < deadline:
        trash = sorted(p.name for p in local.iterdir() if p.name.startswith(".paralog-trash-"))
        if not trash:
            break
        time.sleep(0.1)
    check(not trash, f"trash still under the root 20 s after the run: {trash}")
    return "job directory gone at the end, its trash and an earlier run's soon after"


def main():
    return Suite("run summary").run([("refused epoch makes run fail", case_refused),
                                     ("aborted ranks still counted", case_abort),
                                     ("status finds run's server without --job", case_status),
                                     ("node-local files are private", case_private),
                                     ("finished records removed in the background", case_records)])


if __name__ == "__main__":
    sys.exit(main())
