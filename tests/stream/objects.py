#!/usr/bin/python3
"""Shared event streams on object remotes (docs/streams.md "Object
remotes", issue 17): `paralog stream drain` and the one-node server to a
real MinIO on loopback (tests/lib/minio.py) and to `objstore://`, read
back by `paralog stream cat`. Cases:

  4x3 to S3       4 producer processes x 3 partitions x 5,000 events
                  (flush every 10) while a drain follows to s3:// (a
                  round every 20 ms; killed, then one more round): offsets
                  contiguous, every flushed event exactly once; a copy of
                  the node-local root drained to a directory gives segment
                  files equal byte for byte to the S3 objects of the same
                  offsets (downloaded with awscli; compacted objects
                  beside them), `cat` of S3 equals `cat` of that directory
                  (and of the copy drained to objstore://), line for line;
                  two reader groups, lag 0 in `describe`, nothing again from
                  the committed offsets
  MinIO restart   MinIO killed (SIGKILL) once a drain following four
                  producers has published a round, and started again on
                  the same data 2 s later: the follower fails naming the
                  s3:// stream, or retries through it, and is killed; the
                  drain run again stores every flushed
                  event exactly once (a cut recorded and not applied is
                  applied again)
  paralog run     `paralog run --remote s3://...` (and `objstore://`) with
                  two producers as the program: the server drains the
                  streams there as it runs and a last round when it stops;
                  every event is there
  corrupt object  a byte flipped in a segment object on MinIO (rewritten
                  with awscli): `cat` exits 1 naming the s3:// object and a
                  byte offset, and prints no event of the damaged partition

Usage: python3 -m tests.stream.objects [--only SUBSTRING] [--keep]
Ends with "stream-objects: N passed, N failed"."""
import json
import os
import shutil
import signal
import sys
import time

from tests.lib.check import Suite, check, suite_options
from tests.lib.paths import BIN
from tests.lib.proc import kill_tree, run
from tests.lib.streams import (STREAM, StreamS3, cat_json, cat_lines, check_events, drain, follow_drain, produce,
                               producer_report, stop)

BUCKET = StreamS3.BUCKET


def case_4x3(work, s):
    local, url = work / "local", s.url("run1")
    d = follow_drain(local, url, env=s.env, roll_bytes=None)
    ps = [produce(local, 5000, flush_every=10) for _ in range(4)]
    reports = [producer_report(p) for p in ps]
    for pid, n, rc in reports:
        check(rc == 0 and n == 5000, f"producer {pid} exited {rc} after flushing {n}")
    stop(d)
    drain(local, url, env=s.env, roll_bytes=None)
    flushed = {pid: n for pid, n, _ in reports}
    a = cat_json(f"{url}/{STREAM}", "--group", "A", "--from", "earliest", env=s.env)
    check_events(a, flushed)
    check(len(a) == 20_000, f"{len(a)} events")
    b = cat_json(f"{url}/{STREAM}", "--group", "B", "--from", "earliest", env=s.env)
    check(a == b, "two groups saw another cut order")
    check(cat_json(f"{url}/{STREAM}", "--group", "A", env=s.env) == [], "group A got events again after committing")
    desc = json.loads(run([BIN, "stream", "describe", f"{url}/{STREAM}", "--json"], env=s.env).stdout)
    check(desc["events"] == 20_000 and len(desc["groups"]) == 2 and all(g["lag"] == 0 for g in desc["groups"]),
          f"describe: {desc}")
    check(desc["round"] > 2, f"only {desc['round']} rounds while the producers ran")
    ls = json.loads(run([BIN, "stream", "ls", url, "--json"], env=s.env).stdout)
    check(ls == [STREAM], f"ls: {ls}")

    # The same cut log replayed into a directory and into the object layout.
    copy, posix, objs = work / "copy", work / "posix", work / "objstore"
    shutil.copytree(local, copy)
    posix.mkdir()
    objs.mkdir()
    out = drain(copy, posix, roll_bytes=None).stdout
    check(f"{desc['round']} recorded round(s) applied again" in out, f"re-drain to a directory: {out}")
    shutil.rmtree(copy)
    shutil.copytree(local, copy)
    drain(copy, f"objstore://{objs}", roll_bytes=None)
    want = cat_lines(f"{posix}/{STREAM}", "--from", "earliest")
    check(len(want) == 20_000, f"the directory holds {len(want)} events")
    check(cat_lines(f"{url}/{STREAM}", "--from", "earliest", env=s.env) == want, "cat of S3 differs from the directory's")
    check(cat_lines(f"objstore://{objs}/{STREAM}", "--from", "earliest") == want,
          "cat of objstore:// differs from the directory's")

    # Each segment file of the directory is an S3 object of the same
    # offsets, byte for byte (a round's object; the drain also compacts
    # runs of 8 small ones into new objects, and keeps the small ones for
    # its grace period of 100 rounds).
    got = work / "download"
    keys = set(s.minio.download_all(BUCKET, f"run1/.paralog-streams/{STREAM}", got))
    base = posix / ".paralog-streams" / STREAM
    same = set()
    for part in sorted(base.glob("p*")):
        firsts = sorted(int(x.stem) for x in part.glob("*.seg"))
        ends = firsts[1:] + [desc["partition"][int(part.name[1:])]["high_watermark"]]
        for first, end in zip(firsts, ends):
            k = f"{part.name}/{first:020}-{end:020}"
            seg = part / f"{first:020}.seg"
            check(k in keys and seg.read_bytes() == (got / k).read_bytes(), f"{k} differs from {seg}")
            same.add(k)
    check(len(same) > 3, f"{len(same)} segment files")
    # (Compaction itself is checked in crates/stream/tests/object_remote.rs.)
    compacted = [k for k in keys if k.startswith("p") and k not in same]
    return f"{desc['round']} rounds, {len(same)} round objects, {len(compacted)} compacted"


def case_restart(work, s):
    local, url = work / "local", s.url("restart")
    d = follow_drain(local, url, env=s.env, roll_bytes=None)
    ps = [produce(local, 8000, flush_every=10) for _ in range(4)]
    # MinIO dies once the drain has published a round, producers still running.
    deadline = time.time() + 60
    while time.time() < deadline:
        r = run([BIN, "stream", "describe", f"{url}/{STREAM}", "--json"], env=s.env, check=False)
        if r.returncode == 0 and json.loads(r.stdout)["round"] >= 1:
            break
        time.sleep(0.02)
    s.minio.kill()
    running = sum(p.poll() is None for p in ps)
    time.sleep(2)
    s.minio.start()
    reports = [producer_report(p) for p in ps]
    time.sleep(0.5)
    for pid, n, rc in reports:
        check(rc == 0 and n == 8000, f"producer {pid} exited {rc} after flushing {n}")
    # The follower either failed a round on the dead MinIO (naming the
    # stream) or rode the outage out on the S3 client's retries; it is
    # killed now (a crash as well) and the drain run again.
    kill_tree(d, signal.SIGKILL)
    _, err = d.communicate()
    if d.returncode == -9:
        how = "retried through the outage"
    else:
        check(d.returncode == 1 and f"s3://{BUCKET}/restart" in err, f"follower: {d.returncode} {err[-400:]}")
        how = "failed"
    again = drain(local, url, env=s.env, roll_bytes=None).stdout
    flushed = {pid: n for pid, n, _ in reports}
    ev = cat_json(f"{url}/{STREAM}", "--from", "earliest", env=s.env)
    check_events(ev, flushed)
    check(len(ev) == 32_000, f"{len(ev)} events")
    replayed = [x for x in again.splitlines() if "applied again" in x]
    return f"{running} producer(s) running at the kill; the follower {how}; " + \
        (replayed[0] if replayed else "no cut left unapplied")


def case_paralog_run(work, s, layout=False):
    local, prefix = work / "local", work / "prefix"
    prefix.mkdir()
    url = f"objstore://{work / 'objstore'}" if layout else s.url("run")
    (work / "objstore").mkdir()
    prod = f"{BIN} stream produce --stream {STREAM} --partitions 3 --events 8000 --flush-every 100"
    r = run([BIN, "run", "--local", local, "--prefix", prefix, "--remote", url, "--mpi", "none", "--", "sh", "-c",
             f"{prod} & {prod} --partition-by key; wait"], env=s.env, cwd=work)
    flushed = {x.split()[1]: 8000 for x in r.stdout.splitlines() if x.startswith("producer ")}
    check(len(flushed) == 2, f"producers said: {r.stdout[:300]}")
    ev = cat_json(f"{url}/{STREAM}", "--from", "earliest", env=s.env)
    check_events(ev, flushed)
    check(len(ev) == 16_000, f"{len(ev)} events")
    return f"{len(ev)} events"


def case_corrupt(work, s):
    local, url = work / "local", s.url("corrupt")
    producer_report(produce(local, 3000, flush_every=1000))
    drain(local, url, env=s.env, roll_bytes=None)
    keys = [k for k, _ in s.minio.keys(BUCKET, f"corrupt/.paralog-streams/{STREAM}/p00001")]
    check(keys, "no object of partition 1")
    key = keys[0]
    f = work / "obj"
    s.minio.aws("s3", "cp", "--only-show-errors", f"s3://{BUCKET}/{key}", f)
    b = bytearray(f.read_bytes())
    b[len(b) - 100] ^= 1
    f.write_bytes(bytes(b))
    s.minio.aws("s3", "cp", "--only-show-errors", f, f"s3://{BUCKET}/{key}")
    r = run([BIN, "stream", "cat", f"{url}/{STREAM}", "--json"], env=s.env, check=False)
    check(r.returncode == 1 and f"s3://{BUCKET}/{key}" in r.stderr and "corrupt at offset" in r.stderr,
          f"cat: {r.returncode} {r.stderr}")
    check(all(json.loads(x)["partition"] != 1 for x in r.stdout.splitlines()),
          "an event of the damaged partition was printed")
    return r.stderr.strip()


def main():
    a = suite_options().parse_args()
    suite = Suite("stream-objects", keep=a.keep)
    s = StreamS3(suite.base / "minio")
    suite.cleanup.append(s.minio.stop)
    cases = [("4x3 to S3", case_4x3), ("MinIO restart", case_restart), ("paralog run", case_paralog_run),
             ("paralog run, objstore://", lambda w, s: case_paralog_run(w, s, layout=True)),
             ("corrupt object", case_corrupt)]
    sys.exit(suite.run([(label, lambda w, f=f: f(w, s)) for label, f in cases], only=a.only))


if __name__ == "__main__":
    os.umask(0o022)
    main()
