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
             earlier epochs are drained, status says DAMAGED and exits 2,
             as a table and with --json alike (before, --json exited 0)
  remote     the remote fails (full, then read-only: a real tmpfs mount) while
             the program runs: the server retries, status shows why, local
             data is kept, and the drain completes once the remote is back
  recover    `paralog recover` of a log no server drained equals the last
             committed epoch, and a second run changes nothing

Usage: python3 -m tests.server.e2e [--only NAME] [--mode MODE] [--keep]
Prints one line per case and ends with "server: N passed, N failed".
"""

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.lib.check import Failed, Suite, check
from tests.lib.compare import files, same_bytes
from tests.lib.mpi import MODES, PROGRAMS, build_tests, mode_options, run_direct
from tests.lib.paralog import jobs_left, paralog_run, run_captured, status
from tests.lib.paths import BIN, POSIX_WRITER, PY, RUN_DIRECT
from tests.lib.proc import kill_tree, run
from tests.lib.server import Server

WRITER = POSIX_WRITER
NAMES = ("direct", "remote")


# --- programs ---------------------------------------------------------------

# Where a case drains to: the prefix itself (the embedded default), a
# separate POSIX directory, or the versioned object layout.
KINDS = ("prefix", "remote", "objstore")


def program_case(mode, prog, extra, work, kind):
    flavour, io = MODES[mode]
    args = extra.get(mode, [])
    direct, prefix, local, remote = work / "direct", work / "pfs", work / "local", work / "remote"
    prefix.mkdir(parents=True)
    remote.mkdir()
    run_direct(flavour, io, prog, direct, *args)
    url = {"prefix": None, "remote": str(remote), "objstore": f"objstore://{remote}?dirs=3&keep=2"}[kind]
    paralog_run(local, prefix, [RUN_DIRECT, flavour, io, prog, prefix, *args], remote=url, mpi=flavour)
    outputs = files(direct, snapshots=False)
    check(outputs, "the direct run wrote no file")
    for rel in outputs:
        if kind == "objstore":
            got = work / "got"
            r = run([BIN, "get", f"objstore://{remote}/{rel}", got], check=False)
            check(r.returncode == 0, f"{rel}: paralog get failed: {r.stderr.strip()}")
        else:
            got = (prefix if kind == "prefix" else remote) / rel
            check(got.exists(), f"{rel}: not in the remote")
        same_bytes(direct / rel, got, f"{rel}: remote differs from direct MPI-IO", NAMES)
    if kind != "prefix":
        extra_files = sorted(str(p.relative_to(prefix)) for p in prefix.rglob("*") if p.is_file())
        check(not extra_files, f"with a separate remote, files appeared in the prefix: {extra_files[:5]}")
    left = jobs_left(local)
    check(not left, f"node-local data left after a complete drain: {left}")
    return f"{len(outputs)} file(s) drained to {kind} equal direct MPI-IO"


PROGRAM_CASES = [c for c in PROGRAMS if c[1] != "outside_prefix"]


# --- POSIX cases -------------------------------------------------------------

def expected_file(work, epochs, per_epoch, upto=None):
    out = work / f"expected-{upto or 'last'}"
    run([PY, WRITER, "expected", out, str(epochs), str(per_epoch), *([str(upto)] if upto else [])])
    return out


def case_readback(work):
    prefix, local = work / "pfs", work / "local"
    prefix.mkdir(parents=True)
    epochs, per = 12, 3 << 20
    r = paralog_run(local, prefix, [PY, WRITER, "write", prefix / "ckpt.bin", str(epochs), str(per), "--readback"], mpi="none")
    check("committed 12" in r.stdout, f"the program did not finish: {r.stdout[-300:]}")
    want = expected_file(work, epochs, per)
    same_bytes(want, prefix / "ckpt.bin", "drained file differs")
    return f"{epochs} epochs read back right after each close while draining"


def drain_once(work, local, remote):
    """A server of our own started on the log: drain everything, stop; the
    drain's status."""
    srv = Server(local, remote, None, log=work / "server.log")
    try:
        return srv.drain_and_stop(timeout_s=60)
    finally:
        srv.kill()


def captured(work, name, epochs, per):
    """The POSIX writer's epochs of prefix/name captured with no server
    running; (local, remote), the remote an empty directory."""
    prefix, local, remote = work / "pfs", work / "local", work / "remote"
    prefix.mkdir(parents=True)
    remote.mkdir()
    run_captured([PY, WRITER, "write", prefix / name, str(epochs), str(per)], prefix, local)
    return local, remote


def case_restart(work):
    epochs, per = 6, 1 << 20
    local, remote = captured(work, "a.bin", epochs, per)
    check(not (remote / "a.bin").exists(), "remote written with no server")
    st = drain_once(work, local, remote)
    check(st["epochs_drained"] == epochs, f"drained {st['epochs_drained']} epochs, want {epochs}")
    want = expected_file(work, epochs, per)
    same_bytes(want, remote / "a.bin", "remote differs")
    leftovers = [str(p) for p in Path(local).rglob("e*.*")]
    check(not leftovers, f"local epoch files left after the drain: {leftovers[:3]}")
    return f"{epochs} epochs found by the start-up scan and drained"


def case_damaged(work):
    epochs, per = 4, 256 << 10
    local, remote = captured(work, "d.bin", epochs, per)
    # A POSIX writer's k-th commit is generation k of the file, one epoch
    # each (docs/capture.md, several processes on one file).
    data = sorted(Path(local).rglob("g000002/*/e0000000001.data"))
    check(len(data) == 1, f"expected one data log of epoch 2, found {data}")
    raw = bytearray(data[0].read_bytes())
    # Format 2: the data ends where the commit record begins (the trailer,
    # the log's last 32 bytes, says where): damage the data, not the record.
    data_end = int.from_bytes(raw[-16:-8], "little")
    pos = data_end - 100
    raw[pos] ^= 0x40
    data[0].write_bytes(raw)
    srv = Server(local, remote, None, log=work / "server.log")
    try:
        st = srv.ask({"cmd": "drain", "timeout_s": 60}, timeout=90)
        # Both forms of `paralog status` exit 2: a file will not be drained.
        at = ["--local", local, "--job", srv.job, "--once"]
        table = run([BIN, "status", *at], check=False)
        js = run([BIN, "status", *at, "--json"], check=False)
        check(table.returncode == 2 and "DAMAGED" in table.stdout,
              f"status (table) exited {table.returncode}, not 2: {table.stdout[-400:]}{table.stderr[-300:]}")
        check(js.returncode == 2 and json.loads(js.stdout)["damaged"] == 1,
              f"status --json exited {js.returncode}, not 2: {js.stdout[-400:]}{js.stderr[-300:]}")
        srv.ask({"cmd": "stop"})
        srv.p.wait(timeout=60)
    finally:
        srv.kill()
    f = st["files"][0]
    check(f["state"] == "damaged", f"state {f['state']}, want damaged")
    msg = f["message"] or ""
    check("g000002/r0000000/e0000000001.data" in msg and "offset" in msg, f"the error does not name the data log and offset: {msg}")
    check(f["epochs_drained"] == 1, f"drained {f['epochs_drained']} epochs, want 1 (the one before the damage)")
    want = expected_file(work, epochs, per, 1)
    same_bytes(want, remote / "d.bin", "remote is not the file at epoch 1")
    for e in (2, 3, 4):
        check(list(Path(local).rglob(f"g{e:06d}/*/e0000000001.data")), f"epoch {e} was deleted locally")
    r = run([BIN, "recover", "--local", local, "--remote", remote], check=False)
    check(r.returncode != 0 and "refusing" in r.stdout + r.stderr, f"recover did not refuse the damaged epoch: {r.stdout}{r.stderr}")
    check(want.read_bytes() == (remote / "d.bin").read_bytes(), "recover changed the remote past the damage")
    return ("damaged epoch 2 refused (named with offset), epoch 1 drained, epochs 2-4 kept; "
            "status exits 2 as a table and with --json")


def mount_tmpfs(path, size):
    path.mkdir(parents=True, exist_ok=True)
    return run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", path], check=False).returncode == 0


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
    proc = None
    try:
        epochs, per = 4, 1 << 20
        args = [BIN, "run", "--prefix", prefix, "--local", local, "--job", "t", "--remote", remote,
                "--mpi", "none", "--wait-timeout", "120", "--",
                PY, WRITER, "write", prefix / "r.bin", str(epochs), str(per)]
        proc = subprocess.Popen([str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)

        def retrying(why):
            return lambda st: any(f["state"] == "retrying" and why in (f["message"] or "") for f in st["files"])

        wait_state(local, retrying("No space left"), "the full remote to show as retrying")
        check(list(Path(local).rglob("*.data")), "local epochs gone while the remote is full")
        # Read-only next: a different failure, same promise.
        run(["mount", "-o", "remount,ro", remote])
        wait_state(local, retrying("Read-only"), "the read-only remote to show as retrying")
        run(["mount", "-o", "remount,rw,size=64m", remote])
        out, err = proc.communicate(timeout=180)
        check(proc.returncode == 0, f"paralog run exited {proc.returncode} after the remote came back: {err[-600:]}")
        want = expected_file(work, epochs, per)
        same_bytes(want, remote / "r.bin", "remote differs")
        return "full, then read-only remote: retried, shown in status, drained once back"
    finally:
        kill_tree(proc)
        run(["umount", "-l", remote], check=False)


def case_recover(work):
    epochs, per = 5, 512 << 10
    local, remote = captured(work, "c.bin", epochs, per)
    r = run([BIN, "recover", "--local", local, "--remote", remote, "--json"])
    out = json.loads(r.stdout)
    check(out["files"][0]["drained_epochs"] == epochs, f"recover drained {out['files'][0]['drained_epochs']} epochs")
    want = expected_file(work, epochs, per)
    same_bytes(want, remote / "c.bin", "remote differs")
    before = (remote / "c.bin").stat()
    r = run([BIN, "recover", "--local", local, "--remote", remote, "--json"])
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
    a = mode_options()
    build_tests()
    suite = Suite("server", keep=a.keep)
    for name, fn in POSIX_CASES:
        if a.only and a.only not in name:
            continue
        suite.case(f"posix     {name}", fn)
    modes = list(MODES)
    for mode in a.modes:
        for ci, (name, prog, extra, prog_modes) in enumerate(PROGRAM_CASES):
            if mode not in prog_modes or (a.only and a.only not in name):
                continue
            # A program that runs in every mode meets every kind of remote;
            # one that runs only on Open MPI meets the object layout on OMPIO.
            kind = KINDS[(modes.index(mode) + ci) % len(KINDS)]
            if len(prog_modes) < len(KINDS) and mode == "ompio":
                kind = "objstore"
            suite.case(f"{mode:9} {name}", lambda w, m=mode, p=prog, x=extra, k=kind: program_case(m, p, x, w, k))
    return suite.finish()


if __name__ == "__main__":
    sys.exit(main())
