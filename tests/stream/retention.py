#!/usr/bin/python3
"""Backpressure, retention and following of shared event streams
(docs/streams.md, issue 17): real `paralog stream produce` processes with a
quota of undrained bytes, `paralog stream drain`, `paralog stream trim`,
`tail` and `cat --from TIME`. Cases:

  quota, at once    a producer with a 200 KB quota and no drain fails as
                    soon as the node holds more undrained bytes than that
                    (exit 1, the stream, the bytes and the quota named, by
                    at most one batch over it); every event it flushed is
                    stored once after a drain, nothing invented
  quota, waits      the same quota with a 20 s wait and a drain started
                    1 s later: the producer waits for it (takes at least
                    1 s) and then completes; all events stored once
  quota, C API      the same through libparalog_stream (Python): code
                    EFULL and the message
  trim              a stream drained in 6 rounds, a segment each; `trim
                    --keep-bytes` deletes the oldest segments of each
                    partition, keeping at least that many bytes and always
                    the last segment; `describe` shows the new first
                    offsets; `cat --from earliest` starts there with every
                    event above it; a group committed below them is
                    refused, naming the partition, the offset and the first
                    offset; `--older-than 1h` deletes nothing, `--older-than
                    0s` all but each partition's last segment; the drain
                    goes on after a trim (new rounds readable)
  tail              `stream tail --group T` started on a drained stream
                    while two more producers append and a drain follows:
                    it prints every event, offsets contiguous, each once,
                    and commits as it waits (lag 0 once it has caught up)
  from TIME         events at known times (one producer, 1 ms apart):
                    `cat --from` an RFC 3339 time, ns since the epoch, and
                    the Python reader from a time all start each
                    partition at the first event at or after it
  watermark order   two producers at once, one on partition 0, one on
                    partition 1, partition 2 silent: `tail --order
                    watermark --idle-ms 1500` prints every event once in
                    strict event-time order (none late), which cut order
                    is not; `cat --order watermark` prints nothing while it
                    waits for the silent partition (a 10 min timeout,
                    killed after 3 s) and, with a 500 ms timeout, the same
                    lines as tail after at least 500 ms, and so does the
                    Python reader (`order="watermark", idle=0.5`; an idle
                    timeout in cut order is EINVAL)
  status            a `paralog server` draining a stream to a directory:
                    `paralog status` shows the stream's producers, its
                    bytes not drained yet (0 once drained) and the lag of a
                    reader group that read 1,000 of 3,000 events (2,000)

Usage: python3 -m tests.stream.retention [--only SUBSTRING] [--keep]
Ends with "stream-retention: N passed, N failed".
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.lib.check import Suite, check, suite_options
from tests.lib.paths import BIN, PY, ROOT
from tests.lib.proc import kill_tree, run
from tests.lib.server import Server
from tests.lib.streams import STREAM, cat, check_events, drain, follow_drain, produce, producer_report, stop

QUOTA = 200_000
BATCH = 100 * 104 + 88  # 100 events of 104 bytes, a batch's header and commit


def read_json_lines(p, n, timeout=120):
    """Up to `n` JSON lines a `stream tail` process prints, for at most
    `timeout` seconds (less if it ends)."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        got.append(json.loads(line))
    return got


def case_quota_at_once(work):
    local, remote = work / "local", work / "remote"
    remote.mkdir()
    cmd = [BIN, "stream", "produce", "--local", local, "--stream", STREAM, "--partitions", "3", "--events",
           "5000", "--flush-every", "100", "--quota-bytes", str(QUOTA), "--quota-wait-ms", "0"]
    r = run(cmd, check=False)
    msg = r.stderr.strip()
    check(r.returncode == 1 and f"stream {STREAM}:" in msg and f"past its quota of {QUOTA} bytes" in msg
          and "failing at once" in msg, f"{r.returncode} {msg}")
    held = int(msg.split("stream tele: ")[1].split()[0])
    check(QUOTA < held <= QUOTA + BATCH, f"failed with {held} bytes undrained, quota {QUOTA}")
    lines = r.stdout.splitlines()
    pid = lines[0].split()[1]
    flushed = int([x for x in lines if x.startswith("flushed")][-1].split()[1])
    check(flushed < 5000, f"flushed {flushed} of 5000 past the quota")
    drain(local, remote)
    check_events(cat(remote, "--from", "earliest"), {pid: flushed}, {pid: 5000})
    return msg


def case_quota_waits(work):
    local, remote = work / "local", work / "remote"
    remote.mkdir()
    t0 = time.monotonic()
    cmd = [BIN, "stream", "produce", "--local", local, "--stream", STREAM, "--partitions", "3", "--events", "5000",
           "--flush-every", "100", "--quota-bytes", str(QUOTA), "--quota-wait-ms", "20000"]
    p = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    time.sleep(1.0)
    if p.poll() is not None:
        check(False, f"the producer did not wait for the drain: {p.communicate()}")
    d = follow_drain(local, remote)
    pid, flushed, rc = producer_report(p)
    took = time.monotonic() - t0
    stop(d)
    drain(local, remote)
    check(rc == 0 and flushed == 5000, f"producer exited {rc} after flushing {flushed}")
    check_events(cat(remote, "--from", "earliest"), {pid: 5000})
    return f"took {took:.1f} s (the drain started after 1 s)"


def case_quota_c(work):
    r = run([PY, "-m", "tests.stream.api_client", "error", "quota", work / "local", STREAM], cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=str(ROOT / "crates/stream-c/python")))
    out = r.stdout.strip()
    check(out.startswith("code 8:") and f"stream {STREAM}:" in out and "past its quota of 100000 bytes" in out
          and "waited" in out, out)
    return out


def describe(remote):
    return json.loads(run([BIN, "stream", "describe", f"{remote}/{STREAM}", "--json"]).stdout)


def seg_count(remote):
    return sorted(str(p.relative_to(remote)) for p in Path(remote).glob(f".paralog-streams/{STREAM}/p*/*.seg"))


def case_trim(work):
    local, remote = work / "local", work / "remote"
    remote.mkdir()
    pids = {}
    for _ in range(6):
        pid, n, _ = producer_report(produce(local, 1000, flush_every=200, payload_size=200))
        pids[pid] = n
        # A round per producer, 64 KB segments: several per partition.
        run([BIN, "stream", "drain", "--local", local, "--remote", remote, "--roll-bytes", str(64 << 10)])
    every = cat(remote, "--from", "earliest")
    check_events(every, pids)
    run([BIN, "stream", "cat", f"{remote}/{STREAM}", "--group", "old", "--limit", "10"])
    before = seg_count(remote)
    keep = 200 << 10
    t = json.loads(run([BIN, "stream", "trim", f"{remote}/{STREAM}", "--keep-bytes", "200K", "--json"]).stdout)
    after = seg_count(remote)
    check(sum(len(x["deleted"]) for x in t) == len(before) - len(after) > 0, f"trim: {t}")
    desc = describe(remote)
    for x, part in zip(t, desc["partition"]):
        pdir = Path(remote) / ".paralog-streams" / STREAM / f"p{x['partition']:05}"
        sizes = [f.stat().st_size for f in sorted(pdir.glob("*.seg"))]
        check(sum(sizes) >= keep and sum(sizes) - sizes[0] < keep, f"partition {x['partition']} keeps {sizes}")
        check(part["first_offset"] == x["first_offset"] == int(sorted(pdir.glob("*.seg"))[0].stem),
              f"first offsets: {part} {x}")
    firsts = {p["partition"]: p["first_offset"] for p in desc["partition"]}
    got = cat(remote, "--from", "earliest")
    want = [e for e in every if e["offset"] >= firsts[e["partition"]]]
    check(got == want, f"after the trim: {len(got)} events from earliest, {len(want)} expected")
    r = run([BIN, "stream", "cat", f"{remote}/{STREAM}", "--group", "old"], check=False)
    check(r.returncode == 1 and "was trimmed" in r.stderr and "partition 0: offset" in r.stderr
          and f"starts at offset {firsts[0]} now" in r.stderr, f"a group below the first offsets: {r.stderr}")
    same = json.loads(run([BIN, "stream", "trim", f"{remote}/{STREAM}", "--older-than", "1h", "--json"]).stdout)
    check(all(not x["deleted"] for x in same) and seg_count(remote) == after, f"--older-than 1h: {same}")
    run([BIN, "stream", "trim", f"{remote}/{STREAM}", "--older-than", "0s"])
    last = seg_count(remote)
    check(len(last) == desc["partitions"] < len(after), f"--older-than 0s left {last}")
    pid, n, _ = producer_report(produce(local, 1000, flush_every=200, payload_size=200))
    drain(local, remote)
    tail = [e for e in cat(remote, "--from", "earliest") if e["producer"] == pid]
    check(len(tail) == 1000, f"{len(tail)} events of the round after the trims")
    return f"{len(before)} segments, {len(after)} after --keep-bytes 200K, {len(last)} after --older-than 0s"


def case_tail(work):
    local, remote = work / "local", work / "remote"
    remote.mkdir()
    pids = dict([producer_report(produce(local, 1000, flush_every=100))[:2]])
    drain(local, remote)
    t = subprocess.Popen([str(BIN), "stream", "tail", f"{remote}/{STREAM}", "--group", "T", "--json",
                          "--interval-ms", "20"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    d = follow_drain(local, remote)
    for pid, n, _ in [producer_report(p) for p in [produce(local, 2000, flush_every=100) for _ in range(2)]]:
        pids[pid] = n
    got = read_json_lines(t, 5000)
    stop(d)
    # The group's offsets are stored when tail waits for the next round.
    for _ in range(200):
        groups = describe(remote)["groups"]
        if groups and groups[0]["lag"] == 0:
            break
        time.sleep(0.05)
    kill_tree(t)
    t.communicate()
    check(len(got) == 5000, f"tail printed {len(got)} of 5000 events")
    check_events(sorted(got, key=lambda e: (e["partition"], e["offset"])), pids)
    check(groups and groups[0]["lag"] == 0, f"tail's group after catching up: {groups}")
    return f"{len(got)} events followed over {describe(remote)['round']} rounds"


def case_from_time(work):
    local, remote = work / "local", work / "remote"
    remote.mkdir()
    base = 1_795_712_400 * 10**9  # 2026-11-26T17:00:00Z
    env = dict(os.environ, PYTHONPATH=str(ROOT / "crates/stream-c/python"))
    run([PY, "-m", "tests.stream.api_client", "produce", local, STREAM, "3", "1000", "100", "--time", str(base)],
        cwd=ROOT, env=env)
    drain(local, remote)
    every = cat(remote, "--from", "earliest")
    want = [e for e in every if e["time_ns"] >= base + 500 * 10**6]
    check(len(want) == 500, f"{len(want)} events at or after 17:00:00.5")
    for spec in ["2026-11-26T17:00:00.5Z", str(base + 500 * 10**6)]:
        got = cat(remote, "--from", spec)
        check(got == want, f"--from {spec}: {len(got)} events, {len(want)} expected")
    py = run([PY, "-m", "tests.stream.api_client", "read", remote, STREAM, "-", "5000", "0.2", "--from",
              str(base + 500 * 10**6)], cwd=ROOT, env=env).stdout
    got = [json.loads(x) for x in py.splitlines()]
    check([(e["partition"], e["offset"]) for e in got] == [(e["partition"], e["offset"]) for e in want],
          f"the Python reader from the time: {len(got)} events")
    check(cat(remote, "--from", "5m") == [], "--from 5m (ago) found events stamped in 2026-11-26 17:00")
    return f"{len(want)} of 1000 events from 17:00:00.5"


def case_watermark(work):
    local, remote = work / "local", work / "remote"
    remote.mkdir()
    # Three partitions; producer A writes partition 0 only, B partition 1
    # only, at the same time (event times: each one's clock, interleaved);
    # partition 2 stays silent.
    d = follow_drain(local, remote)
    cmd = [BIN, "stream", "tail", f"{remote}/{STREAM}", "--order", "watermark", "--idle-ms", "1500", "--json",
           "--interval-ms", "20", "--from", "earliest"]
    t = None
    ps = [produce(local, 3000, flush_every=50, partition_by=f"fixed:{p}") for p in (0, 1)]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (remote / ".paralog-streams" / STREAM / "stream").exists():
        time.sleep(0.02)
    t = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    pids = dict(producer_report(p)[:2] for p in ps)
    got = read_json_lines(t, 6000)
    stop(d)
    kill_tree(t)
    t.communicate()
    check(len(got) == 6000, f"tail --order watermark printed {len(got)} of 6000 events")
    check_events(sorted(got, key=lambda e: (e["partition"], e["offset"])), pids)
    times = [e["time_ns"] for e in got]
    check(times == sorted(times) and not any("late" in e for e in got),
          "tail --order watermark: event times go back")
    check({e["partition"] for e in got} == {0, 1}, "events of both partitions")
    # The same in cat: held while the silent partition is waited for...
    cmd = [BIN, "stream", "cat", f"{remote}/{STREAM}", "--order", "watermark", "--from", "earliest", "--json"]
    c = subprocess.Popen([str(x) for x in cmd + ["--idle-ms", "600000"]], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    time.sleep(3)
    waiting = c.poll() is None
    kill_tree(c)
    held, err = c.communicate()
    check(waiting and not held, f"cat printed {len(held)} bytes before partition 2 was silent for its timeout {err}")
    # ...and after its timeout, strict time order, which cut order is not.
    t0 = time.monotonic()
    lines = run(cmd + ["--idle-ms", "500"]).stdout.splitlines()
    waited = time.monotonic() - t0
    check([json.loads(x) for x in lines] == got and waited >= 0.5,
          f"cat --order watermark: {len(lines)} events after {waited:.2f} s")
    # The Python reader (libparalog_stream) in watermark order: the same.
    env = dict(os.environ, PYTHONPATH=str(ROOT / "crates/stream-c/python"))
    py = run([PY, "-m", "tests.stream.api_client", "read", remote, STREAM, "-", "6000", "5", "--from", "earliest",
              "--order", "watermark", "--idle", "0.5"], cwd=ROOT, env=env).stdout
    check([(e["partition"], e["offset"]) for e in map(json.loads, py.splitlines())]
          == [(e["partition"], e["offset"]) for e in got], "the Python reader in watermark order")
    r = run([PY, "-m", "tests.stream.api_client", "error", "idle", remote, STREAM], cwd=ROOT, env=env).stdout
    check("code 2:" in r and "watermark order" in r, f"an idle timeout in cut order (EINVAL, 2): {r}")
    cut = [e["time_ns"] for e in cat(remote, "--from", "earliest")]
    check(sorted(cut) == times and cut != times, "cut order is already time order: the case shows nothing")
    return f"{len(got)} events in time order; cat waited {waited:.2f} s for the silent partition"


def case_status(work):
    local, remote = work / "local", work / "remote"
    remote.mkdir()
    srv = Server(local, remote, dict(os.environ), job="t")
    try:
        producer_report(produce(local, 3000, flush_every=500))
        st = None
        for _ in range(600):
            st = json.loads(run([BIN, "status", "--local", local, "--job", "t", "--json"]).stdout)["streams"]
            if st and st[0].get("lag_bytes") == 0:
                break
            time.sleep(0.05)
        check(st and st[0]["stream"] == STREAM and st[0]["lag_bytes"] == 0 and st[0]["producers"] == 1
              and st[0]["bytes"] > 3000 * 104, f"status streams: {st}")
        # Drained counts a cut once it is recorded; the watermark follows.
        for _ in range(600):
            if (remote / ".paralog-streams" / STREAM / "stream").exists() and describe(remote)["events"] == 3000:
                break
            time.sleep(0.05)
        run([BIN, "stream", "cat", f"{remote}/{STREAM}", "--group", "S", "--limit", "1000"])
        st = json.loads(run([BIN, "status", "--local", local, "--job", "t", "--json"]).stdout)["streams"]
        check(st[0]["groups"] == [{"group": "S", "lag": 2000}], f"group lag in status: {st}")
        table = run([BIN, "status", "--local", local, "--job", "t", "--once"]).stdout
        line = [x for x in table.splitlines() if x.startswith(f"stream {STREAM}:")]
        check(line and "0 B not drained yet" in line[0] and "S 2000" in line[0], f"status table: {table[-500:]}")
    finally:
        srv.kill()
    return line[0]


def main():
    a = suite_options().parse_args()
    suite = Suite("stream-retention", keep=a.keep)
    cases = [("quota, at once", case_quota_at_once), ("quota, waits", case_quota_waits),
             ("quota, C API", case_quota_c), ("trim", case_trim), ("tail", case_tail), ("from TIME", case_from_time),
             ("watermark order", case_watermark), ("status", case_status)]
    sys.exit(suite.run(cases, only=a.only))


if __name__ == "__main__":
    os.umask(0o022)
    main()
