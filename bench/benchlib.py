"""What the benchmark scripts share: the binaries they measure (copied
first, so that a rebuild during a run changes nothing), the POSIX writer
bench/drain_writer.c run directly or under the capture library with no
server, and one request to a paralog server's status socket."""

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOB = "b"


def sh(*args, **kw):
    return subprocess.run([str(a) for a in args], check=True, **kw)


class Tools:
    def __init__(self, base):
        d = base / "bin"
        d.mkdir()
        self.paralog = d / "paralog"
        self.capture = d / "libparalog_capture.so"
        shutil.copy2(ROOT / "target/release/paralog", self.paralog)
        shutil.copy2(ROOT / "target/release/libparalog_capture.so", self.capture)
        self.writer = d / "drain_writer"
        sh("cc", "-O2", "-Wall", "-Wextra", "-o", self.writer, ROOT / "bench/drain_writer.c")
        self.rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                  capture_output=True, text=True).stdout.strip()

    def write(self, args, capture=None):
        """Run the writer; capture=(prefix, local): under the capture library.
        No PARALOG_* or AWS_* setting of ours reaches it."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PARALOG_", "AWS_"))}
        if capture:
            prefix, local = capture
            env.update(LD_PRELOAD=str(self.capture), PARALOG_PREFIX=str(prefix),
                       PARALOG_LOCAL=str(local), PARALOG_JOB=JOB)
        r = sh(self.writer, *args, env=env, capture_output=True, text=True)
        return json.loads(r.stdout.strip().splitlines()[-1])


def request(sock, cmd, timeout=3600):
    """One JSON request to a server's socket, its one-line JSON answer."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(timeout)
    s.connect(str(sock))
    s.sendall((json.dumps(cmd) + "\n").encode())
    line = s.makefile().readline()
    s.close()
    return json.loads(line)
