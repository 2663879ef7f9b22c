"""A MinIO server for the S3 tests (a free loopback port, a temporary data
directory, a random secret key; killed and restarted on the same data), and
awscli (target/pylib) talking to it directly. A subclass can run it
elsewhere (tests/cluster/netns.py: in a network namespace) by overriding
host, wrap() and live()."""

import json
import os
import secrets
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from .check import Failed
from .paralog import clean_env
from .paths import MINIO, PY, PYLIB
from .proc import free_port


class MinIO:
    host = "127.0.0.1"

    def __init__(self, base, port=None):
        self.base = Path(base)
        self.data = self.base / "minio-data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.user = "paralogtest"
        self.secret = "plsecret-" + secrets.token_hex(16)
        self.port = port or free_port()
        self.p = None
        self.logf = self.base / "minio.log"

    @property
    def url(self):
        return f"http://{self.host}:{self.port}"

    def wrap(self, cmd):
        """The command line that runs cmd where MinIO runs."""
        return [str(c) for c in cmd]

    def console_port(self):
        return free_port()

    def live(self):
        """MinIO answers its health check."""
        try:
            with urllib.request.urlopen(f"{self.url}/minio/health/live", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def start(self, timeout=60):
        env = clean_env({"MINIO_ROOT_USER": self.user, "MINIO_ROOT_PASSWORD": self.secret,
                         "MINIO_BROWSER": "off", "MINIO_UPDATE": "off", "HOME": str(self.base)})
        with open(self.logf, "ab") as log:
            self.p = subprocess.Popen(self.wrap([MINIO, "server", self.data, "--quiet",
                                                 "--address", f"{self.host}:{self.port}",
                                                 "--console-address", f"{self.host}:{self.console_port()}"]),
                                      stdout=log, stderr=log, env=env, start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.p.poll() is not None:
                raise Failed(f"minio exited {self.p.returncode}: {self.logf.read_text(errors='replace')[-600:]}")
            if self.live():
                return
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
        r = subprocess.run(self.wrap([PY, "-m", "awscli", *args]), env=env, text=True,
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

    @classmethod
    def with_bucket(cls, base, bucket):
        """A MinIO started under `base` with `bucket` made, and the
        environment that reaches it."""
        m = cls(base)
        m.start()
        m.mb(bucket)
        return m, m.env()

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
