"""Servers of our own: one request to a server's socket, a `paralog server`
whose log we keep and whose exit status we see, and a server job on
simulated nodes (SimCluster, the base of tests/cluster's)."""

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from .check import Failed, check
from .paralog import capture_env
from .mpi import DEFAULT_IO, launcher, mpi_env, program
from .paths import BIN, ROOT
from .proc import kill_tree, record, run


def ask(sock, req, timeout=300):
    """One request on a server's socket, one JSON line back (None if the
    server closed the socket without an answer; ValueError if it sent only
    part of one)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
        c.settimeout(timeout)
        c.connect(str(sock))
        c.sendall((json.dumps(req) + "\n").encode())
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = c.recv(65536)
            if not chunk:
                break
            buf += chunk
    return json.loads(buf) if buf.strip() else None


def failpoint_server(local, remote, log, point, env=None):
    """`paralog server --local LOCAL --job t --remote REMOTE` in a session of
    its own, armed to be killed at the crash point `point`, its stderr
    appended to `log` (not Server: this one may die before it answers)."""
    with open(log, "ab") as f:
        return subprocess.Popen([BIN, "server", "--local", local, "--job", "t", "--remote", remote],
                                stdout=subprocess.DEVNULL, stderr=f, start_new_session=True,
                                env={**(env or os.environ), "PARALOG_FAILPOINT": point})


def wait_failpoint_kill(p, log, point):
    """The failpoint_server `p` ended killed at `point` (its log says so)."""
    try:
        rc = p.wait(timeout=120)
    except subprocess.TimeoutExpired:
        kill_tree(p)
        rc = None
    text = Path(log).read_text(errors="replace")
    check(rc == -9 and f"failpoint {point} reached" in text, f"not killed at {point} ({rc}): {text[-600:]}")


class Server:
    """`paralog server --job J` of our own (its own session), its stderr in a
    log file (default: server-J.log beside the local directory). Ready once
    it answers a status request on its socket (its own: the pid it reports
    is this process's, not a crashed predecessor's). preexec: run in the
    child before it starts (a lowered limit)."""

    def __init__(self, local, remote, env, job="t", extra=(), log=None, timeout=20, preexec=None):
        self.local, self.job, self.remote = Path(local), job, remote
        self.local.mkdir(parents=True, exist_ok=True)
        os.chmod(self.local, 0o700)
        self.log = Path(log) if log else self.local.parent / f"server-{job}.log"
        self.sock = self.local / f".paralog-server-{job}.sock"
        with open(self.log, "ab") as logf:
            self.p = subprocess.Popen([str(BIN), "server", "--local", str(local), "--job", job, "--remote", str(remote),
                                       *map(str, extra)], stdout=subprocess.DEVNULL, stderr=logf, env=env,
                                      start_new_session=True, preexec_fn=preexec)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.sock.exists():
                try:
                    st = ask(self.sock, {"cmd": "status"}, timeout=5)
                    if st and st.get("pid", self.p.pid) == self.p.pid:
                        return
                except (OSError, ValueError):
                    pass
            if self.p.poll() is not None:
                raise Failed(f"server exited {self.p.returncode}: {self.text()[-600:]}")
            time.sleep(0.05)
        self.kill()
        raise Failed(f"the server did not answer on its socket within {timeout} s")

    def text(self):
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def died(self):
        """Failed naming how the server ended, if it did."""
        rc = self.p.poll()
        if rc is None:
            return None
        how = f"killed by signal {-rc} ({signal.Signals(-rc).name})" if rc < 0 else f"exited {rc}"
        tail = "\n".join(self.text().splitlines()[-3:])
        return Failed(f"the server {how} while draining; last log lines: {tail[-600:]}")

    def ask(self, req, timeout=300):
        return ask(self.sock, req, timeout)

    def drain_and_stop(self, timeout_s=120):
        """Ask it to drain everything, then to stop; the drain's status."""
        try:
            st = self.ask({"cmd": "drain", "timeout_s": timeout_s}, timeout=timeout_s + 30)
            self.ask({"cmd": "stop"})
        except OSError as e:
            time.sleep(0.5)
            raise self.died() or Failed(f"asking the server to drain: {e}")
        if st is None:
            time.sleep(0.5)
            raise self.died() or Failed("the server closed the socket without an answer")
        try:
            self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill()
            raise Failed("the server did not stop")
        record(f"server log {self.log}", self.text())
        return st

    def kill(self):
        kill_tree(self.p)
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        record(f"server log {self.log}", self.text())


class SimCluster:
    """A job on simulated nodes: the prefix, node-local directories
    local/{node} (PARALOG_NODE names the node), a server job (one server per
    node, started by a subclass) whose output goes to servers.log, its job
    named "t"."""

    def __init__(self, work, flavour, remote, remote_env=None):
        self.work = Path(work)
        self.flavour = flavour
        self.remote = remote
        self.remote_env = remote_env or {}
        self.local = f"{self.work}/local/{{node}}"
        self.prefix = self.work / "prefix"
        self.prefix.mkdir(parents=True, exist_ok=True)
        (self.work / "local").mkdir(mode=0o700, exist_ok=True)
        self.server_log = self.work / "servers.log"
        self.servers = None
        self.log = None

    def tail(self, n=1500):
        try:
            return self.server_log.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def capture_env(self, base):
        """`base` with capture on for this job (no server of paralog env's)."""
        return capture_env(self.prefix, self.local, self.flavour, "t", self.remote, base=base)

    def waited(self, r):
        """What `paralog wait` (result `r`) said, once it succeeded and the
        server job then ended cleanly."""
        check(r.returncode == 0, f"paralog wait exited {r.returncode}: {r.stdout}{r.stderr}\n{self.tail()}")
        try:
            rc = self.servers.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise Failed(f"the server job did not exit after paralog wait: {self.tail()}")
        check(rc == 0, f"server job exited {rc}: {self.tail()}")
        return r.stdout.strip()

    def stop(self):
        if self.servers and self.servers.poll() is None:
            kill_tree(self.servers)
            try:
                self.servers.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        if self.log:
            self.log.close()
            self.log = None


# Simulated nodes' ranks: each runs as_node.sh, which tells capture its
# node (RANKS_PER_NODE consecutive ranks a node).
AS_NODE = ROOT / "tests/cluster/as_node.sh"
RANKS_PER_NODE = 2


class Cluster(SimCluster):
    """One simulated job: its nodes' local directories, its server job (one
    MPMD job: a server per node, each told its node's name)."""

    def __init__(self, work, flavour, nodes, remote, aws_env=None, server_args=()):
        super().__init__(work, flavour, remote, aws_env)
        self.nodes = nodes
        self.server_args = list(server_args)

    def env(self, extra=None):
        e = mpi_env(self.remote_env)
        e.update(extra or {})
        return e

    def node_cmd(self, cmd, per_node_env=None):
        """An MPMD command line: one process per node, each told its name."""
        out = launcher(self.flavour, 1)
        for n in range(self.nodes):
            if n:
                out += [":", "-n", "1"]
            env = {"PARALOG_NODE": f"n{n}", **(per_node_env or {}).get(n, {})}
            out += ["env", *(f"{k}={v}" for k, v in env.items()), *map(str, cmd)]
        return out

    def start_servers(self, per_node_env=None, peer_timeout=60):
        cmd = [BIN, "server", "--local", self.local, "--remote", self.remote, "--job", "t",
               "--peer-timeout", str(peer_timeout), *self.server_args]
        self.log = open(self.server_log, "ab")
        self.servers = subprocess.Popen(self.node_cmd(cmd, per_node_env), stdout=self.log,
                                        stderr=subprocess.STDOUT, env=self.env(),
                                        start_new_session=True)
        # Each server's socket appears when it is ready.
        deadline = time.time() + 60
        while time.time() < deadline:
            socks = [self.work / "local" / f"n{n}" / ".paralog-server-t.sock" for n in range(self.nodes)]
            if all(s.exists() for s in socks):
                return
            if self.servers.poll() is not None:
                raise Failed(f"server job exited {self.servers.returncode}: {self.tail()}")
            time.sleep(0.1)
        raise Failed(f"server job not ready in 60 s: {self.tail()}")

    def run_app(self, prog, args, outdir, timeout=300, check_rc=True):
        env = self.capture_env(self.env({"RANKS_PER_NODE": str(RANKS_PER_NODE)}))
        np = self.nodes * RANKS_PER_NODE
        cmd = launcher(self.flavour, np, DEFAULT_IO[self.flavour]) + [AS_NODE, program(self.flavour, prog), outdir, *args]
        return run(cmd, env=env, check=check_rc, timeout=timeout)

    def status(self, node=0):
        """`paralog status --json` of node n{node}'s server of the job: the
        one answer both drain engines give (docs/server.md), with the
        server job's own block."""
        r = run([BIN, "status", "--local", self.local, "--job", "t", "--json", "--once"],
                env=self.env({"PARALOG_NODE": f"n{node}"}), check=False, timeout=60)
        check(r.returncode == 0, f"paralog status exited {r.returncode}: {r.stderr.strip()[-300:]}")
        st = json.loads(r.stdout)
        cl = st.get("cluster")
        check(cl and cl.get("nodes") == self.nodes and cl.get("node") == f"n{node}",
              f"status of a server job of {self.nodes} node(s) has cluster block {cl}")
        states = {"idle", "queued", "draining", "retrying", "damaged", "refused"}
        for f in st["files"]:
            check(f["state"] in states and f["path"], f"status file entry {f}")
        check(st["bytes_drained"] == sum(f["bytes_drained"] for f in st["files"]),
              f"status total bytes_drained {st['bytes_drained']} is not the sum over its files")
        return st

    def round_costs(self):
        """Every server's `round_cost` (status), in node order."""
        out = []
        for n in range(self.nodes):
            st = ask(self.work / "local" / f"n{n}" / ".paralog-server-t.sock", {"cmd": "status"}, timeout=60)
            check(st and st.get("cluster"), f"node n{n}'s status has no cluster block: {st}")
            out.append(st["cluster"]["round_cost"])
        return out

    def quiet_rounds(self, rounds=3, timeout=60):
        """Once nothing changes on any node, a round sends no summary bytes
        (docs/cluster.md, "What a round costs"): wait for `rounds` rounds in
        a row in which no server received any, then check that every
        server received what all of them sent. The counters so seen."""
        deadline = time.time() + timeout
        before = self.round_costs()
        while time.time() < deadline:
            time.sleep(0.25)
            now = self.round_costs()
            if any(a["bytes_received"] != b["bytes_received"] for a, b in zip(now, before)):
                before = now
                continue
            if min(a["rounds"] - b["rounds"] for a, b in zip(now, before)) >= rounds:
                sent = sum(c["bytes_sent"] for c in now)
                for n, c in enumerate(now):
                    check(c["bytes_received"] == sent,
                          f"node n{n} received {c['bytes_received']} bytes in its rounds, the servers sent {sent}")
                    check(c["last_sent"] == 0 and c["last_received"] == 0,
                          f"node n{n}'s last idle round sent {c['last_sent']} and received {c['last_received']} bytes")
                return now
        raise Failed(f"the servers' rounds still exchanged summary bytes after {timeout} s with nothing "
                     f"changing: {self.round_costs()}")

    def wait(self, timeout=180):
        """`paralog wait` on one node; then the server job must end, cleanly."""
        r = run([BIN, "wait", "--local", self.local, "--job", "t", "--timeout", str(timeout)],
                env=self.env({"PARALOG_NODE": "n0"}), check=False, timeout=timeout + 30)
        return self.waited(r)
