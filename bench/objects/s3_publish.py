#!/usr/bin/python3
"""What one logged put's publish costs on S3 as the versions its name keeps
grow (docs/objects.md "What a version costs", the bullet on the search for
a version of the put's id; docs/benchmarks.md section 11). MinIO on
loopback (tests/lib/minio.py).

For each count N and each binary (`--before`, an earlier build's `paralog`,
and `--bin`, this tree's), a name of its own gets N versions by direct puts
(one 4x4 int32 chunk each). Then, in rounds alternating the binaries, each
logs one put of 16x4096 int32 in 4 chunks (`obj put --local`) and
publishes it with `obj publish`: round 1 through tests/remote/faultproxy.py
injecting nothing, which counts the requests (all, and the GETs of the
name's version records); the other rounds straight to MinIO, timed (the
process's wall time, its start included). Each publish adds a version, so
round r finds N + r - 1 kept.

Usage: bench/objects/s3_publish.py --before OLD/paralog [--bin target/release/paralog]
         [--counts 10,100,300] [--rounds 4] [--json F]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests.lib.minio import MinIO  # noqa: E402
from tests.remote.s3 import FaultProxy  # noqa: E402

BUCKET = "plbench"


def run(cmd, env):
    r = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, cmd))[:200]}: exit {r.returncode}: {r.stderr[-600:]}")
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="an earlier build's paralog binary")
    ap.add_argument("--bin", default=str(ROOT / "target/release/paralog"))
    ap.add_argument("--counts", default="10,100,300")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--json")
    a = ap.parse_args()
    bins = {"before": a.before, "after": a.bin}
    counts = [int(c) for c in a.counts.split(",")]
    work = Path(tempfile.mkdtemp(prefix="s3-publish-"))
    minio, env = MinIO.with_bucket(work, BUCKET)
    store = f"s3://{BUCKET}/store"
    small, data = work / "small.bin", work / "data.bin"
    small.write_bytes(os.urandom(4 * 4 * 4))
    data.write_bytes(os.urandom(16 * 4096 * 4))
    proxy = None
    try:
        run([a.bin, "obj", "init", store], env)
        proxy = FaultProxy(work, minio.port, rate=0, min_rate=0)
        counted = minio.env(endpoint=f"http://127.0.0.1:{proxy.port}")
        out = []
        for n in counts:
            for label in bins:
                for _ in range(n):
                    run([a.bin, "obj", "put", f"{store}/{label}{n}", small, "--dtype", "int32",
                         "--shape", "4,4", "--chunks", "4,4"], env)
            row = {"kept": n}
            for r in range(a.rounds):
                order = list(bins) if r % 2 == 0 else list(bins)[::-1]
                for label in order:
                    local = work / f"local-{label}-{n}-{r}"
                    local.mkdir()
                    run([bins[label], "obj", "put", f"{store}/{label}{n}", data, "--dtype", "int32",
                         "--shape", "16,4096", "--chunks", "4,4096", "--local", local], env)
                    if r == 0:
                        lines = len(proxy.log.read_text().splitlines()) if proxy.log.exists() else 0
                        run([bins[label], "obj", "publish", local], counted)
                        new = [ln for ln in proxy.log.read_text().splitlines()[lines:] if " forwarded " in ln]
                        records = [ln for ln in new if re.search(rf" GET \S*/meta/{label}{n}/v\d{{10}}\b", ln)]
                        row[f"{label} requests"] = len(new)
                        row[f"{label} record GETs"] = len(records)
                    else:
                        t0 = time.perf_counter()
                        run([bins[label], "obj", "publish", local], env)
                        row.setdefault(f"{label} s", []).append(time.perf_counter() - t0)
            for label in bins:
                times = row.pop(f"{label} s", [])
                row[f"{label} ms median"] = round(1000 * statistics.median(times), 1) if times else None
                row[f"{label} ms all"] = [round(1000 * t, 1) for t in times]
            out.append(row)
            print(json.dumps(row), flush=True)
        print(f"load average at the end: {os.getloadavg()}")
        if a.json:
            Path(a.json).write_text(json.dumps(out, indent=1))
    finally:
        if proxy:
            proxy.stop()
        minio.stop()
        subprocess.run(["rm", "-rf", str(work)])


if __name__ == "__main__":
    main()
