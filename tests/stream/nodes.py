#!/usr/bin/python3
"""Shared event streams drained by a server job across simulated nodes
(docs/streams.md "Many nodes", issue 17): one `paralog server` per node
(an MPMD job of MPICH or Open MPI, each told its node), real `paralog
stream produce` processes on every node appending to one stream of 4
partitions, drained to a directory. Cases, each with MPICH and Open MPI:

  2 nodes / 4 nodes  two producers per node while the servers run (one
                     with a quota of 100 KB not drained, a third of what
                     it writes: it goes on as the job's cuts reach its
                     node); then
                     `paralog wait`: every flushed event in `stream cat`
                     exactly once, per producer sequence strictly
                     increasing, offsets contiguous from 0; every node's
                     cut log byte for byte the same; partitions appended by
                     every server (status: events by node, each the events
                     of the partitions p mod N it owns); the event bytes sent
                     between servers equal to the frames of the events not
                     on their owner's node (each crossed once, the owner's
                     own never); each node's `stream lag` (and n0's
                     `status`) 0 bytes not drained; and the nodes' segments gathered into one
                     node-local root with one node's cut log, drained by a
                     one-node `paralog stream drain` into an empty
                     directory: every segment file byte for byte the server
                     job's (the same bytes at the same offsets)
  2 nodes, objstore  the same to the object layout (objstore://), where the
                     leader owns every partition: events by node all the
                     leader's, bytes between nodes the other node's
                     frames; `cat` equal event for event (offsets, rounds)
                     to a one-node drain of the merged root
  2 nodes, s3        the same to S3 (a MinIO on loopback): the leader
                     PUTs every round's objects and the index
  killed after cut   node n1's server kills itself (SIGKILL) right after
                     recording its 3rd cut while producers run: the job
                     ends; a new server job (no failpoint) applies the
                     recorded cut again (or copies it to a node that
                     missed it), then `wait`: every flushed event once
  killed mid apply   the same with n1 killed after writing its 3rd
                     partition batch (the owner of partitions 1 and 3: a
                     round half-written on the remote, rewritten at the
                     same positions)
  killed before wm   the same with the leader (n0) killed just before it
                     publishes a watermark
  release           (MPICH, Open MPI) `paralog server --stream-release-bytes
                     1`: 8 waves of 2 short producers per node; after each
                     wave, the job cuts, publishes and releases the ended
                     producers' segments on both nodes while it runs: each
                     node's stream directory, sampled, shrinks after every
                     wave and never holds a third of what was written; after
                     `wait` no segment is left and both cut logs are the
                     same base record; every flushed event once; before
                     `wait`, each node's `paralog status` counts as released
                     exactly its producers' segments and the bytes they
                     wrote (`produce` says), nothing held
  release, objstore  the same (4 waves, MPICH) to the object layout
  release killed after deletions, recover (MPICH) / at base, job (Open MPI)
                     the same job killed at its 3rd release on n1: after
                     n1 deleted its segments (before any base), then a
                     one-node `recover` on n0 is refused and changes
                     nothing, and the job of recovers drains the rest; or
                     with n1's base written to its temporary and not
                     renamed (n0 rebased), then the server job again: n1
                     copies n0's base (said in the log exactly when the
                     logs differed); every flushed event once, the cut
                     logs equal
  torn cut           n1's server killed half-way through writing its 3rd
                     cut record (n0 recorded it whole): the new job finds
                     n1's log a round behind, n1 copies the record from the
                     others (the torn one overwritten) and the cut is
                     applied; every flushed event once. (If n0 had not
                     recorded it either when the job ended, both logs are
                     at the same round and nothing is copied: the case
                     says which it saw; a node copies exactly when the
                     logs differed)

Usage: python3 -m tests.stream.nodes [--only SUBSTRING] [--keep]
Ends with "stream-nodes: N passed, N failed".
"""
import filecmp
import json
import os
import shutil
import sys
import time

from tests.lib.check import Suite, check, suite_options
from tests.lib.paths import BIN
from tests.lib.proc import run
from tests.lib.server import Cluster
from tests.lib.streams import (STREAM, cat_json, check_events, drain, frame_len, lazy_s3, local_rounds, produce,
                               producer_result)

PARTS = 4
EVENTS = 3000
PAYLOAD = 64


def start_producers(c, per_node=2, events=EVENTS, quota=None):
    """per_node producers on every node; [(node, process)]. quota: (bytes,
    wait ms) for the last node's first producer."""
    out = []
    for n in range(c.nodes):
        local = c.work / "local" / f"n{n}"
        local.mkdir(mode=0o700, parents=True, exist_ok=True)
        for i in range(per_node):
            q = quota if (n, i) == (c.nodes - 1, 0) else None
            out.append((n, produce(local, events, flush_every=250, payload_size=PAYLOAD, parts=PARTS, quota=q)))
    return out


def reports(procs, wrote=None):
    """{producer id: flushed} and {producer id: node}, all producers done;
    wrote: a dict given gets {producer id: bytes of its segment}."""
    flushed, node = {}, {}
    for n, p in procs:
        r = producer_result(p)
        check(r["rc"] == 0, f"producer on n{n} exited {r['rc']}")
        flushed[r["id"]], node[r["id"]] = r["flushed"], n
        if wrote is not None:
            wrote[r["id"]] = r["bytes"]
    return flushed, node


def stream_status(c, total, timeout=120):
    """n0's status once the servers stored `total` events."""
    deadline = time.time() + timeout
    while True:
        st = c.status()
        if st["cluster"].get("stream_events", 0) >= total or time.time() > deadline:
            return st
        time.sleep(0.2)


def lag_rounds(c, n):
    """The rounds of node n's cut log (`stream lag`)."""
    return local_rounds(c.work / "local" / f"n{n}")


def cut_logs_equal(c):
    logs = [(c.work / "local" / f"n{n}" / ".paralog-streams" / STREAM / "cuts").read_bytes()
            for n in range(c.nodes)]
    check(all(x == logs[0] for x in logs) and logs[0], f"the nodes' cut logs differ: {[len(x) for x in logs]}")
    return logs[0]


def merge_roots(c):
    """Every node's segments and n0's cut log in one node-local root."""
    merged = c.work / "merged"
    sdir = merged / ".paralog-streams" / STREAM
    sdir.mkdir(parents=True)
    os.chmod(merged, 0o700)
    for n in range(c.nodes):
        for f in (c.work / "local" / f"n{n}" / ".paralog-streams" / STREAM).glob("*.seg"):
            shutil.copy2(f, sdir / f.name)
    shutil.copy2(c.work / "local" / "n0" / ".paralog-streams" / STREAM / "cuts", sdir / "cuts")
    return merged


def one_node_redrain(c, remote):
    """The merged root drained by a one-node drain into an empty
    directory: the same segment files."""
    merged = merge_roots(c)
    fresh = c.work / "fresh"
    fresh.mkdir()
    drain(merged, fresh, roll_bytes=None)
    a, b = remote / ".paralog-streams" / STREAM, fresh / ".paralog-streams" / STREAM
    segs = sorted(p.relative_to(a) for p in a.glob("p*/*.seg"))
    check(segs and segs == sorted(p.relative_to(b) for p in b.glob("p*/*.seg")),
          f"segment files differ: {segs} / {sorted(b.glob('p*/*.seg'))}")
    for s in segs + [a.relative_to(a) / "watermark"]:
        check(filecmp.cmp(a / s, b / s, shallow=False), f"{s} differs from a one-node drain of the same cuts")
    return len(segs)


def case_nodes(work, flavour, nodes, objects=False, s3=None):
    """objects: to the object layout, where the leader owns every
    partition (it PUTs each round's objects and the index); s3: a
    StreamS3, to S3 (an object remote too: the leader's PUTs)."""
    env = None
    if s3:
        objects, env = True, s3.env
        remote = s3.url(f"nodes-{flavour}")
    elif objects:
        (work / "obj").mkdir()
        remote = f"objstore://{work}/obj"
    else:
        remote = work / "remote"
        remote.mkdir()
    owner = (lambda p: 0) if objects else (lambda p: p % nodes)
    c = Cluster(work, flavour, nodes, str(remote), aws_env=env)
    c.start_servers()
    try:
        # The last node's first producer may hold 100 KB not drained: its
        # 300 KB go through only as the job's cuts reach its node's log.
        flushed, node = reports(start_producers(c, quota=(100_000, 60_000)))
        total = sum(flushed.values())
        st = stream_status(c, total)
        cl = st["cluster"]
        # n0's status: its node's streams, nothing left to drain there.
        check(st["streams"] and st["streams"][0]["lag_bytes"] == 0 and st["streams"][0]["producers"] == 2,
              f"n0's status streams: {st['streams']}")
        events = cat_json(f"{remote}/{STREAM}", "--from", "earliest", env=env)
        check_events(events, flushed)
        check(len(events) == total == cl["stream_events"], f"{len(events)} events read, {total} flushed, "
              f"the servers stored {cl['stream_events']}")
        by = [sum(1 for e in events if owner(e["partition"]) == n) for n in range(nodes)]
        check(cl["stream_events_by_node"] == by and (objects or all(by)),
              f"events appended by each server {cl['stream_events_by_node']}, partitions owned say {by}")
        crossing = sum(frame_len(e) for e in events if owner(e["partition"]) != node[e["producer"]])
        check(cl["stream_bytes_between_nodes"] == crossing and crossing > 0,
              f"{cl['stream_bytes_between_nodes']} event bytes between nodes, {crossing} were off their owner's node")
        for n in range(nodes):
            lag = json.loads(run([BIN, "stream", "lag", "--local", work / "local" / f"n{n}", "--json"]).stdout)
            check(lag and all(r["bytes"] - r["drained"] == 0 for r in lag), f"n{n}'s stream lag: {lag}")
        c.wait()
        said = [x for x in c.tail(20000).splitlines() if "paralog server: streams:" in x]
        check(said and f" {total} event(s) stored (appended by node {'/'.join(map(str, by))})" in said[-1],
              f"the servers' report: {said}")
    finally:
        c.stop()
    cut_logs_equal(c)
    if objects:
        # The same events at the same offsets and rounds as a one-node
        # drain of the same cuts into a fresh directory.
        merged = merge_roots(c)
        fresh = work / "fresh"
        fresh.mkdir()
        drain(merged, fresh, roll_bytes=None)
        check(cat_json(f"{fresh}/{STREAM}", "--from", "earliest") == events,
              "the object layout's events differ from a one-node drain of the same cuts")
        same = "cat = a one-node drain's"
    else:
        same = f"{one_node_redrain(c, remote)} segments = a one-node drain's"
    return (f"{total} events from {len(flushed)} producers on {nodes} nodes; by server {by}; "
            f"{crossing} bytes between nodes; {same}")


def killed_job(work, flavour, node, failpoint, remote, server_args=()):
    """A server job of 2 nodes draining to `remote` while waves of
    producers run (a new cut every round) until node `node`'s server dies
    at `failpoint`: (the cluster, what each producer flushed, each node's
    rounds)."""
    c = Cluster(work, flavour, 2, str(remote), server_args=server_args)
    c.start_servers(per_node_env={node: {"PARALOG_FAILPOINT": failpoint}})
    procs = []
    deadline = time.time() + 120
    while c.servers.poll() is None and time.time() < deadline:
        procs += start_producers(c, per_node=1, events=1000)
        time.sleep(0.3)
    procs += start_producers(c, per_node=1, events=1000)
    rc = c.servers.poll()
    c.stop()
    check(rc is not None and rc != 0, f"the server job did not end by {failpoint} (exit {rc}): {c.tail()}")
    flushed, _ = reports(procs)
    return c, flushed, [lag_rounds(c, n) for n in range(c.nodes)]


def case_killed(work, flavour, node, failpoint):
    remote = work / "remote"
    remote.mkdir()
    c, flushed, rounds = killed_job(work, flavour, node, failpoint, remote)
    # The killed servers' sockets are left behind: the new ones' mark readiness.
    for n in range(c.nodes):
        (c.work / "local" / f"n{n}" / ".paralog-server-t.sock").unlink(missing_ok=True)
    c.start_servers()
    try:
        out = c.wait()
    finally:
        c.stop()
    events = cat_json(f"{remote}/{STREAM}", "--from", "earliest")
    check_events(events, flushed)
    check(len(events) == sum(flushed.values()), f"{len(events)} events, {sum(flushed.values())} flushed")
    cut_logs_equal(c)
    said = "cut log lacked the job's last round" in c.tail(100000)
    check(said == (max(rounds) > min(rounds)), f"cut logs at rounds {rounds} before the restart, copied: {said}")
    return f"{len(events)} events once after {failpoint} on n{node}; cut logs at rounds {rounds}, copied: {said}"


RELEASE = ["--stream-release-bytes", "1"]


def held(c, n):
    """(bytes, segment files) of the stream on node n's root now."""
    total, segs = 0, 0
    d = c.work / "local" / f"n{n}" / ".paralog-streams" / STREAM
    for e in (os.scandir(d) if d.exists() else ()):
        try:
            total += e.stat().st_size
        except FileNotFoundError:
            continue  # released since the listing
        segs += e.name.endswith(".seg")
    return total, segs


def case_release(work, flavour, waves=8, objects=False):
    """Waves of short producers on both nodes while the server job runs
    with --stream-release-bytes 1: each node's stream directory, sampled,
    shrinks as the job releases ended producers' segments and stays far
    below what its producers wrote; after `wait` no segment is left and
    every node's cut log is the same base; every flushed event once.
    objects: to the object layout (a round is published by its index)."""
    if objects:
        (work / "obj").mkdir()
        remote = f"objstore://{work}/obj"
    else:
        remote = work / "remote"
        remote.mkdir()
    c = Cluster(work, flavour, 2, str(remote), server_args=RELEASE)
    c.start_servers()
    flushed, peak, shrank = {}, [0, 0], [0, 0]
    last, wrote, node_of = [0, 0], {}, {}

    def sample():
        for n in range(2):
            now = held(c, n)[0]
            peak[n] = max(peak[n], now)
            shrank[n] += now < last[n]
            last[n] = now
        time.sleep(0.05)

    try:
        for w in range(waves):
            procs = start_producers(c, per_node=2, events=600)
            while any(p.poll() is None for _, p in procs):
                sample()
            f, nodes = reports(procs, wrote)
            flushed.update(f)
            node_of.update(nodes)
            # The job cuts the ended producers' last batches, publishes
            # them and releases their segments while it runs.
            deadline = time.time() + 60
            while any(held(c, n)[1] for n in range(2)) and time.time() < deadline:
                sample()
            check(not any(held(c, n)[1] for n in range(2)),
                  f"wave {w}: segments still held 60 s after their producers ended: {c.tail()}")
        counted = [released_status(c, n, node_of, wrote) for n in range(2)]
        c.wait()
    finally:
        c.stop()
    events = cat_json(f"{remote}/{STREAM}", "--from", "earliest")
    check_events(events, flushed)
    check(len(events) == sum(flushed.values()), f"{len(events)} events, {sum(flushed.values())} flushed")
    # What each node's producers wrote, by their own count (sampling the
    # directory missed segments released between two samples).
    total = [sum(b for pid, b in wrote.items() if node_of[pid] == n) for n in range(2)]
    for n in range(2):
        check(shrank[n] > 0, f"n{n}'s stream directory never shrank while producers ran (peak {peak[n]} bytes)")
        check(peak[n] < total[n] / 3, f"n{n} held {peak[n]} bytes at once, of {total[n]} its producers wrote")
        b, segs = held(c, n)
        check(segs == 0 and b < 2000, f"n{n} holds {segs} segment(s), {b} bytes after the job: {c.tail()}")
    log = cut_logs_equal(c)
    check(log.startswith(b"PLSTBASE"), "the nodes' cut logs are not a base after the job")
    released = c.tail(1 << 22).count("drained segments released on every node")
    check(released >= waves, f"{released} release(s) logged for {waves} waves")
    return (f"{len(events)} events once from {len(flushed)} producers in {waves} waves; per node peak "
            f"{peak[0]}/{peak[1]} of {total[0]}/{total[1]} bytes written, shrank {shrank[0]}/{shrank[1]} "
            f"times; {released} releases; no segment left, cut logs one base of {len(log)} bytes; "
            f"status: released {counted[0]} / {counted[1]}")


def released_status(c, n, node_of, wrote):
    """Node n's `paralog status` once every segment its producers wrote is
    gone (none is on the node): per stream, the segments released equal
    to its producers, their bytes to what they wrote (`produce` says),
    nothing held. The (segments, bytes) seen."""
    mine = [p for p, m in node_of.items() if m == n]
    want = (len(mine), sum(wrote[p] for p in mine))
    deadline = time.time() + 30
    while True:
        row = [r for r in c.status(n).get("streams", []) if r.get("stream") == STREAM]
        got = (row[0]["released_segments"], row[0]["released_bytes"]) if row else None
        if got == want or time.time() > deadline:
            break
        time.sleep(0.1)
    check(got == want, f"n{n}'s status says {got} (segments, bytes) released, its producers wrote {want}: {row}")
    r = row[0]
    check(r["held_bytes"] == 0 and r["drained_bytes"] == 0 and r["lag_bytes"] == 0 and r["producers"] == 0,
          f"n{n} holds nothing of the stream, its status says {r}")
    check(r["releases"] >= 1, f"n{n}: {r['releases']} releases")
    return got


def base_alone(c, n):
    """Whether node n's cut log is a base record alone (rebased at its
    last round; docs/streams-format.md kind 12: its length at byte 12)."""
    b = (c.work / "local" / f"n{n}" / ".paralog-streams" / STREAM / "cuts").read_bytes()
    return b[:8] == b"PLSTBASE" and int.from_bytes(b[12:16], "little") == len(b)


def case_release_killed(work, flavour, node, failpoint, then):
    """A server job releasing at every round (waves of producers) killed
    at a release's `failpoint` on `node` (after its deletions, before the
    base; or the base written to its temporary, not renamed), then the
    server job again (`then` "job") or `paralog recover` as an MPI job
    ("recover"): every flushed event once, the cut logs equal; a node
    whose log was not rebased when the others' was copies their base."""
    remote = work / "remote"
    remote.mkdir()
    c, flushed, rounds = killed_job(work, flavour, node, failpoint, remote, RELEASE)
    based = [base_alone(c, n) for n in range(c.nodes)]
    if then == "job":
        for n in range(c.nodes):
            (c.work / "local" / f"n{n}" / ".paralog-server-t.sock").unlink(missing_ok=True)
        c.start_servers()
        try:
            c.wait()
        finally:
            c.stop()
        said = c.tail(1 << 22)
    else:
        # One node alone is refused with a released root too, changing nothing.
        n0 = c.work / "local" / "n0" / ".paralog-streams" / STREAM
        before = sorted((f.name, f.read_bytes()) for f in n0.iterdir() if f.is_file())
        r = run([BIN, "recover", "--local", c.local, "--remote", remote, "--job", "t"],
                env=c.env({"PARALOG_NODE": "n0"}), check=False, timeout=300)
        check(r.returncode == 1 and "NOT DRAINED: a server job of 2 nodes drained it" in r.stdout,
              f"one-node recover on n0: {r.returncode} {r.stdout}")
        check(sorted((f.name, f.read_bytes()) for f in n0.iterdir() if f.is_file()) == before,
              "the refused one-node recover changed n0's root")
        cmd = c.node_cmd([BIN, "recover", "--local", c.local, "--remote", remote, "--job", "t"])
        r = run(cmd, env=c.env(), check=False, timeout=300)
        check(r.returncode == 0, f"recover job exited {r.returncode}: {r.stdout[-800:]}{r.stderr[-800:]}")
        said = r.stdout + r.stderr
    events = cat_json(f"{remote}/{STREAM}", "--from", "earliest")
    check_events(events, flushed)
    check(len(events) == sum(flushed.values()), f"{len(events)} events, {sum(flushed.values())} flushed")
    cut_logs_equal(c)
    copied = "the others' base copied" in said
    check(copied == (based[0] != based[1] and rounds[0] == rounds[1]),
          f"logs rebased {based} at rounds {rounds} after the kill; base copied: {copied}")
    return (f"{len(events)} events once after {failpoint} on n{node}, then the {then}; logs rebased {based} at "
            f"rounds {rounds}, base copied: {copied}")


def main():
    a = suite_options().parse_args()
    suite = Suite("stream-nodes", keep=a.keep)
    on_s3 = lazy_s3(suite)
    cases = []
    for fl in ("mpich", "openmpi"):
        cases += [(f"2 nodes, {fl}", lambda w, fl=fl: case_nodes(w, fl, 2)),
                  (f"2 nodes, objstore, {fl}", lambda w, fl=fl: case_nodes(w, fl, 2, objects=True)),
                  (f"2 nodes, s3, {fl}", lambda w, fl=fl: case_nodes(w, fl, 2, s3=on_s3())),
                  (f"4 nodes, {fl}", lambda w, fl=fl: case_nodes(w, fl, 4)),
                  (f"killed after cut, {fl}", lambda w, fl=fl: case_killed(w, fl, 1, "stream.after_cut:3")),
                  (f"killed mid apply, {fl}", lambda w, fl=fl: case_killed(w, fl, 1, "stream.mid_apply:3")),
                  (f"killed before wm, {fl}", lambda w, fl=fl: case_killed(w, fl, 0, "stream.before_watermark:3")),
                  (f"torn cut, {fl}", lambda w, fl=fl: case_killed(w, fl, 1, "stream.torn_cut:3")),
                  (f"release, {fl}", lambda w, fl=fl: case_release(w, fl))]
    cases += [("release, objstore, mpich", lambda w: case_release(w, "mpich", waves=4, objects=True))]
    cases += [("release killed after deletions, recover, mpich",
               lambda w: case_release_killed(w, "mpich", 1, "stream.release_deleted:3", "recover")),
              ("release killed at base, job, openmpi",
               lambda w: case_release_killed(w, "openmpi", 1, "stream.base_written:3", "job"))]
    sys.exit(suite.run(cases, only=a.only))


if __name__ == "__main__":
    os.umask(0o022)
    main()
