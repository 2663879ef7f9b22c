"""Shared event streams for the suites of tests/stream (docs/streams.md):
`paralog stream produce` processes and what they report, the drain (one
round, or following), `cat`, and the check of what a reader got against
what the producers flushed."""

import json
import signal
import subprocess
from collections import defaultdict

from .check import check
from .paths import BIN
from .proc import kill_tree, run

STREAM = "tele"
PARTS = 3


def produce(local, events, flush_every=500, payload_size=64, stream=STREAM, parts=PARTS, partition_by=None,
            quota=None, **kw):
    """A producer process (its own session); stdout: "producer ID", then
    "flushed N" after each flush returned. partition_by: as `produce
    --partition-by` (round-robin by default); quota: (bytes, wait ms)."""
    cmd = [BIN, "stream", "produce", "--local", local, "--stream", stream, "--partitions", str(parts),
           "--events", str(events), "--flush-every", str(flush_every), "--payload-size", str(payload_size)]
    if partition_by:
        cmd += ["--partition-by", partition_by]
    if quota:
        cmd += ["--quota-bytes", str(quota[0]), "--quota-wait-ms", str(quota[1])]
    return subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kw)


def producer_report(p):
    """(producer id, last flushed count, exit status) from a finished or
    killed producer."""
    r = producer_result(p)
    return r["id"], r["flushed"], r["rc"]


def producer_result(p):
    """producer_report's, as a dict (id, flushed, rc), with `bytes`: the
    bytes of its segment files, headers included, that `produce` says at
    its end (None if it was killed before)."""
    out, err = p.communicate()
    lines = out.split("\n")
    ids = [x.split()[1] for x in lines if x.startswith("producer ")]
    pid = ids[0] if ids else None
    check(pid or p.returncode == -9, f"producer printed no id: {out[:200]} {err[-300:]}")
    flushed = [int(x.split()[1]) for x in lines if x.startswith("flushed ")]
    written = [int(x.split()[1]) for x in lines if x.startswith("bytes ")]
    return {"id": pid, "flushed": flushed[-1] if flushed else 0, "rc": p.returncode,
            "bytes": written[-1] if written else None}


def follow_drain(local, remote, interval_ms=20, env=None, roll_bytes=1 << 20):
    """A drain following the producers (its own session): a round every
    interval_ms. roll_bytes: segment files of a directory remote rolled at
    that size (None: the drain's default, as an object remote takes)."""
    return subprocess.Popen([str(c) for c in drain_cmd(local, remote, roll_bytes)]
                            + ["--follow", "--interval-ms", str(interval_ms)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)


def drain_cmd(local, remote, roll_bytes=1 << 20):
    cmd = [BIN, "stream", "drain", "--local", local, "--remote", remote]
    return cmd + (["--roll-bytes", str(roll_bytes)] if roll_bytes else [])


def stop(p):
    """SIGKILL: the drain is crash-safe, so stopping it is a crash too."""
    kill_tree(p, signal.SIGKILL)
    out, err = p.communicate()
    check(p.returncode in (-9, 0), f"drain failed before it was stopped: {err[-500:]}")
    return out


def drain(local, remote, check_=True, env=None, roll_bytes=1 << 20):
    """One drain round (`paralog stream drain`)."""
    return run(drain_cmd(local, remote, roll_bytes), check=check_, env=env)


def cat_lines(target, *args, env=None):
    """`paralog stream cat TARGET --json ARGS` (TARGET: URL/STREAM), its lines."""
    return run([BIN, "stream", "cat", target, "--json", *args], env=env).stdout.splitlines()


def cat_json(target, *args, env=None):
    """cat_lines, each line decoded."""
    return [json.loads(x) for x in cat_lines(target, *args, env=env)]


def cat(remote, *args):
    """cat_json of the suites' stream under a directory remote."""
    return cat_json(f"{remote}/{STREAM}", *args)


class StreamS3:
    """A MinIO with one bucket for streams; `url(name)` a fresh prefix in it."""

    BUCKET = "plstreams"

    def __init__(self, work):
        from .minio import MinIO
        self.minio, self.env = MinIO.with_bucket(work, self.BUCKET)

    def url(self, name):
        return f"s3://{self.BUCKET}/{name}"


def lazy_s3(suite):
    """A function giving the suite's StreamS3, its MinIO started on the
    first call only (a suite whose S3 cases are filtered out starts none)
    and stopped with the suite."""
    made = []

    def get():
        if not made:
            made.append(StreamS3(suite.base / "minio"))
            suite.cleanup.append(made[0].minio.stop)
        return made[0]
    return get


def local_rounds(local):
    """The rounds of a node-local root's cut log (`stream lag`; 0: none)."""
    lag = json.loads(run([BIN, "stream", "lag", "--local", local, "--json"]).stdout)
    return lag[0]["rounds"] if lag else 0


def frame_len(e):
    """An event frame's bytes (docs/streams-format.md: 40 + key + payload)."""
    key = e.get("key") or ""
    return 40 + len(key.encode()) + len(e["payload"].encode())


def check_events(events, flushed, appended=None):
    """Offsets contiguous from 0 per partition; per (producer, partition)
    seq strictly increasing; per producer the seqs are exactly 0..n-1 for
    some n with flushed[p] <= n <= appended[p] (default n = flushed[p]),
    each with the payload it appended. Returns {producer: n}."""
    next_off = defaultdict(int)
    last = {}
    seqs = defaultdict(list)
    for e in events:
        p = e["partition"]
        check(e["offset"] == next_off[p], f"partition {p}: offset {e['offset']} where {next_off[p]} was expected")
        next_off[p] += 1
        k = (e["producer"], p)
        check(k not in last or e["seq"] > last[k], f"producer {k[0]} partition {p}: seq {e['seq']} after {last.get(k)}")
        last[k] = e["seq"]
        check(e["payload"].startswith(f"{e['producer']}:{e['seq']}:"), f"payload {e['payload'][:40]!r} is not event {e['seq']}'s")
        seqs[e["producer"]].append(e["seq"])
    got = {}
    for pid, f in flushed.items():
        s = sorted(seqs.pop(pid, []))
        n = len(s)
        check(s == list(range(n)), f"producer {pid}: stored seqs are not 0..{n - 1} exactly once (gap or duplicate)")
        hi = appended[pid] if appended else f
        check(f <= n <= hi, f"producer {pid}: {n} events stored, {f} were flushed, {hi} appended")
        got[pid] = n
    check(not seqs, f"events of producers that never ran: {list(seqs)[:3]}")
    return got
