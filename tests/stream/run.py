#!/usr/bin/python3
"""Shared event streams on one node (docs/streams.md, issue 17, first
milestone): real `paralog stream produce` processes writing real segments
under a node-local root, `paralog stream drain` to a POSIX remote, and
`paralog stream cat` reading it back. Cases:

  4x3x50000       4 producer processes x 3 partitions x 50,000 events
                  (flush every 100) while a drain runs a round every 20 ms
                  (killed with SIGKILL at the end, then one more round):
                  offsets contiguous from 0 per partition; per producer
                  and partition, sequence numbers strictly increase; per
                  producer, every event 0..49,999 exactly once with the
                  payload it appended; two reader groups see identical
                  partitions, both with lag 0 after, and a group read again
                  from its committed offsets gets nothing; `stream lag`
                  says nothing is left on the node; a copy of the
                  node-local root drained into a fresh remote gives the same
                  segment files byte for byte
  kill mid-write  a producer of 200 KB events writing 8 MiB batches killed
                  while it writes: the drain reports the torn tail and cuts
                  it off (the producer is gone), stores every flushed event
                  once, and a second drain finds the segment clean
  crash at P      the drain killed (PARALOG_FAILPOINT) at each point of its
                  second round: half of the cut record written, the cut
                  recorded, one partition applied, every partition applied
                  before the watermark. Readers then see exactly round 1;
                  the next drain applies the recorded cut again (or, with a
                  torn cut record, makes it anew) and the remote and the
                  cut log equal, byte for byte, those of an uninterrupted
                  drain of the same segments
  reader killed   `cat --group G --commit-every 1000` killed with SIGKILL
                  after 20,000 of 60,000 events, then run again from the
                  group's committed offsets: every event delivered at least
                  once, duplicates only from the uncommitted window (at
                  most 1,000 plus what sat in the output buffer)
  paralog run     two producers as the program of `paralog run` (no
                  --remote): the server drains the streams as it runs and a
                  last round when it stops; every event is under the
                  prefix's .paralog-streams afterwards, and the run reports
                  no file written past capture
  one fdatasync   strace of a producer: fdatasync calls equal flushes
                  (10 or 20 flushes of the same events), and the fsyncs,
                  renames and mkdirs do not grow with flushes
  corrupt local   a byte flipped in a committed batch of a segment: the
                  drain exits 1 naming the segment and the batch's offset,
                  and nothing of the stream is published
  corrupt remote  (`stream lag` counts every byte as not drained before
                  the first drain) a byte flipped in a drained partition segment: cat exits
                  1 naming the segment and an offset, and prints no event
                  of the damaged batch
  bad commands    unknown stream (on a directory and on objstore://, to
                  cat and to trim), a partition count that
                  differs from the node's: one line, exit 1; a bad local
                  retention threshold (`server --stream-release-bytes
                  lots`, PARALOG_STREAM_RELEASE_BYTES=-5 for `stream
                  drain`) refused naming it, nothing drained; `drain
                  --release-bytes 0` (never) drains

Kills at random points (producers, the drain or a server, a reader, MinIO):
tests/stream/kills.py.

Usage: python3 -m tests.stream.run [--only SUBSTRING] [--keep]
Ends with "stream: N passed, N failed".
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from tests.lib.check import Suite, check, fail, suite_options
from tests.lib.paths import BIN
from tests.lib.proc import kill_tree, run
from tests.lib.server import Server
from tests.lib.streams import PARTS, STREAM, cat, check_events, drain, follow_drain, produce, producer_report, stop

def segment_tree(remote):
    """Relative path -> bytes of every record of the stream but the groups'."""
    base = Path(remote) / ".paralog-streams" / STREAM
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*"))
            if p.is_file() and "groups" not in p.parts}


def case_big(work):
    local, remote = work / "local", work / "remote"
    remote.mkdir()
    d = follow_drain(local, remote)
    # A flush every 100 events: 500 flushes each, so that the producers run
    # long enough for the drain to take several rounds while they do.
    ps = [produce(local, 50_000, flush_every=100) for _ in range(4)]
    reports = [producer_report(p) for p in ps]
    for pid, n, rc in reports:
        check(rc == 0 and n == 50_000, f"producer {pid} exited {rc} after flushing {n}")
    rounds = stop(d)
    drain(local, remote)
    flushed = {pid: n for pid, n, _ in reports}
    a = cat(remote, "--group", "A", "--from", "earliest")
    check_events(a, flushed)
    check(len(a) == 200_000, f"{len(a)} events")
    b = cat(remote, "--group", "B", "--from", "earliest")
    key = lambda e: (e["partition"], e["offset"])  # noqa: E731
    check(sorted(a, key=key) == sorted(b, key=key), "two groups saw different partitions")
    check(a == b, "two groups saw another cut order")
    check(cat(remote, "--group", "A") == [], "group A got events again after committing")
    desc = json.loads(run([BIN, "stream", "describe", f"{remote}/{STREAM}", "--json"]).stdout)
    check(desc["events"] == 200_000 and all(g["lag"] == 0 for g in desc["groups"]) and len(desc["groups"]) == 2,
          f"describe: {desc}")
    n_rounds = desc["round"]
    lag = json.loads(run([BIN, "stream", "lag", "--local", local, "--json"]).stdout)
    check(len(lag) == 1 and lag[0]["producers"] == 4 and lag[0]["lag_bytes"] == 0 and lag[0]["bytes"] > 0
          and lag[0]["rounds"] == n_rounds, f"lag after the last round: {lag}")
    check(n_rounds > 2, f"only {n_rounds} drain rounds while producers ran (the drain printed {rounds[-300:]!r})")
    # A copy of the node-local root (segments and cut log) into a fresh remote.
    copy, fresh = work / "copy", work / "fresh"
    shutil.copytree(local, copy)
    fresh.mkdir()
    out = drain(copy, fresh).stdout
    check(f"{n_rounds} recorded round(s) applied again" in out, f"re-drain: {out}")
    want, got = segment_tree(remote), segment_tree(fresh)
    check(want.keys() == got.keys(), f"re-drain made other files: {sorted(set(want) ^ set(got))[:5]}")
    for k in want:
        check(want[k] == got[k], f"re-drain: {k} differs")
    return f"{n_rounds} rounds, {sum(len(v) for k, v in want.items() if k.endswith('.seg'))} segment bytes"


def case_paralog_run(work):
    local, prefix = work / "local", work / "prefix"
    prefix.mkdir()
    prod = f"{BIN} stream produce --stream {STREAM} --partitions {PARTS} --events 20000 --flush-every 100"
    # A relative prefix with `..` in it: the streams still find it.
    r = run([BIN, "run", "--local", local, "--prefix", "prefix/../prefix", "--mpi", "none", "--", "sh", "-c",
             f"{prod} & {prod} --partition-by key; wait"], cwd=work)
    check("MISSED" not in r.stdout + r.stderr, f"stream files taken for files written past capture: {r.stderr[-500:]}")
    flushed = {}
    for line in r.stdout.splitlines():
        if line.startswith("producer "):
            flushed[line.split()[1]] = 20_000
    check(len(flushed) == 2, f"producers said: {r.stdout[:300]}")
    check_events(cat(prefix, "--from", "earliest"), flushed)
    desc = json.loads(run([BIN, "stream", "describe", f"{prefix}/{STREAM}", "--json"]).stdout)
    return f"{desc['round']} drain rounds"


def case_paralog_run_not_drained(work):
    """A stream that cannot drain at the end of `paralog run` (its remote
    directory missing): the run exits 3, says NOT DRAINED with the
    server's error, keeps the server's log and the segments; `recover`,
    the remote made, stores every flushed event. (The run used to exit 0
    and remove the log.)"""
    local, prefix, remote = work / "local", work / "prefix", work / "remote"
    prefix.mkdir()
    prod = f"{BIN} stream produce --stream {STREAM} --partitions {PARTS} --events 3000 --flush-every 100"
    r = run([BIN, "run", "--local", local, "--prefix", prefix, "--remote", remote, "--mpi", "none", "--",
             "sh", "-c", prod], check=False)
    err = r.stderr
    check(r.returncode == 3, f"paralog run exited {r.returncode}, not 3: {err[-600:]}")
    check("NOT DRAINED: the server ended" in err and "stream not drained" in err and str(remote) in err,
          f"the run did not say why: {err[-600:]}")
    logs = list(local.glob(".paralog-server-*.log"))
    check(len(logs) == 1 and "stream not drained" in logs[0].read_text(), f"the server's log was not kept: {logs}")
    check("paralog recover" in err, f"no recover hint: {err[-400:]}")
    flushed = {line.split()[1]: 3000 for line in r.stdout.splitlines() if line.startswith("producer ")}
    check(len(flushed) == 1, f"producer said: {r.stdout[:300]}")
    remote.mkdir()
    run([BIN, "recover", "--local", local, "--remote", remote])
    check_events(cat(remote, "--from", "earliest"), flushed)
    return "exit 3 naming the stream's error, log kept; recover stored all 3000 events"


def case_wait_streams(work):
    """`paralog wait` on a one-node server covers the streams: with the
    stream's remote missing it exits 3 naming the stream (it used to say
    "everything committed is drained" and the events stayed on the node);
    with the remote there, every flushed event is on it when wait returns
    (it used to be drained only at the stop, after wait's answer)."""
    out = []
    for made in (False, True):
        local, remote = work / f"local-{made}", work / f"remote-{made}"
        if made:
            remote.mkdir()
        srv = Server(local, remote, env=None, job="w")
        try:
            p = produce(local, 2000, flush_every=100)
            p.wait(timeout=120)
            pid, n, rc = producer_report(p)
            check(rc == 0 and n == 2000, f"producer: exit {rc}, {n} flushed")
            flushed = {pid: n}
            r = run([BIN, "wait", "--local", local, "--job", "w", "--timeout", "60"], check=False)
            if made:
                check(r.returncode == 0, f"wait exited {r.returncode}: {r.stderr[-400:]}")
                check_events(cat(remote, "--from", "earliest"), flushed)
                check(srv.p.wait(timeout=30) == 0, f"server exited {srv.p.returncode}: {srv.text()[-400:]}")
                out.append("drained before wait returned")
            else:
                check(r.returncode == 3, f"wait exited {r.returncode}, not 3: {r.stdout}{r.stderr[-400:]}")
                check(f"stream {STREAM}: not drained" in r.stderr and str(remote) in r.stderr,
                      f"wait did not name the stream: {r.stderr[-400:]}")
                check(srv.p.wait(timeout=30) == 1, f"server exited {srv.p.returncode}, not 1")
                remote.mkdir()
                run([BIN, "recover", "--local", local, "--remote", remote])
                check_events(cat(remote, "--from", "earliest"), flushed)
                out.append("missing remote: wait 3 naming the stream, recover stored every event")
        finally:
            srv.kill()
    return "; ".join(out)


def case_kill_mid_write(work):
    local, remote = work / "local", work / "remote"
    remote.mkdir()
    tries = 0
    while True:
        tries += 1
        shutil.rmtree(local, ignore_errors=True)
        p = produce(local, 1000, flush_every=100, payload_size=200_000, parts=1, stream="big")
        # Wait for its id (it has opened its segment), then kill it a
        # little later, while it writes.
        first = p.stdout.readline()
        time.sleep(0.01 * tries)
        kill_tree(p, signal.SIGKILL)
        pid, flushed, _ = producer_report(p)
        pid = first.split()[1] if first.startswith("producer ") else pid
        seg = sorted((local / ".paralog-streams" / "big").glob("*.seg"))[0]
        r = run([BIN, "stream", "drain", "--local", local, "--remote", remote, "--stream", "big"])
        if "cut off" in r.stdout or tries == 8:
            break
        shutil.rmtree(remote / ".paralog-streams", ignore_errors=True)
    if "cut off" not in r.stdout:
        return "SKIP: no kill landed inside a write in 8 tries"
    off = int(r.stdout.split("cut off at offset ")[1].split()[0])
    check(seg.stat().st_size == off, f"segment is {seg.stat().st_size} bytes, the tail was cut at {off}")
    again = run([BIN, "stream", "drain", "--local", local, "--remote", remote, "--stream", "big"]).stdout
    check("not read" not in again and "cut off" not in again, f"second drain: {again}")
    events = [json.loads(x) for x in run([BIN, "stream", "cat", f"{remote}/big", "--json"]).stdout.splitlines()]
    n = len(events)
    check(flushed <= n and [e["seq"] for e in events] == list(range(n)), f"{n} events stored, {flushed} flushed")
    check(all(e["payload"].startswith(f"{pid}:{e['seq']}:") for e in events), "a payload is not its event's")
    return f"after {tries} tries: {flushed} flushed, {n} stored, tail cut at {off}"


def copy_segments(src, dst):
    """The producers' segments of src into dst (not its cut log)."""
    d = Path(dst) / ".paralog-streams" / STREAM
    d.mkdir(parents=True, exist_ok=True)
    for f in seg_files(src):
        shutil.copyfile(f, d / f.name)


def case_crash(point):
    def case(work):
        local, remote, ref, ref_remote = work / "local", work / "remote", work / "ref", work / "ref-remote"
        remote.mkdir()
        ref_remote.mkdir()
        for _ in range(3):
            producer_report(produce(local, 10_000, flush_every=500))
        copy_segments(local, ref)
        drain(local, remote)
        drain(ref, ref_remote)
        round1 = cat(remote, "--from", "earliest")
        for _ in range(2):
            producer_report(produce(local, 10_000, flush_every=500))
        copy_segments(local, ref)
        r = run([BIN, "stream", "drain", "--local", local, "--remote", remote], check=False,
                env=dict(os.environ, PARALOG_FAILPOINT=point))
        check(r.returncode == -9, f"the drain was not killed at {point}: {r.returncode} {r.stderr[-300:]}")
        check(cat(remote, "--from", "earliest") == round1, "readers saw a round that was not published")
        out = drain(local, remote).stdout
        replayed = "applied again" in out
        check(replayed == (point != "stream.torn_cut"), f"after {point}: {out}")
        drain(ref, ref_remote)
        want, got = segment_tree(ref_remote), segment_tree(remote)
        check(want.keys() == got.keys() and all(want[k] == got[k] for k in want),
              f"after {point} the remote differs from an uninterrupted drain's")
        cuts = lambda root: (Path(root) / ".paralog-streams" / STREAM / "cuts").read_bytes()  # noqa: E731
        check(cuts(local) == cuts(ref), "the cut logs differ")
        check(len(cat(remote, "--from", "earliest")) == 50_000, "not every event is stored")
        return "recorded cut applied again" if replayed else "torn cut record overwritten"
    return case


def case_reader_killed(work):
    local, remote = work / "local", work / "remote"
    remote.mkdir()
    for _ in range(2):
        producer_report(produce(local, 30_000, flush_every=1000))
    drain(local, remote)
    every = cat(remote, "--from", "earliest")
    check(len(every) == 60_000, f"{len(every)} events")
    p = subprocess.Popen([str(BIN), "stream", "cat", f"{remote}/{STREAM}", "--json", "--group", "G",
                          "--commit-every", "1000"], stdout=subprocess.PIPE, text=True, start_new_session=True)
    first = []
    for line in p.stdout:
        first.append(json.loads(line))
        if len(first) == 20_000:
            kill_tree(p, signal.SIGKILL)
            break
    # What was written to the pipe before the kill was delivered too.
    first += [json.loads(x) for x in p.stdout.read().splitlines() if x.strip()]
    p.wait()
    check(len(first) < 60_000, "the reader was not killed before the end")
    second = cat(remote, "--group", "G")
    key = lambda e: (e["partition"], e["offset"])  # noqa: E731
    seen = {key(e) for e in first} | {key(e) for e in second}
    check(seen == {key(e) for e in every}, f"{len({key(e) for e in every} - seen)} events never delivered")
    dup = len({key(e) for e in first} & {key(e) for e in second})
    # At most the events after the last commit: 1,000, plus the lines in
    # the 64 KiB output buffer written before it.
    check(dup <= 1000 + 65536 // 150, f"{dup} events delivered twice")
    check(cat(remote, "--group", "G") == [], "the group got events again after a complete read")
    return f"{len(first)} delivered before the kill, {dup} again after"


def syscalls(work, flush_every):
    trace = work / f"strace-{flush_every}"
    local = work / f"local-{flush_every}"
    run(["strace", "-f", "-qq", "-o", trace, "-e", "trace=fdatasync,fsync,rename,renameat,renameat2,mkdir,mkdirat",
         BIN, "stream", "produce", "--local", local, "--stream", STREAM, "--events", "2000",
         "--flush-every", str(flush_every)])
    counts = defaultdict(int)
    for line in trace.read_text().splitlines():
        name = line.split(None, 1)[1].split("(", 1)[0] if " " in line else ""
        counts[name] += 1
    return counts


def case_fdatasync(work):
    if not shutil.which("strace"):
        return "SKIP: strace is not installed"
    c10, c20 = syscalls(work, 200), syscalls(work, 100)
    check(c10["fdatasync"] == 10 and c20["fdatasync"] == 20, f"fdatasync per flush: {dict(c10)} / {dict(c20)}")
    for k in set(c10) | set(c20):
        if k != "fdatasync":
            check(c10[k] == c20[k], f"{k} grows with flushes: {dict(c10)} / {dict(c20)}")
    return f"10 flushes: {dict(c10)}"


def seg_files(local):
    return sorted((Path(local) / ".paralog-streams" / STREAM).glob("*.seg"))


def case_corrupt_local(work):
    local, remote = work / "local", work / "remote"
    remote.mkdir()
    pid, n, _ = producer_report(produce(local, 1000, flush_every=100))
    seg = seg_files(local)[0]
    st = seg.stat()
    check(oct(st.st_mode & 0o777) == "0o600" and oct(seg.parent.stat().st_mode & 0o777) == "0o700",
          f"local stream files are not private: {oct(st.st_mode)} {oct(seg.parent.stat().st_mode)}")
    b = bytearray(seg.read_bytes())
    at = len(b) // 2
    b[at] ^= 0x40
    seg.write_bytes(bytes(b))
    r = drain(local, remote, check_=False)
    msg = (r.stderr or r.stdout).strip()
    check(r.returncode == 1 and str(seg) in msg and "offset" in msg, f"drain of a damaged segment: {r.returncode} {msg}")
    off = int(msg.split("offset ")[1].split(":")[0])
    # A batch here is 100 events of 104 bytes (+ 88 bytes of header and
    # commit record): the offset named is the start of the flipped one.
    check(off <= at < off + 100 * 104 + 88 and (off - (52 + len(STREAM))) % (100 * 104 + 88) == 0,
          f"offset {off} is not the damaged batch's (byte {at} flipped)")
    check(not (remote / ".paralog-streams" / STREAM / "watermark").exists(), "a watermark was published")
    check(cat(remote, "--from", "earliest") == [], "events delivered from a damaged stream")
    return msg


def case_corrupt_remote(work):
    local, remote = work / "local", work / "remote"
    remote.mkdir()
    producer_report(produce(local, 3000, flush_every=1000))
    lag = json.loads(run([BIN, "stream", "lag", "--local", local, "--json"]).stdout)
    check(lag[0]["lag_bytes"] == lag[0]["bytes"] > 3000 * 104, f"lag before any drain: {lag}")
    drain(local, remote)
    seg = sorted((remote / ".paralog-streams" / STREAM / "p00001").glob("*.seg"))[0]
    b = bytearray(seg.read_bytes())
    b[len(b) - 100] ^= 1
    seg.write_bytes(bytes(b))
    r = run([BIN, "stream", "cat", f"{remote}/{STREAM}", "--json", "--order", "cut"], check=False)
    check(r.returncode == 1 and str(seg) in r.stderr and "offset" in r.stderr, f"cat: {r.returncode} {r.stderr}")
    check(all(json.loads(x)["partition"] != 1 for x in r.stdout.splitlines()), "an event of the damaged partition was printed")
    return r.stderr.strip()


def case_bad(work):
    local, remote = work / "local", work / "remote"
    remote.mkdir()
    for cmd, want in [
        (["stream", "cat", f"{remote}/nope"], "no stream nope"),
        (["stream", "describe", f"objstore://{remote}/tele"], "no stream tele"),
        (["stream", "trim", f"objstore://{remote}/tele", "--keep-bytes", "1M"], "no stream tele"),
        (["stream", "cat", "tele"], "URL/STREAM"),
        (["stream", "drain", "--local", local, "--remote", remote, "--stream", "nope"], "no stream nope"),
    ]:
        r = run([BIN, *cmd], check=False)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 1 and len(lines) == 1 and want in lines[0], f"{cmd}: {r.returncode} {r.stderr}")
    producer_report(produce(local, 10, flush_every=10))
    p = produce(local, 10, parts=4)
    out, err = p.communicate()
    check(p.returncode == 1 and "has 3 partitions, not 4" in err, f"reopen with 4 partitions: {p.returncode} {err}")
    # Local retention's threshold: a bad size is refused naming the
    # option or the setting, before anything is drained; 0 (never) is a
    # threshold, as the docs say.
    drain_cmd = [BIN, "stream", "drain", "--local", local, "--remote", remote]
    r = run([BIN, "server", "--local", local, "--remote", remote, "--stream-release-bytes", "lots"], check=False)
    check(r.returncode == 2 and "--stream-release-bytes" in r.stderr and "not a size" in r.stderr,
          f"server --stream-release-bytes lots: {r.returncode} {r.stderr}")
    r = run(drain_cmd, env=dict(os.environ, PARALOG_STREAM_RELEASE_BYTES="-5"), check=False)
    check(r.returncode == 1 and "PARALOG_STREAM_RELEASE_BYTES=-5" in r.stderr,
          f"drain with PARALOG_STREAM_RELEASE_BYTES=-5: {r.returncode} {r.stderr}")
    check(not (remote / ".paralog-streams").exists(), "a drain refused for its setting drained")
    r = run(drain_cmd + ["--release-bytes", "0"], check=False)
    check(r.returncode == 0 and "round 1:" in r.stdout, f"drain --release-bytes 0: {r.returncode} {r.stderr}")


def main():
    a = suite_options().parse_args()
    suite = Suite("stream", keep=a.keep)
    cases = [("4x3x50000", case_big)]
    cases += [(f"crash at {p}", case_crash(p)) for p in
              ("stream.torn_cut", "stream.after_cut", "stream.mid_apply", "stream.before_watermark")]
    cases += [("kill mid-write", case_kill_mid_write), ("reader killed", case_reader_killed), ("paralog run", case_paralog_run), ("paralog run, stream not drained", case_paralog_run_not_drained), ("paralog wait covers streams", case_wait_streams), ("one fdatasync per flush", case_fdatasync), ("corrupt local", case_corrupt_local),
              ("corrupt remote", case_corrupt_remote), ("bad commands", case_bad)]
    sys.exit(suite.run(cases, only=a.only))


if __name__ == "__main__":
    os.umask(0o022)
    main()
