#!/usr/bin/python3
"""Two capture invariants that byte comparisons alone cannot show.

1. The read-avoiding settings are in force (docs/capture.md, "Reads while
   writing"): for each MPI mode, a noncontiguous collective write with holes
   (tests/mpi noncontig_holes) runs under capture with PARALOG_VERBOSE=1; the
   MPI library must report romio_cb_write=disable and romio_ds_write=disable
   (ROMIO) or run with OMPI_MCA_fcoll=individual (OMPIO), and no rank may
   read back a byte it did not write (zero reads answered from the committed
   view: no read-modify-write happened). Control: a program that reads a
   file back after reopening it does report such reads, so the counter works.
2. The sentinel (invariant 5): a write that bypasses capture (a raw write
   syscall on the captured descriptor) makes the next consistency point fail
   with EIO and one stderr line, and its bytes never enter a committed epoch.

Prints one line per case and "N passed, N failed".
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "target/release/paralog"
RUN_DIRECT = ROOT / "tests/mpi/run_direct.sh"
MODES = {"mpich": ("mpich", "romio"), "ompio": ("openmpi", "ompio"), "romio321": ("openmpi", "romio321")}


def capture_env(flavour, prefix, local):
    out = subprocess.run(
        [BIN, "env", "--mpi", flavour, "--prefix", prefix, "--local", local, "--job", "inv"],
        text=True, capture_output=True, check=True,
    ).stdout
    env = dict(os.environ, PARALOG_VERBOSE="1")
    for line in out.splitlines():
        k, _, v = line.removeprefix("export ").partition("=")
        env[k] = v.strip("'")
    return env


def view_reads(stderr, name):
    return [int(n) for n in re.findall(rf"{re.escape(name)}: (\d+) reads answered from the committed view", stderr)]


def case_hints(mode, work):
    flavour, io = MODES[mode]
    prefix = work / "pfs"
    prefix.mkdir()
    env = capture_env(flavour, prefix, work / "local")
    r = subprocess.run([RUN_DIRECT, flavour, io, "noncontig_holes", prefix], env=env, text=True, capture_output=True)
    if r.returncode != 0:
        return f"noncontig_holes failed under capture: {r.stderr[-500:]}"
    hints = re.findall(r"noncontig_holes\.dat: hints in force: (.*)", r.stderr)
    if len(hints) != 4:
        return f"expected the hints from 4 ranks, got {hints}"
    for h in hints:
        if io == "ompio":
            if "OMPI_MCA_fcoll=individual" not in h:
                return f"OMPIO without fcoll=individual: {h}"
        elif "romio_cb_write=disable romio_ds_write=disable" not in h:
            return f"ROMIO hints not in force: {h}"
    reads = view_reads(r.stderr, "noncontig_holes.dat")
    if len(reads) != 4 or any(reads):
        return f"ranks read back bytes they did not write (read-modify-write): {reads}"
    # Control: reading a file back after reopening it is counted.
    other = work / "other"
    other.mkdir()
    plain = work / "input.bin"
    plain.write_bytes(b"x" * 4096)
    r = subprocess.run([RUN_DIRECT, flavour, io, "outside_prefix", prefix, other, plain], env=env, text=True, capture_output=True)
    if r.returncode != 0:
        return f"outside_prefix failed under capture: {r.stderr[-500:]}"
    if not any(view_reads(r.stderr, "inside.dat")):
        return "the control (a read-back after reopen) counted no reads: the counter does not work"
    return None


def case_sentinel(work):
    prefix, local = work / "pfs", work / "local"
    prefix.mkdir()
    target = prefix / "ckpt.bin"
    code = f"""
import ctypes, os
fd = os.open({str(target)!r}, os.O_CREAT | os.O_WRONLY, 0o644)
os.write(fd, b"committed")
os.fsync(fd)
os.write(fd, b"-captured")
libc = ctypes.CDLL(None, use_errno=True)
print("raw", libc.syscall(1, fd, b"BYPASS", 6))   # SYS_write, past every wrapper
try:
    os.fsync(fd)
    print("fsync ok")
except OSError as e:
    print("fsync errno", e.errno)
try:
    os.close(fd)
    print("close ok")
except OSError as e:
    print("close errno", e.errno)
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARALOG_")}
    env.update(
        LD_PRELOAD=str(ROOT / "target/release/libparalog_capture.so"),
        PARALOG_PREFIX=str(prefix), PARALOG_LOCAL=str(local), PARALOG_JOB="inv",
    )
    r = subprocess.run(["/usr/bin/python3", "-c", code], env=env, text=True, capture_output=True, timeout=60)
    if "raw 6" not in r.stdout:
        return f"the raw write did not happen: {r.stdout}{r.stderr}"
    if "fsync errno 5" not in r.stdout or "close errno 5" not in r.stdout:
        return f"the consistency points after the bypass did not fail with EIO: {r.stdout}"
    if "6 bytes reached" not in r.stderr or "without passing through capture" not in r.stderr:
        return f"no stderr line about the bypass: {r.stderr}"
    out = work / "got"
    m = subprocess.run([BIN, "materialize", "--local", local, target, out], text=True, capture_output=True)
    if m.returncode != 0:
        return f"materialize failed: {m.stderr}"
    if out.read_bytes() != b"committed":
        return f"the committed file must be the epoch before the bypass, got {out.read_bytes()!r}"
    return None


def main():
    cases = [(f"read-avoiding settings in force, {m}", (lambda m=m: lambda w: case_hints(m, w))()) for m in MODES]
    cases.append(("sentinel catches a write that bypassed capture", case_sentinel))
    passed = failed = 0
    for name, fn in cases:
        work = Path(tempfile.mkdtemp(prefix="paralog-inv-"))
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
    print(f"invariants: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
