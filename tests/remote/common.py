"""Shared helpers of the remote tests (tests/remote/s3.py, objstore.py):
running paralog and the writer programs, a MinIO on loopback, awscli, a
`paralog server` of our own (to keep its debug log), the case runner.
Standard library only (the tests run with /usr/bin/python3)."""

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "target/release/paralog"
PY = "/usr/bin/python3"
HERE = Path(__file__).resolve().parent
WRITER = HERE / "writer.py"
POSIX_WRITER = ROOT / "tests/server/posix_writer.py"
MINIO = ROOT / "target/go/bin/minio"
PYLIB = ROOT / "target/pylib"

sys.path.insert(0, str(HERE))
import writer  # noqa: E402  (the plans: expected bytes computed in memory)


class Failed(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failed(msg)


def clean_env(extra=None):
    """The environment without any PARALOG_* / AWS_* setting of the caller."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PARALOG_", "AWS_"))}
    env.update(extra or {})
    return env


# Everything paralog printed (stdout, stderr, server logs), for the
# credentials check of s3.py.
TRANSCRIPTS = []


def record(label, text):
    if text:
        TRANSCRIPTS.append((label, text))


def sh(cmd, env=None, check_rc=True, timeout=600, label=None, stdin=None):
    cmd = [str(c) for c in cmd]
    # Its own session, so that a timeout ends the whole tree (a `paralog run`
    # and its server, an MPI launcher and its ranks).
    p = subprocess.Popen(cmd, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=stdin if stdin is not None else subprocess.DEVNULL, errors="replace",
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(p)
        p.communicate()
        raise Failed(f"{' '.join(cmd)[:300]}: timed out after {timeout} s")
    r = subprocess.CompletedProcess(cmd, p.returncode, out, err)
    if cmd[0] == str(BIN):
        record(label or " ".join(cmd[:2]), r.stdout + r.stderr)
    if check_rc and r.returncode != 0:
        raise Failed(f"{' '.join(cmd)[:300]} exited {r.returncode}: {(r.stderr or r.stdout).strip()[-800:]}")
    return r


def first_difference(want, got):
    if want == got:
        return "equal"
    for i in range(0, min(len(want), len(got)), 1 << 16):
        a, b = want[i:i + (1 << 16)], got[i:i + (1 << 16)]
        if a != b:
            k = next(j for j, (p, q) in enumerate(zip(a, b)) if p != q) if a[:len(b)] != b[:len(a)] else min(len(a), len(b))
            if k < min(len(a), len(b)):
                return f"first difference at byte {i + k} (want {a[k]:#04x}, got {b[k]:#04x}); sizes {len(want)} vs {len(got)}"
    return f"sizes differ: want {len(want)}, got {len(got)}"


def same_bytes(want, got_path, what):
    got = Path(got_path).read_bytes()
    check(want == got, f"{what}: {first_difference(want, got)}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_tree(p, sig=signal.SIGKILL):
    """Signal a process we started in its own session (and its group)."""
    if p is None or p.poll() is not None:
        return
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass


# --- paralog ------------------------------------------------------------------

def capture_env(prefix, local, remote, job="t", mpi="mpich", base=None):
    """`paralog env`: capture on, no server (one we start, or none). The
    remote tells capture where drained bytes are read from."""
    r = sh([BIN, "env", "--mpi", mpi, "--prefix", prefix, "--local", local, "--job", job, "--remote", remote],
           env=base)
    env = dict(base or os.environ)
    for line in r.stdout.splitlines():
        k, _, v = line.removeprefix("export ").partition("=")
        env[k] = v.strip("'")
    return env


def paralog_run(local, prefix, cmd, remote, mpi="none", extra=(), env=None, check_rc=True, timeout=600, job="t"):
    args = [BIN, "run", "--prefix", prefix, "--local", local, "--job", job, "--remote", remote,
            "--mpi", mpi, *extra, "--", *cmd]
    r = sh(args, env=env, check_rc=False, timeout=timeout, label="paralog run")
    keep_server_log(local, job)
    if check_rc and r.returncode != 0:
        raise Failed(f"paralog run exited {r.returncode}: {gist(r.stdout + r.stderr)}")
    return r


def gist(text, n=3):
    """The first lines that look like errors, or the end of the text."""
    lines = [l for l in text.splitlines() if any(w in l for w in ("rror", "failed", "does not exist", "WARN", "panick"))]
    return " | ".join(l.strip()[:300] for l in lines[:n]) if lines else text.strip()[-800:]


def keep_server_log(local, job="t"):
    log = Path(local) / f".paralog-server-{job}.log"
    if log.exists():
        record(f"server log {log}", log.read_text(errors="replace"))


def status(local, job="t"):
    r = subprocess.run([BIN, "status", "--local", local, "--job", job, "--json", "--once"],
                       text=True, capture_output=True)
    return json.loads(r.stdout) if r.returncode == 0 else None


def ask(sock, req, timeout=300):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(timeout)
    s.connect(str(sock))
    s.sendall((json.dumps(req) + "\n").encode())
    line = s.makefile().readline()
    s.close()
    return json.loads(line) if line else None


class Server:
    """`paralog server --job J` of our own, its stderr kept in a file."""

    def __init__(self, local, remote, env, job="t", extra=()):
        self.local, self.job, self.remote = Path(local), job, remote
        self.local.mkdir(parents=True, exist_ok=True)
        os.chmod(self.local, 0o700)
        self.log = self.local.parent / f"server-{job}.log"
        self.sock = self.local / f".paralog-server-{job}.sock"
        with open(self.log, "ab") as logf:
            self.p = subprocess.Popen([str(BIN), "server", "--local", str(local), "--job", job, "--remote", remote, *extra],
                                      stdout=subprocess.DEVNULL, stderr=logf, env=env, start_new_session=True)
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.sock.exists():
                try:
                    ask(self.sock, {"cmd": "status"}, timeout=5)
                    return
                except OSError:
                    pass
            if self.p.poll() is not None:
                raise Failed(f"server exited {self.p.returncode}: {self.text()[-600:]}")
            time.sleep(0.05)
        self.kill()
        raise Failed("the server did not come up")

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

    def drain_and_stop(self, timeout_s=120):
        try:
            st = ask(self.sock, {"cmd": "drain", "timeout_s": timeout_s}, timeout=timeout_s + 30)
            ask(self.sock, {"cmd": "stop"})
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


def run_writer_captured(prefix, local, remote, args, env, timeout=300, check_rc=True):
    """A writer plan with capture on and no server of paralog run's."""
    cenv = capture_env(prefix, local, remote, base=env)
    r = subprocess.run([PY, str(WRITER), *map(str, args)], env=cenv, text=True, capture_output=True, timeout=timeout)
    if check_rc and r.returncode != 0:
        raise Failed(f"writer {args[:2]} exited {r.returncode}: {r.stderr.strip()[-600:]}")
    return r


# --- MinIO and awscli --------------------------------------------------------

class MinIO:
    """A MinIO server on a free loopback port with a temporary data dir."""

    def __init__(self, base):
        self.base = Path(base)
        self.data = self.base / "minio-data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.user = "paralogtest"
        self.secret = "plsecret-" + secrets.token_hex(16)
        self.port = free_port()
        self.p = None
        self.logf = self.base / "minio.log"

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout=60):
        console = free_port()
        env = clean_env({"MINIO_ROOT_USER": self.user, "MINIO_ROOT_PASSWORD": self.secret,
                         "MINIO_BROWSER": "off", "MINIO_UPDATE": "off", "HOME": str(self.base)})
        with open(self.logf, "ab") as log:
            self.p = subprocess.Popen([str(MINIO), "server", str(self.data), "--quiet",
                                       "--address", f"127.0.0.1:{self.port}",
                                       "--console-address", f"127.0.0.1:{console}"],
                                      stdout=log, stderr=log, env=env, start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.p.poll() is not None:
                raise Failed(f"minio exited {self.p.returncode}: {self.logf.read_text(errors='replace')[-600:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/minio/health/live", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise Failed("minio did not answer in time")

    def kill(self):
        """SIGKILL (the data dir stays: start() brings the same store back)."""
        if self.p and self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait(timeout=30)

    def stop(self):
        if self.p and self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        self.p = None

    def env(self, endpoint=None, secret=None):
        """AWS settings for awscli and paralog (no config files of the user)."""
        nothing = self.base / "empty-aws-config"
        nothing.touch()
        return clean_env({
            "AWS_ACCESS_KEY_ID": self.user,
            "AWS_SECRET_ACCESS_KEY": secret or self.secret,
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint or self.url,
            "AWS_CONFIG_FILE": str(nothing),
            "AWS_SHARED_CREDENTIALS_FILE": str(nothing),
            "AWS_EC2_METADATA_DISABLED": "true",
        })

    def aws(self, *args, check_rc=True, timeout=300):
        env = self.env()
        env["PYTHONPATH"] = str(PYLIB)
        r = subprocess.run([PY, "-m", "awscli", *map(str, args)], env=env, text=True,
                           capture_output=True, timeout=timeout)
        if check_rc and r.returncode != 0:
            raise Failed(f"aws {' '.join(map(str, args))[:200]} exited {r.returncode}: {r.stderr.strip()[-600:]}")
        return r

    def api(self, *args):
        """`aws s3api ...` parsed (None for an empty answer)."""
        out = self.aws("s3api", *args, "--output", "json").stdout.strip()
        return json.loads(out) if out else None

    def mb(self, bucket):
        self.aws("s3api", "create-bucket", "--bucket", bucket)

    def download_all(self, bucket, prefix, dest):
        """Every object under `prefix/` into `dest` (one awscli call); returns
        the sorted relative keys."""
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        self.aws("s3", "sync", "--no-progress", "--only-show-errors", f"s3://{bucket}/{prefix}/", dest)
        return sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())

    def keys(self, bucket, prefix):
        out = []
        token = None
        while True:
            args = ["list-objects-v2", "--bucket", bucket, "--prefix", prefix + "/"]
            if token:
                args += ["--starting-token", token]
            r = self.api(*args) or {}
            out += [(o["Key"], o["Size"]) for o in r.get("Contents", [])]
            token = r.get("NextToken")
            if not token:
                return sorted(out)

    def uploads(self, bucket, key):
        """The unfinished multipart uploads of one key. (MinIO lists the
        uploads on disk only for a prefix that is an object's whole key;
        without one it shows only those its running process created.)"""
        r = self.api("list-multipart-uploads", "--bucket", bucket, "--prefix", key) or {}
        return [(u["Key"], u["UploadId"]) for u in r.get("Uploads", []) or [] if u["Key"] == key]


# --- the case runner ---------------------------------------------------------

class Suite:
    def __init__(self, name, keep=False):
        self.name = name
        self.keep = keep
        self.passed = self.failed = 0
        self.base = Path(tempfile.mkdtemp(prefix=f"paralog-{name}-"))
        self.cleanup = []  # callables run at the end, last first
        self.t0 = time.time()
        # A signal ends the run through the finally blocks (MinIO, proxy).
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, lambda *_: sys.exit(130))

    def case(self, label, fn):
        work = self.base / label.replace(" ", "_").replace("/", "_")
        work.mkdir(parents=True, exist_ok=True)
        t = time.time()
        try:
            msg = fn(work)
            if msg.startswith("SKIP"):
                print(f"SKIP {label}: {msg.removeprefix('SKIP: ')}", flush=True)
                shutil.rmtree(work, ignore_errors=True)
                return
            self.passed += 1
            print(f"PASS {label}: {msg} ({time.time() - t:.1f} s)", flush=True)
            if not self.keep:
                shutil.rmtree(work, ignore_errors=True)
        except Exception as e:  # any error fails the case, not the run
            self.failed += 1
            what = str(e) if isinstance(e, Failed) else f"{type(e).__name__}: {e}"
            print(f"FAIL {label}: {what}  [kept in {work}] ({time.time() - t:.1f} s)", flush=True)

    def run_cleanup(self):
        while self.cleanup:
            fn = self.cleanup.pop()
            try:
                fn()
            except Exception as e:  # cleanup must go on
                print(f"{self.name}: cleanup: {e}", file=sys.stderr)

    def finish(self):
        self.run_cleanup()
        if not self.keep and self.failed == 0:
            shutil.rmtree(self.base, ignore_errors=True)
        elif self.failed:
            print(f"{self.name}: work directories kept in {self.base}", flush=True)
        print(f"{self.name}: {self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0
