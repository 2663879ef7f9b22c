"""Running commands: each in a session of its own, so that a time limit (or
the end of the test) ends the whole tree (`paralog run` and its server, an
MPI launcher and its ranks); a free loopback port; and the transcript of
everything paralog printed (s3.py searches it for the secret key)."""

import os
import signal
import socket
import subprocess

from .check import Failed
from .paths import BIN

# (label, text) of every output of paralog (its stdout and stderr, server
# logs kept by the suites).
TRANSCRIPTS = []


def record(label, text):
    if text:
        TRANSCRIPTS.append((label, text))


class Timeout(Failed):
    """A command did not end within its time limit (its tree was killed)."""


def run(cmd, env=None, check=True, timeout=600, stdin=None, cwd=None, text=True, label=None):
    """Run cmd to its end; its CompletedProcess (stdout and stderr captured).
    check: a non-zero exit raises Failed with the end of its output. A
    command still running after `timeout` s is killed with its whole
    process group and raises Timeout."""
    cmd = [str(c) for c in cmd]
    kw = {"text": True, "errors": "replace"} if text else {}
    p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=stdin if stdin is not None else subprocess.DEVNULL, start_new_session=True, **kw)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(p)
        p.communicate()
        raise Timeout(f"{' '.join(cmd)[:300]}: timed out after {timeout} s")
    except BaseException:  # a signal or ^C: nothing of ours stays behind
        kill_tree(p)
        raise
    r = subprocess.CompletedProcess(cmd, p.returncode, out, err)
    if text and cmd[0] == str(BIN):
        record(label or " ".join(cmd[:2]), out + err)
    if check and r.returncode != 0:
        said = (err or out).strip()[-800:]
        raise Failed(f"{' '.join(cmd)[:300]} exited {r.returncode}: {said}")
    return r


def kill_tree(p, sig=signal.SIGKILL):
    """Signal a process we started in its own session, and its group."""
    if p is None or p.poll() is not None:
        return
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

