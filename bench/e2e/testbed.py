"""The bandwidth-limited remote of the end-to-end benchmark, built and torn
down by the harness itself (root only):

    compute namespace  plb<PID>c            storage namespace  plb<PID>s
    10.231.0.1/30  veth plb<PID>c  <====>  veth plb<PID>s  10.231.0.2/30
                   tc tbf RATE (egress)      tc tbf RATE (egress)
    the program, paralog run,                sshd (its own config, host key and
    sshfs (the client), awscli               private /run) serving the storage
                                             directory over SFTP; MinIO (S3)

Both ends of the veth are limited by a token bucket (tbf) at the same rate,
so the link is symmetric; nothing else throttles anything. The sshfs mount is
made from inside the compute namespace (nsenter --net), so its traffic crosses
the link, and it is visible in the host's mount namespace at MNT (every
process of ours sees it). Drain traffic is sampled from the compute end's
counters (/proc/<a process in the namespace>/net/dev: /sys/class/net shows
only the host's namespace).

Names carry the harness's PID, so two runs never collide; a namespace or
sshfs mount left by a run that was killed with SIGKILL is removed by the next
run (its PID is gone). Everything is torn down in close(), which the harness
calls from a finally block (Ctrl-C, SIGTERM and SIGHUP included).
"""

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MINIO = ROOT / "target/go/bin/minio"
PYLIB = ROOT / "target/pylib"
PY = "/usr/bin/python3"
IP_C, IP_S = "10.231.0.1", "10.231.0.2"
S3_PORT = 9000
BASE_PREFIX = "paralog-e2e-"


def run(cmd, check=True, **kw):
    return subprocess.run([str(c) for c in cmd], check=check, text=True, capture_output=True, **kw)


def pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def stop_group(p, timeout=15):
    """SIGTERM, then SIGKILL, to the session of a process we started."""
    if p is None or p.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            return
        try:
            p.wait(timeout=timeout)
            return
        except subprocess.TimeoutExpired:
            pass


def clean_stale():
    """Namespaces and sshfs mounts of earlier runs whose harness is gone."""
    out = run(["ip", "netns", "list"], check=False).stdout
    for line in out.splitlines():
        m = re.match(r"^(plb(\d+)[cs])\b", line)
        if m and not pid_alive(int(m.group(2))) and int(m.group(2)) != os.getpid():
            print(f"testbed: removing namespace {m.group(1)} left by a run that ended", flush=True)
            run(["ip", "netns", "del", m.group(1)], check=False)
    for line in Path("/proc/mounts").read_text().splitlines():
        f = line.split()
        if len(f) > 2 and f[2] == "fuse.sshfs" and f"/{BASE_PREFIX}" in f[1]:
            m = re.search(rf"/{BASE_PREFIX}(\d+)-", f[1])
            if m and not pid_alive(int(m.group(1))):
                print(f"testbed: unmounting {f[1]} left by a run that ended", flush=True)
                run(["umount", "-l", f[1]], check=False)
    # Working directories of runs that ended without their clean-up (never
    # one with a mount inside).
    mounts = Path("/proc/mounts").read_text()
    for top in ("/var/tmp", "/tmp", "/dev/shm"):
        for d in Path(top).glob(f"{BASE_PREFIX}*-*"):
            m = re.match(rf"{BASE_PREFIX}(\d+)-", d.name)
            if m and not pid_alive(int(m.group(1))) and str(d) + "/" not in mounts:
                print(f"testbed: removing {d} left by a run that ended", flush=True)
                shutil.rmtree(d, ignore_errors=True)


class Testbed:
    def __init__(self, base, rate_mbit, sample_s=0.05):
        self.base = Path(base)
        self.rate_mbit = rate_mbit
        self.link_Bps = rate_mbit * 1e6 / 8
        tag = f"plb{os.getpid()}"
        self.ns_c, self.ns_s = tag + "c", tag + "s"
        self.if_c, self.if_s = tag + "c", tag + "s"
        self.storage = self.base / "storage"   # what sshd serves (host path)
        self.mnt = self.base / "mnt"           # the sshfs mount point
        self.minio_data = self.base / "minio-data"
        self.sample_s = sample_s
        self.procs = {}
        self.created = []
        self.mounted = False
        self.user = "paralogbench"
        self.secret = "pb-" + secrets.token_hex(16)

    # --- commands inside the namespaces ---------------------------------

    def in_c(self, cmd):
        return ["ip", "netns", "exec", self.ns_c, *map(str, cmd)]

    def in_s(self, cmd):
        return ["ip", "netns", "exec", self.ns_s, *map(str, cmd)]

    @property
    def s3_url(self):
        return f"http://{IP_S}:{S3_PORT}"

    def aws_env(self):
        """The standard AWS settings for MinIO (both awscli and paralog)."""
        nothing = self.base / "empty-aws-config"
        nothing.touch()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PARALOG_", "AWS_"))}
        env.update(AWS_ACCESS_KEY_ID=self.user, AWS_SECRET_ACCESS_KEY=self.secret, AWS_REGION="us-east-1",
                   AWS_ENDPOINT_URL=self.s3_url, AWS_CONFIG_FILE=str(nothing),
                   AWS_SHARED_CREDENTIALS_FILE=str(nothing), AWS_EC2_METADATA_DISABLED="true")
        return env

    def aws(self, *args, timeout=600):
        env = self.aws_env()
        env["PYTHONPATH"] = str(PYLIB)
        return run(self.in_c([PY, "-m", "awscli", *args]), env=env, timeout=timeout)

    # --- set-up -----------------------------------------------------------

    def start(self, s3=True):
        """The link, sshd and the sshfs mount; MinIO too unless s3=False."""
        clean_stale()
        for d in (self.storage, self.mnt, self.minio_data, self.base / "ssh"):
            d.mkdir(parents=True, exist_ok=True)
        self._network()
        self._sshd()
        self._sshfs()
        if s3:
            self._minio()

    def _network(self):
        for ns in (self.ns_c, self.ns_s):
            run(["ip", "netns", "add", ns])
            self.created.append(ns)
        run(["ip", "link", "add", self.if_c, "type", "veth", "peer", "name", self.if_s])
        run(["ip", "link", "set", self.if_c, "netns", self.ns_c])
        run(["ip", "link", "set", self.if_s, "netns", self.ns_s])
        for ns, dev, ip in ((self.ns_c, self.if_c, IP_C), (self.ns_s, self.if_s, IP_S)):
            run(["ip", "-n", ns, "addr", "add", f"{ip}/30", "dev", dev])
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
            run(["ip", "-n", ns, "link", "set", dev, "up"])
            # The only throttle of the benchmark. burst: 256 KiB (more than
            # rate/HZ), queue: 50 ms of data.
            run(["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{self.rate_mbit}mbit",
                 "burst", "256kb", "latency", "50ms"])
        # A process that lives in the compute namespace: its /proc/PID/net/dev
        # shows the veth's counters.
        self.procs["holder"] = subprocess.Popen(self.in_c(["sleep", "infinity"]), start_new_session=True)
        self.netdev = Path(f"/proc/{self.procs['holder'].pid}/net/dev")
        deadline = time.time() + 10
        while self.if_c not in self._read_netdev_text() and time.time() < deadline:
            time.sleep(0.02)
        self.counters()

    def tc_show(self):
        return run(["tc", "-n", self.ns_c, "qdisc", "show", "dev", self.if_c]).stdout.strip()

    def _sshd(self):
        ssh = self.base / "ssh"
        for name in ("host_key", "id"):
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", ssh / name])
        shutil.copy(ssh / "id.pub", ssh / "authorized_keys")
        cfg = ssh / "sshd_config"
        cfg.write_text("\n".join([
            f"ListenAddress {IP_S}", "Port 22", f"HostKey {ssh / 'host_key'}", f"PidFile {ssh / 'sshd.pid'}",
            f"AuthorizedKeysFile {ssh / 'authorized_keys'}", "PermitRootLogin prohibit-password",
            "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
            "Subsystem sftp internal-sftp", "LogLevel ERROR", ""]))
        # sshd wants /run/sshd: a private tmpfs on /run, in a mount namespace
        # of its own (ip netns exec already makes one; unshare makes sure).
        script = f"mount -t tmpfs tmpfs /run && mkdir -p /run/sshd && exec /usr/sbin/sshd -D -e -f {cfg}"
        with open(self.base / "sshd.log", "ab") as log:
            self.procs["sshd"] = subprocess.Popen(
                self.in_s(["unshare", "--mount", "--propagation", "private", "sh", "-c", script]),
                stdout=log, stderr=log, start_new_session=True)
        self._wait_port(IP_S, 22, "sshd", self.procs["sshd"])

    def _wait_port(self, host, port, what, proc, timeout=60):
        probe = ("import socket,sys,time\n"
                 f"d=time.time()+{timeout}\n"
                 "while time.time()<d:\n"
                 "  try:\n"
                 f"    socket.create_connection(('{host}',{port}),timeout=1).close(); sys.exit(0)\n"
                 "  except OSError: time.sleep(0.1)\n"
                 "sys.exit(1)\n")
        r = subprocess.run(self.in_c([PY, "-c", probe]))
        if r.returncode != 0 or proc.poll() is not None:
            raise RuntimeError(f"{what} did not come up (see {self.base})")

    def _sshfs(self):
        ssh = self.base / "ssh"
        opts = ",".join([
            f"IdentityFile={ssh / 'id'}", "StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null",
            "LogLevel=ERROR", "Ciphers=aes128-gcm@openssh.com", "Compression=no"])
        with open(self.base / "sshfs.log", "ab") as log:
            self.procs["sshfs"] = subprocess.Popen(
                ["nsenter", f"--net=/run/netns/{self.ns_c}", "sshfs", "-f", "-o", opts,
                 f"root@{IP_S}:{self.storage}", str(self.mnt)],
                stdout=log, stderr=log, start_new_session=True)
        deadline = time.time() + 30
        while time.time() < deadline:
            if self._is_mounted():
                self.mounted = True
                return
            if self.procs["sshfs"].poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"sshfs did not mount: {(self.base / 'sshfs.log').read_text(errors='replace')[-500:]}")

    def _is_mounted(self):
        for line in Path("/proc/mounts").read_text().splitlines():
            f = line.split()
            if len(f) > 2 and f[1] == str(self.mnt) and f[2] == "fuse.sshfs":
                return True
        return False

    def _minio(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PARALOG_", "AWS_", "MINIO_"))}
        env.update(MINIO_ROOT_USER=self.user, MINIO_ROOT_PASSWORD=self.secret, MINIO_BROWSER="off",
                   MINIO_UPDATE="off", HOME=str(self.base))
        with open(self.base / "minio.log", "ab") as log:
            self.procs["minio"] = subprocess.Popen(
                self.in_s([MINIO, "server", self.minio_data, "--quiet", "--address", f"{IP_S}:{S3_PORT}",
                           "--console-address", f"{IP_S}:{S3_PORT + 1}"]),
                stdout=log, stderr=log, env=env, start_new_session=True)
        self._wait_port(IP_S, S3_PORT, "MinIO", self.procs["minio"])
        deadline = time.time() + 60
        while True:
            try:
                self.aws("s3api", "create-bucket", "--bucket", "bench")
                return
            except subprocess.CalledProcessError as e:
                if time.time() > deadline:
                    raise RuntimeError(f"MinIO: cannot make the bucket: {e.stderr[-400:]}")
                time.sleep(0.5)

    # --- measurements -------------------------------------------------------

    def _read_netdev_text(self):
        try:
            return self.netdev.read_text()
        except OSError:
            return ""

    def counters(self):
        """(tx_bytes, rx_bytes) of the compute end of the veth."""
        for line in self._read_netdev_text().splitlines():
            name, _, rest = line.partition(":")
            if name.strip() == self.if_c:
                f = rest.split()
                return int(f[8]), int(f[0])
        raise RuntimeError(f"no counters for {self.if_c}")

    def cpu_seconds(self):
        """CPU seconds (user + system) used so far by the remote's side of
        the testbed, which shares this machine's CPUs with the program: every
        process in the storage namespace (MinIO, sshd and its session), and
        the sshfs client with its ssh."""
        tick = os.sysconf("SC_CLK_TCK")
        try:
            want = os.readlink(f"/proc/{self.procs['minio'].pid}/ns/net")
        except (OSError, KeyError):
            return {"storage": 0.0, "sshfs": 0.0}
        sshfs = self.procs.get("sshfs")
        out = {"storage": 0.0, "sshfs": 0.0}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
                f = stat[stat.rindex(")") + 2:].split()
                cpu = (int(f[11]) + int(f[12])) / tick
                if os.readlink(f"/proc/{d}/ns/net") == want:
                    out["storage"] += cpu
                elif sshfs and (int(d) == sshfs.pid or int(f[1]) == sshfs.pid):
                    out["sshfs"] += cpu
            except (OSError, ValueError, IndexError):
                continue
        return out

    def sampler(self):
        return Sampler(self)

    def tcp_goodput(self, seconds=4.0):
        """Payload bytes/s of one TCP stream from compute to storage."""
        port = 5201
        recv = ("import socket\n"
                f"s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('{IP_S}',{port})); s.listen(1)\n"
                "c,_=s.accept(); n=0\n"
                "while True:\n"
                "  b=c.recv(1<<20)\n"
                "  if not b: break\n"
                "  n+=len(b)\n"
                "c.sendall(str(n).encode()); c.close()\n")
        send = ("import socket,time,sys\n"
                f"c=socket.create_connection(('{IP_S}',{port})); buf=b'x'*(1<<20); t=time.monotonic(); n=0\n"
                f"while time.monotonic()-t<{seconds}:\n"
                "  c.sendall(buf); n+=len(buf)\n"
                "c.shutdown(socket.SHUT_WR); got=int(c.recv(64)); dt=time.monotonic()-t\n"
                "print(got/dt)\n")
        r_p = subprocess.Popen(self.in_s([PY, "-c", recv]), stdout=subprocess.PIPE, start_new_session=True)
        try:
            time.sleep(0.3)
            out = run(self.in_c([PY, "-c", send]), timeout=seconds + 60).stdout
            return float(out.strip())
        finally:
            stop_group(r_p, timeout=5)

    # --- tear-down ----------------------------------------------------------

    def close(self):
        errors = []
        if self.mounted or self._is_mounted():
            r = run(["fusermount3", "-u", self.mnt], check=False)
            if r.returncode != 0:
                run(["umount", "-l", self.mnt], check=False)
            self.mounted = self._is_mounted()
            if self.mounted:
                errors.append(f"{self.mnt} is still mounted")
        for name in ("sshfs", "minio", "sshd", "holder"):
            stop_group(self.procs.pop(name, None))
        for ns in self.created:
            r = run(["ip", "netns", "del", ns], check=False)
            if r.returncode != 0:
                errors.append(f"ip netns del {ns}: {r.stderr.strip()}")
        self.created = []
        return errors


def teardown(bed, cg, shm, base, keep):
    """The end of a benchmark run: the testbed and the CPU group closed,
    the run's /dev/shm directory removed, its base directory removed unless
    kept (or the remote is still mounted there); the teardown errors,
    printed."""
    errors = bed.close() + (cg.close() if cg else [])
    for e in errors:
        print(f"teardown: {e}", file=sys.stderr)
    if shm is not None:
        shutil.rmtree(shm, ignore_errors=True)
    if not keep and not bed.mounted:
        shutil.rmtree(base, ignore_errors=True)
    elif keep:
        print(f"kept {base}")
    return errors


class CpuGroup:
    """A cpu cgroup for the harness and everything it starts (the program,
    paralog's server, MinIO, sshd, sshfs), with a high scheduler weight
    (cgroup v1 cpu.shares, or v2 cpu.weight): a weight, not a limit. On a
    machine shared with other people's builds it keeps the benchmark's
    compute from swinging with their load, as if the job had its node (and
    the remote its own machine). Inside the group, nice levels work as usual
    (paralog's drain at nice 10 still yields to the program's ranks).
    Removed by close(); a group left by a killed run is removed by the next."""

    V1 = Path("/sys/fs/cgroup/cpu")
    V2 = Path("/sys/fs/cgroup")

    def __init__(self, shares):
        self.path = None
        self.root = None
        if shares <= 0:
            return
        name = f"paralog-bench-{os.getpid()}"
        if (self.V1 / "cpu.shares").exists():
            self.root, knob, value = self.V1, "cpu.shares", str(shares)
        elif "cpu" in (self.V2 / "cgroup.controllers").read_text(errors="replace").split() if (
                self.V2 / "cgroup.controllers").exists() else False:
            self.root, knob, value = self.V2, "cpu.weight", str(max(1, min(10000, shares * 100 // 1024)))
        else:
            print("testbed: no cpu cgroup controller: running without a CPU weight", flush=True)
            return
        self._clean_stale()
        self.path = self.root / name
        self.path.mkdir()
        (self.path / knob).write_text(value)
        (self.path / "cgroup.procs").write_text(str(os.getpid()))
        self.desc = f"{knob}={value} ({self.path})"

    def _clean_stale(self):
        for d in self.root.glob("paralog-bench-*"):
            m = re.match(r"paralog-bench-(\d+)$", d.name)
            if m and not pid_alive(int(m.group(1))):
                self._remove(d)

    def _remove(self, d):
        # Processes killed a moment ago may still be exiting (reaped by init).
        for _ in range(100):
            try:
                for pid in (d / "cgroup.procs").read_text().split():
                    try:
                        (self.root / "cgroup.procs").write_text(pid)
                    except OSError:
                        pass
                d.rmdir()
                return True
            except OSError:
                time.sleep(0.1)
        return False

    def close(self):
        if self.path and self.path.exists():
            if not self._remove(self.path):
                left = (self.path / "cgroup.procs").read_text().split()
                return [f"cannot remove the cgroup {self.path} (processes in it: {' '.join(left) or 'none'})"]
        return []


class Sampler:
    """A thread that reads the compute end's tx/rx byte counters every
    sample_s seconds (time.monotonic(), the workload's clock)."""

    def __init__(self, bed):
        self.bed = bed
        self.samples = []
        self.stop_ev = threading.Event()
        self.t = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        nxt = time.monotonic()
        while not self.stop_ev.is_set():
            tx, rx = self.bed.counters()
            self.samples.append((time.monotonic(), tx, rx))
            nxt += self.bed.sample_s
            self.stop_ev.wait(max(0.0, nxt - time.monotonic()))

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *exc):
        self.stop_ev.set()
        self.t.join()
        tx, rx = self.bed.counters()
        self.samples.append((time.monotonic(), tx, rx))


def dump(obj, path):
    Path(path).write_text(json.dumps(obj, indent=1))
