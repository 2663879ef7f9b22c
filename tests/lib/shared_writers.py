"""Concurrent writers of one shared description (issue 13): the shell
script that makes them, and one run of it under `paralog run` checked line
by line. Used by tests/correctness/posix_programs.py (one short run) and
tests/correctness/shared_stress.py (many, by hand)."""
import collections

from tests.lib.check import check
from tests.lib.mpi import mpi_env
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
