#!/usr/bin/python3
"""What idle streams cost the one-node server (docs/benchmarks.md section
12, "Idle streams"; docs/streams.md "Idle streams"): the server's CPU time
over --seconds (60) with --streams (100) streams that nothing appends to.

For each binary measured (--before BIN, then --bin, default
target/release/paralog; each copied first): a node-local root on --dir is
filled with --streams streams of --producers ended producers each
(`paralog stream produce`, 100 events, a flush every 50), then `paralog
server --job idle --remote DIR` starts on it; after --warmup seconds (the
first rounds drain everything, and the directories settle), its CPU time
(utime + stime of /proc/PID/stat, every thread) is read at the start and
the end of --seconds. Then one more producer appends to one stream and
the time until `paralog stream lag` says it is drained is printed (an
idle stream still takes a flush at once), and the server is stopped.
Prints each binary's CPU seconds and share of one core, and the ratio
after / before.

Usage: bench/streams/idle.py [--before BIN] [--bin BIN] [--streams 100]
         [--producers 2] [--seconds 60] [--warmup 5] [--dir /dev/shm]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from benchlib import request  # noqa: E402

JOB = "idle"


def cpu_seconds(pid):
    """utime + stime of a process (all its threads), in seconds."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def produce(paralog, local, stream, events=100):
    subprocess.run([paralog, "stream", "produce", "--local", local, "--stream", stream, "--partitions", "4",
                    "--events", str(events), "--flush-every", "50", "--payload-size", "200"],
                   check=True, capture_output=True)


def lag_bytes(paralog, local):
    rows = json.loads(subprocess.run([paralog, "stream", "lag", "--local", local, "--json"], check=True,
                                     capture_output=True, text=True).stdout)
    return sum(r["lag_bytes"] for r in rows), len(rows)


def measure(paralog, a, base, label):
    work = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=base))
    local, remote = work / "local", work / "remote"
    local.mkdir(mode=0o700)
    remote.mkdir()
    for s in range(a.streams):
        for _ in range(a.producers):
            produce(paralog, local, f"s{s:03}")
    sock = work / "server.sock"
    log = open(work / "server.log", "wb")
    srv = subprocess.Popen([paralog, "server", "--local", local, "--job", JOB, "--remote", remote,
                            "--socket", sock], stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    try:
        deadline = time.time() + 30
        while not sock.exists():
            if srv.poll() is not None or time.time() > deadline:
                sys.exit(f"{label}: the server did not start: {(work / 'server.log').read_text()[-500:]}")
            time.sleep(0.05)
        time.sleep(a.warmup)
        lag, n = lag_bytes(paralog, local)
        if lag or n != a.streams:
            sys.exit(f"{label}: after {a.warmup} s, {n} streams, {lag} bytes not drained")
        c0, t0 = cpu_seconds(srv.pid), time.time()
        time.sleep(a.seconds)
        c1, t1 = cpu_seconds(srv.pid), time.time()
        # An idle stream takes a new flush at its next round.
        t2 = time.time()
        produce(paralog, local, "s000", events=10)
        t3 = time.time()
        while lag_bytes(paralog, local)[0]:
            if time.time() - t3 > 30:
                sys.exit(f"{label}: a flush to an idle stream not drained within 30 s")
            time.sleep(0.01)
        took = time.time() - t3
        request(sock, {"cmd": "stop"})
        srv.wait(60)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    if srv.returncode != 0:
        sys.exit(f"{label}: the server exited {srv.returncode}: {(work / 'server.log').read_text()[-500:]}")
    cpu, wall = c1 - c0, t1 - t0
    print(f"{label}: {cpu:.2f} s of CPU in {wall:.0f} s ({100 * cpu / wall:.1f}% of a core) with {a.streams} "
          f"idle streams of {a.producers} ended producers each; a new flush drained {took * 1000:.0f} ms after "
          f"its producer ended (producer run {1000 * (t3 - t2):.0f} ms)", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    return cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", help="a paralog binary to measure first (e.g. a build of an earlier commit)")
    ap.add_argument("--bin", default=str(ROOT / "target/release/paralog"))
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=5.0,
                    help="seconds between the server's start and the measure (>= 3: directories settle in 2 s)")
    ap.add_argument("--dir", default="/dev/shm")
    a = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="paralog-idle-", dir=a.dir))
    try:
        bins = base / "bin"
        bins.mkdir()
        runs = [("before", a.before)] if a.before else []
        runs.append(("after" if a.before else "this build", a.bin))
        cpu = {}
        for label, b in runs:
            copy = bins / label.replace(" ", "-")
            shutil.copy2(b, copy)
            cpu[label] = measure(copy, a, base, label.replace(" ", "-"))
        if a.before:
            print(f"ratio after / before: {cpu['after'] / max(cpu['before'], 1e-9):.3f} "
                  f"({cpu['before'] / max(cpu['after'], 1e-9):.1f}x less CPU)")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
