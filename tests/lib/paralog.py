"""The paralog command line as the suites use it: a clean environment,
capture without a server (`paralog env`), `paralog run`, status, inspect."""

import json
import os
import shutil
import time
from pathlib import Path

from .check import Failed
from .paths import BIN
from .proc import record, run


def clean_env(extra=None, drop=("PARALOG_", "AWS_")):
    """The environment without any PARALOG_* / AWS_* setting of the caller."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(extra or {})
    return env


def capture_env(prefix, local, mpi="none", job="t", remote=None, base=None):
    """`paralog env`'s settings (run with `base`, default this process's
    environment) added to `base`: capture on, no server (one we start, or
    none). job=None: paralog's default job."""
    args = [BIN, "env", "--mpi", mpi, "--prefix", prefix, "--local", local]
    if job is not None:
        args += ["--job", job]
    if remote is not None:
        args += ["--remote", remote]
    r = run(args, env=base)
    env = dict(base if base is not None else os.environ)
    for line in r.stdout.splitlines():
        k, _, v = line.removeprefix("export ").partition("=")
        env[k] = v.strip("'")
    return env


def run_captured(cmd, prefix, local, remote=None, mpi="mpich", job="t", base=None, timeout=300, check=True):
    """A program run with capture on and no server of paralog's (none, a
    crashed one, or one of our own); check: a non-zero exit raises Failed."""
    r = run(cmd, env=capture_env(prefix, local, mpi, job, remote, base), check=False, timeout=timeout)
    if check and r.returncode != 0:
        raise Failed(f"{' '.join(map(str, cmd))[:300]} exited {r.returncode} under capture: {r.stderr.strip()[-600:]}")
    return r


def paralog_run(local, prefix, cmd, remote=None, mpi="none", extra=(), env=None, check=True, timeout=600,
                job="t", cwd=None, text=True):
    """`paralog run` (remote=None: the prefix is the remote; mpi=None or
    job=None: paralog's default); its server log is kept in the transcript.
    check: a non-zero exit raises Failed with the lines that look like
    errors."""
    args = [BIN, "run", "--prefix", prefix, "--local", local]
    if job is not None:
        args += ["--job", job]
    if remote is not None:
        args += ["--remote", remote]
    if mpi is not None:
        args += ["--mpi", mpi]
    r = run([*args, *extra, "--", *cmd], env=env, check=False, timeout=timeout, cwd=cwd, text=text,
            label="paralog run")
    if job is not None:
        keep_server_log(local, job)
    if check and r.returncode != 0:
        out = r.stdout + r.stderr
        raise Failed(f"paralog run exited {r.returncode}: {gist(out if text else out.decode(errors='replace'))}")
    return r


def gist(text, n=3):
    """The first lines that look like errors, or the end of the text."""
    lines = [l for l in text.splitlines() if any(w in l for w in ("rror", "failed", "does not exist", "WARN", "panick"))]
    return " | ".join(l.strip()[:300] for l in lines[:n]) if lines else text.strip()[-800:]


def keep_server_log(local, job="t"):
    """The log of the server `paralog run` started, into the transcript (run
    deletes it after a complete drain)."""
    log = Path(local) / f".paralog-server-{job}.log"
    if log.exists():
        record(f"server log {log}", log.read_text(errors="replace"))


def status(local, job=None, env=None):
    """`paralog status --json --once`, parsed; None if no server answered
    (exit 2 still answers: a damaged or refused file, docs/server.md)."""
    args = [BIN, "status", "--local", local, "--json", "--once"] + (["--job", job] if job else [])
    r = run(args, env=env, check=False, timeout=60)
    return json.loads(r.stdout) if r.returncode in (0, 2) else None


def inspect(local):
    """`paralog inspect --json`, parsed."""
    return json.loads(run([BIN, "inspect", "--local", local, "--json"]).stdout)


def remove_local(local, timeout=60):
    """Remove a node-local root after `paralog run`: first wait for the
    detached `rm` of a finished job's records (`.paralog-trash-*`), which
    would race a removal of its own."""
    local = Path(local)
    deadline = time.time() + timeout
    while time.time() < deadline and any(p.name.startswith(".paralog-trash-") for p in local.iterdir()):
        time.sleep(0.05)
    shutil.rmtree(local)


def jobs_left(local):
    """Job directories left in a node-local root (run removes a finished job)."""
    local = Path(local)
    return [p.name for p in local.iterdir() if not p.name.startswith(".paralog-")] if local.exists() else []
