#!/usr/bin/python3
"""Checkpoint sets on S3 written by a server job: `--agg-mode leader`
against `--agg-mode own`, side by side in each round (order rotated), on
simulated nodes (tests/lib/server.py's Cluster: one server per node in one
MPMD job on this machine, 2 ranks per node) and a real MinIO on loopback
(tests/lib/minio.py). Results and their reading: docs/benchmarks.md,
section 9, "On S3".

The workload is tests/aggregate/progs/ckpt.c (MPICH): every rank writes
its member ckpt/step-NNNNNN/rank-RRRRR.dat per checkpoint, --mb MB on
average, uneven by --spread % (CKPT_SPREAD), --steps checkpoints.

Measured per variant (mode, K): application time (launch to exit), total
time (launch until `paralog wait` returns: every set published), member
bytes between nodes (the servers' counter), the bytes the containers hold
on S3 against the members' bytes (alignment and, in the own mode,
padding of regions under 5 MiB), and the containers' parts. Loopback has
no link to cap: this shows the bytes and the CPU/copy cost of each mode,
not a storage-bound run (bench/aggregate.py does that, on POSIX).

Usage: bench/aggregate_s3.py [--nodes 2] [--mb 32] [--steps 2]
         [--spread 20] [--ks 1,2] [--rounds 2] [--dir /tmp] [--json OUT]
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.aggregate import nodes, s3  # noqa: E402
from tests.aggregate import run as agg  # noqa: E402
from tests.aggregate.s3 import BUCKET, RULE  # noqa: E402
from tests.lib.minio import MinIO  # noqa: E402
from tests.lib.server import RANKS_PER_NODE, Cluster  # noqa: E402


def run_variant(a, work, minio, mode, k, rnd):
    pre = f"r{rnd}-{mode}-k{k}"
    args = ["--aggregate", RULE, "--agg-mode", mode, "--containers", str(k)]
    c = Cluster(work / pre, "mpich", a.nodes, f"s3://{BUCKET}/{pre}", aws_env=s3.aws_env(minio),
                server_args=args)
    c.start_servers()
    t0 = time.time()
    try:
        nodes.write_job(c, "mpich", a.nodes * RANKS_PER_NODE, {"CKPT_SPREAD": str(a.spread)},
                        steps=a.steps, mean=a.mb * 1_000_000)
        t1 = time.time()
        c.wait(timeout=3600)
        t2 = time.time()
    finally:
        c.stop()
    between, _ = nodes.totals(c)
    keys = minio.keys(BUCKET, pre)
    containers = [(key, size) for key, size in keys if key.endswith(".plc")]
    stored = sum(size for _, size in containers)
    parts = [s3.parts(minio, key) for key, _ in containers]
    return {"mode": mode, "k": k, "round": rnd, "app_s": t1 - t0, "total_s": t2 - t0,
            "between": between[-1] if between else None, "stored": stored,
            "containers": len(containers), "parts": parts}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--mb", type=int, default=32)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--spread", type=int, default=20)
    ap.add_argument("--ks", default="1,2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--json")
    a = ap.parse_args()
    ks = [int(k) for k in a.ks.split(",")]
    variants = [(m, k) for k in ks for m in ("leader", "own")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-agg-s3-", dir=a.dir) as d:
        work = Path(d)
        # The members' bytes: the same program run directly.
        direct = agg.direct_run(work, a.nodes * RANKS_PER_NODE, steps=a.steps, mean=a.mb * 1_000_000,
                                spread=a.spread)
        members = sum(f.stat().st_size for f in (direct / "ckpt").rglob("rank-*.dat"))
        minio, _ = MinIO.with_bucket(work, BUCKET)
        try:
            for rnd in range(a.rounds):
                order = variants[rnd % len(variants):] + variants[:rnd % len(variants)]
                for mode, k in order:
                    r = run_variant(a, work, minio, mode, k, rnd)
                    rows.append(r)
                    print(f"round {rnd} {mode:6} K={k}: app {r['app_s']:.1f} s, total {r['total_s']:.1f} s, "
                          f"between nodes {r['between']}, stored {r['stored']} in {r['containers']} "
                          f"container(s) of {r['parts']} parts", flush=True)
        finally:
            minio.stop()
    print(f"\nmedians over {a.rounds} round(s), {a.nodes} nodes x {RANKS_PER_NODE} ranks, "
          f"{a.mb} MB per rank +-{a.spread} %, {a.steps} checkpoints, {members} member bytes:")
    for mode, k in variants:
        rs = [r for r in rows if r["mode"] == mode and r["k"] == k]
        print(f"  {mode:6} K={k}: app {statistics.median(r['app_s'] for r in rs):.1f} s, "
              f"total {statistics.median(r['total_s'] for r in rs):.1f} s, "
              f"between nodes {rs[-1]['between']} B, stored {rs[-1]['stored']} B")
    if a.json:
        Path(a.json).write_text(json.dumps({"members": members, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
