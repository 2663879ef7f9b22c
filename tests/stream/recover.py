#!/usr/bin/python3
"""`paralog recover` brings the streams to the remote (docs/streams.md
"Recovery", issue 17): after a crash of the server (or the server job),
every flushed event is stored exactly once, the same bytes at the same
offsets as `paralog stream drain` of the same node-local root. Cases:

  one node, FP, FLAVOUR
                  real MPI ranks (api_producer.c: 3 ranks, collective
                  open and flush, MPICH or Open MPI) and a `stream
                  produce` process append to one stream while a one-node
                  `paralog server` drains it; the producer is killed -9
                  while it produces (once it said it flushed 3,000 of the
                  2,000,000 events it would append and the server died at
                  its failpoint or recorded two rounds: checked that it
                  was killed, not finished);
                  the server kills itself at failpoint FP (after its 3rd
                  cut is recorded, or before its watermark) or is killed
                  -9 at once (kill -9); the node-local root is copied;
                  `paralog recover --local L --remote R`: it says which
                  recorded rounds it applied again, the new rounds, and
                  the events it stored (what the remote gained); every flushed event once in `stream
                  cat` (offsets contiguous from 0, per producer sequence
                  strictly increasing, nothing unflushed invented beyond
                  what the killed producer appended); `paralog stream
                  drain` of the copy into a fresh directory makes the
                  same segment files, watermark and cut log byte for
                  byte; a second `recover` drains nothing and changes no
                  byte, and a third's `--json` says 0 rounds, 0 events
  one node, objstore, after cut, openmpi
                  the same to the object layout (objstore://): `cat` of
                  the remote equal (offsets, rounds, bytes) to that of
                  `stream drain` of the copy, a second recover changing
                  no file of the layout
  2 nodes, after cut, mpich / torn cut, openmpi
                  a server job of 2 simulated nodes (tests/lib/server.py
                  Cluster) killed after n1 records its 3rd cut (or
                  half-way through writing it: n1's log a round behind,
                  which the job of recovers copies from n0) while
                  `stream produce` processes on both nodes append; a
                  one-node `paralog recover` on n0 is refused (exit 1,
                  naming the stream, the server job's mark and what to
                  run) and changes nothing;
                  `paralog recover` as an MPI job (one process per node)
                  applies the recorded cut and drains the rest: every
                  flushed event once, both cut logs the same bytes, the
                  segments byte for byte a one-node drain's of the nodes'
                  segments merged with one cut log; a second job of
                  recovers stores nothing
  reader rank killed, FLAVOUR
                  3 ranks read a stream as one reader group over
                  MPI_COMM_WORLD (api_producer.c groupread: rank 0 the
                  read proxy, round-robin, every event acknowledged, a
                  commit every 50 rounds); rank 1 kills itself (SIGKILL)
                  after round 275: the launcher ends the job (exit not 0,
                  no hang: a 180 s limit); every event below the group's
                  committed offsets was delivered; a new run of the group
                  gets exactly the events from the committed offsets on
                  (none below), each as stored; the two runs together
                  deliver every event, the ones delivered twice at most
                  what can be handed out between two commits (the other
                  ranks go on after the kill until the next commit, which
                  needs every rank); the offsets end at the partitions'
                  ends

Usage: python3 -m tests.stream.recover [--only SUBSTRING] [--keep]
Ends with "stream-recover: N passed, N failed".
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

from tests.lib.check import Suite, check, suite_options
from tests.lib.mpi import launcher, mpi_env
from tests.lib.paths import BIN
from tests.lib.proc import kill_tree, run
from tests.lib.server import Server
from tests.lib.streams import STREAM, cat, check_events, drain, local_rounds, produce
from tests.stream.api import producers_of, program
from tests.stream.nodes import cut_logs_equal, killed_job, one_node_redrain
from tests.stream.run import segment_tree

RANKS = 3
EVENTS = 6000
FLUSH_EVERY = 200
# The lone producer could append this many events: far more than it does
# before it is killed, once it said it flushed KILL_AT (so the kill lands
# while it produces, however fast the machine).
LONE = 2_000_000
KILL_AT = 3000


def kill_producing(p, at, ready, timeout=120):
    """Read a `stream produce` process's lines until it says it flushed at
    least `at` events and `ready()` (looked at every 50 ms) holds, then
    SIGKILL it: (its id, the last count it said it flushed, its exit
    code)."""
    lines = []
    deadline = time.time() + timeout
    looked, is_ready = 0.0, False
    while time.time() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        lines.append(line)
        if time.time() - looked > 0.05:
            looked, is_ready = time.time(), ready()
        if is_ready and line.startswith("flushed ") and int(line.split()[1]) >= at:
            break
    kill_tree(p, signal.SIGKILL)
    out, err = p.communicate()
    lines += out.splitlines(True)
    ids = [x.split()[1] for x in lines if x.startswith("producer ")]
    flushed = [int(x.split()[1]) for x in lines if x.startswith("flushed ")]
    check(ids, f"the producer printed no id: {''.join(lines)[:200]} {err[-300:]}")
    return ids[0], (flushed[-1] if flushed else 0), p.returncode


def cuts(local):
    return (local / ".paralog-streams" / STREAM / "cuts").read_bytes()


def recover(local, remote, env=None, check_=True):
    r = run([BIN, "recover", "--local", local, "--remote", remote, "--job", "t"], env=env, check=False,
            timeout=300)
    if check_:
        check(r.returncode == 0, f"recover exited {r.returncode}: {r.stdout[-800:]}{r.stderr[-800:]}")
    return r


def case_one_node(flavour, failpoint, objects=False):
    """objects: the remote is the object layout (objstore://), where each
    round's batch of a partition is an object and the index is PUT last."""
    def case(work):
        exe = program(flavour)
        local, ref = work / "local", work / "ref"
        for d in ("remote", "fresh"):
            (work / d).mkdir()
        remote, fresh = (f"objstore://{work}/{d}" if objects else work / d for d in ("remote", "fresh"))
        env = dict(os.environ)
        if failpoint:
            env["PARALOG_FAILPOINT"] = failpoint
        srv = Server(local, remote, env)
        try:
            ranks = subprocess.Popen([str(c) for c in launcher(flavour, RANKS) + [
                exe, "produce", local, STREAM, "3", str(EVENTS), str(FLUSH_EVERY)]], env=mpi_env(),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
            lone = produce(local, LONE, flush_every=100, payload_size=32)
            # The lone producer is killed -9 part-way, while it produces
            # (its last flush may be torn), once the server died at its
            # failpoint (its new batches make the rounds the failpoint
            # counts), or recorded two rounds; then the server by kill -9.
            ready = ((lambda: srv.p.poll() is not None) if failpoint  # noqa: E731
                     else (lambda: local_rounds(local) >= 2))
            lone_id, lone_flushed, lone_rc = kill_producing(lone, KILL_AT, ready)
            check(lone_rc == -9 and KILL_AT <= lone_flushed < LONE,
                  f"the lone producer was not killed while producing: exit {lone_rc}, {lone_flushed} flushed")
            if not failpoint:
                kill_tree(srv.p, signal.SIGKILL)
            pout, perr = ranks.communicate(timeout=300)
            check(ranks.returncode == 0, f"ranks: {ranks.returncode} {pout[-300:]} {perr[-300:]}")
            try:
                rc = srv.p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                rc = None
            check(rc == -9, f"the server was not killed ({failpoint or 'kill -9'}): {rc} {srv.text()[-500:]}")
        finally:
            srv.kill()
        flushed = {p: EVENTS for p in producers_of(pout)}
        check(len(flushed) == RANKS, f"{RANKS} ranks printed {len(flushed)} producers: {pout[:300]}")
        flushed[lone_id] = lone_flushed
        rounds = local_rounds(local)
        shutil.copytree(local, ref, ignore=shutil.ignore_patterns("*.sock"))
        published = published_events(remote)
        out = recover(local, remote).stdout
        line = [x for x in out.splitlines() if x.startswith(f"stream {STREAM}: ")]
        check(line and "NOT DRAINED" not in line[0], f"recover said: {out}")
        m = re.match(r"stream \S+: (\d+) recorded round", line[0])
        replayed = int(m.group(1)) if m else 0
        if failpoint:
            check(replayed == 1, f"the round recorded before {failpoint} was not applied again: {line[0]}")
        appended = dict(flushed, **{lone_id: LONE})
        got = check_events(cat(remote, "--from", "earliest"), flushed, appended)
        # "nothing to drain" when the server had drained it all before it died.
        m = re.search(r"(\d+) event\(s\) stored", line[0])
        check(m or "nothing to drain" in line[0], f"recover said: {line[0]}")
        stored = int(m.group(1)) if m else 0
        check(stored == sum(got.values()) - published,
              f"recover says it stored {stored} events, the remote went from {published} to {sum(got.values())}")
        # The same root drained by `paralog stream drain`: the same files
        # (on the object layout, the same events at the same offsets and
        # rounds: its files are versions of objects).
        drain(ref, fresh, roll_bytes=None)
        look = (lambda r: cat(r, "--from", "earliest")) if objects else segment_tree  # noqa: E731
        want, have = look(fresh), look(remote)
        if objects:
            check(want == have, "recover's events differ from a `stream drain` of a copy of the root")
        else:
            check(want.keys() == have.keys(), f"files differ from stream drain's: {sorted(set(want) ^ set(have))[:5]}")
            for k in want:
                check(want[k] == have[k], f"{k} differs from a `stream drain` of a copy of the root")
        check(cuts(local) == cuts(ref), "recover's cut log differs from stream drain's of the copy")
        # Idempotent: nothing drained, nothing changed.
        before = tree(work / "remote")
        again = recover(local, remote).stdout
        check(f"stream {STREAM}: nothing to drain" in again, f"a second recover: {again}")
        check(tree(work / "remote") == before and cuts(local) == cuts(ref), "a second recover changed the remote")
        js = json.loads(run([BIN, "recover", "--local", local, "--remote", remote, "--job", "t", "--json"]).stdout)
        check([(x["stream"], x["replayed"], x["rounds"], x["events"], x.get("error")) for x in js["streams"]]
              == [(STREAM, 0, 0, 0, None)], f"recover --json, a third time: {js}")
        extra = got[lone_id] - lone_flushed
        return (f"{sum(got.values())} events once ({RANKS} ranks + a producer killed after {lone_flushed} flushed, "
                f"{extra} more stored); {rounds} rounds before the crash, {replayed} applied again; "
                f"{'events' if objects else f'segments ({len(want)} files)'} = stream drain's")
    return case


def tree(d):
    """Every file under d (relative path) with its bytes."""
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def published_events(remote):
    """The events readers see below the watermark (0: not published yet)."""
    r = run([BIN, "stream", "cat", f"{remote}/{STREAM}", "--json", "--from", "earliest"], check=False)
    return len(r.stdout.splitlines()) if r.returncode == 0 else 0


def case_nodes(flavour, failpoint):
    def case(work):
        remote = work / "remote"
        remote.mkdir()
        c, flushed, rounds = killed_job(work, flavour, 1, failpoint, remote)
        n0 = work / "local" / "n0"
        before = (segment_tree(remote), cuts(n0))
        # One node alone: refused, nothing changed.
        r = recover(c.local, remote, env=c.env({"PARALOG_NODE": "n0"}), check_=False)
        check(r.returncode == 1 and f"stream {STREAM}: NOT DRAINED: a server job of 2 nodes drained it" in r.stdout
              and "as an MPI job" in r.stdout, f"one-node recover on n0: {r.returncode} {r.stdout}")
        check((segment_tree(remote), cuts(n0)) == before, "the refused one-node recover changed something")
        # The job of recovers.
        cmd = c.node_cmd([BIN, "recover", "--local", c.local, "--remote", remote, "--job", "t"])
        r = run(cmd, env=c.env(), check=False, timeout=300)
        check(r.returncode == 0, f"recover job exited {r.returncode}: {r.stdout[-800:]}{r.stderr[-800:]}")
        said = [x for x in r.stdout.splitlines() if x.startswith("paralog recover: streams:")]
        check(said, f"the job of recovers said nothing of streams: {r.stdout}")
        copied = "cut log lacked the job's last round" in r.stderr
        check(copied == (max(rounds) > min(rounds)), f"cut logs at rounds {rounds}, copied: {copied}")
        events = cat(remote, "--from", "earliest")
        check_events(events, flushed)
        check(len(events) == sum(flushed.values()), f"{len(events)} events, {sum(flushed.values())} flushed")
        cut_logs_equal(c)
        segs = one_node_redrain(c, remote)
        after = segment_tree(remote)
        again = run(cmd, env=c.env(), check=False, timeout=300)
        check(again.returncode == 0 and "streams:" not in again.stdout,
              f"a second job of recovers: {again.returncode} {again.stdout}")
        check(segment_tree(remote) == after, "a second job of recovers changed the remote")
        return (f"{len(events)} events once; cut logs at rounds {rounds} after {failpoint} on n1 (copied: {copied}); "
                f"one node alone refused; "
                f"{said[0].split(': ', 2)[2]}; {segs} segments = a one-node drain's")
    return case


GROUP_RANKS = 3
GROUP_EVENTS = 2000
COMMIT_EVERY = 50
KILL_AFTER = 275


def group_events(out):
    """{(partition, offset): line} of every rank's OUT.<rank> file."""
    got = {}
    for f in sorted(out.parent.glob(f"{out.name}.*")):
        for line in f.read_text().splitlines():
            part, off, prod, seq, _key, payload = line.split(" ", 5)
            k = (int(part), int(off))
            check(k not in got, f"{k} handed to two ranks in one run")
            got[k] = (prod, int(seq), payload)
    return got


def by_rank(out):
    """Each rank's lines of OUT.<rank>."""
    return [f.read_text().splitlines() for f in sorted(out.parent.glob(f"{out.name}.*"))]


def group_offsets(remote, group):
    desc = json.loads(run([BIN, "stream", "describe", f"{remote}/{STREAM}", "--json"]).stdout)
    return [g for g in desc["groups"] if g["group"] == group][0]["offsets"], desc


def case_reader_killed(flavour):
    """Rank 1 of a reader group over a communicator killed -9; then a
    new run of the group: nothing lost, duplicates only past the last
    commit; the job ends (the launcher ends the other ranks), no hang."""
    def case(work):
        exe = program(flavour)
        local, remote = work / "local", work / "remote"
        remote.mkdir()
        r = run(launcher(flavour, GROUP_RANKS) + [exe, "produce", local, STREAM, "3", str(GROUP_EVENTS), "500"],
                env=mpi_env(), timeout=300)
        flushed = {p: GROUP_EVENTS for p in producers_of(r.stdout)}
        drain(local, remote)
        stored = {(e["partition"], e["offset"]): e for e in cat(remote, "--from", "earliest")}
        check_events(sorted(stored.values(), key=lambda e: (e["partition"], e["offset"])), flushed)
        env = mpi_env({"GROUP_COMMIT_EVERY": str(COMMIT_EVERY), "GROUP_KILL_RANK": "1",
                       "GROUP_KILL_AFTER": str(KILL_AFTER)})
        first_out = work / "first"
        t0 = time.time()
        r = run(launcher(flavour, GROUP_RANKS) + [exe, "groupread", remote, STREAM, "G", "0", str(1 << 60),
                                                  first_out], env=env, check=False, timeout=180)
        took, code = time.time() - t0, r.returncode
        check(r.returncode != 0, f"the group's job exited {r.returncode} with rank 1 killed: {r.stdout[-300:]}")
        first = group_events(first_out)
        committed, _ = group_offsets(remote, "G")
        # The group committed after round 250 (5 commits): every event
        # below its offsets was delivered in the first run.
        check(sum(committed) >= (KILL_AFTER // COMMIT_EVERY) * COMMIT_EVERY * GROUP_RANKS - 4 * GROUP_RANKS * 3,
              f"committed offsets {committed} after {KILL_AFTER // COMMIT_EVERY} commits of {GROUP_RANKS} ranks")
        below = {k for k in stored if k[1] < committed[k[0]]}
        check(below <= first.keys(), f"{len(below - first.keys())} committed events were never delivered")
        second_out = work / "second"
        r = run(launcher(flavour, GROUP_RANKS) + [exe, "groupread", remote, STREAM, "G", "0", str(1 << 60),
                                                  second_out], env=mpi_env(), check=False, timeout=300)
        check(r.returncode == 0, f"the second run: {r.returncode} {r.stdout[-300:]} {r.stderr[-300:]}")
        second = group_events(second_out)
        # It resumes exactly at the committed offsets: every event from
        # there, none below.
        check(second.keys() == stored.keys() - below,
              f"the second run got {len(second)} events, {len(stored) - len(below)} were not committed")
        check(first.keys() | second.keys() == stored.keys(), "an event was delivered in neither run")
        for k, v in {**first, **second}.items():
            e = stored[k]
            check(v == (e["producer"], e["seq"], e["payload"]), f"{k}: delivered {v}, stored {e}")
        dups = first.keys() & second.keys()
        # Handed out after the last commit: at most one event a rank a
        # round, until the next commit (which needs every rank: the others
        # go on after the kill, a scatter needs no answer, until its
        # gather), plus what the proxy held back (at most 4 rounds).
        bound = (COMMIT_EVERY + 4) * GROUP_RANKS
        check(len(dups) <= bound, f"{len(dups)} events delivered twice, more than the {bound} that can be handed "
                                  "out between two commits")
        ranks = by_rank(first_out)
        after_kill = max(len(v) for v in ranks) - len(ranks[1])
        again, _ = group_offsets(remote, "G")
        check(again == [len([k for k in stored if k[0] == p]) for p in range(3)], f"offsets at the end: {again}")
        return (f"rank 1 killed after round {KILL_AFTER}: the job ended in {took:.1f} s (exit {code}), a "
                f"rank got up to {after_kill} more events than it; committed {committed}; {len(first)} "
                f"events then {len(second)}, {len(dups)} twice; nothing lost")
    return case


def main():
    a = suite_options().parse_args()
    suite = Suite("stream-recover", keep=a.keep)
    cases = [("one node, after cut, mpich", case_one_node("mpich", "stream.after_cut:3")),
             ("one node, before watermark, openmpi", case_one_node("openmpi", "stream.before_watermark:3")),
             ("one node, kill -9, mpich", case_one_node("mpich", None)),
             ("one node, objstore, after cut, openmpi", case_one_node("openmpi", "stream.after_cut:3", True)),
             ("2 nodes, after cut, mpich", case_nodes("mpich", "stream.after_cut:3")),
             ("2 nodes, torn cut, openmpi", case_nodes("openmpi", "stream.torn_cut:3")),
             ("reader rank killed, mpich", case_reader_killed("mpich")),
             ("reader rank killed, openmpi", case_reader_killed("openmpi"))]
    sys.exit(suite.run(cases, only=a.only))


if __name__ == "__main__":
    os.umask(0o022)
    main()
