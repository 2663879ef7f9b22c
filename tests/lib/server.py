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
from .paths import BIN
from .proc import kill_tree, record


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


class Server:
    """`paralog server --job J` of our own (its own session), its stderr in a
    log file (default: server-J.log beside the local directory). Ready once
    it answers a status request on its socket (its own: the pid it reports
    is this process's, not a crashed predecessor's)."""

    def __init__(self, local, remote, env, job="t", extra=(), log=None, timeout=20):
        self.local, self.job, self.remote = Path(local), job, remote
        self.local.mkdir(parents=True, exist_ok=True)
        os.chmod(self.local, 0o700)
        self.log = Path(log) if log else self.local.parent / f"server-{job}.log"
        self.sock = self.local / f".paralog-server-{job}.sock"
        with open(self.log, "ab") as logf:
            self.p = subprocess.Popen([str(BIN), "server", "--local", str(local), "--job", job, "--remote", str(remote),
                                       *map(str, extra)], stdout=subprocess.DEVNULL, stderr=logf, env=env,
                                      start_new_session=True)
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
