#!/usr/bin/python3
"""Upload throughput to S3 (a MinIO on loopback) of paralog's drain versus
`aws s3 cp` of the same bytes to the same MinIO, in the same run.
Results and their reading: docs/benchmarks.md, section 5.

Setup: one MinIO (target/go/bin/minio, single drive, data directory in a
temporary directory under --tmp) on a free 127.0.0.1 port, one bucket made
with awscli; both tools get the same environment: AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_REGION=us-east-1,
AWS_ENDPOINT_URL=http://127.0.0.1:PORT, and empty AWS config/credentials
files (so awscli runs with its default transfer settings: multipart above
8 MiB, 8 MiB parts, 10 concurrent requests). MinIO is stopped by its PID at
the end, and the temporary directory is removed.

Cases (one file each; bench/drain_writer.c writes it, deterministically):
  large:   LARGE_MIB (1 GiB) written sequentially in 8 MiB pwrites, one
           epoch (fsync, then close);
  extents: EXTENTS (5,000) noncontiguous 4..64 KiB pwrites, each at its
           own 80 KiB slot in random order (a separate extent with holes
           around it), one epoch; the object is the logical file, holes as
           zeros: 5,000 x 80 KiB = 400 MiB, of which ~170 MiB were written.

Methods, each timed once per round, in an order that rotates per round:
  server:        the writer runs under the real capture library
                 (LD_PRELOAD=libparalog_capture.so, PARALOG_PREFIX/LOCAL/JOB,
                 no server running) and leaves a node-local log; then
                 `paralog server --local L --job J --remote s3://B/P` with
                 its defaults (4 workers, nice 10, lowest best-effort I/O
                 priority) is timed from spawn to its answer to
                 {"cmd":"drain"} on L/.paralog-server-J.sock (so start-up,
                 the S3 client's set-up and the whole upload are included);
                 then {"cmd":"stop"};
  server-nice0:  the same with --nice 0 (aws runs at nice 0);
  recover:       `paralog recover --local L --job J --remote s3://B/P --json`
                 (the same upload code, in the foreground), timed whole;
  aws:           `aws s3 cp --no-progress --only-show-errors FILE s3://B/K`
                 (python3 -m awscli with target/pylib), timed whole (the
                 interpreter's start-up is included, as the server's is) on
                 the plain file the writer leaves when run without capture
                 (the same logical bytes; written once per case, clean in
                 the page cache, as the log is);
  aws-c8:        the same with max_concurrent_requests = 8 (in an AWS config
                 file that sets only that): paralog's 8 part uploads in
                 flight per file, to tell concurrency from per-byte cost.
The log of a paralog method is written just before it is timed (its pages
are clean in the page cache too).

Throughput = object size (= the plain file's size) / wall time, in MB/s
(10^6). The table shows medians (min-max) and the ratio of each other
method's median to aws's, then the median CPU time (user+sys, from
getrusage of the waited-for child) each method spent per GiB of object,
and MinIO's during the same timing (from /proc/PID/stat; on 2 cores the
two compete), and the median over rounds of each round's ratio to aws
(paired: less exposed to load that drifts). Every paralog object is downloaded once with awscli and compared (cmp)
with the plain file, and must carry a whole-object CRC32C (checksum type
FULL_OBJECT, which MinIO checked on completion); every aws object's size is
checked; the multipart ETags of both sides are compared (with 8 MiB parts
on both sides they are equal when the bytes are). Objects are deleted after
each round.

Fixed costs, measured first (3 times each, medians): `aws s3 cp` of a
1-byte file (the interpreter's and botocore's start-up, one PUT), and a
`paralog server` on an empty log from spawn to its drain answer (start-up
and the S3 client's set-up). They are included in every timing above.

Usage: bench/s3_vs_awscli.py [--cases large,extents] [--repeat 3]
         [--methods server,server-nice0,recover,aws,aws-c8] [--large-mib 1024]
         [--extents 5000] [--tmp /tmp] [--json OUT] [--keep]

The binaries are copied to a private directory first, so a rebuild of
target/release during the run does not change what is measured. Space on
--tmp: about 4 x the largest object (plain file, log, MinIO's copy, the
verification download).
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from benchlib import JOB, Tools, request, sh  # noqa: E402
sys.path.insert(0, str(ROOT))
from tests.lib.minio import MinIO  # noqa: E402  (MinIO on loopback, awscli env)
from tests.lib.paths import PY, PYLIB  # noqa: E402

BUCKET = "bench"


def writer_args(case, a, path):
    if case == "large":
        return ["large", path, a.large_mib, 8192, 1]
    return ["small", path, a.extents, 1, 7]


def paralog_env(minio):
    env = minio.env()
    env["PARALOG_LOG"] = "warn"
    return env


def run_server(tools, minio, local, remote, extra, errlog):
    """Start a server on an existing log, ask it to drain, stop it.
    Returns (wall seconds from spawn to the drain answer, status)."""
    sock = local / f".paralog-server-{JOB}.sock"
    with open(errlog, "ab") as ef:
        t0 = time.perf_counter()
        p = subprocess.Popen([str(tools.paralog), "server", "--local", str(local), "--job", JOB,
                              "--remote", remote, *extra], env=paralog_env(minio),
                             stdout=subprocess.DEVNULL, stderr=ef)
    try:
        while True:
            if p.poll() is not None:
                raise RuntimeError(f"server exited {p.returncode} early: "
                                   f"{Path(errlog).read_text(errors='replace')[-800:]}")
            try:
                st = request(sock, {"cmd": "drain"})
                break
            except (FileNotFoundError, ConnectionRefusedError):
                time.sleep(0.002)
        wall = time.perf_counter() - t0
        if "error" in st or st.get("damaged") or st.get("epochs_pending"):
            raise RuntimeError(f"drain failed: {st}; log: "
                               f"{Path(errlog).read_text(errors='replace')[-800:]}")
        try:
            request(sock, {"cmd": "stop"}, timeout=60)
        except (ValueError, OSError):
            pass
        p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()  # by its PID: the server we started
            p.wait()
    return wall, st


def run_recover(tools, minio, local, remote):
    t0 = time.perf_counter()
    r = sh(tools.paralog, "recover", "--local", local, "--remote", remote, "--job", JOB, "--json",
           env=paralog_env(minio), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    out = json.loads(r.stdout)
    if out.get("failed"):
        raise RuntimeError(f"recover failed: {out}")
    return wall, out


def aws_env(minio, concurrency=None):
    env = minio.env()
    env["PYTHONPATH"] = str(PYLIB)
    if concurrency:
        conf = minio.base / f"aws-config-c{concurrency}"
        conf.write_text(f"[default]\ns3 =\n    max_concurrent_requests = {concurrency}\n")
        env["AWS_CONFIG_FILE"] = str(conf)
    return env


def aws(minio, *args, timeout=1800, concurrency=None):
    return sh(PY, "-m", "awscli", *args, env=aws_env(minio, concurrency), capture_output=True,
              text=True, timeout=timeout)


def run_aws_cp(minio, src, url, concurrency=None):
    t0 = time.perf_counter()
    aws(minio, "s3", "cp", "--no-progress", "--only-show-errors", src, url, concurrency=concurrency)
    return time.perf_counter() - t0


def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def minio_cpu(minio):
    """CPU seconds (user+sys) MinIO has used so far, from /proc."""
    f = Path(f"/proc/{minio.p.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def head(minio, key, checksum=False):
    """(size, ETag), and with checksum=True the whole-object checksum's type
    (FULL_OBJECT for paralog's CRC32C, None if the object has none)."""
    r = aws(minio, "s3api", "head-object", "--bucket", BUCKET, "--key", key, "--output", "json",
            *(["--checksum-mode", "ENABLED"] if checksum else []))
    h = json.loads(r.stdout)
    if checksum:
        kind = h.get("ChecksumType") if h.get("ChecksumCRC32C") else None
        return h["ContentLength"], h["ETag"].strip('"'), kind
    return h["ContentLength"], h["ETag"].strip('"')


def same(a, b):
    return subprocess.run(["cmp", "-s", str(a), str(b)]).returncode == 0


def bench_case(tools, minio, a, case, base, results):
    methods = a.methods
    work = Path(tempfile.mkdtemp(prefix=f"{case}-", dir=base))
    rates = {m: [] for m in methods}
    detail = {m: [] for m in methods}
    etags = {}
    try:
        # The plain file: aws's source and the reference for every check.
        (work / "plain").mkdir()
        plain = work / "plain/f"
        w = tools.write(writer_args(case, a, plain))
        size = plain.stat().st_size
        print(f"{case}: object {size} bytes ({size / 2**20:.0f} MiB), {w['bytes']} bytes written "
              f"in {w['extents']} extent(s)", flush=True)
        for i in range(a.repeat):
            order = methods[i % len(methods):] + methods[:i % len(methods)]
            for m in order:
                prefix = f"{case}-r{i}-{m}"
                key = f"{prefix}/f"
                if m.startswith("aws"):
                    time.sleep(a.settle)
                    c0, s0 = child_cpu(), minio_cpu(minio)
                    t = run_aws_cp(minio, plain, f"s3://{BUCKET}/{key}",
                                   concurrency=8 if m == "aws-c8" else None)
                    cpu, scpu = child_cpu() - c0, minio_cpu(minio) - s0
                    n, etag = head(minio, key)
                    if n != size:
                        raise RuntimeError(f"{m}: object of {n} bytes, file of {size}")
                    detail[m].append({"wall": t, "cpu": cpu, "minio_cpu": scpu})
                else:
                    inp = work / f"in-{m}"
                    pfs, local = inp / "pfs", inp / "local"
                    pfs.mkdir(parents=True)
                    tools.write(writer_args(case, a, pfs / "f"), capture=(pfs, local))
                    if (pfs / "f").exists():
                        raise RuntimeError("capture did not take the file: it reached the prefix")
                    time.sleep(a.settle)
                    remote = f"s3://{BUCKET}/{prefix}"
                    c0, s0 = child_cpu(), minio_cpu(minio)
                    if m == "recover":
                        t, st = run_recover(tools, minio, local, remote)
                        detail[m].append({"wall": t, "cpu": child_cpu() - c0,
                                          "minio_cpu": minio_cpu(minio) - s0})
                    else:
                        ex = ["--nice", "0"] if m == "server-nice0" else []
                        t, st = run_server(tools, minio, local, remote, ex, work / f"server-{m}.log")
                        detail[m].append({"wall": t, "cpu": child_cpu() - c0,
                                          "minio_cpu": minio_cpu(minio) - s0,
                                          "drain_active_s": st.get("drain_active_s"),
                                          "bytes_drained": st.get("bytes_drained")})
                    shutil.rmtree(inp)
                    n, etag, kind = head(minio, key, checksum=True)
                    if kind != "FULL_OBJECT":
                        raise RuntimeError(f"{m}: s3://{BUCKET}/{key} has no whole-object CRC32C ({kind})")
                    dl = work / "download"
                    aws(minio, "s3", "cp", "--no-progress", "--only-show-errors",
                        f"s3://{BUCKET}/{key}", dl)
                    if not same(plain, dl):
                        raise RuntimeError(f"{m}: s3://{BUCKET}/{key} differs from {plain}")
                    dl.unlink()
                etags.setdefault(m, set()).add(etag)
                aws(minio, "s3", "rm", "--recursive", "--only-show-errors", f"s3://{BUCKET}/{prefix}/")
                rates[m].append(size / t / 1e6)
            print(f"  round {i + 1}: " + "  ".join(f"{m} {rates[m][-1]:.0f} MB/s" for m in methods)
                  + f"  (load {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    all_etags = set().union(*etags.values())
    row = {"case": case, "object_bytes": size, "written_bytes": w["bytes"], "extents": w["extents"],
           "runs": a.repeat, "MBps": rates, "detail": detail,
           "etags": {m: sorted(e) for m, e in etags.items()}, "etags_equal": len(all_etags) == 1}
    results.append(row)
    return row


def fixed_costs(tools, minio, base):
    work = base / "fixed"
    (work / "local").mkdir(parents=True)
    one = work / "one"
    one.write_bytes(b"x")
    out = {"aws_1byte": [], "server_empty": []}
    for i in range(3):
        out["aws_1byte"].append(run_aws_cp(minio, one, f"s3://{BUCKET}/fixed/one-{i}"))
        out["server_empty"].append(run_server(tools, minio, work / "local", f"s3://{BUCKET}/fixed",
                                              [], work / "server.log")[0])
    aws(minio, "s3", "rm", "--recursive", "--only-show-errors", f"s3://{BUCKET}/fixed/")
    shutil.rmtree(work)
    med = {k: statistics.median(v) for k, v in out.items()}
    print(f"fixed costs (median of 3): aws s3 cp of 1 byte {med['aws_1byte']:.2f} s, "
          f"paralog server on an empty log to its drain answer {med['server_empty']:.2f} s",
          flush=True)
    return out


def print_table(rows, methods):
    paralogs = [m for m in methods if m != "aws"]
    print("throughput, MB/s: median (min-max), and ratio of medians to aws")
    hdr = f"{'case':8} {'MiB':>5} " + " ".join(f"{m + ' MB/s':>19}" for m in methods)
    if "aws" in methods:
        hdr += "".join(f" {m + '/aws':>13}" for m in paralogs)
    print(hdr)
    for r in rows:
        v = r["MBps"]
        med = {m: statistics.median(x) for m, x in v.items()}
        line = f"{r['case']:8} {r['object_bytes'] / 2**20:5.0f} "
        line += " ".join(f"{med[m]:6.0f} ({min(v[m]):4.0f}-{max(v[m]):4.0f})" for m in methods)
        if "aws" in methods:
            line += "".join(f" {med[m] / med['aws']:12.2f}x" for m in paralogs)
        print(line)
    if "aws" in methods and paralogs:
        # Each round runs every method within a few tens of seconds: the
        # ratio within a round is less exposed to load that drifts.
        print("paired: median over rounds of the round's ratio to aws")
        for r in rows:
            v = r["MBps"]
            print(f"{r['case']:8} " + "  ".join(
                f"{m}/aws {statistics.median(x / y for x, y in zip(v[m], v['aws'])):.2f}x"
                for m in paralogs))
    print("CPU seconds (user+sys) per GiB of object, median: the tool (+ MinIO during its "
          "timing); ETags of all objects equal")
    for r in rows:
        gib = r["object_bytes"] / 2**30
        cpu = {m: statistics.median(d["cpu"] for d in r["detail"][m]) / gib for m in methods}
        srv = {m: statistics.median(d["minio_cpu"] for d in r["detail"][m]) / gib for m in methods}
        print(f"{r['case']:8} " + "  ".join(f"{m} {cpu[m]:.2f} (+{srv[m]:.2f})" for m in methods)
              + f"  ETags equal: {r['etags_equal']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default="large,extents")
    ap.add_argument("--methods", default="server,server-nice0,aws,aws-c8")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--large-mib", type=int, default=1024)
    ap.add_argument("--extents", type=int, default=5000)
    ap.add_argument("--settle", type=float, default=0.5, help="seconds of rest before each timing")
    ap.add_argument("--tmp", default="/tmp")
    ap.add_argument("--json")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    a.cases = a.cases.split(",")
    a.methods = a.methods.split(",")
    for m in a.methods:
        if m not in ("server", "server-nice0", "recover", "aws", "aws-c8"):
            ap.error(f"unknown method {m}")
    largest = max(a.large_mib << 20 if c == "large" else a.extents * 80 << 10 for c in a.cases)
    free = shutil.disk_usage(a.tmp).free
    if free < 4 * largest + (2 << 30):
        sys.exit(f"{a.tmp}: {free / 2**30:.1f} GiB free, need {(4 * largest + (2 << 30)) / 2**30:.1f}")
    base = Path(tempfile.mkdtemp(prefix="paralog-s3bench-", dir=a.tmp))
    minio = None
    results = []
    try:
        tools = Tools(base)
        minio = MinIO(base)
        minio.start()
        minio.mb(BUCKET)
        v = aws(minio, "--version")
        aws_version = (v.stdout.strip() or v.stderr.strip() or "?").split()[0]
        print(f"paralog {tools.rev}, {aws_version}, MinIO at {minio.url}, {os.cpu_count()} CPUs, "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
        fixed = fixed_costs(tools, minio, base)
        for case in a.cases:
            bench_case(tools, minio, a, case, base, results)
        print()
        print_table(results, a.methods)
        print(f"(load at the end {os.getloadavg()[0]:.1f})")
        if a.json:
            Path(a.json).write_text(json.dumps({"rev": tools.rev, "aws": aws_version,
                                                "fixed": fixed, "results": results}, indent=1))
    finally:
        if minio:
            minio.stop()  # by the PID (process group) of the MinIO we started
        if a.keep:
            print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
