#!/usr/bin/python3
"""Server tests: real programs under `paralog run`, the server draining to a
POSIX remote while they run, results compared byte for byte.

  programs   every capture test program (tests/mpi) in every MPI mode under
             `paralog run`: the remote file equals the direct MPI-IO file;
             each program drains to the prefix itself (the embedded
             default), to a separate --remote directory, and to the
             versioned object layout (objstore://, read back with
             `paralog get`), one kind per MPI mode
  readback   a program that writes, closes and reads its file back at once,
             every epoch, while the server drains it
  restart    a log written with no server running is drained by a server
             started afterwards (start-up scan), and nothing is left locally
  damaged    a flipped bit in a committed epoch: that epoch and the later
             ones stay local, the error names file, rank, epoch and offset,
             earlier epochs are drained, status says DAMAGED
  remote     the remote fails (full, then read-only: a real tmpfs mount) while
             the program runs: the server retries, status shows why, local
             data is kept, and the drain completes once the remote is back
  recover    `paralog recover` of a log no server drained equals the last
             committed epoch, and a second run changes nothing

Usage: tests/server/e2e.py [--only NAME] [--mode MODE] [--keep]
Prints one line per case and ends with "server: N passed, N failed".
"""

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "target/release/paralog"
WRITER = ROOT / "tests/server/posix_writer.py"
PY = "/usr/bin/python3"

spec = importlib.util.spec_from_file_location("capture_run", ROOT / "tests/capture/run.py")
cap = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cap)
sh, same, first_difference = cap.sh, cap.same, cap.first_difference


class Failed(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failed(msg)


def jobs_left(local):
    """Job directories left in a node-local root (run removes a finished job)."""
    return [p.name for p in Path(local).iterdir() if not p.name.startswith(".paralog-")] if Path(local).exists() else []


def paralog_run(local, prefix, cmd, remote=None, mpi=None, extra=(), env=None, check_rc=True):
    args = [BIN, "run", "--prefix", prefix, "--local", local, "--job", "t"]
    if remote:
        args += ["--remote", remote]
    if mpi:
        args += ["--mpi", mpi]
    args += [*extra, "--", *cmd]
    r = sh(args, env=env, check=False)
    if check_rc and r.returncode != 0:
        raise Failed(f"paralog run exited {r.returncode}: {(r.stderr or r.stdout).strip()[-800:]}")
    return r


# --- programs ---------------------------------------------------------------

# Where a case drains to: the prefix itself (the embedded default), a
# separate POSIX directory, or the versioned object layout.
KINDS = ("prefix", "remote", "objstore")


def program_case(mode, name, prog, extra, work, kind):
    flavour, io = cap.MODES[mode]
    args = extra.get(mode, [])
    direct, prefix, local, remote = work / "direct", work / "pfs", work / "local", work / "remote"
    prefix.mkdir(parents=True)
    remote.mkdir()
    sh([cap.RUN_DIRECT, flavour, io, prog, direct, *args])
    url = {"prefix": None, "remote": str(remote), "objstore": f"objstore://{remote}?dirs=3&keep=2"}[kind]
    paralog_run(local, prefix, [cap.RUN_DIRECT, flavour, io, prog, prefix, *args], remote=url, mpi=flavour)
    files = cap.outputs(direct)
    check(files, "the direct run wrote no file")
    for rel in files:
        if kind == "objstore":
            got = work / "got"
            r = sh([BIN, "get", f"objstore://{remote}/{rel}", got], check=False)
            check(r.returncode == 0, f"{rel}: paralog get failed: {r.stderr.strip()}")
        else:
            got = (prefix if kind == "prefix" else remote) / rel
            check(got.exists(), f"{rel}: not in the remote")
        check(same(direct / rel, got), f"{rel}: remote differs from direct MPI-IO: {first_difference(direct / rel, got)}")
    if kind != "prefix":
        extra_files = sorted(str(p.relative_to(prefix)) for p in prefix.rglob("*") if p.is_file())
        check(not extra_files, f"with a separate remote, files appeared in the prefix: {extra_files[:5]}")
    left = jobs_left(local)
    check(not left, f"node-local data left after a complete drain: {left}")
    return f"{len(files)} file(s) drained to {kind} equal direct MPI-IO"


PROGRAM_CASES = [c for c in cap.CASES if c[1] != "outside_prefix"]


# --- POSIX cases -------------------------------------------------------------

def expected_file(work, epochs, per_epoch, upto=None):
    out = work / f"expected-{upto or 'last'}"
    sh([PY, WRITER, "expected", out, str(epochs), str(per_epoch), *([str(upto)] if upto else [])])
    return out


def case_readback(work):
    prefix, local = work / "pfs", work / "local"
    prefix.mkdir(parents=True)
    epochs, per = 12, 3 << 20
    r = paralog_run(local, prefix, [PY, WRITER, "write", prefix / "ckpt.bin", str(epochs), str(per), "--readback"], mpi="none")
    check("committed 12" in r.stdout, f"the program did not finish: {r.stdout[-300:]}")
    want = expected_file(work, epochs, per)
    check(same(want, prefix / "ckpt.bin"), f"drained file differs: {first_difference(want, prefix / 'ckpt.bin')}")
    return f"{epochs} epochs read back right after each close while draining"


def capture_only(work, prefix, local, cmd):
    """Run a program with capture on and no server (a crashed or absent one)."""
    r = sh([BIN, "env", "--mpi", "mpich", "--prefix", prefix, "--local", local, "--job", "t"])
    env = dict(os.environ)
    for line in r.stdout.splitlines():
        k, _, v = line.removeprefix("export ").partition("=")
        env[k] = v.strip("'")
    sh(cmd, env=env)


def start_server(local, remote, *extra):
    logf = open(Path(local) / ".paralog-test-server.log", "ab")
    p = subprocess.Popen([BIN, "server", "--local", local, "--remote", remote, *extra],
                         stdout=subprocess.DEVNULL, stderr=logf)
    sock = Path(local) / ".paralog-server.sock"
    for _ in range(500):
        if sock.exists() and status(local) is not None:
            return p
        if p.poll() is not None:
            raise Failed(f"server exited {p.returncode}: {(Path(local) / '.paralog-test-server.log').read_text()[-500:]}")
        time.sleep(0.02)
    p.kill()
    raise Failed("server did not come up")


def status(local, job=None):
    args = [BIN, "status", "--local", local, "--json"] + (["--job", job] if job else [])
    r = subprocess.run(args, text=True, capture_output=True)
    return json.loads(r.stdout) if r.returncode == 0 else None


def drain_and_stop(local):
    """Ask the server to drain everything, then stop; return the status."""
    import socket as so
    s = so.socket(so.AF_UNIX)
    s.connect(str(Path(local) / ".paralog-server.sock"))
    s.sendall(b'{"cmd":"drain","timeout_s":60}\n')
    st = json.loads(s.makefile().readline())
    s.close()
    s = so.socket(so.AF_UNIX)
    s.connect(str(Path(local) / ".paralog-server.sock"))
    s.sendall(b'{"cmd":"stop"}\n')
    s.makefile().readline()
    s.close()
    return st


def case_restart(work):
    prefix, local, remote = work / "pfs", work / "local", work / "remote"
    prefix.mkdir(parents=True)
    remote.mkdir()
    epochs, per = 6, 1 << 20
    capture_only(work, prefix, local, [PY, WRITER, "write", prefix / "a.bin", str(epochs), str(per)])
    check(not (remote / "a.bin").exists(), "remote written with no server")
    p = start_server(local, remote)
    st = drain_and_stop(local)
    p.wait(timeout=30)
    check(st["epochs_drained"] == epochs, f"drained {st['epochs_drained']} epochs, want {epochs}")
    want = expected_file(work, epochs, per)
    check(same(want, remote / "a.bin"), f"remote differs: {first_difference(want, remote / 'a.bin')}")
    leftovers = [str(p) for p in Path(local).rglob("e*.*")]
    check(not leftovers, f"local epoch files left after the drain: {leftovers[:3]}")
    return f"{epochs} epochs found by the start-up scan and drained"


def case_damaged(work):
    prefix, local, remote = work / "pfs", work / "local", work / "remote"
    prefix.mkdir(parents=True)
    remote.mkdir()
    epochs, per = 4, 256 << 10
    capture_only(work, prefix, local, [PY, WRITER, "write", prefix / "d.bin", str(epochs), str(per)])
    # A POSIX writer's k-th commit is generation k of the file, one epoch
    # each (docs/capture.md, several processes on one file).
    data = sorted(Path(local).rglob("g000002/*/e0000000001.data"))
    check(len(data) == 1, f"expected one data log of epoch 2, found {data}")
    raw = bytearray(data[0].read_bytes())
    pos = len(raw) - 100
    raw[pos] ^= 0x40
    data[0].write_bytes(raw)
    p = start_server(local, remote)
    st = drain_and_stop(local)
    p.wait(timeout=30)
    f = st["files"][0]
    check(f["state"] == "damaged", f"state {f['state']}, want damaged")
    msg = f["message"] or ""
    check("g000002/r0000000/e0000000001.data" in msg and "offset" in msg, f"the error does not name the data log and offset: {msg}")
    check(f["epochs_drained"] == 1, f"drained {f['epochs_drained']} epochs, want 1 (the one before the damage)")
    want = expected_file(work, epochs, per, 1)
    check(same(want, remote / "d.bin"), f"remote is not the file at epoch 1: {first_difference(want, remote / 'd.bin')}")
    for e in (2, 3, 4):
        check(list(Path(local).rglob(f"g{e:06d}/*/e0000000001.manifest")), f"epoch {e} was deleted locally")
    r = sh([BIN, "recover", "--local", local, "--remote", remote], check=False)
    check(r.returncode != 0 and "refusing" in r.stdout + r.stderr, f"recover did not refuse the damaged epoch: {r.stdout}{r.stderr}")
    check(same(want, remote / "d.bin"), "recover changed the remote past the damage")
    return "damaged epoch 2 refused (named with offset), epoch 1 drained, epochs 2-4 kept"


def mount_tmpfs(path, size):
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", path], capture_output=True, text=True)
    return r.returncode == 0


def wait_state(local, pred, what, timeout=30):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = status(local, "t")
        if last and pred(last):
            return last
        time.sleep(0.1)
    raise Failed(f"timed out waiting for {what}; last status: {json.dumps(last)[:600] if last else None}")


def case_remote(work):
    prefix, local, remote = work / "pfs", work / "local", work / "remote"
    prefix.mkdir(parents=True)
    if not mount_tmpfs(remote, "1m"):
        return "SKIP: cannot mount a tmpfs here (needs root)"
    try:
        epochs, per = 4, 1 << 20
        args = [BIN, "run", "--prefix", prefix, "--local", local, "--job", "t", "--remote", remote,
                "--mpi", "none", "--wait-timeout", "120", "--",
                PY, WRITER, "write", prefix / "r.bin", str(epochs), str(per)]
        run = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def retrying(why):
            return lambda st: any(f["state"] == "retrying" and why in (f["message"] or "") for f in st["files"])

        st = wait_state(local, retrying("No space left"), "the full remote to show as retrying")
        check(list(Path(local).rglob("*.manifest")), "local epochs gone while the remote is full")
        # Read-only next: a different failure, same promise.
        subprocess.run(["mount", "-o", "remount,ro", remote], check=True)
        wait_state(local, retrying("Read-only"), "the read-only remote to show as retrying")
        subprocess.run(["mount", "-o", "remount,rw,size=64m", remote], check=True)
        out, err = run.communicate(timeout=180)
        check(run.returncode == 0, f"paralog run exited {run.returncode} after the remote came back: {err[-600:]}")
        want = expected_file(work, epochs, per)
        check(same(want, remote / "r.bin"), f"remote differs: {first_difference(want, remote / 'r.bin')}")
        return "full, then read-only remote: retried, shown in status, drained once back"
    finally:
        subprocess.run(["umount", "-l", remote], capture_output=True)


def case_recover(work):
    prefix, local, remote = work / "pfs", work / "local", work / "remote"
    prefix.mkdir(parents=True)
    remote.mkdir()
    epochs, per = 5, 512 << 10
    capture_only(work, prefix, local, [PY, WRITER, "write", prefix / "c.bin", str(epochs), str(per)])
    r = sh([BIN, "recover", "--local", local, "--remote", remote, "--json"])
    out = json.loads(r.stdout)
    check(out["files"][0]["drained_epochs"] == epochs, f"recover drained {out['files'][0]['drained_epochs']} epochs")
    want = expected_file(work, epochs, per)
    check(same(want, remote / "c.bin"), f"remote differs: {first_difference(want, remote / 'c.bin')}")
    before = (remote / "c.bin").stat()
    r = sh([BIN, "recover", "--local", local, "--remote", remote, "--json"])
    out = json.loads(r.stdout)
    check(out["files"][0]["drained_epochs"] == 0, "a second recover drained again")
    after = (remote / "c.bin").stat()
    check((before.st_mtime_ns, before.st_size) == (after.st_mtime_ns, after.st_size), "a second recover touched the remote")
    return f"{epochs} epochs recovered; second run changed nothing"


POSIX_CASES = [
    ("readback", case_readback),
    ("restart", case_restart),
    ("damaged", case_damaged),
    ("remote", case_remote),
    ("recover", case_recover),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", help="run cases whose name contains this")
    ap.add_argument("--mode", choices=list(cap.MODES), action="append")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    sh(["make", "-s", "-C", ROOT / "tests/mpi", f"OUT={cap.OUT}"], capture=False)
    base = Path(tempfile.mkdtemp(prefix="paralog-server-"))
    passed = failed = 0

    def one(label, fn, work):
        nonlocal passed, failed
        work.mkdir(parents=True)
        try:
            msg = fn(work)
            passed += 1
            print(f"PASS {label}: {msg}", flush=True)
            if not a.keep:
                shutil.rmtree(work, ignore_errors=True)
        except (Failed, RuntimeError, subprocess.SubprocessError, OSError, KeyError, IndexError) as e:
            failed += 1
            print(f"FAIL {label}: {e}  [kept in {work}]", flush=True)

    for name, fn in POSIX_CASES:
        if a.only and a.only not in name:
            continue
        one(f"posix     {name}", fn, base / "posix" / name)
    modes = list(cap.MODES)
    for mode in a.mode or modes:
        for ci, (name, prog, extra, prog_modes) in enumerate(PROGRAM_CASES):
            if mode not in prog_modes or (a.only and a.only not in name):
                continue
            # A program that runs in every mode meets every kind of remote;
            # one that runs only on Open MPI meets the object layout on OMPIO.
            kind = KINDS[(modes.index(mode) + ci) % len(KINDS)]
            if len(prog_modes) < len(KINDS) and mode == "ompio":
                kind = "objstore"
            slug = name.replace(" ", "_").replace("/", "_")
            one(f"{mode:9} {name}", lambda w, m=mode, n=name, p=prog, x=extra, k=kind: program_case(m, n, p, x, w, k),
                base / mode / slug)
    if not a.keep and failed == 0:
        shutil.rmtree(base, ignore_errors=True)
    print(f"server: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
