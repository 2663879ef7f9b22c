#!/usr/bin/python3
"""N-to-K checkpoint aggregation (docs/aggregate.md) against file-per-process
and N-1 shared-file checkpoints, side by side in one run, on simulated nodes
behind a bandwidth-limited storage link. Results and their reading:
docs/benchmarks.md, section 9.

Where things run (root only; everything is made here and torn down at the
end, also on Ctrl-C, SIGTERM, SIGHUP):

- 4 nodes, each a network namespace with its own address, joined by a
  bridge (tests/cluster/netns.py's Net): the application's 2 ranks per node
  (Open MPI, TCP between the namespaces) and, for paralog, one server of the
  server job per node, whose members cross the veths over MPI.
- The storage: sshd in a storage namespace serving a directory over SFTP,
  mounted with sshfs from a compute namespace (bench/e2e/testbed.py); the
  link between the two is a veth capped with tc tbf at --rate-mbit both
  ways, the only throttle unless --node-mbit caps each node's own veth to
  the bridge too (both ways; what the leader mode's transfer crosses).
  Every node's processes see the mount, and every byte to or from the
  remote crosses the storage link.

The workload is tests/aggregate/progs/ckpt.c: every rank writes its member
ckpt/step-NNNNNN/rank-RRRRR.dat (POSIX write, fsync, close) per checkpoint,
--mib per rank on average, sizes uneven by 0 or +-20 % (CKPT_SPREAD), a
barrier and --compute-ms of pause between checkpoints, --steps of them.
Variants, each with and without the imbalance:

  direct fpp     the ranks write their members straight to the mount
  direct N-1     one shared file per checkpoint on the mount, the ranks'
                 bytes one after the other with MPI_File_write_at_all
                 (CKPT_SHARED: the synchronous aggregation baseline)
  paralog fpp    under capture, a server job of 4 nodes draining to the
                 mount, no aggregation
  paralog K=k    the same with --aggregate 'ckpt/{set}/rank-*.dat'
                 --containers k, k = 1, 2, 4 (--agg-mode leader: the other
                 nodes of a group send their members to its leader)
  paralog own    the same with --agg-mode own, k = 1, 2: each node writes
    K=k          its own members into its own region of the container (no
                 member byte between nodes; K = 4 is the same in both
                 modes: every node is a group of its own)

Measured per variant: remote files per checkpoint; application time (the
launch of the ranks to their exit); total time (the launch until every
byte is durable on the remote: the program's exit for direct runs, the
return of `paralog wait` for paralog) and throughput (checkpoint bytes /
total time); bytes on the storage link; bytes between nodes, as the
servers count them and as the nodes' eth0 received them, against the
least the groups need (every byte but the group leader's, once); the
leader's receive buffers against its pool (the servers' own counter) and
the servers' peak RSS (VmHWM); restart reads: `ckpt verify` (stat, open,
read, pread, lseek, readdir, glob of every member, every byte compared)
timed over the plain files of "direct fpp", and under capture in a new job
with no node-local log over the sets (every block's checksum verified).
The verification is also the benchmark's check: every variant's members
read back equal to what the ranks wrote (N-1: the file sizes only).

Usage: bench/aggregate.py [--repeat 1] [--mib 4] [--steps 3] [--rate-mbit 200]
         [--node-mbit 0] [--compute-ms 1000] [--dir /tmp] [--json OUT] [--keep]
Space: about 12 x 8 x MIB x STEPS MiB on --dir (every remote of a round is kept
until the round ends).
"""

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench/e2e"))
from testbed import BASE_PREFIX, Testbed  # noqa: E402
from tests.aggregate.nodes import minimum_between  # noqa: E402
from tests.cluster.netns import Net, NetCluster  # noqa: E402
from tests.lib.mpi import compile_program  # noqa: E402
from tests.lib.paralog import capture_env, clean_env  # noqa: E402
from tests.lib.paths import BIN  # noqa: E402
from tests.lib.server import RANKS_PER_NODE  # noqa: E402

NODES = 4
NP = NODES * RANKS_PER_NODE
FLAVOUR = "openmpi"  # MPICH 4.0.2 hangs in MPI_Finalize across 3+ namespaces (tests/cluster/netns.py)
RULE = "ckpt/{set}/rank-*.dat"
SRC = ROOT / "tests/aggregate/progs/ckpt.c"
VARIANTS = ["direct fpp", "direct N-1", "paralog fpp", "paralog K=1", "paralog K=2", "paralog K=4",
            "paralog own K=1", "paralog own K=2"]
OWN_KS = (1, 2)
SPREADS = (0, 20)


def k_of(variant):
    m = re.fullmatch(r"paralog (?:own )?K=(\d+)", variant)
    return int(m.group(1)) if m else None


def mode_of(variant):
    """--agg-mode of a paralog variant with sets."""
    return "own" if variant.startswith("paralog own") else "leader"


def server_pids(net):
    """The `paralog server` process of each node (None where there is none)."""
    out = []
    for ns in net.ns:
        found = None
        pids = subprocess.run(["ip", "netns", "pids", ns], text=True, capture_output=True).stdout.split()
        for pid in pids:
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"paralog") and b"server" in argv[1:3]:
                found = int(pid)
        out.append(found)
    return out


class PeakRss:
    """The peak RSS (VmHWM) of each node's server, read every 0.2 s until
    stopped (the kernel keeps the high-water mark: the last read before the
    process exits is its peak, up to the last 0.2 s)."""

    def __init__(self, pids):
        self.pids = pids
        self.peak = [0] * len(pids)
        self.done = threading.Event()
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def loop(self):
        while not self.done.wait(0.2):
            for i, pid in enumerate(self.pids):
                if pid is None:
                    continue
                try:
                    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                        if line.startswith("VmHWM:"):
                            self.peak[i] = max(self.peak[i], int(line.split()[1]) * 1024)
                except OSError:
                    pass

    def stop(self):
        self.done.set()
        self.t.join()
        return self.peak


class Bench:
    def __init__(self, a, base, bed, net):
        self.a, self.base, self.bed, self.net = a, base, bed, net
        bindir = base / "bin"
        self.app = compile_program(f"mpicc.{FLAVOUR}", SRC, bindir / "ckpt-mpi", "-O2", "-Wno-format-truncation",
                                   "-DUSE_MPI")
        self.reader = compile_program("gcc", SRC, bindir / "ckpt", "-O2", "-Wno-format-truncation")
        self.mean = a.mib << 20

    def args(self):
        return [NP, self.a.steps, self.mean]

    def env(self, spread, variant):
        e = {"CKPT_SPREAD": str(spread), "CKPT_COMPUTE_MS": str(self.a.compute_ms), "PARALOG_LOG": "warn"}
        if variant == "direct N-1":
            e["CKPT_SHARED"] = "1"
        return e

    def run_variant(self, r, variant, spread):
        tag = f"r{r}-{variant.replace(' ', '-').replace('=', '')}-s{spread}"
        work = self.base / "work" / tag
        work.mkdir(parents=True)
        remote = self.bed.mnt / tag       # what the programs and servers write to
        on_host = self.bed.storage / tag  # the same directory, read without the link
        remote.mkdir()
        k = k_of(variant)
        server_args = ["--nice", "0"] + (["--aggregate", RULE, "--containers", str(k),
                                          "--agg-mode", mode_of(variant)] if k else [])
        c = NetCluster(self.net, work, FLAVOUR, str(remote), RANKS_PER_NODE, server_args=server_args)
        out = {"variant": variant, "spread": spread, "round": r, "remote": str(on_host)}
        env = self.env(spread, variant)
        link0, rx0 = self.bed.counters(), [rx for rx, _ in self.net.counters()]
        rss = None
        try:
            if variant.startswith("paralog"):
                c.start_servers()
                rss = PeakRss(server_pids(self.net))
            t0 = time.perf_counter()
            c.run_app(self.app, self.args(), timeout=1800, env=env, capture=variant.startswith("paralog"),
                      prefix=None if variant.startswith("paralog") else remote)
            out["app_s"] = time.perf_counter() - t0
            if variant.startswith("paralog"):
                said = c.wait_said(timeout=1800)
                out["total_s"] = time.perf_counter() - t0
                out["server_rss"] = rss.stop()
                rss = None
                log = c.server_log.read_text(errors="replace") + said
                m = re.findall(r"(\d+) bytes between nodes", log)
                out["between"] = int(m[-1]) if m else 0
                m = re.findall(r"(\d+) checkpoint set\(s\) published; a leader held at most (\d+) bytes of "
                               r"receive buffers \(pool (\d+)\)", log)
                if m:
                    out["sets"], out["rxbuf_peak"], out["pool"] = map(int, m[-1])
            else:
                out["total_s"] = out["app_s"]
        finally:
            if rss:
                rss.stop()
            c.stop()
        link1, rx1 = self.bed.counters(), [rx for rx, _ in self.net.counters()]
        out["link_tx"] = link1[0] - link0[0]
        out["nodes_rx"] = sum(b - a for a, b in zip(rx0, rx1))
        out["files_per_ckpt"], out["bytes"] = self.remote_files(on_host, variant, k)
        shutil.rmtree(work / "local", ignore_errors=True)
        if variant != "direct N-1":
            out["read_s"], out["read_link_rx"] = self.restart_read(work, remote, spread, variant)
        return out

    def remote_files(self, d, variant, k):
        """Files per checkpoint on the remote (one list per checkpoint), and
        the checkpoint bytes there."""
        ckpt = d / "ckpt"
        if variant == "direct N-1":
            files = sorted(ckpt.iterdir())
            return [1] * len(files), sum(f.stat().st_size for f in files)
        steps = sorted(p for p in ckpt.iterdir() if p.is_dir())
        counts = [sum(1 for _ in s.iterdir()) for s in steps]
        if k:
            rows = json.loads(subprocess.run([str(BIN), "sets", str(d), "--json"], check=True, text=True,
                                             capture_output=True).stdout)
            return counts, sum(row["bytes"] for row in rows)
        return counts, sum(f.stat().st_size for s in steps for f in s.iterdir())

    def restart_read(self, work, remote, spread, variant):
        """`ckpt verify` over the mount: the plain files directly, the sets
        under capture in a new job (no node-local log). Time, link bytes
        received."""
        cmd = [self.reader, None, NP, self.a.steps, self.mean, "verify"]
        env = clean_env({"CKPT_SPREAD": str(spread)})
        if k_of(variant):
            # The job's own prefix (its directories, not its files: the
            # members exist only in the sets on the remote).
            prefix = work / "prefix"
            env = capture_env(prefix, work / "local2", "none", "restart", str(remote), base=env)
            cmd[1] = prefix
        else:
            cmd[1] = remote
        rx0 = self.bed.counters()[1]
        t0 = time.perf_counter()
        p = subprocess.run([str(x) for x in cmd], env=env, text=True, capture_output=True, timeout=1800)
        secs = time.perf_counter() - t0
        if p.returncode != 0 or "verified" not in p.stdout:
            raise RuntimeError(f"{variant}: restart read failed ({p.returncode}): {p.stdout[-600:]}{p.stderr[-600:]}")
        return secs, self.bed.counters()[1] - rx0


def cap_nodes(net, mbit):
    """Each node's veth to the bridge limited both ways (its eth0's egress,
    and the hub end's egress towards it), as the storage link is."""
    for k, ns in enumerate(net.ns):
        for where, dev in ((ns, "eth0"), (net.hub, f"v{k}")):
            subprocess.run(["tc", "-n", where, "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{mbit}mbit",
                            "burst", "256kb", "latency", "50ms"], check=True)


def med(rows, key):
    vals = [x[key] for x in rows if key in x]
    return statistics.median(vals) if vals else None


def summarize(a, results, rev, when):
    """The table and the ratios of docs/benchmarks.md section 9."""
    nodes_link = f", {a.node_mbit} Mbit/s node links" if a.node_mbit else ""
    print(f"\n{NODES} nodes x {RANKS_PER_NODE} ranks, {a.mib} MiB per rank, {a.steps} checkpoints, "
          f"{a.rate_mbit} Mbit/s storage link{nodes_link}, {a.compute_ms} ms between checkpoints, {a.repeat} round(s), "
          f"commit {rev}, {when}")
    print("variant         | imb | files/ckpt | app s | total s | MB/s | link MB | between MB (veth rx) | "
          "rx buffers / pool | server RSS MiB | restart read s")
    table = {}
    for spread in SPREADS:
        for v in VARIANTS:
            rows = results[(v, spread)]
            row = {key: med(rows, key) for key in ("app_s", "total_s", "bytes", "link_tx", "nodes_rx", "between",
                                                 "minimum", "rxbuf_peak", "pool", "read_s", "read_link_rx")}
            row["files_per_ckpt"] = sorted({n for x in rows for n in x["files_per_ckpt"]})
            rss = [max(x["server_rss"]) for x in rows if x.get("server_rss")]
            row["server_rss"] = statistics.median(rss) if rss else None
            row["mbps"] = row["bytes"] / row["total_s"] / 1e6
            table[(v, spread)] = row
            between = (f"{row['between'] / 1e6:.1f} ({row['nodes_rx'] / 1e6:.1f})" if v.startswith("paralog")
                       else f"- ({row['nodes_rx'] / 1e6:.1f})")
            buf = (f"{row['rxbuf_peak'] / 2**20:.0f} / {row['pool'] / 2**20:.0f} MiB" if row["pool"] else "-")
            rss_s = f"{row['server_rss'] / 2**20:.0f}" if row["server_rss"] else "-"
            read = f"{row['read_s']:.2f}" if row["read_s"] is not None else "-"
            print(f"{v:15} | {spread:3} | {','.join(map(str, row['files_per_ckpt'])):10} | {row['app_s']:5.2f} | "
                  f"{row['total_s']:7.2f} | {row['mbps']:4.1f} | {row['link_tx'] / 1e6:7.1f} | {between:20} | "
                  f"{buf:17} | {rss_s:14} | {read}")
    print("\nratios (targets of issue 16)")
    ratios = []

    def say(what, value, target, ok):
        ratios.append({"what": what, "value": value, "target": target, "met": ok})
        print(f"  {what:58} {value:6.3f}  target {target:8}  {'met' if ok else 'MISSED'}")

    for spread in SPREADS:
        base = table[("paralog fpp", spread)]
        plain = table[("direct fpp", spread)]
        for k in (1, 2, 4):
            row = table[(f"paralog K={k}", spread)]
            say(f"K={k} imb {spread}: files per checkpoint", max(row["files_per_ckpt"]), f"= {k + 1}",
                row["files_per_ckpt"] == [k + 1])
            say(f"K={k} imb {spread}: throughput / paralog fpp", row["mbps"] / base["mbps"], ">= 0.9",
                row["mbps"] / base["mbps"] >= 0.9)
            say(f"K={k} imb {spread}: application time / paralog fpp", row["app_s"] / base["app_s"], "<= 1.03",
                row["app_s"] / base["app_s"] <= 1.03)
            if row["minimum"]:
                say(f"K={k} imb {spread}: bytes between nodes / minimum", row["between"] / row["minimum"],
                    "<= 1.05", row["between"] <= 1.05 * row["minimum"])
            else:
                say(f"K={k} imb {spread}: bytes between nodes (MB; the minimum is 0)", row["between"] / 1e6,
                    "= 0", row["between"] == 0)
            if row["pool"]:
                say(f"K={k} imb {spread}: leader rx buffers / pool", row["rxbuf_peak"] / row["pool"], "<= 1",
                    row["rxbuf_peak"] <= row["pool"])
            say(f"K={k} imb {spread}: restart read speed / N plain files", plain["read_s"] / row["read_s"],
                ">= 0.9", plain["read_s"] / row["read_s"] >= 0.9)
    for spread in SPREADS:
        base = table[("paralog fpp", spread)]
        for k in OWN_KS:
            row, leader = table[(f"paralog own K={k}", spread)], table[(f"paralog K={k}", spread)]
            say(f"own K={k} imb {spread}: files per checkpoint", max(row["files_per_ckpt"]), f"= {k + 1}",
                row["files_per_ckpt"] == [k + 1])
            say(f"own K={k} imb {spread}: throughput / paralog fpp", row["mbps"] / base["mbps"], ">= 0.9",
                row["mbps"] / base["mbps"] >= 0.9)
            say(f"own K={k} imb {spread}: application time / paralog fpp", row["app_s"] / base["app_s"],
                "<= 1.03", row["app_s"] / base["app_s"] <= 1.03)
            say(f"own K={k} imb {spread}: bytes between nodes (MB; none)", row["between"] / 1e6, "= 0",
                row["between"] == 0)
            say(f"own K={k} imb {spread}: total time / leader K={k}", row["total_s"] / leader["total_s"], "-",
                True)
            say(f"own K={k} imb {spread}: restart read speed / N plain files",
                table[("direct fpp", spread)]["read_s"] / row["read_s"], ">= 0.9",
                table[("direct fpp", spread)]["read_s"] / row["read_s"] >= 0.9)
    for v in VARIANTS:
        cost = table[(v, 20)]["total_s"] / table[(v, 0)]["total_s"]
        say(f"{v}: total time with +-20 % / without", cost, "<= 1.10" if k_of(v) else "-",
            cost <= 1.10 if k_of(v) else True)
    for spread in SPREADS:
        say(f"direct N-1 imb {spread}: throughput / paralog K=1",
            table[("direct N-1", spread)]["mbps"] / table[("paralog K=1", spread)]["mbps"], "-", True)
    return table, ratios


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--mib", type=int, default=4, help="MiB per rank per checkpoint (mean)")
    ap.add_argument("--steps", type=int, default=3, help="checkpoints")
    ap.add_argument("--rate-mbit", type=int, default=200)
    ap.add_argument("--node-mbit", type=int, default=0,
                    help="cap each node's link to the others too (tc tbf both ways; 0: uncapped)")
    ap.add_argument("--compute-ms", type=int, default=1000)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--json")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, lambda *_: sys.exit(130))
    base = Path(tempfile.mkdtemp(prefix=f"{BASE_PREFIX}{os.getpid()}-agg-", dir=a.dir))
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], text=True,
                         capture_output=True).stdout.strip()
    t_start, load0 = time.strftime("%d %b %Y %H:%M", time.gmtime()), os.getloadavg()[0]
    results = {}
    bed = Testbed(base, a.rate_mbit)
    try:
        bed.start(s3=False)
        with Net(NODES, base) as net:
            if a.node_mbit:
                cap_nodes(net, a.node_mbit)
            b = Bench(a, base, bed, net)
            order = [(v, s) for s in SPREADS for v in VARIANTS]
            for r in range(a.repeat):
                shift = r * 5 % len(order)
                for v, s in order[shift:] + order[:shift]:
                    res = b.run_variant(r, v, s)
                    results.setdefault((v, s), []).append(res)
                    print(f"round {r + 1} {v:15} imbalance {s:2}%: app {res['app_s']:.2f} s, total "
                          f"{res['total_s']:.2f} s, files/ckpt {res['files_per_ckpt']}, restart read "
                          f"{res.get('read_s', 0):.2f} s, load {os.getloadavg()[0]:.1f}", flush=True)
                for s in SPREADS:
                    # The least bytes between nodes, from this round's direct
                    # files (the same sizes as every variant's).
                    direct = Path([x for x in results[("direct fpp", s)] if x["round"] == r][0]["remote"])
                    for k in (1, 2, 4):
                        for x in results[(f"paralog K={k}", s)]:
                            if x["round"] == r:
                                x["minimum"] = minimum_between(direct, NODES, k)
                for s in SPREADS:
                    held = {x["variant"]: x["bytes"] for (v, sp), rows in results.items() if sp == s
                            for x in rows if x["round"] == r}
                    if len(set(held.values())) != 1:
                        raise RuntimeError(f"round {r + 1}, imbalance {s}: the remotes hold different bytes: {held}")
                for tag in (base / "work").iterdir():
                    shutil.rmtree(tag, ignore_errors=True)
                for d in bed.storage.iterdir():
                    shutil.rmtree(d, ignore_errors=True)
        when = f"{t_start}-{time.strftime('%H:%M', time.gmtime())} UTC, load {load0:.1f} -> {os.getloadavg()[0]:.1f}"
        table, ratios = summarize(a, results, rev, when)
        if a.json:
            Path(a.json).write_text(json.dumps({
                "rev": rev, "when": when, "args": vars(a),
                "runs": [x for rows in results.values() for x in rows],
                "table": [{"variant": v, "spread": s, **row} for (v, s), row in table.items()],
                "ratios": ratios}, indent=1))
    finally:
        for e in bed.close():
            print(f"teardown: {e}", file=sys.stderr)
        if a.keep:
            print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
