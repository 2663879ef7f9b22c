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

Usage: python3 -m tests.capture.invariants
Prints one line per case and "invariants: N passed, N failed".
"""

import os
import re
import sys

from tests.lib.check import Suite, check
from tests.lib.mpi import MODES, run_direct
from tests.lib.paralog import capture_env, clean_env
from tests.lib.paths import BIN, CAPTURE_LIB, PY
from tests.lib.proc import run


def view_reads(stderr, name):
    return [int(n) for n in re.findall(rf"{re.escape(name)}: (\d+) reads answered from the committed view", stderr)]


def case_hints(mode, work):
    flavour, io = MODES[mode]
    prefix = work / "pfs"
    prefix.mkdir()
    env = capture_env(prefix, work / "local", flavour, "inv", base=dict(os.environ, PARALOG_VERBOSE="1"))
    r = run_direct(flavour, io, "noncontig_holes", prefix, env=env, check=False)
    check(r.returncode == 0, f"noncontig_holes failed under capture: {r.stderr[-500:]}")
    hints = re.findall(r"noncontig_holes\.dat: hints in force: (.*)", r.stderr)
    check(len(hints) == 4, f"expected the hints from 4 ranks, got {hints}")
    for h in hints:
        if io == "ompio":
            check("OMPI_MCA_fcoll=individual" in h, f"OMPIO without fcoll=individual: {h}")
        else:
            check("romio_cb_write=disable romio_ds_write=disable" in h, f"ROMIO hints not in force: {h}")
    reads = view_reads(r.stderr, "noncontig_holes.dat")
    check(len(reads) == 4 and not any(reads), f"ranks read back bytes they did not write (read-modify-write): {reads}")
    # Control: reading a file back after reopening it is counted.
    other = work / "other"
    other.mkdir()
    plain = work / "input.bin"
    plain.write_bytes(b"x" * 4096)
    r = run_direct(flavour, io, "outside_prefix", prefix, other, plain, env=env, check=False)
    check(r.returncode == 0, f"outside_prefix failed under capture: {r.stderr[-500:]}")
    check(any(view_reads(r.stderr, "inside.dat")),
          "the control (a read-back after reopen) counted no reads: the counter does not work")


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
    env = clean_env({"LD_PRELOAD": str(CAPTURE_LIB), "PARALOG_PREFIX": str(prefix), "PARALOG_LOCAL": str(local),
                     "PARALOG_JOB": "inv"}, drop=("PARALOG_",))
    r = run([PY, "-c", code], env=env, check=False, timeout=60)
    check("raw 6" in r.stdout, f"the raw write did not happen: {r.stdout}{r.stderr}")
    check("fsync errno 5" in r.stdout and "close errno 5" in r.stdout,
          f"the consistency points after the bypass did not fail with EIO: {r.stdout}")
    check("6 bytes reached" in r.stderr and "without passing through capture" in r.stderr,
          f"no stderr line about the bypass: {r.stderr}")
    out = work / "got"
    m = run([BIN, "materialize", "--local", local, target, out], check=False)
    check(m.returncode == 0, f"materialize failed: {m.stderr}")
    check(out.read_bytes() == b"committed",
          f"the committed file must be the epoch before the bypass, got {out.read_bytes()!r}")


def main():
    cases = [(f"read-avoiding settings in force, {m}", (lambda m=m: lambda w: case_hints(m, w))()) for m in MODES]
    cases.append(("sentinel catches a write that bypassed capture", case_sentinel))
    return Suite("invariants").run(cases)


if __name__ == "__main__":
    sys.exit(main())
