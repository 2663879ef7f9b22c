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

Usage: python3 -m tests.stream.local_retention [--only SUBSTRING] [--keep]
Ends with "stream-local-retention: N passed, N failed".
"""
import os
import subprocess
import sys
import time
from collections import defaultdict

from tests.lib.check import Suite, check, suite_options
from tests.lib.mpi import launcher, mpi_env
from tests.lib.proc import run
from tests.lib.streams import cat, drain_cmd, stop
from tests.lib.paths import PY
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


def run_and_check(local, remote, cmd, env, producers, count):
    """Run the producers' command while a drain follows them with local
    retention at every round; check what the node held and what `cat`
    gives. A summary."""
    remote.mkdir()
    # follow_drain's command, with local retention at every round.
    d = subprocess.Popen([str(c) for c in drain_cmd(local, remote)]
                         + ["--follow", "--interval-ms", "20", "--release-bytes", "1"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    prod = subprocess.Popen([str(c) for c in cmd], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    most, most_segs = 0, 0
    while prod.poll() is None:
        if (local / ".paralog-streams" / STREAM).is_dir():
            b, s = held(local)
            most, most_segs = max(most, b), max(most_segs, s)
        time.sleep(0.01)
    pout, perr = prod.communicate(timeout=300)
    check(prod.returncode == 0, f"ranks: {prod.returncode} {pout[-300:]} {perr[-300:]}")
    # Let the following drain catch up, then one last round (it
    # releases what the ranks left).
    time.sleep(0.5)
    stop(d)
    r = run([str(c) for c in drain_cmd(local, remote)] + ["--release-bytes", "1"])
    end, end_segs = held(local)
    events = cat(remote)
    ids = check_stream(sorted(events, key=lambda e: (e["partition"], e["offset"])), producers, count)
    written = sum(len(e["payload"]) + 40 for e in events)
    check(most < written / 3, f"the node held up to {most} bytes of {written} written")
    check(len(ids) > 4 * producers, f"{len(ids)} producer ids: the segments did not roll")
    check(most_segs < len(ids) / 2, f"{most_segs} segment files at once of {len(ids)}: not deleted as drained")
    check(end_segs == 0 and end < 1000, f"after the drain: {end_segs} segments, {end} bytes; {r.stdout[-300:]}")
    cuts = (local / ".paralog-streams" / STREAM / "cuts").read_bytes()
    check(cuts[:8] == b"PLSTBASE", f"the cut log starts with {cuts[:8]!r}")
    return (pout, f"{len(events)} events, {written} bytes written, the node held at most {most} "
                  f"({most_segs} segments at once of {len(ids)}), {end} after the drain")


def case_ranks(flavour, np=2):
    def case(work):
        exe = program(flavour)
        local, remote = work / "local", work / "remote"
        cmd = launcher(flavour, np) + [exe, "produce", local, STREAM, "3", str(EVENTS), "40", str(ROLL), "2000"]
        return run_and_check(local, remote, cmd, mpi_env(), np, EVENTS)[1]
    return case


def case_python(work):
    local, remote = work / "local", work / "remote"
    code = ("import sys, time, paralog.stream as ps\n"
            f"p = ps.Producer(sys.argv[2], 3, local=sys.argv[1], roll={ROLL})\n"
            "first = p.id\n"
            f"for i in range({EVENTS}):\n"
            "    p.append(f'{first}:{i}:py'.encode())\n"
            "    if (i + 1) % 40 == 0:\n"
            "        p.flush()\n"
            "        time.sleep(0.002)\n"
            "print('ids', first, p.id)\n"
            "p.close()\n")
    env = dict(os.environ, PYTHONPATH=str(PYPATH))
    out, summary = run_and_check(local, remote, [PY, "-c", code, local, STREAM], env, 1, EVENTS)
    ids = out.split()
    check(len(ids) == 3 and ids[1] != ids[2], f"the producer's id after its rolls: {out!r}")
    return summary


def main():
    a = suite_options().parse_args()
    suite = Suite("stream-local-retention", keep=a.keep)
    cases = [("mpich", case_ranks("mpich")), ("openmpi", case_ranks("openmpi")), ("python", case_python)]
    sys.exit(suite.run(cases, only=a.only))


if __name__ == "__main__":
    os.umask(0o022)
    main()
