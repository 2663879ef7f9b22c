#!/usr/bin/python3
"""What a round of the server job costs, against the number of nodes N and
the epochs E pending on each node (make bench-rounds; docs/benchmarks.md
section 10, the cost model in docs/cluster.md "What a round costs").

For every N and E: node-local logs are made for N simulated nodes with
crates/log/examples/pending_logs.rs (node n holds rank n of E/OPENS shared
files, each opened OPENS times, one epoch per open committed locally by
rank n of a communicator of N + 1 ranks: never globally committed, so
every epoch stays pending and is shipped in every round, and nothing is
drained). Then the server job runs on them (one `paralog server` per
simulated node, all processes of one mpirun on this machine, so the
allgather goes through MPI's shared memory, not a network) for --rounds
rounds after two warm-up rounds, and each server's `status` gives what its
rounds cost (the round_cost counters: bytes sent into and received from
the rounds' allgathers, microseconds scanning, exchanging and planning).
The table shows per round, averaged over the measured rounds and over the
nodes: the bytes one server sends and receives, and the time of each part
(the exchange includes waiting for the slowest server). Then, BATCHES (5)
times, NEW (10) more epochs appear on every node (new files) and the
servers run one more round; the last two columns are what one server
received per batch beyond the steady rounds' bytes (N x NEW manifests,
once each, when only changes are sent), and the mean time of a round
while they arrived. Then `paralog wait` stops the servers. The logs are
a second old when the servers start, and the first two rounds are not
counted (a scan keeps only what was written a second before:
crates/log/src/reader/cache.rs).

--bin DIR runs another build (paralog, libparalog_coord_*.so and
pending_logs in DIR: e.g. a copy of an earlier commit's, for before and
after in one run).

Usage: bench/rounds.py [--nodes 1,2,4,8] [--epochs 10,100,1000,10000]
         [--opens 10] [--rounds 5] [--mpi mpich|openmpi] [--dir /dev/shm]
         [--json OUT] [--quick] [--bin DIR]
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from benchlib import request  # noqa: E402

JOB = "b"
# New epochs per node added during a run (the "new" columns), and how
# many times.
NEW = 10
BATCHES = 5
BUILT = ROOT / "target/release"
# Copied to a directory of the run first (with the servers' MPI libraries,
# found beside the executable), so that a rebuild during a run changes nothing.
GEN = BUILT / "examples/pending_logs"
PARALOG = BUILT / "paralog"


def copy_tools(d, built=None):
    global GEN, PARALOG
    if built is not None:
        GEN, PARALOG = built / GEN.name, built / PARALOG.name
    for f in [GEN, PARALOG, *(built or BUILT).glob("libparalog_coord_*.so")]:
        shutil.copy2(f, d / f.name)
    GEN, PARALOG = d / GEN.name, d / PARALOG.name


def env():
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("PARALOG_", "OMPI_", "PMI_")) and k != "LD_PRELOAD"}
    e.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
              "OMPI_MCA_rmaps_base_oversubscribe": "1", "PARALOG_LOG": "warn"})
    return e


def launcher(mpi):
    return ["mpirun.mpich", "-n", "1"] if mpi == "mpich" else ["mpirun.openmpi", "--oversubscribe", "-n", "1"]


def make_logs(work, nodes, epochs, opens):
    files, per = max(1, epochs // opens), min(opens, epochs)
    for n in range(nodes):
        d = work / "local" / f"n{n}"
        d.mkdir(parents=True, mode=0o700)
        subprocess.run([GEN, d, JOB, str(n), str(nodes), str(files), str(per)], check=True)
    return files * per


def costs(work, nodes):
    out = []
    for n in range(nodes):
        st = request(work / "local" / f"n{n}" / f".paralog-server-{JOB}.sock", {"cmd": "status"}, timeout=600)
        out.append(st["cluster"]["round_cost"])
    return out


def measure(work, nodes, epochs, opens, rounds, mpi):
    e = make_logs(work, nodes, epochs, opens)
    # A scan keeps what it read only if it was written at least a second
    # before (crates/log/src/reader/cache.rs): older logs, as pending ones
    # of a real job mostly are, are read once.
    time.sleep(1.1)
    remote = work / "remote"
    remote.mkdir()
    cmd = launcher(mpi)
    for n in range(nodes):
        if n:
            cmd += [":", "-n", "1"]
        cmd += ["env", f"PARALOG_NODE=n{n}", PARALOG, "server", "--local", f"{work}/local/{{node}}",
                "--remote", remote, "--job", JOB, "--nice", "0"]
    log = open(work / "servers.log", "wb")
    p = subprocess.Popen(list(map(str, cmd)), stdout=log, stderr=subprocess.STDOUT, env=env(),
                         start_new_session=True)
    try:
        socks = [work / "local" / f"n{n}" / f".paralog-server-{JOB}.sock" for n in range(nodes)]
        deadline = time.time() + 120
        while not all(s.exists() for s in socks):
            if p.poll() is not None or time.time() > deadline:
                raise SystemExit(f"server job not ready: {(work / 'servers.log').read_text()[-800:]}")
            time.sleep(0.05)
        # Warm-up, not counted: the first two rounds (page cache, first
        # allocations, every log read once).
        while min(c["rounds"] for c in costs(work, nodes)) < 2:
            time.sleep(0.05)
        before = costs(work, nodes)
        while min(a["rounds"] - b["rounds"] for a, b in zip(costs(work, nodes), before)) < rounds:
            time.sleep(0.1)
        after = costs(work, nodes)
        # NEW more epochs on every node (new files, one open each), after
        # each round, BATCHES times: what the rounds that see them receive
        # on top of the steady rounds, and take.
        for b in range(BATCHES):
            first = max(1, epochs // opens) + 1 + b * NEW
            for n in range(nodes):
                subprocess.run([GEN, work / "local" / f"n{n}", JOB, str(n), str(nodes), str(NEW), "1", str(first)],
                               check=True)
            mark = costs(work, nodes)
            while min(c["rounds"] - m["rounds"] for c, m in zip(costs(work, nodes), mark)) < 1:
                time.sleep(0.02)
        grown = costs(work, nodes)
        r = subprocess.run([str(PARALOG), "wait", "--local", f"{work}/local/{{node}}", "--job", JOB,
                            "--timeout", "600"], env={**env(), "PARALOG_NODE": "n0"},
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"paralog wait exited {r.returncode}: {r.stdout}{r.stderr}")
        p.wait(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
            p.wait()
        log.close()
    per = []
    for a, b in zip(after, before):
        k = a["rounds"] - b["rounds"]
        per.append({f: (a[f] - b[f]) / k for f in
                    ("bytes_sent", "bytes_received", "scan_us", "exchange_us", "plan_us")})
    # Every server receives every server's summary: a check of the counters.
    sent = sum(x["bytes_sent"] for x in per)
    for x in per:
        if abs(x["bytes_received"] - sent) > 0.01 * sent + 64 * nodes:
            raise SystemExit(f"N={nodes} E={epochs}: a server received {x['bytes_received']:.0f} B a round, "
                             f"the servers sent {sent:.0f}")
    mean = {f: sum(x[f] for x in per) / nodes for f in per[0]}
    # Received in the rounds that saw the new epochs beyond the steady
    # rounds' bytes, per batch; the mean time of those rounds.
    def total_us(c):
        return c["scan_us"] + c["exchange_us"] + c["plan_us"]

    extra = [(g["bytes_received"] - a["bytes_received"]) - (g["rounds"] - a["rounds"]) * x["bytes_received"]
             for g, a, x in zip(grown, after, per)]
    mean["new_received"] = sum(extra) / nodes / BATCHES
    mean["new_round_ms"] = sum((total_us(g) - total_us(a)) / (g["rounds"] - a["rounds"])
                               for g, a in zip(grown, after)) / nodes / 1000
    mean["total_ms"] = (mean["scan_us"] + mean["exchange_us"] + mean["plan_us"]) / 1000
    mean["max_total_ms"] = max(x["scan_us"] + x["exchange_us"] + x["plan_us"] for x in per) / 1000
    return {"nodes": nodes, "epochs_per_node": e, "rounds": rounds, **mean}


def fit(rows):
    """Least squares: received bytes = a + b N E; time = t0 + t1 E + t2 N E."""
    import numpy as np
    ne = np.array([r["nodes"] * r["epochs_per_node"] for r in rows], float)
    e = np.array([r["epochs_per_node"] for r in rows], float)
    one = np.ones_like(ne)
    recv = np.array([r["bytes_received"] for r in rows])
    (a, b), *_ = np.linalg.lstsq(np.stack([one, ne], 1), recv, rcond=None)
    ms = np.array([r["total_ms"] for r in rows])
    (t0, t1, t2), *_ = np.linalg.lstsq(np.stack([one, e, ne], 1), ms, rcond=None)
    return {"bytes_a": a, "bytes_per_NE": b, "ms_t0": t0, "ms_per_E": t1, "ms_per_NE": t2}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="1,2,4,8")
    ap.add_argument("--epochs", default="10,100,1000,10000")
    ap.add_argument("--opens", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mpi", default="mpich", choices=["mpich", "openmpi"])
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true", help="nodes 1,2,4 and epochs 10,100,1000, 3 rounds")
    ap.add_argument("--bin", type=Path, help="run the build in this directory (paralog, pending_logs, "
                    "libparalog_coord_*.so) instead of target/release")
    a = ap.parse_args()
    if a.quick:
        a.nodes, a.epochs, a.rounds = "1,2,4", "10,100,1000", 3
    for tool in [a.bin / t.name for t in (GEN, PARALOG)] if a.bin else (GEN, PARALOG):
        if not tool.exists():
            raise SystemExit(f"{tool} is missing: make bench-rounds builds it")
    tools = Path(tempfile.mkdtemp(prefix="rounds-bin-", dir=a.dir))
    copy_tools(tools, a.bin)
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    build = f"the build in {a.bin}" if a.bin else f"commit {rev}"
    print(f"# bench/rounds.py, {build}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"load {os.getloadavg()[0]:.1f}, MPI {a.mpi}, logs on {a.dir}")
    print(f"| N | E/node | sent B/round | received B/round | scan ms | exchange ms | plan ms | total ms (max node) "
          f"| received for {NEW} new epochs/node, B | ms/round, {NEW} new epochs/node each round |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows = []
    for n in map(int, a.nodes.split(",")):
        for e in map(int, a.epochs.split(",")):
            work = Path(tempfile.mkdtemp(prefix="rounds-", dir=a.dir))
            try:
                r = measure(work, n, e, a.opens, a.rounds, a.mpi)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            rows.append(r)
            print(f"| {n} | {r['epochs_per_node']} | {r['bytes_sent']:.0f} | {r['bytes_received']:.0f} | "
                  f"{r['scan_us'] / 1000:.2f} | {r['exchange_us'] / 1000:.2f} | {r['plan_us'] / 1000:.2f} | "
                  f"{r['total_ms']:.2f} ({r['max_total_ms']:.2f}) | {r['new_received']:.0f} | "
                  f"{r['new_round_ms']:.2f} |", flush=True)
    if len(rows) >= 3:
        f = fit(rows)
        print(f"\nfit: received B/round = {f['bytes_a']:.0f} + {f['bytes_per_NE']:.1f} x N x E; "
              f"ms/round = {f['ms_t0']:.2f} + {f['ms_per_E'] * 1000:.2f} us x E + {f['ms_per_NE'] * 1000:.2f} us x N x E")
    else:
        f = None
    if a.json:
        Path(a.json).write_text(json.dumps({"rev": rev, "rows": rows, "fit": f}, indent=1))
    shutil.rmtree(tools, ignore_errors=True)


if __name__ == "__main__":
    main()
