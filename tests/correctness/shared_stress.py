#!/usr/bin/python3
"""Concurrent writers of one shared description, many times (issue 13):
a shell's stdout redirected into the prefix (`{ ...; } > out`) and, for
each of LOOPS, three background jobs writing through it at once (`make -j`
style): a loop that runs `/bin/echo` (glibc's stdio at exit, past the
wrappers: harvested from the placeholder) LINES times and every fifth time
a `python3` whose `sys.stdout.write` goes through capture's write; a
subshell writing 10 x LINES lines with the builtin `echo` (past the
wrappers, as fast as it can); a python process writing 10 x LINES lines
with `os.write` (through capture, as fast as it can). Each line is one
write(2) (`print` makes two, which interleave with other writers' lines
even without paralog). Each run goes under `paralog run --mpi none`; after
the drain the file must hold every line exactly once, in any order, and
nothing else (no zeros, no duplicate, no torn line).

Short (`make test`, in tests/correctness/posix_programs.py): one run.
Long, by hand: `make test-shared-stress` (RUNS=30 by default).

Usage: python3 -m tests.correctness.shared_stress [--runs N] [--loops N] [--lines N]
       [--remote separate|prefix] [--bin PARALOG] [--keep]
Ends with "shared stress (...): N passed, N failed", and the totals of
lines lost, duplicated and foreign over all runs.
"""
import argparse
import sys

from tests.lib import paralog
from tests.lib.check import Suite
from tests.lib.shared_writers import TOTALS, one_run

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--loops", type=int, default=4)
    ap.add_argument("--lines", type=int, default=100)
    ap.add_argument("--remote", choices=["separate", "prefix"], default="separate")
    ap.add_argument("--append", action="store_true", help="`>>` onto a file that already holds lines")
    ap.add_argument("--bin", help="another paralog binary (its capture library beside it), e.g. an older build")
    ap.add_argument("--keep", action="store_true")
    o = ap.parse_args()
    if o.bin:
        paralog.BIN = o.bin
    suite = Suite(f"shared stress ({o.remote} remote{', >>' if o.append else ''})", keep=o.keep)
    cases = [(f"run {n + 1}/{o.runs}: {o.loops} loops x {o.lines} x (builtin echo, /bin/echo, python)",
              lambda w: one_run(w, o.loops, o.lines, o.remote == "separate", append=o.append)) for n in range(o.runs)]
    rc = suite.run(cases)
    print(f"shared stress totals: {TOTALS['runs']} runs, {TOTALS['lines']} lines, {TOTALS['lost']} lost, "
          f"{TOTALS['duplicated']} duplicated, {TOTALS['foreign']} foreign", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
