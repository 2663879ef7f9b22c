#!/usr/bin/python3
"""The streams' C API and Python module (docs/streams.md, issue 17): real
MPICH and Open MPI ranks producing through paralog/stream.h and its
collective forms, Python producers and readers through `paralog.stream`
(PYTHONPATH=crates/stream-c/python, as the docs say), a real `paralog
stream drain --follow` in between. Cases:

  C ranks, mpich / openmpi
                  4 MPICH or 3 Open MPI ranks (api_producer.c, collective
                  open and flush) x 3 partitions x 5,000 events while a
                  Python reader of group G follows the stream as the drain
                  publishes it (next with a timeout): it gets every event;
                  per producer the sequence numbers are exactly 0..4,999,
                  strictly increasing per partition, offsets contiguous
                  from 0, each payload its event's; the group's committed
                  offsets leave lag 0, and reading the group again gets nothing
  C group, mpich / openmpi
                  a reader group over a communicator (paralog_stream_join_all,
                  next_all, group_ack, leave_all; rank 0 the read proxy): 3
                  ranks read 3 ranks' 3 x 2,000 events round-robin,
                  acknowledging those below offset 1,000: every event once
                  across the ranks, each rank about a third, the group's
                  committed offsets exactly 1,000 per partition; a second
                  run (by key, acknowledging all) gets exactly the rest,
                  each key's events on one rank, and leaves lag 0
  paralog run     2 MPICH ranks under `paralog run` opening the stream
                  with no directory (PARALOG_LOCAL, set by paralog run):
                  every event is under the prefix when it returns
  python          two mpi4py ranks (collective) and one lone process
                  (partition by key) producing; a reader from earliest gets
                  every event as above, and events with one key share one
                  partition; a GroupReader over 2 mpi4py ranks (by key)
                  gets every event once between them, each key on one
                  rank, and leaves lag 0
  bad input       unknown stream (join), a partition count that differs
                  on reopen (C and Python), ranks asking for different
                  counts (every rank refused), an event past the limit (C
                  and Python), acknowledging what was never handed out: the
                  code and a message naming the stream and the numbers

Usage: python3 -m tests.stream.api [--only SUBSTRING] [--keep]
Ends with "stream-api: N passed, N failed".
"""
import json
import os
import re
import subprocess
import sys
import time
from collections import defaultdict

from tests.lib.check import Suite, check, suite_options
from tests.lib.mpi import compile_program, launcher, mpi_env, rank_reports
from tests.lib.paralog import paralog_run
from tests.lib.paths import BIN, PY, RELEASE, ROOT, TARGET
from tests.lib.proc import run
from tests.lib.streams import check_events, drain, follow_drain, stop

STREAM = "tele"
PYPATH = ROOT / "crates/stream-c/python"
INCLUDE = ROOT / "crates/stream-c/include"
SRC = ROOT / "tests/stream/api_producer.c"


def program(flavour):
    """api_producer.c built by a flavour's mpicc against the libraries."""
    for lib in ("libparalog_stream.so", f"libparalog_stream_mpi_{flavour}.so"):
        check((RELEASE / lib).exists(), f"{RELEASE / lib} is missing: run `make shims`")
    return compile_program(f"mpicc.{flavour}", SRC, TARGET / "stream-tests" / flavour / "api_producer",
                           "-O2", "-Wall", "-Werror", f"-I{INCLUDE}",
                           libs=[f"-L{RELEASE}", f"-lparalog_stream_mpi_{flavour}", "-lparalog_stream",
                                 f"-Wl,-rpath,{RELEASE}"])


def py_env():
    return mpi_env({"PYTHONPATH": str(PYPATH)})


def client(*args, mpi=None):
    """api_client.py (as a user's program), under mpirun.openmpi -n `mpi` if given."""
    cmd = [PY, "-m", "tests.stream.api_client", *args]
    if mpi:
        cmd = launcher("openmpi", mpi) + cmd
    return run(cmd, env=py_env(), cwd=ROOT, timeout=300)


def reader(remote, group, count, timeout=20):
    return subprocess.Popen([PY, "-m", "tests.stream.api_client", "read", str(remote), STREAM, group, str(count),
                             str(timeout)], env=py_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def producers_of(out):
    """The ids the producers printed (found anywhere: mpirun merges the
    ranks' outputs, and a line may land inside another one)."""
    return set(re.findall(r"producer ([0-9a-f]{16})\b", out))


def case_c(flavour, np):
    def case(work):
        exe = program(flavour)
        local, remote = work / "local", work / "remote"
        remote.mkdir()
        events = 5000
        r = run(launcher(flavour, np) + [exe, "produce", local, STREAM, "0", "1", "1"], env=mpi_env(), check=False,
                timeout=120)
        bad = rank_reports(r.stdout, r" (?=code \d+: )")
        check(r.returncode != 0 and sorted(bad) == list(range(np))
              and all(x.startswith("code 2:") and "0 partitions" in x for x in bad.values()),
              f"0 partitions: {r.returncode} {r.stdout[-300:]}")
        check(not list(local.glob(".paralog-streams/*/*.seg")), "a refused open left a segment")
        d = follow_drain(local, remote)
        prod = subprocess.Popen([str(c) for c in launcher(flavour, np) + [exe, "produce", local, STREAM, "3",
                                                                          str(events), "250"]],
                                env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        # The reader joins as soon as the drain has published the stream,
        # while the ranks still append: it follows the watermark.
        record = remote / ".paralog-streams" / STREAM / "stream"
        for _ in range(3000):
            if record.exists() or prod.poll() is not None:
                break
            time.sleep(0.01)
        during = prod.poll() is None
        rd = reader(remote, "G", np * events)
        out, err = rd.communicate(timeout=300)
        pout, perr = prod.communicate(timeout=300)
        stop(d)
        check(prod.returncode == 0, f"ranks: {prod.returncode} {pout[-300:]} {perr[-300:]}")
        pids = producers_of(pout)
        check(len(pids) == np, f"{np} ranks printed {len(pids)} producers: {pout[:300]}")
        check(rd.returncode == 0, f"reader: {err[-500:]}")
        got = [json.loads(x) for x in out.splitlines()]
        check_events(sorted(got, key=lambda e: (e["partition"], e["offset"])), {p: events for p in pids})
        check(len(got) == np * events, f"{len(got)} events read")
        desc = json.loads(run([BIN, "stream", "describe", f"{remote}/{STREAM}", "--json"]).stdout)
        check([g["lag"] for g in desc["groups"]] == [0], f"group lag after reading: {desc['groups']}")
        again = reader(remote, "G", 1, timeout=0.5).communicate(timeout=60)[0]
        check(again == "", f"group G read again after committing: {again[:200]}")
        follow = "joined while the ranks appended" if during else "joined after the ranks ended (a loaded machine)"
        return f"{np} ranks, {len(got)} events, {desc['round']} rounds, the reader {follow}"
    return case


def group_read(exe, flavour, np, remote, spread, ack_below, out, group="GR"):
    """api_producer groupread: the events each rank got (dicts), by rank."""
    r = run(launcher(flavour, np) + [exe, "groupread", remote, STREAM, group, str(spread), str(ack_below), out],
            env=mpi_env(), check=False, timeout=300)
    check(r.returncode == 0, f"groupread: {r.returncode} {r.stdout[-500:]} {r.stderr[-500:]}")
    by_rank = {}
    for k in range(np):
        evs = []
        for line in (out.parent / f"{out.name}.{k}").read_text().splitlines():
            part, off, prod, seq, key, payload = line.split(" ", 5)
            evs.append({"partition": int(part), "offset": int(off), "producer": prod, "seq": int(seq),
                        "key": key, "payload": payload})
        by_rank[k] = evs
    return by_rank


def case_group(flavour):
    def case(work):
        exe = program(flavour)
        local, remote = work / "local", work / "remote"
        remote.mkdir()
        np, events, half = 3, 2000, 1000
        r = run(launcher(flavour, np) + [exe, "produce", local, STREAM, "3", str(events), "500"], env=mpi_env(),
                timeout=300)
        pids = producers_of(r.stdout)
        drain(local, remote)
        first = group_read(exe, flavour, np, remote, 0, half, work / "first")
        every = sorted((e for evs in first.values() for e in evs), key=lambda e: (e["partition"], e["offset"]))
        check_events(every, {p: events for p in pids})
        total = len(every)
        counts = sorted(len(v) for v in first.values())
        check(counts[0] >= total // np - np, f"round-robin over {np} ranks handed out {counts}")
        desc = json.loads(run([BIN, "stream", "describe", f"{remote}/{STREAM}", "--json"]).stdout)
        group = [g for g in desc["groups"] if g["group"] == "GR"]
        check(group and group[0]["offsets"] == [half] * 3 and group[0]["lag"] == total - 3 * half,
              f"after acknowledging offsets below {half}: {desc['groups']}")
        second = group_read(exe, flavour, np, remote, 1, 1 << 60, work / "second")
        rest = sorted((e for evs in second.values() for e in evs), key=lambda e: (e["partition"], e["offset"]))
        want = [(e["partition"], e["offset"]) for e in every if e["offset"] >= half]
        check([(e["partition"], e["offset"]) for e in rest] == want,
              f"the second run got {len(rest)} events, {len(want)} were not acknowledged")
        # By key over the whole stream (another group, from the start): the
        # keyed events (rank 1's) may all sit below `half`, where the cut
        # put them, and the second run above would then hold none.
        keyed = group_read(exe, flavour, np, remote, 1, 1 << 60, work / "keyed", group="GK")
        check(sum(len(v) for v in keyed.values()) == total, f"group GK got {keyed and len(keyed)} ranks' events")
        ranks_of_key = defaultdict(set)
        for k, evs in keyed.items():
            for e in evs:
                if e["key"] != "-":
                    ranks_of_key[e["key"]].add(k)
        check(ranks_of_key and all(len(v) == 1 for v in ranks_of_key.values()),
              f"by key, a key's events went to several ranks: {dict(ranks_of_key)}")
        desc = json.loads(run([BIN, "stream", "describe", f"{remote}/{STREAM}", "--json"]).stdout)
        check([g["lag"] for g in desc["groups"] if g["group"] == "GR"] == [0], f"lag at the end: {desc['groups']}")
        return f"{total} events over {np} ranks {counts}, then {len(rest)} again, {len(ranks_of_key)} keys"
    return case


def case_paralog_run(work):
    """The docs' example: MPI ranks appending under `paralog run`, read
    from the prefix when it returns."""
    exe = program("mpich")
    local, prefix = work / "local", work / "prefix"
    prefix.mkdir()
    r = paralog_run(local, prefix, launcher("mpich", 2) + [exe, "produce", "-", STREAM, "3", "3000", "300"],
                    mpi="mpich", env=mpi_env())
    pids = producers_of(r.stdout)
    check(len(pids) == 2, f"ranks printed {r.stdout[:300]}")
    check("MISSED" not in r.stdout + r.stderr, f"stream files taken for files written past capture: {r.stderr[-500:]}")
    got = [json.loads(x) for x in run([BIN, "stream", "cat", f"{prefix}/{STREAM}", "--from", "earliest",
                                       "--json"]).stdout.splitlines()]
    check_events(got, {p: 3000 for p in pids})
    return f"{len(got)} events under the prefix when paralog run returned"


def case_python(work):
    local, remote = work / "local", work / "remote"
    remote.mkdir()
    a = client("produce", local, STREAM, "4", "3000", "100", "--mpi", mpi=2).stdout
    b = client("produce", local, STREAM, "4", "2000", "300", "--key").stdout
    pids = producers_of(a) | producers_of(b)
    check(len(pids) == 3, f"producers: {a[:200]} {b[:200]}")
    keyed = producers_of(b).pop()
    run([BIN, "stream", "drain", "--local", local, "--remote", remote])
    out = reader(remote, "P", 8000, timeout=1).communicate(timeout=120)[0]
    got = [json.loads(x) for x in out.splitlines()]
    flushed = {p: (2000 if p == keyed else 3000) for p in pids}
    check_events(sorted(got, key=lambda e: (e["partition"], e["offset"])), flushed)
    parts = defaultdict(set)
    for e in got:
        if e["producer"] == keyed:
            parts[e["key"]].add(e["partition"])
    check(len(parts) == 5 and all(len(v) == 1 for v in parts.values()), f"keys over partitions: {dict(parts)}")
    client("groupread", remote, STREAM, "Q", "key", work / "q", mpi=2)
    by_rank = [[json.loads(x) for x in (work / f"q.{k}").read_text().splitlines()] for k in range(2)]
    both = sorted(by_rank[0] + by_rank[1], key=lambda e: (e["partition"], e["offset"]))
    check_events(both, flushed)
    keys = defaultdict(set)
    for k, evs in enumerate(by_rank):
        for e in evs:
            if e["key"]:
                keys[e["key"]].add(k)
    check(len(keys) == 5 and all(len(v) == 1 for v in keys.values()), f"a key's events on several ranks: {dict(keys)}")
    desc = json.loads(run([BIN, "stream", "describe", f"{remote}/{STREAM}", "--json"]).stdout)
    check([g["lag"] for g in desc["groups"] if g["group"] == "Q"] == [0], f"group Q's lag: {desc['groups']}")
    return f"{len(got)} events; a group of 2 mpi4py ranks got {len(by_rank[0])} + {len(by_rank[1])}"


def case_bad(work):
    local, remote = work / "local", work / "remote"
    remote.mkdir()
    exe = program("mpich")
    said = []

    def refused(cmd, code, *want, env=None, py=False):
        r = run(cmd, env=env or mpi_env(), cwd=ROOT, check=False, timeout=120)
        lines = [x for x in r.stdout.splitlines() if x.startswith(("code", "rank"))]
        check(lines, f"{cmd[-3:]}: no error: {r.stdout[-300:]} {r.stderr[-300:]}")
        for x in lines:
            check(f"code {code}:" in x and all(w in x for w in want), f"{cmd[-3:]}: {x} (wanted code {code}, {want})")
        check(py or r.returncode != 0, f"{cmd[-3:]} exited 0")
        said.append(lines[0])
        return lines

    mpich = launcher("mpich", 2)
    run(mpich + [exe, "produce", local, STREAM, "3", "10", "10"], env=mpi_env())
    refused(mpich + [exe, "produce", local, STREAM, "4", "10", "10"], 4, f"stream {STREAM}", "has 3 partitions, not 4")
    lines = refused(mpich + [exe, "mismatch", local, "other"], 4, "stream other", "different partition counts (3 to 4)")
    check(len(lines) == 2, f"every rank refused: {lines}")
    refused(mpich + [exe, "toolarge", local, "big", "2"], 5, "stream big", f"{16 * 2**20 + 1} bytes", str(16 * 2**20))
    py = [PY, "-m", "tests.stream.api_client", "error"]
    refused(py + ["join", remote, "nope"], 3, "stream nope", "no stream nope", str(remote), env=py_env(), py=True)
    refused(py + ["reopen", local, STREAM, "5"], 4, "has 3 partitions, not 5", env=py_env(), py=True)
    refused(py + ["toolarge", local, "big2"], 5, "stream big2", "larger than the limit", env=py_env(), py=True)
    run([BIN, "stream", "drain", "--local", local, "--remote", remote, "--stream", STREAM])
    refused(py + ["ack", remote, STREAM], 2, "was not handed to this reader", env=py_env(), py=True)
    return " | ".join(said[:3])


def main():
    a = suite_options().parse_args()
    suite = Suite("stream-api", keep=a.keep)
    cases = [("C ranks, mpich", case_c("mpich", 4)), ("C ranks, openmpi", case_c("openmpi", 3)),
             ("C group, mpich", case_group("mpich")), ("C group, openmpi", case_group("openmpi")),
             ("C ranks under paralog run", case_paralog_run), ("python", case_python), ("bad input", case_bad)]
    sys.exit(suite.run(cases, only=a.only))


if __name__ == "__main__":
    os.umask(0o022)
    main()
