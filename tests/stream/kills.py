#!/usr/bin/python3
"""Shared event streams killed at random points (issue 17: "kill -9 of
producers, of a server, of a reader, and MinIO restarts, at random points:
20 trials in make test, 500 by hand"). Each trial, from its seed:

- the remote: a directory, or (one trial in four) S3 on a MinIO on
  loopback, which is killed (SIGKILL) and started again at a random moment
  while everything runs;
- what drains: `paralog stream drain --follow` (a round every 5-50 ms) or
  a node server (`paralog server --local L --remote R`), killed (SIGKILL)
  at a random moment in one trial of two, else stopped the same way at the
  end;
- 3 or 4 producers (`paralog stream produce`, a flush every 37-200 events,
  payloads of 0 or 100 bytes) killed (SIGKILL) one after the other at
  random moments;
- a reader group G (`paralog stream tail --group G --commit-every K`)
  reading while they run, killed (SIGKILL) at a random moment.

Then one `paralog stream drain` finishes, and:

- every event a producer reported flushed before its kill is stored
  exactly once, nothing it did not append is there, per producer in
  order, offsets contiguous (tests/lib/streams.check_events);
- the group, run again from its committed offsets (`cat --group G`), gets
  every stored event the killed reader had not printed: nothing is lost,
  and the events it gets twice are at most the uncommitted window (K plus
  what sat in the reader's 64 KiB output buffer).

Usage: python3 -m tests.stream.kills [--trials N] [--first SEED] [--only SUBSTRING] [--keep]
(`make test-stream` runs 20 trials, `make test-stream-long` 500.)
Ends with "stream-kills: N passed, N failed".
"""
import json
import os
import random
import signal
import subprocess
import sys
import time

from tests.lib.check import Suite, check, suite_options
from tests.lib.paths import BIN
from tests.lib.proc import kill_tree, run
from tests.lib.streams import STREAM, cat_json, check_events, drain, follow_drain, lazy_s3, produce, producer_report

EVENTS = 30_000


def start_server(local, remote, env):
    """A node server draining the node-local root's streams (its own session)."""
    cmd = [BIN, "server", "--local", local, "--remote", remote, "--job", "kills"]
    return subprocess.Popen([str(c) for c in cmd], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env)


def start_reader(target, every, env, out, timeout=10):
    """`tail --group G` once the stream is on the remote (describe answers),
    its output to the file `out` (a pipe nobody reads would stop it)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if run([BIN, "stream", "describe", target], env=env, check=False).returncode == 0:
            break
        time.sleep(0.02)
    with open(out, "wb") as f:
        return subprocess.Popen([str(BIN), "stream", "tail", target, "--json", "--group", "G",
                                 "--commit-every", str(every)],
                                stdout=f, stderr=subprocess.DEVNULL, start_new_session=True, env=env)


def reader_events(p, out):
    """The events a killed reader printed: the complete lines of its output
    (what reached the file was delivered)."""
    p.wait()
    text = out.read_text()
    lines = text.split("\n")
    if not text.endswith("\n"):
        lines = lines[:-1]
    return [json.loads(x) for x in lines if x.strip()]


def case_trial(seed, s3):
    def case(work):
        rng = random.Random(seed)
        on_s3 = rng.random() < 0.25
        local = work / "local"
        if on_s3:
            s = s3()
            url, env = s.url(f"kills-{seed}"), s.env
        else:
            (work / "remote").mkdir()
            url, env = str(work / "remote"), None
        target = f"{url}/{STREAM}"
        by_server = rng.random() < 0.5
        roll = None if (by_server or on_s3) else 1 << 20
        if by_server:
            d = start_server(local, url, {**os.environ, **(env or {})})
        else:
            d = follow_drain(local, url, interval_ms=rng.choice([5, 20, 50]), env=env, roll_bytes=roll)
        ps = [produce(local, EVENTS, flush_every=rng.choice([37, 100, 200]), payload_size=rng.choice([0, 100]))
              for _ in range(rng.choice([3, 4]))]
        every = rng.choice([50, 500, 2000])
        reader = start_reader(target, every, env, work / "reader.out")
        minio_killed = False
        if on_s3 and rng.random() < 0.7:
            time.sleep(rng.uniform(0.0, 0.3))
            s.minio.kill()
            minio_killed = True
            time.sleep(rng.uniform(0.0, 0.5))
            s.minio.start()
        time.sleep(rng.uniform(0.02, 0.3))
        engine_killed = rng.random() < 0.5
        for p in ps:
            time.sleep(rng.uniform(0, 0.05))
            kill_tree(p, signal.SIGKILL)
            if engine_killed and rng.random() < 0.3:
                kill_tree(d, signal.SIGKILL)
        # The reader goes on while the engine drains what is left (unless
        # it was killed), and is killed in the middle of that.
        time.sleep(rng.uniform(0.1, 1.5))
        kill_tree(reader, signal.SIGKILL)
        kill_tree(d, signal.SIGKILL)
        first = reader_events(reader, work / "reader.out")
        d.communicate()
        reports = [producer_report(p) for p in ps]
        drain(local, url, env=env, roll_bytes=roll)
        flushed = {pid: n for pid, n, _ in reports if pid}
        stored = cat_json(target, "--from", "earliest", env=env)
        got = check_events(stored, flushed, {pid: EVENTS for pid in flushed})
        extra = sum(got[p] - flushed[p] for p in got)

        key = lambda e: (e["partition"], e["offset"])  # noqa: E731
        every_key = {key(e) for e in stored}
        for e in first:
            check(key(e) in every_key, f"the reader printed {key(e)}, which is not stored")
        again = cat_json(target, "--group", "G", env=env)
        seen = {key(e) for e in first} | {key(e) for e in again}
        check(seen == every_key, f"{len(every_key - seen)} stored events never delivered to group G")
        dup = len({key(e) for e in first} & {key(e) for e in again})
        check(dup <= every + 65536 // 100, f"{dup} events delivered twice to G (commits every {every})")
        return (f"{'s3' if on_s3 else 'dir'}{', MinIO restarted' if minio_killed else ''}, "
                f"{'server' if by_server else 'drain'}{' killed' if engine_killed else ''}: "
                f"{len(stored)} stored, flushed {sorted(flushed.values())}, {extra} unacknowledged stored; "
                f"reader printed {len(first)}, {dup} again")
    return case


def main():
    ap = suite_options()
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--first", type=int, default=2000, help="the first trial's seed")
    a = ap.parse_args()
    suite = Suite("stream-kills", keep=a.keep)
    s3 = lazy_s3(suite)
    cases = [(f"trial {seed}", case_trial(seed, s3)) for seed in range(a.first, a.first + a.trials)]
    sys.exit(suite.run(cases, only=a.only))


if __name__ == "__main__":
    os.umask(0o022)
    main()
