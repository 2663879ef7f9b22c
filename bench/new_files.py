#!/usr/bin/python3
"""What the node server costs per new file (issue 15, docs/benchmarks.md
section 7, "One scan per new file"): bench/micro.c `files` (N new files of
SIZE, one write each) under two builds, alternated, ROUNDS rounds, on the
disk (/var/tmp) and tmpfs (/dev/shm).

Two measures per build and round:
  run     `paralog run --mpi none` of the program, the server draining to a
          remote on the same file system: the program's own time, the run's
          wall time (its drain included) and the CPU time (user + system)
          of the run, its server and the program together (the program and
          its capture are the same in both builds, so a difference is the
          server's);
  scans   the server alone (`paralog server`), the program preloaded with
          capture beside it: once every epoch is drained, and before any
          drain request (which scans every file once more), the server's
          CPU time per file (/proc; not under --strace), the scans per
          file that `status` reports (`scans`, builds from session 34 on:
          `n/a` before), and with --strace the server's listings of each
          file's directories and opens of its path record per file.

Usage: bench/new_files.py --before DIR [--after DIR] [--n 50] [--size 4096]
         [--rounds 5] [--fs disk,tmpfs] [--strace]
DIR holds `paralog` and `libparalog_capture.so` (--after: target/release).
"""
import argparse
import collections
import json
import os
import re
import resource
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FS = {"disk": "/var/tmp", "tmpfs": "/dev/shm"}


def cpu_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_case(bin_dir, prog, fs, n, size, env):
    """`paralog run` of the program: (program s, wall s, cpu s)."""
    w = Path(tempfile.mkdtemp(prefix="nf-", dir=fs))
    try:
        (w / "pfs").mkdir()
        (w / "remote").mkdir()
        c0, t0 = cpu_children(), time.monotonic()
        r = subprocess.run([bin_dir / "paralog", "run", "--mpi", "none", "--prefix", w / "pfs", "--local",
                            w / "log", "--remote", w / "remote", "--job", "m", "--", prog, "files",
                            w / "pfs/x", str(size), str(n)], env=env, capture_output=True, text=True)
        wall, cpu = time.monotonic() - t0, cpu_children() - c0
        if r.returncode != 0:
            raise RuntimeError(f"paralog run exited {r.returncode}: {r.stderr[-800:]}")
        got = len(os.listdir(w / "remote"))
        if got != n:
            raise RuntimeError(f"{got} files drained of {n}")
        prog_s = json.loads(r.stdout.strip().splitlines()[-1])["seconds"]
        return prog_s, wall, cpu
    finally:
        shutil.rmtree(w, ignore_errors=True)


def ask(sock, req):
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(sock))
    s.sendall(json.dumps(req).encode() + b"\n")
    s.shutdown(socket.SHUT_WR)
    out = b""
    while b := s.recv(65536):
        out += b
    s.close()
    return json.loads(out)


def scans_case(bin_dir, prog, fs, n, size, env, strace):
    """The server alone: {measure: per file}."""
    w = Path(tempfile.mkdtemp(prefix="nf-", dir=fs))
    try:
        local, remote, pfs = w / "log", w / "remote", w / "pfs"
        for d in (local, remote, pfs):
            d.mkdir(mode=0o700)
        cmd = [bin_dir / "paralog", "server", "--local", local, "--remote", remote]
        if strace:
            cmd = ["strace", "-f", "-y", "-qq", "-e", "trace=getdents64,openat", "-o", w / "trace"] + cmd
        srv = subprocess.Popen(cmd, stderr=subprocess.DEVNULL, env=env)
        sock = local / ".paralog-server.sock"
        try:
            deadline = time.monotonic() + 60
            while not sock.exists():
                if time.monotonic() > deadline:
                    raise RuntimeError("the server did not start")
                time.sleep(0.02)
            penv = dict(env, LD_PRELOAD=str(bin_dir / "libparalog_capture.so"), PARALOG_PREFIX=str(pfs),
                        PARALOG_LOCAL=str(local), PARALOG_JOB="m")
            subprocess.run([prog, "files", pfs / "x", str(size), str(n)], env=penv, check=True,
                           capture_output=True)
            deadline = time.monotonic() + 300
            while True:
                st = ask(sock, {"cmd": "status"})
                if st["epochs_drained"] >= n and st["idle"]:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"not drained: {st}")
                time.sleep(0.05)
            # utime and stime of all its threads (fields 14 and 15), before it stops.
            ticks = open(f"/proc/{srv.pid}/stat").read().rsplit(")", 1)[1].split()
            server_cpu = (int(ticks[11]) + int(ticks[12])) / os.sysconf("SC_CLK_TCK")
            ask(sock, {"cmd": "stop"})
            srv.wait(timeout=60)
        finally:
            if srv.poll() is None:
                srv.kill()
                srv.wait()
        out = {} if strace else {"server CPU ms/file": server_cpu * 1000 / n}
        scans = [f.get("scans") for f in st["files"]]
        if scans and None not in scans:
            out["scans"] = sum(scans) / n
            out["scans max"] = max(scans)
        if strace:
            c = collections.Counter()
            job = str(local / "m") + "/"
            for line in open(w / "trace"):
                m = re.search(r"getdents64\(\d+<([^>]*)>.*= (\d+)", line)
                if m and int(m.group(2)) > 0 and m.group(1).startswith(job):
                    depth = m.group(1)[len(job):].count("/")
                    c[["list file dir", "list g/stage", "list rank dir", "list deeper"][min(depth, 3)]] += 1
                elif re.search(r'/f-[0-9a-f]+/path"', line):
                    c["open path"] += 1
            out.update({k: v / n for k, v in c.items()})
        return out
    finally:
        shutil.rmtree(w, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", default=str(ROOT / "target/release"))
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--fs", default="disk,tmpfs")
    ap.add_argument("--strace", action="store_true")
    a = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARALOG_")}
    tmp = Path(tempfile.mkdtemp(prefix="nf-bin-"))
    try:
        prog = tmp / "micro"
        subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-o", prog, ROOT / "bench/micro.c"], check=True)
        builds = {"before": Path(a.before), "after": Path(a.after)}
        print(f"{a.n} new files of {a.size} B, {a.rounds} rounds, builds alternated; "
              f"load {os.getloadavg()[0]:.1f} at {time.strftime('%H:%M UTC', time.gmtime())}")
        for fsname in a.fs.split(","):
            runs = collections.defaultdict(list)
            scans = collections.defaultdict(lambda: collections.defaultdict(list))
            for rnd in range(a.rounds):
                order = list(builds) if rnd % 2 == 0 else list(builds)[::-1]
                for b in order:
                    runs[b].append(run_case(builds[b], prog, FS[fsname], a.n, a.size, env))
                    for k, v in scans_case(builds[b], prog, FS[fsname], a.n, a.size, env, a.strace).items():
                        scans[b][k].append(v)
            print(f"\n{fsname} ({FS[fsname]}), load {os.getloadavg()[0]:.1f} after")
            print("| build | program ms | run wall ms | run CPU ms | " + " | ".join(
                sorted({k for b in builds for k in scans[b]})) + " |")
            keys = sorted({k for b in builds for k in scans[b]})
            for b in builds:
                r = runs[b]
                cols = [f"{statistics.median(x[i] for x in r) * 1000:.0f} "
                        f"({min(x[i] for x in r) * 1000:.0f}-{max(x[i] for x in r) * 1000:.0f})" for i in range(3)]
                cols += [f"{statistics.median(scans[b][k]):.2f}" if scans[b][k] else "n/a" for k in keys]
                print(f"| {b} | " + " | ".join(cols) + " |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
