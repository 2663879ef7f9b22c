#!/usr/bin/python3
"""Local retention of shared event streams (docs/streams.md "Local
retention", issue 17): the node-local root of a stream stays bounded while
real MPI ranks append for a long time, and shrinks once the drain has
published what it holds. Cases:

  mpich / openmpi 2 ranks (api_producer.c through paralog/stream.h, a
                  collective flush every 40 events, 12,000 events each, a
                  segment roll at 64 KB: paralog_stream_set_roll, 2 ms
                  after each flush) while `paralog stream drain --follow
                  --release-bytes 1` runs: the stream's local bytes
                  (segments and cut log), sampled as the ranks run, never
                  reach a third of what the ranks wrote; the drained
                  segments were deleted while they ran (the segment files
                  seen at once stay few, segments of many ids reach the
                  remote); after a last drain no segment is left and the
                  cut log is a base record, a few hundred bytes;
                  `paralog stream cat` gives every event exactly once, per
                  rank its sequence numbers 0..11,999 (going on across the
                  rolls), in order in each partition, offsets contiguous
  python          a Python producer (`paralog.stream.Producer(roll=64000)`,
                  no MPI) appending 12,000 events, a flush every 40 (2 ms
                  after each): the
                  same checks, its `id` a new one after the rolls
  paralog run, option / setting
                  the Python producer under `paralog run
                  --stream-release-bytes 1`, and 2 MPICH ranks under
                  `paralog run` with PARALOG_STREAM_RELEASE_BYTES=1 (no
                  directory given: PARALOG_LOCAL): the same checks, the
                  run's own server releasing as the program runs, `cat`
                  of the prefix's stream
  status          `paralog server --stream-release-bytes 1`: a producer
                  kept alive and 3 waves of 3 that end; `paralog status`
                  counts as released exactly the ended producers' segments
                  (gone from the node) and the bytes they wrote (`stream
                  produce` says), holds the live one's segment file
                  (drained, not released), then, once it ended, released
                  it too and holds nothing; every event once
  open-file limit 300 ended producers' segments (one event each) drained
                  with local retention at every round by `paralog stream
                  drain` and by `paralog server`, each started with a soft
                  open-file limit of 96 (below the 128 segments one
                  release holds locked; the hard limit unchanged): both
                  raise it and release every segment (the cut log a
                  base), and the remote's stream is byte for byte what a
                  drain of a copy of the root, taken before, writes with
                  no limit and no release

Usage: python3 -m tests.stream.local_retention [--only SUBSTRING] [--keep]
Ends with "stream-local-retention: N passed, N failed".
"""
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections import defaultdict

from tests.lib.check import Suite, check, suite_options
from tests.lib.compare import tree, tree_difference
from tests.lib.mpi import launcher, mpi_env
from tests.lib.paralog import keep_server_log
from tests.lib.proc import kill_tree, run
from tests.lib.server import Server
from tests.lib.streams import cat_json, check_events, drain_cmd, produce, producer_result, stop
from tests.lib.paths import BIN, PY
from tests.stream.api import PYPATH, STREAM, program

EVENTS = 12_000
ROLL = 64_000


def held(local):
    """(bytes, segment files) of the stream on the node-local root now."""
    total, segs = 0, 0
    for e in os.scandir(local / ".paralog-streams" / STREAM):
        try:
            total += e.stat().st_size
        except FileNotFoundError:
            continue  # deleted since the listing
        segs += e.name.endswith(".seg")
    return total, segs


def check_stream(events, ranks, count=EVENTS):
    """Every event once: per rank (the id its payload names) sequence
    numbers 0..count-1, strictly increasing per partition, offsets
    contiguous from 0 per partition. The producer ids seen."""
    next_off = defaultdict(int)
    last = {}
    seqs = defaultdict(list)
    ids = set()
    for e in events:
        p = e["partition"]
        check(e["offset"] == next_off[p], f"partition {p}: offset {e['offset']} where {next_off[p]} was expected")
        next_off[p] += 1
        origin, i, _ = e["payload"].split(":")
        check(int(i) == e["seq"], f"payload {e['payload']!r} has seq {e['seq']}")
        k = (origin, p)
        check(k not in last or e["seq"] > last[k], f"rank {origin} partition {p}: seq {e['seq']} after {last.get(k)}")
        last[k] = e["seq"]
        seqs[origin].append(e["seq"])
        ids.add(e["producer"])
    check(len(seqs) == ranks, f"{len(seqs)} ranks' events, {ranks} ranks ran")
    for origin, s in seqs.items():
        check(sorted(s) == list(range(count)), f"rank {origin}: {len(s)} events, not 0..{count - 1} once each")
    return ids


def run_watching(local, cmd, env):
    """Run the producers' command, sampling what the node holds of the
    stream as it runs: (its stdout, the most bytes and the most segment
    files seen at once)."""
    prod = subprocess.Popen([str(c) for c in cmd], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    most, most_segs = 0, 0
    while prod.poll() is None:
        if (local / ".paralog-streams" / STREAM).is_dir():
            b, s = held(local)
            most, most_segs = max(most, b), max(most_segs, s)
        time.sleep(0.01)
    pout, perr = prod.communicate(timeout=300)
    check(prod.returncode == 0, f"{cmd[0]}: {prod.returncode} {pout[-300:]} {perr[-300:]}")
    return pout, most, most_segs


def check_released(local, target, most, most_segs, producers, count, said=""):
    """After the last drain: what the node held at most while the
    producers ran, and holds now, against what `cat` of `target`
    (URL/STREAM) gives. A summary."""
    end, end_segs = held(local)
    events = cat_json(target, "--from", "earliest")
    ids = check_stream(sorted(events, key=lambda e: (e["partition"], e["offset"])), producers, count)
    written = sum(len(e["payload"]) + 40 for e in events)
    check(most < written / 3, f"the node held up to {most} bytes of {written} written")
    check(len(ids) > 4 * producers, f"{len(ids)} producer ids: the segments did not roll")
    check(most_segs < len(ids) / 2, f"{most_segs} segment files at once of {len(ids)}: not deleted as drained")
    check(end_segs == 0 and end < 1000, f"after the drain: {end_segs} segments, {end} bytes; {said[-300:]}")
    cuts = (local / ".paralog-streams" / STREAM / "cuts").read_bytes()
    check(cuts[:8] == b"PLSTBASE", f"the cut log starts with {cuts[:8]!r}")
    return (f"{len(events)} events, {written} bytes written, the node held at most {most} "
            f"({most_segs} segments at once of {len(ids)}), {end} after the drain")


def run_and_check(local, remote, cmd, env, producers, count):
    """Run the producers' command while a drain follows them with local
    retention at every round; check what the node held and what `cat`
    gives. (The producers' stdout, a summary.)"""
    remote.mkdir()
    # follow_drain's command, with local retention at every round.
    d = subprocess.Popen([str(c) for c in drain_cmd(local, remote)]
                         + ["--follow", "--interval-ms", "20", "--release-bytes", "1"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    pout, most, most_segs = run_watching(local, cmd, env)
    # Let the following drain catch up, then one last round (it
    # releases what the ranks left).
    time.sleep(0.5)
    stop(d)
    r = run([str(c) for c in drain_cmd(local, remote)] + ["--release-bytes", "1"])
    return pout, check_released(local, f"{remote}/{STREAM}", most, most_segs, producers, count, r.stdout)


def case_ranks(flavour, np=2):
    def case(work):
        exe = program(flavour)
        local, remote = work / "local", work / "remote"
        cmd = launcher(flavour, np) + [exe, "produce", local, STREAM, "3", str(EVENTS), "40", str(ROLL), "2000"]
        return run_and_check(local, remote, cmd, mpi_env(), np, EVENTS)[1]
    return case


def python_producer(local, pause=0.002):
    """A Python producer's program: 12,000 events, a flush every 40 and
    `pause` seconds after it, a roll at 64 KB; `local` None: PARALOG_LOCAL
    (under `paralog run`). It prints "ids FIRST LAST" (its id before and
    after the rolls)."""
    return ("import time, paralog.stream as ps\n"
            f"p = ps.Producer({STREAM!r}, 3, local={str(local) if local else None!r}, roll={ROLL})\n"
            "first = p.id\n"
            f"for i in range({EVENTS}):\n"
            "    p.append(f'{first}:{i}:py'.encode())\n"
            "    if (i + 1) % 40 == 0:\n"
            "        p.flush()\n"
            f"        time.sleep({pause})\n"
            "print('ids', first, p.id)\n"
            "p.close()\n")


def check_rolled(out):
    ids = [x.split() for x in out.splitlines() if x.startswith("ids ")]
    check(len(ids) == 1 and ids[0][1] != ids[0][2], f"the producer's id after its rolls: {out[-300:]!r}")


def case_python(work):
    local, remote = work / "local", work / "remote"
    env = dict(os.environ, PYTHONPATH=str(PYPATH))
    out, summary = run_and_check(local, remote, [PY, "-c", python_producer(local)], env, 1, EVENTS)
    check_rolled(out)
    return summary


def case_paralog_run(how):
    """`paralog run` with local retention at every round, given as the
    option (a Python producer) or as PARALOG_STREAM_RELEASE_BYTES (two
    MPICH ranks, which also shows capture accepting the setting): the
    node-local root shrinks while the program runs (its server releases
    the rolled segments), nothing is left when it returns, and `cat` of
    the prefix's stream gives every event once."""
    def case(work):
        local, prefix = work / "local", work / "prefix"
        prefix.mkdir()
        cmd = [BIN, "run", "--prefix", prefix, "--local", local, "--job", "t"]
        # 10 ms after each flush (300 flushes, about 3 s): the run's server
        # releases once per round, so a producer done in a few rounds (2 ms
        # pauses took 0.8 s in CI) could outrun it and the peak would
        # measure the pace, not the release.
        if how == "option":
            env = dict(os.environ, PYTHONPATH=str(PYPATH))
            cmd += ["--mpi", "none", "--stream-release-bytes", "1", "--", PY, "-c", python_producer(None, 0.01)]
            producers = 1
        else:
            env = mpi_env({"PARALOG_STREAM_RELEASE_BYTES": "1"})
            cmd += ["--mpi", "mpich", "--", *launcher("mpich", 2), program("mpich"), "produce", "-", STREAM, "3",
                    str(EVENTS), "40", str(ROLL), "10000"]
            producers = 2
        try:
            out, most, most_segs = run_watching(local, cmd, env)
        finally:
            keep_server_log(local, "t")
        if how == "option":
            check_rolled(out)
        return check_released(local, f"{prefix}/{STREAM}", most, most_segs, producers, EVENTS, out)
    return case


def seg_sizes(local):
    """{segment file: bytes} of the stream on the node-local root now. A
    server or drain running beside the caller releases segments: one gone
    between the listing and its stat is not counted."""
    sizes = {}
    for f in (local / ".paralog-streams" / STREAM).glob("*.seg"):
        try:
            sizes[f.name] = f.stat().st_size
        except FileNotFoundError:
            pass
    return sizes


def stream_row(local):
    rows = json.loads(run([BIN, "status", "--local", local, "--job", "t", "--json"]).stdout)["streams"]
    row = [r for r in rows if r.get("stream") == STREAM]
    check(len(row) == 1, f"status streams: {rows}")
    return row[0]


def until(local, done, what, timeout=60):
    """The stream's status row once `done(row)`, waiting up to `timeout` s."""
    deadline = time.time() + timeout
    while True:
        row = stream_row(local)
        if done(row):
            return row
        check(time.time() < deadline, f"{what} not seen in {timeout} s: {row}")
        time.sleep(0.1)


def case_status(work):
    """`paralog server --stream-release-bytes 1` on one node: a Python
    producer that stays alive and 3 waves of 3 `stream produce` that end.
    Once the server released every ended producer's segment, `paralog
    status` counts as released exactly those segments (their files gone)
    and the bytes they wrote (what `produce` says), holds the live
    producer's segment file (its bytes, drained and not released: all
    past its header), nothing not drained; once the live one ends too,
    its file is released and counted, nothing is held; every event once."""
    local, remote = work / "local", work / "remote"
    remote.mkdir()
    srv = Server(local, remote, dict(os.environ), job="t", extra=["--stream-release-bytes", "1"])
    live = None
    try:
        code = ("import sys, paralog.stream as ps\n"
                f"p = ps.Producer({STREAM!r}, 3, local=sys.argv[1])\n"
                "for i in range(500):\n"
                "    p.append(f'{p.id}:{i}:live'.encode())\n"
                "p.flush()\n"
                "print(p.id, flush=True)\n"
                "sys.stdin.readline()\n"
                "p.close()\n")
        live = subprocess.Popen([PY, "-c", code, str(local)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, env=dict(os.environ, PYTHONPATH=str(PYPATH)), start_new_session=True)
        live_id = live.stdout.readline().strip()
        check(len(live_id) == 16, f"the live producer said {live_id!r}")
        flushed, written = {live_id: 500}, {}
        for _ in range(3):
            for r in [producer_result(p) for p in [produce(local, 400, flush_every=100) for _ in range(3)]]:
                check(r["rc"] == 0 and r["bytes"], f"producer: {r}")
                flushed[r["id"]], written[r["id"]] = r["flushed"], r["bytes"]
        row = until(local, lambda r: r["released_segments"] >= len(written) and r["lag_bytes"] == 0,
                    f"{len(written)} segments released")
        segs = seg_sizes(local)
        check(len(segs) == 1, f"segment files left: {segs}")
        live_bytes = next(iter(segs.values()))
        want = {"released_segments": len(written), "released_bytes": sum(written.values()),
                "held_bytes": live_bytes, "drained_bytes": row["bytes"], "lag_bytes": 0, "producers": 1}
        check({k: row[k] for k in want} == want, f"status {row}, on disk {want}")
        check(0 < row["bytes"] < live_bytes and row["releases"] >= 1, f"status {row}")
        table = run([BIN, "status", "--local", local, "--job", "t", "--once"]).stdout
        check(f"released {len(written)} segment(s)" in table, f"status table: {table[-600:]}")
        # The live producer ends: its segment goes too.
        live.communicate("\n", timeout=60)
        check(live.returncode == 0, f"the live producer exited {live.returncode}")
        end = until(local, lambda r: r["released_segments"] == len(written) + 1, "the live producer released")
        want = {"released_segments": len(written) + 1, "released_bytes": sum(written.values()) + live_bytes,
                "held_bytes": 0, "drained_bytes": 0, "lag_bytes": 0, "producers": 0}
        check({k: end[k] for k in want} == want, f"status {end}, on disk {want}")
        check(not seg_sizes(local), f"segments left: {seg_sizes(local)}")
    finally:
        if live and live.poll() is None:
            kill_tree(live)
        srv.kill()
    check_events(cat_json(f"{remote}/{STREAM}", "--from", "earliest"), flushed)
    return (f"{want['released_segments']} segments, {want['released_bytes']} bytes released and counted, "
            f"{row['releases']} releases by then; {live_bytes} held by the live producer before it ended")


ENDED = 300
SOFT_LIMIT = 96


def lowered_open_files():
    """For preexec_fn: a soft open-file limit of SOFT_LIMIT, the hard one
    as it is."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (SOFT_LIMIT, hard))


def case_open_files(work):
    """More ended producers' segments than a lowered soft open-file limit
    (a release holds up to 128 locked): `stream drain` and `paralog
    server` raise it at start and release them all; the remote's bytes
    are a drain of a copy of the root without the limit."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    check(hard == resource.RLIM_INFINITY or hard > 4 * SOFT_LIMIT, f"hard open-file limit {hard}: too low to test")
    code = ("import sys, paralog.stream as ps\n"
            f"for i in range({ENDED}):\n"
            f"    p = ps.Producer({STREAM!r}, 3, local=sys.argv[1])\n"
            "    p.append(f'{p.id}:0:ended'.encode())\n"
            "    p.flush()\n"
            "    p.close()\n")
    env = dict(os.environ, PYTHONPATH=str(PYPATH))
    made = {}
    for how in ("drain", "server"):
        local = work / how / "local"
        local.mkdir(parents=True)
        os.chmod(local, 0o700)
        run([PY, "-c", code, local], env=env)
        check(len(seg_sizes(local)) == ENDED, f"{how}: {len(seg_sizes(local))} segments made, not {ENDED}")
        # The reference: a copy drained with no limit and no release.
        copy, direct = work / how / "copy", work / how / "direct"
        shutil.copytree(local, copy)
        direct.mkdir()
        run(drain_cmd(copy, direct) + ["--release-bytes", "0"])
        remote = work / how / "remote"
        remote.mkdir()
        if how == "drain":
            # A round takes every segment and releases 128; each later
            # one releases 128 more.
            for _ in range(5):
                r = subprocess.run([str(c) for c in drain_cmd(local, remote)] + ["--release-bytes", "1"],
                                   capture_output=True, text=True, preexec_fn=lowered_open_files)
                check(r.returncode == 0, f"stream drain under a soft limit of {SOFT_LIMIT}: {r.returncode} "
                                         f"{r.stderr[-500:]}")
                if not seg_sizes(local):
                    break
        else:
            srv = Server(local, remote, dict(os.environ), job="t", extra=["--stream-release-bytes", "1"],
                         preexec=lowered_open_files)
            try:
                deadline = time.time() + 60
                while seg_sizes(local) and time.time() < deadline:
                    time.sleep(0.1)
                srv.drain_and_stop()
            finally:
                srv.kill()
            check(srv.p.returncode == 0, f"the server exited {srv.p.returncode}: {srv.text()[-500:]}")
        left = seg_sizes(local)
        check(not left, f"{how}: {len(left)} segments left under a soft limit of {SOFT_LIMIT}")
        cuts = (local / ".paralog-streams" / STREAM / "cuts").read_bytes()
        check(cuts[:8] == b"PLSTBASE", f"{how}: the cut log starts with {cuts[:8]!r}")
        want, got = tree(direct / ".paralog-streams"), tree(remote / ".paralog-streams")
        diff = tree_difference(want, got, ("drained from the copy", f"drained by {how}"))
        check(diff is None, f"{how}: {diff}")
        made[how] = sum(len(v) for v in got.values() if isinstance(v, bytes))
    check_stream(cat_json(f"{work / 'server' / 'remote'}/{STREAM}", "--from", "earliest"), ENDED, 1)
    return (f"{ENDED} segments released under a soft limit of {SOFT_LIMIT} by stream drain and by the server; "
            f"remote streams of {made['drain']} and {made['server']} bytes equal to a drain of the copy")


def main():
    a = suite_options().parse_args()
    suite = Suite("stream-local-retention", keep=a.keep)
    cases = [("mpich", case_ranks("mpich")), ("openmpi", case_ranks("openmpi")), ("python", case_python),
             ("paralog run, option", case_paralog_run("option")),
             ("paralog run, setting", case_paralog_run("setting")), ("status", case_status),
             ("open-file limit", case_open_files)]
    sys.exit(suite.run(cases, only=a.only))


if __name__ == "__main__":
    os.umask(0o022)
    main()
