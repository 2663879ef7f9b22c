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
import collections
import sys

from tests.lib.check import Suite, check
from tests.lib.mpi import mpi_env
from tests.lib import paralog
from tests.lib.paralog import paralog_run
from tests.lib.paths import PY
from tests.lib.proc import run

ENV = mpi_env()


def script(out, loops, lines):
    """The shell command: LOOPS background loops writing into `out`."""
    launched = (f"for i in $(seq 1 {lines}); do /bin/echo \"e $k $i\"; if [ $((i % 5)) = 0 ]; then "
                f"{PY} -c \"import sys; sys.stdout.write('p $k $i\\\\n')\"; fi; done")
    builtin = f"for i in $(seq 1 {10 * lines}); do echo \"b $k $i\"; done"
    bulk = f"{PY} -c \"import os; [os.write(1, b'w $k %d\\\\n' % i) for i in range(1, {10 * lines + 1})]\""
    return f"{{ for k in $(seq 1 {loops}); do ( {launched} ) & ( {builtin} ) & {bulk} & done; wait; }} > {out}"


def expected(loops, lines):
    """Every line the script writes, once."""
    ks = range(1, loops + 1)
    return {f"e {k} {i}" for k in ks for i in range(1, lines + 1)} | \
        {f"p {k} {i}" for k in ks for i in range(5, lines + 1, 5)} | \
        {f"{w} {k} {i}" for k in ks for i in range(1, 10 * lines + 1) for w in "bw"}


def tally(data, loops, lines):
    """(lost, duplicated, foreign) lines of `data` against the expected set."""
    want = expected(loops, lines)
    got = collections.Counter(data.decode(errors="replace").split("\n"))
    if data.endswith(b"\n"):
        got[""] -= 1
    got = +got
    lost = sorted(want - set(got))
    dup = sorted(l for l, n in got.items() if l in want and n > 1)
    foreign = sorted(l for l in got if l not in want)
    return lost, dup, foreign


TOTALS = collections.Counter()


def one_run(work, loops, lines, separate, direct=False):
    """One run under paralog (direct: first one without it, whose lines
    must be the same); raises Failed on any lost, duplicated or foreign
    line."""
    prefix, local = work / "prefix", work / "local"
    remote = work / "remote" if separate else prefix
    prefix.mkdir()
    remote.mkdir(exist_ok=True)
    want = expected(loops, lines)
    if direct:
        d = work / "direct"
        d.mkdir()
        run(["/bin/bash", "-c", script(d / "out.txt", loops, lines)], env=ENV, timeout=300)
        got = (d / "out.txt").read_bytes()
        check(tally(got, loops, lines) == ([], [], []), "the direct run did not write every line once")
    p = paralog_run(local, prefix, ["/bin/bash", "-c", script(prefix / "out.txt", loops, lines)],
                    remote=remote if separate else None, env=ENV, check=False, timeout=600)
    check(p.returncode == 0, f"paralog run exited {p.returncode}: {(p.stdout + p.stderr)[-800:]}")
    data = (remote / "out.txt").read_bytes()
    lost, dup, foreign = tally(data, loops, lines)
    TOTALS["runs"] += 1
    TOTALS["lines"] += len(want)
    TOTALS["lost"] += len(lost)
    TOTALS["duplicated"] += len(dup)
    TOTALS["foreign"] += len(foreign)
    check(not (lost or dup or foreign),
          f"{len(lost)} lost {lost[:5]}, {len(dup)} duplicated {dup[:5]}, "
          f"{len(foreign)} foreign {[l[:40] for l in foreign[:3]]} of {len(want)} lines")
    check(not (separate and (prefix / "out.txt").exists()), "out.txt was written to the prefix past capture")
    return f"{len(want)} lines"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--loops", type=int, default=4)
    ap.add_argument("--lines", type=int, default=100)
    ap.add_argument("--remote", choices=["separate", "prefix"], default="separate")
    ap.add_argument("--bin", help="another paralog binary (its capture library beside it), e.g. an older build")
    ap.add_argument("--keep", action="store_true")
    o = ap.parse_args()
    if o.bin:
        paralog.BIN = o.bin
    suite = Suite(f"shared stress ({o.remote} remote)", keep=o.keep)
    cases = [(f"run {n + 1}/{o.runs}: {o.loops} loops x {o.lines} x (builtin echo, /bin/echo, python)",
              lambda w: one_run(w, o.loops, o.lines, o.remote == "separate")) for n in range(o.runs)]
    rc = suite.run(cases)
    print(f"shared stress totals: {TOTALS['runs']} runs, {TOTALS['lines']} lines, {TOTALS['lost']} lost, "
          f"{TOTALS['duplicated']} duplicated, {TOTALS['foreign']} foreign", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
