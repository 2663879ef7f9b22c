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


def script(out, loops, lines, append=False):
    """The shell command: LOOPS background loops writing into `out`
    (`>`, or `>>` when `append`)."""
    launched = (f"for i in $(seq 1 {lines}); do /bin/echo \"e $k $i\"; if [ $((i % 5)) = 0 ]; then "
                f"{PY} -c \"import sys; sys.stdout.write('p $k $i\\\\n')\"; fi; done")
    builtin = f"for i in $(seq 1 {10 * lines}); do echo \"b $k $i\"; done"
    bulk = f"{PY} -c \"import os; [os.write(1, b'w $k %d\\\\n' % i) for i in range(1, {10 * lines + 1})]\""
    redirect = ">>" if append else ">"
    return f"{{ for k in $(seq 1 {loops}); do ( {launched} ) & ( {builtin} ) & {bulk} & done; wait; }} {redirect} {out}"


# What an appending run's file holds before the script appends to it.
BEFORE = "".join(f"old {i}\n" for i in range(1, 101))


def expected(loops, lines, append=False):
    """Every line the script writes, once (and the lines it appends to)."""
    ks = range(1, loops + 1)
    before = set(BEFORE.splitlines()) if append else set()
    return before | {f"e {k} {i}" for k in ks for i in range(1, lines + 1)} | \
        {f"p {k} {i}" for k in ks for i in range(5, lines + 1, 5)} | \
        {f"{w} {k} {i}" for k in ks for i in range(1, 10 * lines + 1) for w in "bw"}


def tally(data, loops, lines, append=False):
    """(lost, duplicated, foreign) lines of `data` against the expected set;
    an appended file must also begin with what it held."""
    want = expected(loops, lines, append)
    got = collections.Counter(data.decode(errors="replace").split("\n"))
    if data.endswith(b"\n"):
        got[""] -= 1
    got = +got
    lost = sorted(want - set(got))
    dup = sorted(l for l, n in got.items() if l in want and n > 1)
    foreign = sorted(l for l in got if l not in want)
    if append and not data.startswith(BEFORE.encode()):
        foreign.append(f"(the file no longer begins with its {len(BEFORE)} bytes)")
    return lost, dup, foreign


TOTALS = collections.Counter()


def one_run(work, loops, lines, separate, direct=False, append=False):
    """One run under paralog (direct: first one without it, whose lines
    must be the same; append: `>>` onto a file that holds BEFORE); raises
    Failed on any lost, duplicated or foreign line."""
    prefix, local = work / "prefix", work / "local"
    remote = work / "remote" if separate else prefix
    prefix.mkdir()
    remote.mkdir(exist_ok=True)
    want = expected(loops, lines, append)
    if direct:
        d = work / "direct"
        d.mkdir()
        if append:
            (d / "out.txt").write_text(BEFORE)
        run(["/bin/bash", "-c", script(d / "out.txt", loops, lines, append)], env=ENV, timeout=300)
        got = (d / "out.txt").read_bytes()
        check(tally(got, loops, lines, append) == ([], [], []), "the direct run did not write every line once")
    if append:
        (remote / "out.txt").write_text(BEFORE)
    p = paralog_run(local, prefix, ["/bin/bash", "-c", script(prefix / "out.txt", loops, lines, append)],
                    remote=remote if separate else None, env=ENV, check=False, timeout=600)
    check(p.returncode == 0, f"paralog run exited {p.returncode}: {(p.stdout + p.stderr)[-800:]}")
    data = (remote / "out.txt").read_bytes()
    lost, dup, foreign = tally(data, loops, lines, append)
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
