#!/usr/bin/python3
"""Retention and reader-group lag of shared event streams on object
remotes (docs/streams.md "Retention", "Object remotes"; issue 17): a real
MinIO on loopback (tests/lib/minio.py) and `objstore://`. Cases:

  trim, S3 / objstore://
                  three producers (4 KB events) drained by a following
                  `paralog stream drain`; then, while a fourth producer
                  appends and the drain follows, `trim --older-than 2s`
                  (the first three finished 3 s before), then once it
                  is done `trim --keep-bytes 64K`: each is applied by the drain's next
                  round (the command waits for it), every partition's
                  first offset moves up (by age never past the fourth
                  producer's first event); after the last round, `cat --from
                  earliest` equals, line for line, the events at or past
                  the first offsets of a copy of the node-local root
                  drained to a directory (every event past the trim point
                  once, none invented); a group committed below the first
                  offsets is refused naming the partition, the offset and
                  the first offset; on S3 no object wholly below a first
                  offset is left
  trim, drain killed (objstore://)
                  a trim request pending (`--wait-ms 0` says so), the
                  drain killed after it PUT the index naming the trimmed
                  objects retired (PARALOG_FAILPOINT=stream.trim_retired):
                  readers already start at the new first offsets and read
                  every event there; the next drain finishes the request
  status          a `paralog server` draining to S3, then to objstore://:
                  `paralog status` (JSON and table) shows the lag of a
                  group that read 1,000 of 3,000 events (2,000), the
                  numbers `stream describe` shows

Usage: python3 -m tests.stream.object_retention [--only SUBSTRING] [--keep]
Ends with "stream-object-retention: N passed, N failed"."""
import json
import os
import shutil
import sys
import time

from tests.lib.check import Suite, check, suite_options
from tests.lib.paths import BIN
from tests.lib.proc import run
from tests.lib.server import Server
from tests.lib.streams import (STREAM, StreamS3, cat_json, cat_lines, check_events, drain, follow_drain, produce,
                               producer_report, stop)

BUCKET = StreamS3.BUCKET

PAYLOAD = 4000


def describe(target, env):
    return json.loads(run([BIN, "stream", "describe", target, "--json"], env=env).stdout)


def drained_events(target, env):
    """The events the remote holds, 0 before the drain's first round made
    the stream (describe then says there is no such stream)."""
    r = run([BIN, "stream", "describe", target, "--json"], env=env, check=False)
    if r.returncode != 0:
        check("no stream" in r.stderr, f"describe {target}: {r.stderr}")
        return 0
    return json.loads(r.stdout)["events"]


def trim(target, env, *args):
    r = run([BIN, "stream", "trim", target, "--json", "--wait-ms", "120000", *args], env=env)
    rows = json.loads(r.stdout)
    check(isinstance(rows, list), f"trim {args} not applied within 120 s: {rows}")
    return rows


def every_event(work, local):
    """Every event stored, from a copy of the node-local root drained to a
    directory (the cut log replayed): cat's JSON lines."""
    copy, posix = work / "copy", work / "posix"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.rmtree(posix, ignore_errors=True)
    shutil.copytree(local, copy)
    posix.mkdir()
    drain(copy, posix, roll_bytes=None)
    return cat_lines(f"{posix}/{STREAM}", "--from", "earliest")


def case_trim(work, s, layout):
    local = work / "local"
    url = f"objstore://{work / 'objstore'}" if layout else s.url("trim")
    (work / "objstore").mkdir()
    target = f"{url}/{STREAM}"
    d = follow_drain(local, url, env=s.env, roll_bytes=None)
    reports = [producer_report(p) for p in [produce(local, 1000, flush_every=50, payload_size=PAYLOAD)
                                            for _ in range(3)]]
    # The drain has taken everything once describe counts it.
    deadline = time.time() + 120
    while time.time() < deadline and drained_events(target, s.env) < 3000:
        time.sleep(0.1)
    run([BIN, "stream", "cat", target, "--group", "old", "--limit", "10"], env=s.env)
    time.sleep(3)
    late = produce(local, 3000, flush_every=50, payload_size=PAYLOAD)
    by_age = trim(target, s.env, "--older-than", "2s")
    reports.append(producer_report(late))
    # The drain still following, and taking the late producer's last events.
    by_bytes = trim(target, s.env, "--keep-bytes", "64K")
    for pid, n, rc in reports:
        check(rc == 0 and n in (1000, 3000), f"producer {pid} exited {rc} after flushing {n}")
    late_pid = reports[-1][0]
    time.sleep(0.5)
    stop(d)
    drain(local, url, env=s.env, roll_bytes=None)

    every = every_event(work, local)
    ev = [json.loads(x) for x in every]
    check_events(ev, {pid: n for pid, n, _ in reports})
    desc = describe(target, s.env)
    firsts = {p["partition"]: p["first_offset"] for p in desc["partition"]}
    late_first = {}
    for e in ev:
        if e["producer"] == late_pid:
            late_first.setdefault(e["partition"], e["offset"])
    for a, b in zip(by_age, by_bytes):
        p = a["partition"]
        check(a["deleted"] and 0 < a["first_offset"] <= late_first[p],
              f"--older-than 2s, partition {p}: {a} (the late producer starts at {late_first[p]})")
        check(b["deleted"] and a["first_offset"] < b["first_offset"] == firsts[p],
              f"--keep-bytes 64K, partition {p}: {b}")
    want = [x for x, e in zip(every, ev) if e["offset"] >= firsts[e["partition"]]]
    got = cat_lines(target, "--from", "earliest", env=s.env)
    check(len(want) < len(every) and got == want,
          f"cat after the trims: {len(got)} lines, {len(want)} expected of {len(every)}")
    r = run([BIN, "stream", "cat", target, "--group", "old"], env=s.env, check=False)
    check(r.returncode == 1 and "was trimmed" in r.stderr and "offset" in r.stderr
          and any(f"partition {p}: offset" in r.stderr and f"starts at offset {f} now" in r.stderr
                  for p, f in firsts.items()), f"a group below the first offsets: {r.stderr}")
    if not layout:
        left = [k for k, _ in s.minio.keys(BUCKET, f"trim/.paralog-streams/{STREAM}")]
        below = []
        for k in left:
            part, name = k.split("/")[-2:]
            if part.startswith("p") and "-" in name and int(name.split("-")[1]) <= firsts[int(part[1:])]:
                below.append(k)
        check(not below, f"objects below the first offsets left: {below[:3]}")
    return (f"{len(every)} events, {len(want)} left; first offsets {sorted(firsts.items())}; "
            f"--older-than 2s deleted {sum(len(a['deleted']) for a in by_age)} objects, "
            f"--keep-bytes 64K {sum(len(b['deleted']) for b in by_bytes)}")


def case_trim_killed(work, s):
    local, store = work / "local", work / "objstore"
    store.mkdir()
    url = f"objstore://{store}"
    target = f"{url}/{STREAM}"
    for _ in range(4):
        producer_report(produce(local, 500, flush_every=500, payload_size=PAYLOAD))
        drain(local, url, roll_bytes=None)
    before = describe(target, None)
    r = run([BIN, "stream", "trim", target, "--keep-bytes", "0", "--wait-ms", "0"])
    check("trim requested" in r.stdout and "the next round of this stream's drain" in r.stdout,
          f"a pending trim: {r.stdout}")
    env = dict(os.environ, PARALOG_FAILPOINT="stream.trim_retired")
    k = run([BIN, "stream", "drain", "--local", local, "--remote", url], env=env, check=False)
    check(k.returncode == -9, f"the drain was not killed at the failpoint: {k.returncode} {k.stderr[-300:]}")
    mid = describe(target, None)
    firsts = {p["partition"]: p["first_offset"] for p in mid["partition"]}
    check(all(f > 0 for f in firsts.values()) and all(p["segments"] == 1 for p in mid["partition"]),
          f"after the kill: {mid['partition']}")
    every = [json.loads(x) for x in every_event(work, local)]
    want = [e for e in every if e["offset"] >= firsts[e["partition"]]]
    check(cat_json(target, "--from", "earliest") == want, "cat after the killed trim")
    out = drain(local, url, roll_bytes=None).stdout
    r = run([BIN, "stream", "trim", target, "--keep-bytes", "0", "--wait-ms", "0", "--json"])
    check("pending" in r.stdout, f"a new request is pending again: {r.stdout}")
    run([BIN, "stream", "drain", "--local", local, "--remote", url])
    after = describe(target, None)
    check(after["partition"] == mid["partition"] and before["round"] == after["round"],
          f"the request applied again changed {mid['partition']} to {after['partition']}")
    return f"first offsets {sorted(firsts.items())}; drain after the kill: {out.strip()[:120]!r}"


def case_status(work, s):
    """`paralog status` of a server draining to S3, then to objstore://:
    a group that read 1,000 of 3,000 events lags by 2,000 there, as in
    `stream describe`."""
    out = []
    for name, url in [("S3", s.url("status")), ("objstore://", f"objstore://{work / 'objstore'}")]:
        local = work / f"local-{len(out)}"
        (work / "objstore").mkdir(exist_ok=True)
        target = f"{url}/{STREAM}"
        srv = Server(local, url, s.env, job="t")
        try:
            producer_report(produce(local, 3000, flush_every=500))
            deadline = time.time() + 120
            while time.time() < deadline:
                r = run([BIN, "stream", "describe", target, "--json"], env=s.env, check=False)
                if r.returncode == 0 and json.loads(r.stdout)["events"] == 3000:
                    break
                time.sleep(0.1)
            run([BIN, "stream", "cat", target, "--group", "S", "--limit", "1000"], env=s.env)
            st = json.loads(run([BIN, "status", "--local", local, "--job", "t", "--json"], env=s.env).stdout)
            rows = st["streams"]
            want = [{"group": g["group"], "lag": g["lag"]} for g in describe(target, s.env)["groups"]]
            check(rows and rows[0]["stream"] == STREAM and rows[0]["groups"] == want == [{"group": "S", "lag": 2000}],
                  f"{name}: status streams {rows}, describe {want}")
            table = run([BIN, "status", "--local", local, "--job", "t", "--once"], env=s.env).stdout
            line = [x for x in table.splitlines() if x.startswith(f"stream {STREAM}:")]
            check(line and "S 2000" in line[0], f"{name}: status table: {table[-500:]}")
            out.append(f"{name}: {line[0]}")
        finally:
            srv.kill()
    return "; ".join(out)


def main():
    a = suite_options().parse_args()
    suite = Suite("stream-object-retention", keep=a.keep)
    s = StreamS3(suite.base / "minio")
    suite.cleanup.append(s.minio.stop)
    cases = [("trim, S3", lambda w: case_trim(w, s, False)),
             ("trim, objstore://", lambda w: case_trim(w, s, True)),
             ("trim, drain killed (objstore://)", lambda w: case_trim_killed(w, s)),
             ("status, S3 and objstore://", lambda w: case_status(w, s))]
    sys.exit(suite.run(cases, only=a.only))


if __name__ == "__main__":
    os.umask(0o022)
    main()
