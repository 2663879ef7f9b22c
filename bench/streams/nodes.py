#!/usr/bin/python3
"""The SLoG shapes across nodes (issue 17; docs/benchmarks.md section 12,
"Across nodes"): producers on 1, 2 and 4 simulated nodes append to one
stream of P partitions while a server job of as many servers (one per
node, an MPMD job of Open MPI: tests/lib/server.py's Cluster) drains it to
a remote directory, each partition appended by its owner server (p mod N).

For each (nodes, partitions) and round, the order rotated:

  append       every node's producers (bench/streams/loadgen.c, the C API,
               a flush with one fdatasync every FLUSH_MS ms) for SECONDS:
               the sum of the producers' events/s, and its ratio to
               "linear" (nodes x the one-node rate at the same P)
  stored       the events the job stored over the time from the
               producers' start until the servers had stored every one
               (status: stream_events), and how long they needed after
               the producers stopped (catch-up)
  between      the event bytes the servers sent each other (status:
               stream_bytes_between_nodes) against what left its node

Every run must store exactly the events the producers appended, or the
command fails. Simulated nodes share this machine's cores and disk: the
ratio to linear says what the append and drain cost one another here, not
what separate nodes would do (each its own disk and cores).

Usage: bench/streams/nodes.py [--nodes 1,2,4] [--partitions 1,4,16,64]
         [--producers-per-node 1] [--rounds 2] [--seconds 3] [--size 1024]
         [--flush-ms 10] [--flavour openmpi] [--tmp /var/tmp]
         [--remote-dir /dev/shm] [--json target/bench/streams-nodes.json]
"""
import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from run import Tools, loadgens, log, median  # noqa: E402
from tests.lib.server import Cluster  # noqa: E402


def stored_status(c, total, timeout):
    """Node n0's cluster block once the job stored `total` events."""
    deadline = time.time() + timeout
    while True:
        cl = c.status()["cluster"]
        if cl.get("stream_events", 0) >= total:
            return cl
        if time.time() > deadline:
            sys.exit(f"the server job stored {cl.get('stream_events')} of {total} events in {timeout} s")
        time.sleep(0.05)


def run_nodes(a, tools, base, nodes, p, tag):
    work = base / f"nodes{tag}"
    remote = Path(tempfile.mkdtemp(prefix=f"remote{tag}-", dir=a.remote_base))
    c = Cluster(work, a.flavour, nodes, str(remote))
    c.start_servers()
    try:
        cmds = []
        for k in range(nodes):
            local = work / "local" / f"n{k}"
            local.mkdir(mode=0o700, parents=True, exist_ok=True)
            cmds += [["nice", tools.loadgen, "paralog", local, "s", p, a.seconds, a.size, a.flush_ms]
                     for _ in range(a.producers_per_node)]
        t0 = time.time()
        res = loadgens(cmds, "paralog")
        t_done = time.time()
        total = sum(r["events"] for r in res)
        cl = stored_status(c, total, 300)
        t_stored = time.time()
        if cl["stream_events"] != total:
            sys.exit(f"the server job stored {cl['stream_events']} events, the producers appended {total}")
        c.wait()
    finally:
        c.stop()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(remote, ignore_errors=True)
    ev = sum(r["events"] / r["seconds"] for r in res)
    return {"events_s": ev, "mb_s": ev * a.size / 1e6, "events": total,
            "stored_events_s": total / (t_stored - t0), "catch_up_s": t_stored - t_done,
            "between_bytes": cl.get("stream_bytes_between_nodes", 0),
            "by_node": cl.get("stream_events_by_node", [])}


def report(a, nodes, partitions, results):
    def med(n, p, key):
        return median([r[key] for r in results if r["nodes"] == n and r["partitions"] == p])

    log(f"\nAcross nodes: {a.producers_per_node} producer(s) per node, {a.size}-byte events, a flush every "
        f"{a.flush_ms:g} ms, {a.seconds:g} s, median of {a.rounds} round(s); {a.flavour} server job")
    log("| nodes | partitions | append ev/s | vs linear | stored ev/s | catch-up s | bytes between nodes |")
    log("|---:|---:|---:|---:|---:|---:|---:|")
    for p in partitions:
        one = med(1, p, "events_s") if 1 in nodes else None
        for n in nodes:
            ev = med(n, p, "events_s")
            lin = f"{ev / (n * one):.2f}x" if one else "-"
            log(f"| {n} | {p} | {ev:,.0f} | {lin} | {med(n, p, 'stored_events_s'):,.0f} | "
                f"{med(n, p, 'catch_up_s'):.2f} | {med(n, p, 'between_bytes'):,.0f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="1,2,4")
    ap.add_argument("--partitions", default="1,4,16,64")
    ap.add_argument("--producers-per-node", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--flush-ms", type=float, default=10.0)
    ap.add_argument("--flavour", default="openmpi", choices=["openmpi", "mpich"])
    ap.add_argument("--tmp", default="/var/tmp")
    ap.add_argument("--remote-dir", default="/dev/shm")
    ap.add_argument("--json", default=str(ROOT / "target/bench/streams-nodes.json"))
    a = ap.parse_args()
    nodes = [int(x) for x in a.nodes.split(",")]
    partitions = [int(x) for x in a.partitions.split(",")]
    base = Path(tempfile.mkdtemp(prefix="paralog-streams-nodes-", dir=a.tmp))
    a.remote_base = tempfile.mkdtemp(prefix="paralog-streams-nodes-", dir=a.remote_dir)
    results = []
    try:
        tools = Tools(base)
        log(f"paralog {tools.rev}")
        k = 0
        for rnd in range(a.rounds):
            for p in partitions:
                order = nodes[k % len(nodes):] + nodes[:k % len(nodes)]
                k += 1
                for n in order:
                    r = run_nodes(a, tools, base, n, p, f"{rnd}-{n}-{p}")
                    r.update(round=rnd, nodes=n, partitions=p)
                    results.append(r)
                    log(f"round {rnd} nodes={n} P={p} {r['events_s']:10.0f} ev/s appended, "
                        f"{r['stored_events_s']:10.0f} ev/s stored, catch-up {r['catch_up_s']:.2f} s, "
                        f"{r['between_bytes']} bytes between nodes")
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(a.remote_base, ignore_errors=True)
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps({"args": {k: v for k, v in vars(a).items()}, "results": results}, indent=1))
    report(a, nodes, partitions, results)


if __name__ == "__main__":
    main()
