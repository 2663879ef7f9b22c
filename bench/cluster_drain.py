#!/usr/bin/python3
"""Drain throughput of a server job on 1, 2 and 4 simulated nodes against one
ordinary `paralog server` (no MPI) draining the same bytes to the same kind
of remote, side by side in one invocation. Results and their reading:
docs/benchmarks.md, section 8.

The bytes are produced first, with no server running: bench/ior_like.c
(MPICH, RANKS ranks, one shared file, XFER-byte blocks written with
MPI_File_write_at_all in IOR's segment-major layout, one epoch, closed)
runs under capture (`paralog env`) once per node count N, every rank a
process of simulated node n<rank / (RANKS/N)> (tests/cluster/as_node.sh),
so each node's log holds exactly 1/N of the file. These node-local logs
are kept; before every timed drain they are copied to a scratch directory
and the remote is emptied (the copy leaves the logs in the page cache, the
same for every variant). Then only the drain is timed: from the spawn of
the server(s) to the return of `paralog wait` (which asks them to drain
everything and stop):

  single   `paralog server --local L/n0` (no MPI) on the N=1 logs;
  job1     the server job with one node (an MPI job of one process);
  job2     2 nodes, job4: 4 nodes (one server process per node).

Start-up (spawn until node n0's status socket exists) is reported apart.
All servers run with --nice 0 (the default nice 10 would only measure the
other users' load on this machine) and otherwise default settings (8 MiB
buffers: the window of an object gather).

Network (default, --netns): every node is a network namespace with its own
IP and a veth pair to a bridge (tests/cluster/netns.py's Net), so the
servers' MPI traffic crosses real interfaces (TCP over veth); the single
server runs in n0's namespace. The server job's MPI is Open MPI there
(MPICH 4.0.2 hangs in MPI_Finalize across namespaces with 3 or more
processes: tests/cluster/netns.py). With --no-netns all processes share
the root namespace and the MPI of --mpi (MPICH: shared memory between the
servers). The bytes received are counted from the eth0 rx counters, of the
leader (n0) and of all nodes, next to the bytes the servers say they sent
each other: with this layout the other nodes hold (N-1)/N of the bytes
drained. The object layout gathers them at the leader (each must cross
once); S3 uploads each 8 MiB part from the server holding its bytes, and
here every part's bytes are on one node, so none need to cross.

Remotes (--remotes): posix (a directory; every node writes its own bytes),
posix-mpiio (the same, written with the servers' collective MPI-IO,
--posix-writes collective; its `single` is the ordinary server, as for posix),
objstore (the versioned object layout in a directory; the leader makes
each version from bytes gathered over MPI), both on the same file system
as the logs (--dir, default /tmp), and s3 (a MinIO started here: in the
hub namespace on its bridge address with --netns, else on loopback; data
on --dir; one multipart upload of 8 MiB parts, each uploaded by the server
holding its bytes). Round
1 checks every drained file against the file ior_like writes without
capture (cmp; objstore: `paralog get` first; s3: awscli download).

Open MPI's servers yield the CPU while they wait in a collective
(OMPI_MCA_mpi_yield_when_idle=1, which the servers also set for themselves
unless it is set): here 4 nodes share 2 cores, and busy-polling servers
would take the CPU that the one working server needs; --spin measures Open
MPI's default (busy-polling, =0) instead.

Usage: bench/cluster_drain.py [--nodes 1,2,4] [--remotes posix,posix-mpiio,objstore,s3]
         [--repeat 3] [--mib 1024] [--xfer-kib 8192] [--ranks 4]
         [--dir /tmp] [--no-netns] [--mpi openmpi|mpich] [--spin]
         [--json OUT] [--keep]
Needs root for --netns. Space: about (len(nodes) + 3) x MIB.
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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOB = "b"
AS_NODE = ROOT / "tests/cluster/as_node.sh"


def load_netns():
    sys.path.insert(0, str(ROOT))
    from tests.cluster import netns
    return netns


def base_env(extra=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PARALOG_", "AWS_", "OMPI_", "PMI_", "UCX_")) and k != "LD_PRELOAD"}
    env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                "OMPI_MCA_rmaps_base_oversubscribe": "1", "PARALOG_LOG": "warn"})
    env.update(extra or {})
    return env


def run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], check=True, text=True, capture_output=True, **kw)


class MinIOHere:
    """A MinIO for the S3 remote: on loopback, or (--netns) in the hub
    namespace on its bridge address, reachable from every node. Its
    process is ours (started here, ended by its id)."""

    def __init__(self, base, net):
        self.net = net
        self.data = base / "minio-data"
        self.data.mkdir()
        self.host = net.hub_ip if net else "127.0.0.1"
        self.port = 9000 if net else free_port()
        self.user, self.secret = "paralogbench", "plbench-" + os.urandom(12).hex()
        self.p = None
        self.log = base / "minio.log"

    def wrap(self, cmd):
        return (["ip", "netns", "exec", self.net.hub] if self.net else []) + [str(c) for c in cmd]

    def env(self):
        nothing = self.data.parent / "empty-aws-config"
        nothing.touch()
        return {"AWS_ACCESS_KEY_ID": self.user, "AWS_SECRET_ACCESS_KEY": self.secret, "AWS_REGION": "us-east-1",
                "AWS_ENDPOINT_URL": f"http://{self.host}:{self.port}", "AWS_CONFIG_FILE": str(nothing),
                "AWS_SHARED_CREDENTIALS_FILE": str(nothing), "AWS_EC2_METADATA_DISABLED": "true"}

    def start(self):
        env = base_env({"MINIO_ROOT_USER": self.user, "MINIO_ROOT_PASSWORD": self.secret, "MINIO_BROWSER": "off",
                        "MINIO_UPDATE": "off", "HOME": str(self.data.parent)})
        with open(self.log, "ab") as log:
            self.p = subprocess.Popen(self.wrap([ROOT / "target/go/bin/minio", "server", self.data, "--quiet",
                                                 "--address", f"{self.host}:{self.port}",
                                                 "--console-address", f"{self.host}:{self.port + 1}"]),
                                      env=env, stdout=log, stderr=log, start_new_session=True)
        probe = (f"import urllib.request,sys\ntry:\n urllib.request.urlopen('http://{self.host}:{self.port}"
                 f"/minio/health/live',timeout=2)\nexcept Exception:\n sys.exit(1)\n")
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.p.poll() is not None:
                raise RuntimeError(f"minio exited: {self.log.read_text(errors='replace')[-500:]}")
            if subprocess.run(self.wrap([sys.executable, "-c", probe])).returncode == 0:
                break
            time.sleep(0.3)
        else:
            raise RuntimeError("minio did not come up")
        self.aws("s3api", "create-bucket", "--bucket", "bench")

    def aws(self, *args):
        env = base_env(self.env())
        env["PYTHONPATH"] = str(ROOT / "target/pylib")
        return run(self.wrap(["/usr/bin/python3", "-m", "awscli", *args]), env=env)

    def stop(self):
        if self.p and self.p.poll() is None:
            os.killpg(self.p.pid, 15)
            try:
                self.p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, 9)
                self.p.wait()


class LaunchFailed(RuntimeError):
    pass


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Bench:
    def __init__(self, a, base, net, minio=None):
        self.a, self.base, self.net, self.minio = a, base, net, minio
        self.n_s3 = 0
        bindir = base / "bin"
        bindir.mkdir()
        # The binaries and the libraries next to them (paralog env and the
        # server job find them there): a rebuild during the run changes nothing.
        for f in ["paralog", "libparalog_capture.so", "libparalog_mpi_mpich.so", "libparalog_mpi_openmpi.so",
                  "libparalog_coord_mpich.so", "libparalog_coord_openmpi.so"]:
            shutil.copy2(ROOT / "target/release" / f, bindir / f)
        self.paralog = bindir / "paralog"
        self.writer = bindir / "ior_like"
        run(["mpicc.mpich", "-O2", "-o", self.writer, ROOT / "bench/ior_like.c"])
        self.rev = run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]).stdout.strip()
        self.xfer = a.xfer_kib * 1024
        per = a.ranks * self.xfer
        self.segments = max(1, (a.mib << 20) // per)
        self.bytes = self.segments * per
        self.scratch = base / "run"

    # --- the bytes ---------------------------------------------------------

    def writer_cmd(self, path):
        return ["mpirun.mpich", "-n", self.a.ranks, AS_NODE, self.writer, path, self.xfer, self.segments, 1]

    def reference(self):
        d = self.base / "reference"
        d.mkdir()
        run(self.writer_cmd(d / "out.dat"), env=base_env())
        return d / "out.dat"

    def produce(self, nodes):
        """The node-local logs of one capture run on `nodes` simulated nodes."""
        logs = self.base / f"logs-{nodes}"
        prefix = self.base / f"prefix-{nodes}"
        logs.mkdir(mode=0o700)
        prefix.mkdir()
        out = run([self.paralog, "env", "--mpi", "mpich", "--prefix", prefix, "--local", f"{logs}/{{node}}",
                   "--remote", self.base / "nowhere", "--job", JOB], env=base_env()).stdout
        env = base_env({"RANKS_PER_NODE": str(self.a.ranks // nodes)})
        for line in out.splitlines():
            k, _, v = line.removeprefix("export ").partition("=")
            env[k] = v.strip("'")
        run(self.writer_cmd(prefix / "out.dat"), env=env)
        held = []
        for k in range(nodes):
            r = run([self.paralog, "inspect", "--local", logs / f"n{k}", "--json"], env=base_env())
            held.append(sum(rk.get("data_bytes") or 0 for j in json.loads(r.stdout)["jobs"] for f in j["files"]
                            for e in f["epochs"] for rk in e["ranks"]))
        return logs, held

    # --- one timed drain ---------------------------------------------------

    def remote_url(self, kind):
        if kind == "s3":
            self.n_s3 += 1
            return f"s3://bench/r{self.n_s3}", None
        d = self.scratch / "remote"
        d.mkdir()
        return (str(d) if kind.startswith("posix") else f"objstore://{d}"), d

    def fresh(self, logs):
        if self.scratch.exists():
            shutil.rmtree(self.scratch)
        self.scratch.mkdir()
        local = self.scratch / "local"
        run(["cp", "-a", logs, local])
        return local

    def counters(self):
        """Bytes received by the leader (n0), and by all nodes."""
        if not self.net:
            return (0, 0)
        c = self.net.counters()
        return (c[0][0], sum(rx for rx, _ in c))

    def server_cmd(self, variant, nodes, local, url, kind):
        srv = [self.paralog, "server", "--remote", url, "--job", JOB, "--nice", "0"]
        if variant == "single":
            cmd = srv + ["--local", local / "n0"]
            return (self.net.exec_in(0) if self.net else []) + cmd
        srv += ["--local", f"{local}/{{node}}", "--peer-timeout", "300"]
        if kind == "posix-mpiio":
            srv += ["--posix-writes", "collective"]
        if self.net:
            return self.net.launcher(self.a.mpi, 1, nodes, nodes=nodes) + srv
        if self.a.mpi == "mpich":
            cmd = ["mpirun.mpich", "-n", "1"]
        else:
            cmd = ["mpirun.openmpi", "--oversubscribe", "-n", "1"]
        for k in range(nodes):
            if k:
                cmd += [":", "-n", "1"]
            cmd += ["env", f"PARALOG_NODE=n{k}", *srv]
        return cmd

    def drain(self, variant, nodes, logs, kind, check_against=None):
        local = self.fresh(logs)
        url, rdir = self.remote_url(kind)
        env = self.net.env() if self.net else base_env()
        env["PARALOG_LOG"] = "warn"
        if self.a.mpi == "openmpi":
            # Idle servers (waiting in a collective) yield the CPU (what the
            # servers choose for themselves unless told): 4 nodes share 2
            # cores here, unlike real nodes. --spin: Open MPI's default.
            env["OMPI_MCA_mpi_yield_when_idle"] = "0" if self.a.spin else "1"
        if kind == "s3":
            env.update(self.minio.env())
        cmd = [str(c) for c in self.server_cmd(variant, nodes, local, url, kind)]
        sock = local / "n0" / f".paralog-server-{JOB}.sock"
        log = open(self.scratch / "server.log", "wb")
        rx0 = self.counters()
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while not sock.exists():
                if p.poll() is not None:
                    raise LaunchFailed(f"{variant}: server(s) exited {p.returncode} before they were ready: "
                                       f"{self.tail()}")
                if time.perf_counter() - t0 > 90:
                    raise LaunchFailed(f"{variant}: not ready in 90 s: {self.tail()}")
                time.sleep(0.005)
            ready = time.perf_counter() - t0
            wait = [self.paralog, "wait", "--local", local / "n0", "--job", JOB, "--timeout", "1800"]
            w = subprocess.run([str(c) for c in (self.net.exec_in(0) if self.net else []) + wait],
                               env=base_env(), text=True, capture_output=True)
            wall = time.perf_counter() - t0
            if w.returncode != 0:
                raise RuntimeError(f"{variant}: paralog wait exited {w.returncode}: {w.stdout}{w.stderr} {self.tail()}")
            rc = p.wait(timeout=120)
            if rc != 0:
                raise RuntimeError(f"{variant}: server(s) exited {rc}: {self.tail()}")
        except LaunchFailed:
            if self.net:
                self.net.kill_nodes()  # daemons detached from the launcher
            raise
        finally:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
            log.close()
        rx1 = self.counters()
        rx, rx_all = rx1[0] - rx0[0], rx1[1] - rx0[1]
        m = re.search(r"(\d+) epoch\(s\), (\d+) bytes", w.stdout)
        drained = int(m.group(2)) if m else -1
        m = re.search(r"(\d+) bytes between nodes", w.stdout)
        between = int(m.group(1)) if m else 0
        if drained != self.bytes:
            raise RuntimeError(f"{variant}: drained {drained} bytes, want {self.bytes}: {w.stdout}")
        if check_against:
            got = rdir / "out.dat" if rdir else self.scratch / "got.dat"
            if kind == "objstore":
                run([self.paralog, "get", f"{url}/out.dat", got], env=base_env())
            elif kind == "s3":
                self.minio.aws("s3", "cp", "--no-progress", "--only-show-errors", f"{url}/out.dat", got)
            if subprocess.run(["cmp", "-s", check_against, got]).returncode != 0:
                raise RuntimeError(f"{variant} {kind}: the drained file differs from the direct one")
        if kind == "s3":
            self.minio.aws("s3", "rm", "--recursive", "--only-show-errors", f"{url}/")
        return {"wall": wall, "ready": ready, "rx_leader": rx, "rx_all": rx_all, "between": between,
                "drained": drained}

    def tail(self):
        try:
            return (self.scratch / "server.log").read_text(errors="replace")[-1500:]
        except OSError:
            return ""


def fmt_mb(bytes_, secs):
    return bytes_ / secs / 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", default="1,2,4")
    ap.add_argument("--remotes", default="posix,posix-mpiio,objstore,s3")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--xfer-kib", type=int, default=8192)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--no-netns", action="store_true")
    ap.add_argument("--mpi", choices=["openmpi", "mpich"], default="openmpi")
    ap.add_argument("--spin", action="store_true",
                    help="Open MPI servers busy-poll while idle (default: mpi_yield_when_idle=1)")
    ap.add_argument("--json")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    # A signal ends the run through the finally blocks (namespaces, MinIO),
    # also when started in the background (SIGINT ignored there).
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, lambda *_: sys.exit(130))
    nodes = [int(n) for n in a.nodes.split(",")]
    remotes = a.remotes.split(",")
    if "s3" in remotes and not (ROOT / "target/go/bin/minio").exists():
        print("no target/go/bin/minio (make setup-test): leaving out s3", file=sys.stderr)
        remotes.remove("s3")
    for n in nodes:
        if a.ranks % n:
            sys.exit(f"--ranks {a.ranks} is not a multiple of {n} nodes")
    if not a.no_netns and a.mpi == "mpich" and max(nodes) > 2:
        print("warning: MPICH across namespaces hangs in MPI_Finalize with 3+ processes", file=sys.stderr)
    base = Path(tempfile.mkdtemp(prefix="paralog-cluster-drain-", dir=a.dir))
    netns = None if a.no_netns else load_netns()
    t_start = time.strftime("%H:%M", time.gmtime())
    load0 = os.getloadavg()
    results = {}  # (remote, variant) -> list of runs
    minio = None
    try:
        net_cm = netns.Net(max(nodes), base) if netns else None
        net = net_cm.__enter__() if net_cm else None
        try:
            if "s3" in remotes:
                minio = MinIOHere(base, net)
                minio.start()
            b = Bench(a, base, net, minio)
            ref = b.reference()
            logs = {}
            for n in sorted(set(nodes) | {1}):
                logs[n], held = b.produce(n)
                print(f"logs for {n} node(s): data bytes per node {held}", flush=True)
            variants = [("single", 1)] + [(f"job{n}", n) for n in nodes]
            for r in range(a.repeat):
                for kind in remotes:
                    order = variants[r % len(variants):] + variants[:r % len(variants)]
                    for name, n in order:
                        for attempt in (1, 2, 3):
                            try:
                                res = b.drain("single" if name == "single" else "job", n, logs[n], kind,
                                              check_against=ref if r == 0 else None)
                                break
                            except LaunchFailed as e:
                                # The MPI launcher failed to start the job (not
                                # a drain): said, and started again.
                                print(f"round {r + 1} {kind} {name}: launch failed (attempt {attempt}): "
                                      f"{str(e)[-300:]}", flush=True)
                                if attempt == 3:
                                    raise
                        results.setdefault((kind, name), []).append(res)
                        print(f"round {r + 1} {kind:8} {name:6} {res['wall']:6.2f} s "
                              f"({fmt_mb(b.bytes, res['wall']):6.0f} MB/s, ready after {res['ready']:.2f} s, "
                              f"rx leader {res['rx_leader'] / 1e6:.1f} MB, all nodes {res['rx_all'] / 1e6:.1f} MB, "
                              f"sent between servers {res['between'] / 1e6:.1f} MB)", flush=True)
        finally:
            if minio:
                minio.stop()
            if net_cm:
                net_cm.__exit__(None, None, None)
        load1 = os.getloadavg()
        print(f"\n{b.bytes / 2**20:.0f} MiB, {a.ranks} ranks, {a.xfer_kib} KiB blocks, {a.repeat} rounds, "
              f"{'netns' if net else 'one namespace'}, server job on {a.mpi}"
              f"{' (busy-polling)' if a.spin and a.mpi == 'openmpi' else ''}, commit {b.rev}, "
              f"{t_start}-{time.strftime('%H:%M', time.gmtime())} UTC, load {load0[0]:.1f} -> {load1[0]:.1f}")
        print("remote   | variant | median s | MB/s (min-max) | x single | start-up s | "
              "rx leader, rx all nodes, sent between servers / other nodes' bytes")
        table = []
        for kind in remotes:
            single = statistics.median(x["wall"] for x in results[(kind, "single")])
            for name, n in [("single", 1)] + [(f"job{n}", n) for n in nodes]:
                runs = results[(kind, name)]
                walls = [x["wall"] for x in runs]
                med = statistics.median(walls)
                others = b.bytes * (n - 1) / n if name != "single" else 0
                rx = statistics.median(x["rx_leader"] for x in runs)
                rx_all = statistics.median(x["rx_all"] for x in runs)
                between = statistics.median(x["between"] for x in runs)
                if others and net:
                    share = f"{rx / others:.3f}, {rx_all / others:.3f}, {between / others:.3f}"
                elif net:
                    share = f"{rx / 1e6:.1f} MB, {rx_all / 1e6:.1f} MB, {between / 1e6:.1f} MB"
                else:
                    share = "-"
                row = {"remote": kind, "variant": name, "nodes": n, "median_s": med,
                       "mbps": fmt_mb(b.bytes, med), "mbps_min": fmt_mb(b.bytes, max(walls)),
                       "mbps_max": fmt_mb(b.bytes, min(walls)), "ratio": single / med,
                       "ready_s": statistics.median(x["ready"] for x in runs), "rx_leader": rx,
                       "other_nodes_bytes": others, "walls": walls, "readies": [x["ready"] for x in runs],
                       "rx_leader_runs": [x["rx_leader"] for x in runs],
                       "rx_all": rx_all, "between": between}
                table.append(row)
                print(f"{kind:8} | {name:7} | {med:8.2f} | {row['mbps']:5.0f} ({row['mbps_min']:.0f}-{row['mbps_max']:.0f}) "
                      f"| {row['ratio']:5.2f} | {row['ready_s']:6.2f} | {share}")
        if a.json:
            Path(a.json).write_text(json.dumps({"bytes": b.bytes, "rev": b.rev, "netns": bool(net), "mpi": a.mpi,
                                                "load": [load0, load1], "rows": table}, indent=1))
    finally:
        if not a.keep:
            shutil.rmtree(base, ignore_errors=True)
        else:
            print(f"kept {base}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
