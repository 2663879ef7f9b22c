#!/usr/bin/python3
"""`paralog recover` brings the streams to the remote (docs/streams.md
"Recovery", issue 17): after a crash of the server (or the server job),
every flushed event is stored exactly once, the same bytes at the same
offsets as `paralog stream drain` of the same node-local root. Cases:

  one node, FP, FLAVOUR
                  real MPI ranks (api_producer.c: 3 ranks, collective
                  open and flush, MPICH or Open MPI) and a `stream
                  produce` process killed -9 part-way append to one
                  stream while a one-node `paralog server` drains it;
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
                  byte
  2 nodes, FLAVOUR
                  a server job of 2 simulated nodes (tests/lib/server.py
                  Cluster) killed after n1 records its 3rd cut while
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
from tests.lib.server import Cluster, Server
from tests.lib.streams import STREAM, cat, check_events, drain, produce, producer_report
from tests.stream.api import producers_of, program
from tests.stream.nodes import cut_logs_equal, lag_rounds, one_node_redrain, reports, start_producers
from tests.stream.run import segment_tree

RANKS = 3
EVENTS = 6000
FLUSH_EVERY = 200
LONE = 40_000


def cuts(local):
    return (local / ".paralog-streams" / STREAM / "cuts").read_bytes()


def recover(local, remote, env=None, check_=True):
    r = run([BIN, "recover", "--local", local, "--remote", remote, "--job", "t"], env=env, check=False,
            timeout=300)
    if check_:
        check(r.returncode == 0, f"recover exited {r.returncode}: {r.stdout[-800:]}{r.stderr[-800:]}")
    return r


def case_one_node(flavour, failpoint):
    def case(work):
        exe = program(flavour)
        local, remote, ref, fresh = work / "local", work / "remote", work / "ref", work / "fresh"
        remote.mkdir()
        fresh.mkdir()
        env = dict(os.environ)
        if failpoint:
            env["PARALOG_FAILPOINT"] = failpoint
        srv = Server(local, remote, env)
        try:
            ranks = subprocess.Popen([str(c) for c in launcher(flavour, RANKS) + [
                exe, "produce", local, STREAM, "3", str(EVENTS), str(FLUSH_EVERY)]], env=mpi_env(),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
            lone = produce(local, LONE, flush_every=100, payload_size=32)
            # The lone producer is killed -9 part-way (its last flush may be
            # torn); the server dies at its failpoint, or by kill -9 now.
            time.sleep(0.6)
            kill_tree(lone, signal.SIGKILL)
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
        lone_id, lone_flushed, _ = producer_report(lone)
        flushed = {p: EVENTS for p in producers_of(pout)}
        check(len(flushed) == RANKS, f"{RANKS} ranks printed {len(flushed)} producers: {pout[:300]}")
        flushed[lone_id] = lone_flushed
        rounds = lag_rounds_local(local)
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
        stored = int(re.search(r"(\d+) event\(s\) stored", line[0]).group(1))
        check(stored == sum(got.values()) - published,
              f"recover says it stored {stored} events, the remote went from {published} to {sum(got.values())}")
        # The same root drained by `paralog stream drain`: the same files.
        drain(ref, fresh, roll_bytes=None)
        want, have = segment_tree(fresh), segment_tree(remote)
        check(want.keys() == have.keys(), f"files differ from stream drain's: {sorted(set(want) ^ set(have))[:5]}")
        for k in want:
            check(want[k] == have[k], f"{k} differs from a `stream drain` of a copy of the root")
        check(cuts(local) == cuts(ref), "recover's cut log differs from stream drain's of the copy")
        # Idempotent: nothing drained, no byte changed.
        again = recover(local, remote).stdout
        check(f"stream {STREAM}: nothing to drain" in again, f"a second recover: {again}")
        check(segment_tree(remote) == have and cuts(local) == cuts(ref), "a second recover changed the remote")
        extra = got[lone_id] - lone_flushed
        return (f"{sum(got.values())} events once ({RANKS} ranks + a producer killed after {lone_flushed} flushed, "
                f"{extra} more stored); {rounds} rounds before the crash, {replayed} applied again; "
                f"segments = stream drain's ({len(want)} files)")
    return case


def published_events(remote):
    """The events readers see below the watermark (0: not published yet)."""
    r = run([BIN, "stream", "cat", f"{remote}/{STREAM}", "--json", "--from", "earliest"], check=False)
    return len(r.stdout.splitlines()) if r.returncode == 0 else 0


def lag_rounds_local(local):
    lag = json.loads(run([BIN, "stream", "lag", "--local", local, "--json"]).stdout)
    return lag[0]["rounds"] if lag else 0


def case_nodes(flavour):
    def case(work):
        remote = work / "remote"
        remote.mkdir()
        c = Cluster(work, flavour, 2, str(remote))
        c.start_servers(per_node_env={1: {"PARALOG_FAILPOINT": "stream.after_cut:3"}})
        procs = []
        deadline = time.time() + 120
        while c.servers.poll() is None and time.time() < deadline:
            procs += start_producers(c, per_node=1, events=1000)
            time.sleep(0.3)
        procs += start_producers(c, per_node=1, events=1000)
        rc = c.servers.poll()
        c.stop()
        check(rc is not None and rc != 0, f"the server job did not end by its failpoint (exit {rc}): {c.tail()}")
        flushed, _ = reports(procs)
        rounds = [lag_rounds(c, n) for n in range(c.nodes)]
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
        return (f"{len(events)} events once; cut logs at rounds {rounds} after the kill; one node alone refused; "
                f"{said[0].split(': ', 2)[2]}; {segs} segments = a one-node drain's")
    return case


def main():
    a = suite_options().parse_args()
    suite = Suite("stream-recover", keep=a.keep)
    cases = [("one node, after cut, mpich", case_one_node("mpich", "stream.after_cut:3")),
             ("one node, before watermark, openmpi", case_one_node("openmpi", "stream.before_watermark:3")),
             ("one node, kill -9, mpich", case_one_node("mpich", None)),
             ("2 nodes, mpich", case_nodes("mpich")),
             ("2 nodes, openmpi", case_nodes("openmpi"))]
    sys.exit(suite.run(cases, only=a.only))


if __name__ == "__main__":
    os.umask(0o022)
    main()
