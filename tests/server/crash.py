#!/usr/bin/python3
"""Crash tests: kill -9 the program, the server and recover at random moments.

A real MPI program (tests/mpi/src/epochs.c: 4 ranks, 8 epochs of
noncontiguous overwrites with set_size shrinks and growths, about 2 MiB per
epoch) runs under `paralog run` with a separate remote directory. Each trial
injects a random fault:

  program    SIGKILL of one rank: half the time sent by the rank itself
             with a POSIX timer armed as it enters a consistency point
             (epochs --kill-in-sync=E:R:USEC, 0-20 ms: usually inside
             MPI_File_sync / MPI_File_close, i.e. in the fdatasync, the
             manifest or the agreement; a kill from outside rarely lands in
             those few ms on a busy machine), otherwise kill -9 from here
             of one rank or of the launcher at a random time, a few ms
             after rank 0 entered a consistency point, or after one
             returned;
  failpoint  PARALOG_FAILPOINT=NAME:N in the server (drain.mid_write,
             before_fsync, after_fsync, after_progress, mid_delete);
  server     kill -9 of the server pid at a random time or a few ms after an
             epoch committed;
  both       a program kill and a server fault;
and, in some trials, a failpoint in the first `paralog recover` as well.
Drain speed (--max-rate), buffer size and compute time between epochs are
random too, so the kills land at varied places.

The reference is one direct run (no paralog) per MPI mode with --snapshot:
snapshot k is the file after consistency point k (k = 0: no file).

Checked in every trial:
  live   while the trial runs, the remote file is sampled: every 8-byte word
         is a word of snapshot j for p1 <= j <= p2 + 1 (p1, p2: the progress
         record read before and after the sample), or zero; an exact match
         must be at a committed epoch, and the epochs seen in order (c).
  (a)    once every process of the trial is gone (no drain runs), the remote
         equals snapshot k, byte for byte, with p <= k <= p+1 <= K (p: the
         progress record, K: the last globally committed epoch). Only after
         a crash of the server in the middle of an epoch may it instead be
         a mix of epochs p and p+1 (docs/server.md: the drain of that epoch
         is still in progress until recover finishes it).
  (c)    no word of an epoch after K (or of the junk a rank overwrites within
         an epoch) is ever in the remote: covered by the word check.
  (K)    printed <= K <= printed + 1, K <= the last consistency point rank 0
         entered (printed: the last "committed N" rank 0 wrote after
         MPI_File_sync/close returned: the program was told N committed).
  (d)    every committed epoch after the progress record still has every
         rank's data log and manifest; the progress record never passes K;
         records of drained epochs are left behind only by a server crash
         (or are a slow rank's lone commit mark).
  (b)    `paralog recover` succeeds and the remote equals snapshot K; the
         progress record says K; no committed epoch is left locally; the
         uncommitted records are untouched. A second recover drains nothing
         and changes nothing (remote bytes, mtime, the local tree). Then
         `recover --gc` removes the uncommitted records and changes nothing
         remote.
  (run)  `paralog run` exits 0 only if the program completed and the remote
         holds the last epoch; 3 only after a server crash; a killed program
         never yields 0 unless it had completed; without a server crash,
         run returns only when everything committed is drained (remote ==
         snapshot K).

Usage: python3 -m tests.server.crash [--trials N] [--seed S] [--trial I]
                                     [--mpi mpich|ompio|romio321|openmpi|all] [--keep]
Prints one line per trial and ends with "crash: N passed, N failed".
A failure prints the command that replays it (--seed S --trial I).
"""

import argparse
import json
import math
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

from tests.lib.check import Failed, Suite
from tests.lib.mpi import MODES, MPI_TESTS, build_tests, launcher, mpi_env, run_direct
from tests.lib.paralog import inspect as inspect_all
from tests.lib.paths import BIN
from tests.lib.proc import run
from tests.lib.server import Server

NP = 4
EPOCHS = 8
KIB = 512  # per rank and epoch
FILE = "epochs.dat"
TOKEN_VAR = "CRASHTEST_TOKEN"  # marks every process of a trial (not a PARALOG_* name)
POINTS = ["drain.mid_write", "drain.before_fsync", "drain.after_fsync", "drain.after_progress", "drain.mid_delete"]
TRIAL_DEADLINE = 90.0  # seconds for the program and run's drain together
WORD = 8
CHUNK = 4000  # the program's block size: compare block-wise first, then by word
REPLAY = "python3 -m tests.server.crash"


# --------------------------------------------------------------------------
# small helpers


def clean_env(extra=None):
    return mpi_env(extra, drop=("PARALOG_",))


def read_or_none(p):
    try:
        return Path(p).read_bytes()
    except FileNotFoundError:
        return None


def splitmix64(x):
    m = (1 << 64) - 1
    x = (x + 0x9E3779B97F4A7C15) & m
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
    return x ^ (x >> 31)


def word_origin(off, word):
    """Which epoch of epochs.c wrote this 8-byte word at this offset (for messages)."""
    v = struct.unpack("<Q", word)[0]
    w = off // WORD
    for e in range(1, EPOCHS + 1):
        for tag, what in ((0, "data"), (1, "junk overwritten within the epoch")):
            if splitmix64((e << 40) ^ (tag << 60) ^ w) == v:
                return f"{what} of epoch {e}"
    return "not written by any epoch at this offset"


# --------------------------------------------------------------------------
# the remote file against the snapshots


class Snaps:
    def __init__(self, snaps):
        self.s = snaps  # index k: bytes of the file after consistency point k; [0] is None (no file)

    def exact(self, data):
        """The epochs k whose snapshot equals data (None: no file)."""
        return [k for k, s in enumerate(self.s) if s == data]

    def mix(self, data, lo, hi):
        """None if every word of data is a word of snapshot lo..hi at its
        offset, or zero, and the size fits; else what is wrong."""
        if data is None:
            return None
        allowed = [self.s[k] or b"" for k in range(max(lo, 0), min(hi, EPOCHS) + 1)]
        limit = max(len(s) for s in allowed)
        if len(data) > limit:
            return f"size {len(data)} is larger than any of epochs {lo}..{hi} ({limit})"
        zero = bytes(CHUNK)
        for off in range(0, len(data), CHUNK):
            chunk = data[off:off + CHUNK]
            if chunk == zero[:len(chunk)] or any(s[off:off + CHUNK] == chunk for s in allowed):
                continue
            for w in range(off, off + len(chunk), WORD):
                word = data[w:w + WORD]
                if word.count(0) == len(word) or any(s[w:w + WORD] == word for s in allowed):
                    continue
                # A drain buffer that is not a multiple of 8 bytes may stop
                # inside a word: then every byte must be explained.
                for i in range(w, w + len(word)):
                    if data[i] != 0 and not any(s[i:i + 1] == data[i:i + 1] for s in allowed):
                        return (f"byte {i} is none of epochs {lo}..{hi} nor zero: the word at {w}, "
                                f"{word.hex()}, is {word_origin(w, word)}")
        return None

    def describe(self, data):
        if data is None:
            return "no file"
        ks = self.exact(data)
        return f"epoch {ks[0]}" if ks else f"{len(data)} bytes equal to no epoch"


# --------------------------------------------------------------------------
# the node-local log


def job_dir(local, job):
    return Path(local) / job


def read_progress(local, job):
    """The drained epoch from the progress record: 0 if none yet, None if the
    job directory is gone (paralog run removes it after a complete drain)."""
    jd = job_dir(local, job)
    files = sorted(jd.glob("f-*"))
    if not jd.is_dir():
        return None
    if not files:
        return 0
    b = read_or_none(files[0] / "progress")
    if b is None:
        return None if not files[0].is_dir() else 0
    if len(b) != 48 or b[:8] != b"PLGPROGR":
        raise Failed(f"unreadable progress record {files[0] / 'progress'}: {b[:16]!r}")
    gen, ep = struct.unpack_from("<QQ", b, 24)
    if gen != 1:
        raise Failed(f"progress record names open {gen}; the program opens once")
    return ep


def inspect(local, job):
    """inspect --json's entry for the program's file: None if the job is gone."""
    for j in inspect_all(local)["jobs"]:
        if j["name"] != job:
            continue
        files = j["files"]
        if len(files) != 1:
            raise Failed(f"inspect lists {len(files)} files, want 1: {[f.get('path') for f in files]}")
        return files[0]
    return None


def parse_id(s):
    if not s:
        return 0
    g, e = s.split(":")
    if int(g) != 1:
        raise Failed(f"epoch id {s}: the program opens once")
    return int(e)


def local_state(info):
    """(p, K, {epoch: {rank: (manifest, data_bytes, mark)}}, committed set) from inspect."""
    p = parse_id(info["drained_up_to"])
    epochs, committed = {}, set()
    for e in info["epochs"]:
        if e["open"] != 1:
            raise Failed(f"inspect lists open {e['open']}; the program opens once")
        epochs[e["epoch"]] = {r["rank"]: (r["manifest"], r["data_bytes"], r["mark"]) for r in e["ranks"]}
        if e["committed"]:
            committed.add(e["epoch"])
    k = max([p, *committed])
    return p, k, epochs, committed


def tree(path):
    """Every file under path with size and mtime (to see that nothing changed)."""
    out = {}
    for dirpath, dirs, files in os.walk(path):
        for n in files + dirs:
            q = Path(dirpath) / n
            try:
                st = q.lstat()
            except FileNotFoundError:
                continue
            out[str(q.relative_to(path))] = (st.st_size if n in files else -1, st.st_mtime_ns)
    return out


# --------------------------------------------------------------------------
# processes of a trial


class Proc:
    def __init__(self, pid, ppid, cmd, env):
        self.pid, self.ppid, self.cmd, self.env = pid, ppid, cmd, env

    @property
    def is_server(self):
        return len(self.cmd) > 1 and self.cmd[0].endswith(b"paralog") and self.cmd[1] == b"server"

    @property
    def rank(self):
        if os.path.basename(self.cmd[0]) != b"epochs":
            return None
        for var in (b"PMI_RANK", b"OMPI_COMM_WORLD_RANK"):
            if var in self.env:
                return int(self.env[var])
        return None


def scan(token):
    """Live (non-zombie) processes whose environment holds the trial's token."""
    tok = f"{TOKEN_VAR}={token}".encode()
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                items = f.read().split(b"\0")
            if tok not in items:
                continue
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if fields[0] in ("Z", "X"):
            continue
        env = dict(x.split(b"=", 1) for x in items if b"=" in x)
        found.append(Proc(int(d), int(fields[1]), cmd, env))
    return found


def kill_all(token):
    """SIGKILL every process of the trial until none is left; how many."""
    n = 0
    for _ in range(100):
        ps = scan(token)
        if not ps:
            return n
        for p in ps:
            try:
                os.kill(p.pid, signal.SIGKILL)
                n += 1
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    raise Failed(f"processes of trial token {token} survive SIGKILL")


# --------------------------------------------------------------------------
# a trial's plan


def log_uniform(rng, hi):
    return max(1, int(math.exp(rng.uniform(0, math.log(hi + 1)))))


def plan_trial(rng, mode):
    t = {
        "mode": mode,
        "sleep_ms": rng.choice([0, 10, 30, 60]),
        "max_rate": rng.choice([None, None, "64M", "24M", "10M"]),
        # 5000 bytes: the drain's chunks end inside extents and inside words.
        "buffer": rng.choice(["8M", "1M", "64K", "5000"]),
        "program_kill": None,  # (target, trigger)
        "server_kill": None,  # trigger
        "failpoint": None,  # "NAME:N"
        "recover_failpoint": None,
    }
    kind = rng.choices(["program", "failpoint", "server", "both"], [3, 3, 2, 2])[0]
    t["kind"] = kind
    # A rough idea of how long the program and the drain take.
    prog_s = 0.4 + EPOCHS * (0.05 + t["sleep_ms"] / 1000)
    rate = {None: 400, "64M": 64, "24M": 24, "10M": 10}[t["max_rate"]]
    drain_s = EPOCHS * NP * KIB / 1024 * 1.4 / rate

    def program_trigger():
        r = rng.random()
        if r < 0.15:  # just after rank 0 entered a consistency point
            return ("syncing", rng.randint(1, EPOCHS), rng.uniform(0, 0.01))
        if r < 0.55:
            return ("committed", rng.randint(1, EPOCHS - 1), rng.uniform(0, 0.02 + t["sleep_ms"] / 1000))
        return ("time", rng.uniform(0.3, prog_s))

    def failpoint():
        point = rng.choice(POINTS)
        if point == "drain.mid_write":
            n = log_uniform(rng, {"8M": 1200, "1M": 1500, "64K": 1500, "5000": 3000}[t["buffer"]])
        elif point == "drain.mid_delete":
            n = rng.randint(1, NP * EPOCHS)
        else:
            n = rng.randint(1, EPOCHS)
        t["failpoint"] = f"{point}:{n}"

    def server_kill():
        if rng.random() < 0.5:
            t["server_kill"] = ("committed", rng.randint(1, EPOCHS), rng.uniform(0, 0.25))
        else:
            t["server_kill"] = ("time", rng.uniform(0.3, prog_s + drain_s))

    if kind in ("program", "both"):
        if rng.random() < 0.5:
            # The rank kills itself (a POSIX timer, SIGKILL) a few ms into a
            # consistency point: precise where a kill from here is not.
            t["program_kill"] = (f"rank {rng.randrange(NP)}", ("self", rng.randint(1, EPOCHS), rng.randint(0, 20000)))
        else:
            target = rng.choice(["rank 0", "rank 1", "rank 2", "rank 3", "launcher"])
            t["program_kill"] = (target, program_trigger())
    if kind == "failpoint" or (kind == "both" and rng.random() < 0.55):
        failpoint()
    elif kind in ("server", "both"):
        server_kill()
    if rng.random() < 0.3:
        # N is scaled to what recover finds to do (recover_failpoint()).
        t["recover_failpoint"] = (rng.choice(POINTS), rng.random())
    # Resume with a new server (start-up scan) before recover.
    t["restart_server"] = rng.random() < 0.35
    return t


def recover_failpoint(spec, pending):
    """NAME:N for a recover that has `pending` epochs to drain."""
    point, u = spec
    per_epoch = {"drain.mid_write": 300, "drain.mid_delete": NP}.get(point, 1)
    return f"{point}:{1 + int(u * max(pending, 1) * per_epoch)}"


def fmt_trigger(tr):
    if tr[0] == "time":
        return f"at {tr[1]:.2f} s"
    if tr[0] == "self":
        return f"(by itself) {tr[2] / 1000:.1f} ms into consistency point {tr[1]}"
    return f"{tr[2] * 1000:.0f} ms after '{tr[0]} {tr[1]}'"


def describe_plan(t):
    parts = [t["mode"]]
    if t["program_kill"]:
        parts.append(f"kill -9 {t['program_kill'][0]} {fmt_trigger(t['program_kill'][1])}")
    if t["failpoint"]:
        parts.append(f"server failpoint {t['failpoint']}")
    if t["server_kill"]:
        parts.append(f"kill -9 server {fmt_trigger(t['server_kill'])}")
    if t["recover_failpoint"]:
        parts.append(f"recover failpoint {t['recover_failpoint'][0]}")
    if t["restart_server"]:
        parts.append("then a new server")
    parts.append(f"rate {t['max_rate'] or 'unlimited'}, buffer {t['buffer']}, compute {t['sleep_ms']} ms")
    return "; ".join(parts)


# --------------------------------------------------------------------------
# one trial


class Trial:
    def __init__(self, idx, plan, work, snaps):
        self.idx, self.plan, self.work, self.snaps = idx, plan, work, snaps
        self.local = work / "local"
        self.remote = work / "remote"
        self.prefix = work / "pfs"
        self.progfile = work / "program-progress.txt"
        self.job = f"crash{idx}"
        self.token = f"{os.getpid()}-{idx}-{random.getrandbits(48):x}"
        self.problems = []
        self.notes = []
        self.server_crashed = False  # the server died by a fault we injected
        self.program_killed = False
        self.orphans = 0
        self.samples = []  # (p1, p2, exact k or None, needs epoch p2+1)
        self.pids = {}  # role -> pid, found ahead of the kill
        self.p_seen = 0  # the largest progress record seen while sampling

    def fail(self, what):
        self.problems.append(what)

    # -- the program's own progress lines
    def program_lines(self):
        b = read_or_none(self.progfile) or b""
        out = []
        for line in b.decode(errors="replace").splitlines():
            w = line.split()
            if len(w) == 2 and w[1].isdigit():
                out.append((w[0], int(w[1])))
        return out

    def printed(self):
        return max([n for w, n in self.program_lines() if w == "committed"], default=0)

    def entered(self):
        return max([n for w, n in self.program_lines() if w == "syncing"], default=0)

    # -- faults
    def resolve(self, roles, run_pid):
        """Find the pids of the processes to kill ahead of time: a kill a
        few ms into a consistency point must not wait for a /proc scan."""
        ps = scan(self.token)
        for role in roles:
            if role in self.pids:
                continue
            if role == "server":
                cands = [p for p in ps if p.is_server]
            elif role == "launcher":
                cands = [p for p in ps if p.ppid == run_pid and not p.is_server]
            else:
                cands = [p for p in ps if p.rank == int(role.split()[1])]
            if len(cands) == 1:
                self.pids[role] = cands[0].pid

    def kill_role(self, role, run_pid):
        if role not in self.pids:
            self.resolve([role], run_pid)
        pid = self.pids.get(role)
        if pid is None:
            return False
        try:  # still ours (not a reused pid)?
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"{TOKEN_VAR}={self.token}".encode() not in f.read().split(b"\0"):
                    return False
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return False
            os.kill(pid, signal.SIGKILL)
        except (OSError, ProcessLookupError):
            return False
        return True

    def due(self, trigger, t0, seen):
        now = time.monotonic()
        if trigger[0] == "time":
            return now - t0 >= trigger[1]
        key = (trigger[0], trigger[1])
        return key in seen and now - seen[key] >= trigger[2]

    def alive(self, role):
        pid = self.pids.get(role)
        if pid is None:
            return False
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"{TOKEN_VAR}={self.token}".encode() not in f.read().split(b"\0"):
                    return False
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except OSError:
            return False

    def kill_imminent(self, pending):
        """A kill is due a few ms after a line that may come any moment: a
        sample (some ms of reading and comparing) must not delay it."""
        lines = self.program_lines()
        last = lines[-1] if lines else ("committed", 0)
        for _, _, (kind, n, *_) in pending:
            if kind == "syncing" and last in (("committed", n - 1), ("syncing", n)):
                return True
            if kind == "committed" and last in (("syncing", n), ("committed", n)):
                return True
        return False

    def sample(self):
        p1 = read_progress(self.local, self.job)
        data = read_or_none(self.remote / FILE)
        p2 = read_progress(self.local, self.job)
        # After a complete drain, paralog run removes the job's records
        # (progress record included): a missing record then means nothing.
        # It can only happen once the program has ended (the launcher is
        # gone), and after a record was seen, a smaller one is that removal.
        if p1 is None or p2 is None or min(p1, p2) < self.p_seen:
            return
        if p2 == 0 and not self.alive("launcher"):
            return
        self.p_seen = p2
        ks = [k for k in self.snaps.exact(data) if p1 <= k <= p2 + 1]
        if ks:
            self.samples.append((p1, p2, ks[0], ks[0] == p2 + 1))
            return
        if self.snaps.mix(data, p1, p2) is None:
            self.samples.append((p1, p2, None, False))
            return
        problem = self.snaps.mix(data, p1, p2 + 1)
        if problem:
            self.fail(f"(c) live sample (progress {p1}..{p2}): {problem}")
        self.samples.append((p1, p2, None, True))

    # -- the run
    def run(self):
        t = self.plan
        flavour, io = MODES[t["mode"]]
        for d in (self.prefix, self.remote):
            d.mkdir(parents=True)
        # Under nice: the ranks spin in MPI on 2 cores, and a harness that
        # waits for the CPU would land its kills late.
        cmd = ["nice", "-n", "5", BIN, "run", "--prefix", self.prefix, "--local", self.local, "--remote", self.remote,
               "--job", self.job, "--mpi", flavour, "--wait-timeout", "60", "--buffer", t["buffer"]]
        if t["max_rate"]:
            cmd += ["--max-rate", t["max_rate"]]
        cmd += ["--", *launcher(flavour, NP, io if flavour == "openmpi" else None), MPI_TESTS / flavour / "epochs", self.prefix, f"--epochs={EPOCHS}", f"--kib={KIB}",
                f"--sleep-ms={t['sleep_ms']}", f"--progress={self.progfile}"]
        self_kill = t["program_kill"] and t["program_kill"][1][0] == "self"
        if self_kill:
            role, (_, e, usec) = t["program_kill"]
            cmd.append(f"--kill-in-sync={e}:{role.split()[1]}:{usec}")
        extra = {TOKEN_VAR: self.token}
        if t["failpoint"]:
            extra["PARALOG_FAILPOINT"] = t["failpoint"]
        out = open(self.work / "run.out", "w")
        t0 = time.monotonic()
        proc = subprocess.Popen([str(c) for c in cmd], env=clean_env(extra), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        pending = []
        if t["program_kill"] and not self_kill:
            pending.append(("program", t["program_kill"][0], t["program_kill"][1]))
        if t["server_kill"]:
            pending.append(("server", "server", t["server_kill"]))
        seen = {}
        last_sample = last_scan = 0.0
        timed_out = False
        try:
            while True:
                rc = proc.poll()
                now = time.monotonic()
                for line in self.program_lines():
                    seen.setdefault(line, now)
                for action in list(pending):
                    what, role, trigger = action
                    if not self.due(trigger, t0, seen):
                        continue
                    pending.remove(action)
                    lines = self.program_lines()
                    state = f"{lines[-1][0]} {lines[-1][1]}" if lines else "before epoch 1"
                    inside = bool(lines) and lines[-1][0] == "syncing"
                    if self.kill_role(role, proc.pid):
                        if what == "program":
                            self.program_killed = True
                            self.notes.append(f"killed {role} at {now - t0:.2f} s ({state}{', inside the consistency point' if inside else ''})")
                        else:
                            self.server_crashed = True
                            self.notes.append(f"killed the server at {now - t0:.2f} s ({state})")
                    else:
                        self.notes.append(f"{role} was already gone at {now - t0:.2f} s")
                unresolved = [role for _, role, _ in pending if role not in self.pids]
                if "launcher" not in self.pids:
                    unresolved.append("launcher")  # sample() asks whether the program still runs
                if unresolved and now - last_scan > 0.1:
                    self.resolve(unresolved, proc.pid)
                    last_scan = time.monotonic()
                if now - last_sample > 0.04 and not self.kill_imminent(pending):
                    self.sample()
                    last_sample = time.monotonic()
                if rc is not None:
                    break
                if now - t0 > TRIAL_DEADLINE:
                    timed_out = True
                    break
                time.sleep(0.002)
        finally:
            if timed_out or proc.poll() is None:
                kill_all(self.token)
                proc.wait()
            out.close()
        for action in pending:
            self.notes.append(f"{action[1]} kill not reached (run ended first)")
        self.run_rc = proc.returncode
        if self_kill:
            e = t["program_kill"][1][1]
            if self.entered() >= e:
                self.program_killed = True
                where = "; rank 0 never returned from it" if self.printed() < e else ""
                self.notes.append(f"{t['program_kill'][0]} armed its kill in consistency point {e}{where}")
                if self.printed() < e:
                    self.notes[-1] += " (inside the consistency point)"
            else:
                self.notes.append(f"consistency point {e} was never reached")
        self.run_time = time.monotonic() - t0
        if timed_out:
            self.fail(f"paralog run did not finish within {TRIAL_DEADLINE:.0f} s")
        # The dust settles: every process of the trial gone. Ranks can
        # outlive run: Open MPI's ranks go on when mpirun is killed, and run
        # waits for the launcher only (then their epochs stay local).
        # Scanned for half a second at least: a process between fork and
        # exec cannot be read, and one scan missed a launcher's proxy that
        # then started every rank (seen on a machine at load 10).
        left = scan(self.token)
        seen = {p.pid for p in left}
        t_scan = time.monotonic()
        while time.monotonic() < t_scan + 10 and (left or time.monotonic() < t_scan + 0.5):
            time.sleep(0.05)
            left = scan(self.token)
            seen |= {p.pid for p in left}
        self.orphans = len(seen)
        killed = kill_all(self.token)
        if self.orphans:
            self.notes.append(f"{self.orphans} process(es) outlived paralog run"
                              f"{f', {killed} killed after 10 s' if killed else ''}")
        log = read_or_none(self.local / f".paralog-server-{self.job}.log") or b""
        if t["failpoint"] and b"failpoint reached" in log:
            self.server_crashed = True
            self.notes.append(f"failpoint {t['failpoint']} fired")
        elif t["failpoint"]:
            self.notes.append(f"failpoint {t['failpoint']} not reached")

    # -- checks once nothing runs
    def check_state(self, when, info, data, may_mix, printed, entered):
        """(a), (c), (K) and (d) on a settled state; returns K (None: unknown)."""
        E = EPOCHS
        if info is None:
            # run removed the job directory after a complete drain: the remote
            # must be the last committed epoch, which is printed or printed+1.
            ks = [k for k in self.snaps.exact(data) if printed <= k <= min(printed + 1, entered)]
            if not ks:
                self.fail(f"(a) {when}: the job's local records are gone but the remote is "
                          f"{self.snaps.describe(data)}, not the last committed epoch ({printed} or {printed + 1})")
                return None
            return ks[-1]
        p, K, epochs, committed = local_state(info)
        if info.get("problems"):
            self.fail(f"{when}: inspect reports problems: {info['problems']}")
        if info.get("progress_error"):
            self.fail(f"{when}: progress record unreadable: {info['progress_error']}")
        # (K)
        if not printed <= K <= min(printed + 1, E):
            self.fail(f"(K) {when}: last globally committed epoch {K}, but the program was told {printed} committed")
        if K > entered:
            self.fail(f"(K) {when}: epoch {K} committed but rank 0 only entered consistency point {entered}")
        if p > K:
            self.fail(f"(d) {when}: progress record {p} is past the last committed epoch {K}")
        # (a) + (c)
        ks = self.snaps.exact(data)
        good = [k for k in ks if p <= k <= min(p + 1, K)]
        if not good:
            mixed = self.snaps.mix(data, p, p + 1) if p + 1 <= K else "no committed epoch after the progress record"
            if ks:
                self.fail(f"(a) {when}: remote is epoch {ks[0]}, outside progress {p}..{min(p + 1, K)} (K={K})")
            elif not may_mix:
                self.fail(f"(a) {when}: no drain was interrupted, yet the remote is {self.snaps.describe(data)}"
                          f" (progress {p}, K={K}){': ' + mixed if mixed else ''}")
            elif mixed:
                self.fail(f"(c) {when}: remote after an interrupted drain (progress {p}, K={K}): {mixed}")
            else:
                self.notes.append(f"{when}: remote is a mix of epochs {p} and {p + 1} (drain of {p + 1} interrupted)")
        # (d)
        for e in range(p + 1, K + 1):
            ranks = epochs.get(e, {})
            for r in range(NP):
                m, data_bytes, _ = ranks.get(r, (False, None, False))
                if not m or not data_bytes:
                    self.fail(f"(d) {when}: committed epoch {e} is not drained (progress {p}) but rank {r}'s "
                              f"{'manifest' if not m else 'data log'} is gone")
        for e, ranks in epochs.items():
            if e > p:
                continue
            heavy = [r for r, (m, d, _) in ranks.items() if m or d]
            if heavy and not self.server_crashed and when == "after the run":
                self.fail(f"(d) {when}: records of drained epoch {e} (ranks {heavy}) left behind without a server crash")
        return K

    def check(self):
        t = self.plan
        E = EPOCHS
        printed, entered = self.printed(), self.entered()
        data0 = read_or_none(self.remote / FILE)
        info0 = inspect(self.local, self.job)
        K = self.check_state("after the run", info0, data0, self.server_crashed, printed, entered)
        k0 = self.snaps.exact(data0)
        # live samples: in order, only committed epochs
        last = -1
        for p1, p2, k, needs_next in self.samples:
            if K is not None and needs_next and p2 + 1 > K:
                self.fail(f"(c) live sample needed epoch {p2 + 1}, which never committed (K={K})")
            if k is not None:
                if k < last:
                    self.fail(f"live samples went back from epoch {last} to {k}")
                last = k
        # run's exit status
        rc = self.run_rc
        completed = printed == E
        if not self.program_killed and not completed and not self.problems:
            self.fail(f"the program did not complete although nobody killed it (run exit {rc}); see {self.work / 'run.out'}")
        if rc == 0:
            if not completed:
                self.fail("paralog run exited 0 but the program did not complete")
            if data0 != self.snaps.s[E]:
                self.fail(f"paralog run exited 0 but the remote is {self.snaps.describe(data0)}, not epoch {E}")
        if rc == 3 and not self.server_crashed and not self.program_killed:
            self.fail("paralog run exited 3 (drain incomplete) without a server crash")
        if self.program_killed and rc == 0 and not completed:
            self.fail("a killed program, but paralog run exited 0")
        if not self.server_crashed and not self.orphans and K is not None and K not in k0:
            self.fail(f"without a server crash, paralog run returned before the drain: remote is "
                      f"{self.snaps.describe(data0)}, last committed epoch {K}")
        if K is None:
            if not k0:
                return
            K = k0[-1]

        # recover, possibly crashing once
        uncommitted_before = None
        if info0 is not None:
            uncommitted_before = {e: r for e, r in local_state(info0)[2].items() if e > K}
        if t["recover_failpoint"] and info0 is not None:
            fp = recover_failpoint(t["recover_failpoint"], K - local_state(info0)[0])
            r = run([BIN, "recover", "--local", self.local, "--remote", self.remote, "--job", self.job, "--json"],
                   env=clean_env({"PARALOG_FAILPOINT": fp}), check=False)
            if r.returncode == -signal.SIGKILL:
                self.notes.append(f"recover died at {fp}")
                self.server_crashed = True
                self.check_state("after recover crashed", inspect(self.local, self.job),
                                 read_or_none(self.remote / FILE), True, printed, entered)
            elif r.returncode != 0:
                self.fail(f"recover (failpoint {fp} not reached) failed: {r.returncode} {r.stdout}{r.stderr}")
            else:
                self.notes.append(f"recover failpoint {fp} not reached")
        if t["restart_server"] and info0 is not None:
            self.resume_with_server(K)
        r = run([BIN, "recover", "--local", self.local, "--remote", self.remote, "--job", self.job, "--json"], check=False)
        if info0 is None and r.returncode != 0 and "no job" in (r.stderr + r.stdout):
            pass  # nothing of the job is left: nothing to recover
        elif r.returncode != 0:
            self.fail(f"(b) recover failed ({r.returncode}): {r.stdout[-800:]}{r.stderr[-800:]}")
            return
        data1 = read_or_none(self.remote / FILE)
        if data1 != self.snaps.s[K]:
            self.fail(f"(b) after recover the remote is {self.snaps.describe(data1)}, not epoch {K}")
        info1 = inspect(self.local, self.job)
        if info1 is not None:
            p1, K1, epochs1, _ = local_state(info1)
            if K1 != K:
                self.fail(f"(b) after recover the last committed epoch is {K1}, was {K}")
            if p1 != K and K > 0:
                self.fail(f"(b) after recover the progress record says {p1}, not {K}")
            left = sorted(e for e, ranks in epochs1.items() if e <= K and any(m or d for m, d, _ in ranks.values()))
            if left:
                self.fail(f"(d) after recover, records of drained epochs {left} are still there")
            unc = {e: r for e, r in epochs1.items() if e > K}
            if uncommitted_before is not None and unc != uncommitted_before:
                self.fail(f"(d) recover changed the records of uncommitted epochs: {uncommitted_before} -> {unc}")
        # a second recover changes nothing
        st1 = (self.remote / FILE).stat().st_mtime_ns if data1 is not None else None
        tree1 = tree(self.local / self.job) if (self.local / self.job).exists() else {}
        r = run([BIN, "recover", "--local", self.local, "--remote", self.remote, "--job", self.job, "--json"], check=False)
        if info1 is not None:
            if r.returncode != 0:
                self.fail(f"(b) second recover failed ({r.returncode}): {r.stdout[-800:]}{r.stderr[-800:]}")
            else:
                n = sum(f["drained_epochs"] for f in json.loads(r.stdout)["files"])
                if n:
                    self.fail(f"(b) second recover drained {n} epoch(s)")
        data2 = read_or_none(self.remote / FILE)
        st2 = (self.remote / FILE).stat().st_mtime_ns if data2 is not None else None
        tree2 = tree(self.local / self.job) if (self.local / self.job).exists() else {}
        if data2 != data1 or st2 != st1:
            self.fail("(b) the second recover changed the remote file")
        if tree2 != tree1:
            changed = sorted(set(tree1.items()) ^ set(tree2.items()))[:4]
            self.fail(f"(b) the second recover changed the node-local log: {changed}")
        # --gc removes what can never be committed and nothing else
        if info1 is not None:
            r = run([BIN, "recover", "--local", self.local, "--remote", self.remote, "--job", self.job, "--gc", "--json"],
                   check=False)
            if r.returncode != 0:
                self.fail(f"recover --gc failed ({r.returncode}): {r.stdout[-800:]}{r.stderr[-800:]}")
            info3 = inspect(self.local, self.job)
            if info3 is not None and info3["epochs"]:
                self.fail(f"recover --gc left epochs {[e['epoch'] for e in info3['epochs']]} ({info3['committed']})")
            if read_or_none(self.remote / FILE) != data1:
                self.fail("recover --gc changed the remote file")
        self.summary = (f"told {printed}, committed {K}; remote after the run: {self.snaps.describe(data0)}; "
                        f"after recover: epoch {K}; {len(self.samples)} live samples; run exit {rc}, {self.run_time:.1f} s")


    def resume_with_server(self, K):
        """A new `paralog server` finds the committed epochs by its start-up
        scan and drains them: remote == snapshot K, nothing damaged."""
        srv = None
        try:
            # Ready once it answers on its socket with its own pid (not the
            # crashed server's socket), within 20 s.
            srv = Server(self.local, self.remote, clean_env({TOKEN_VAR: self.token}), job=self.job,
                         log=self.work / "server2.log")
            st = srv.ask({"cmd": "drain", "timeout_s": 30}, 40)
            bad = [f"{f['state']}: {f['message']}" for f in st.get("files", []) if f.get("message") or f["state"] != "idle"]
            if st["damaged"] or st["retrying"] or st["epochs_pending"] or not st["idle"] or bad:
                self.fail(f"(b) the new server did not finish the drain: damaged {st['damaged']}, retrying "
                          f"{st['retrying']}, pending {st['epochs_pending']}, idle {st['idle']}: {bad}")
            try:
                srv.ask({"cmd": "stop"}, 10)
            except ValueError:
                pass  # the server may exit before its answer to stop is (fully) written
            srv.p.wait(timeout=20)
            data = read_or_none(self.remote / FILE)
            if data != self.snaps.s[K]:
                self.fail(f"(b) after the new server's drain the remote is {self.snaps.describe(data)}, not epoch {K}")
            else:
                self.notes.append(f"a new server drained to epoch {K}")
        except (Failed, OSError, ValueError, KeyError, AttributeError, subprocess.TimeoutExpired) as e:
            self.fail(f"(b) the new server: {type(e).__name__}: {e}")
        finally:
            if srv is not None:
                srv.kill()


# --------------------------------------------------------------------------


def references(modes, base):
    """Snapshots of a direct run per MPI mode (all must agree)."""
    refs = {}
    for mode in modes:
        flavour, io = MODES[mode]
        d = base / f"reference-{mode}"
        run_direct(flavour, io, "epochs", d, "--snapshot", f"--epochs={EPOCHS}", f"--kib={KIB}", env=clean_env())
        snaps = [None] + [read_or_none(d / f"{FILE}.epoch{k}") for k in range(1, EPOCHS + 1)]
        if any(s is None for s in snaps[1:]):
            raise Failed(f"direct run in {d}: missing snapshots")
        if snaps[EPOCHS] != read_or_none(d / FILE):
            raise Failed(f"direct run in {d}: the final file differs from the last snapshot")
        if len(set(snaps[1:])) != EPOCHS:
            raise Failed(f"direct run in {d}: two epochs have identical snapshots")
        refs[mode] = Snaps(snaps)
        shutil.rmtree(d)
    first = next(iter(refs.values()))
    for mode, s in refs.items():
        if s.s != first.s:
            raise Failed(f"direct runs disagree between {modes[0]} and {mode}")
    return refs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--trial", type=int, action="append", help="run only this trial (replay); repeatable")
    ap.add_argument("--mpi", default="all", help="mpich, ompio, romio321, openmpi (= ompio), all (= mpich,ompio,romio321), or a comma list; trials rotate through them (default: all)")
    ap.add_argument("--keep", action="store_true", help="keep every trial's directory (failed ones are always kept)")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1, 1 << 31)
    names = []
    for m in a.mpi.split(","):
        m = m.strip()
        names += list(MODES) if m == "all" else ["ompio"] if m == "openmpi" else [m]
    for m in names:
        if m not in MODES:
            ap.error(f"unknown MPI mode {m}")
    trials = a.trial or list(range(1, a.trials + 1))
    t_start = time.monotonic()
    print(f"crash: seed {seed}, {len(trials)} trial(s), modes {','.join(names)} "
          f"(replay one: {REPLAY} --seed {seed} --mpi {a.mpi} --trial I)", flush=True)
    build_tests(*[f"{MPI_TESTS}/{f}/epochs" for f in sorted({MODES[m][0] for m in names})])
    suite = Suite("crash", keep=a.keep)
    stats = {"mix": 0, "inside": 0, "server": 0, "recover": 0, "orphans": 0}
    current = None
    try:
        refs = references(sorted(set(names), key=names.index), suite.base)
        for i in trials:
            rng = random.Random(f"{seed}:{i}")
            mode = names[(i - 1) % len(names)]
            plan = plan_trial(rng, mode)
            work = suite.base / f"trial{i}"
            work.mkdir()
            tr = current = Trial(i, plan, work, refs[mode])
            try:
                tr.run()
                tr.check()
            except Exception as e:  # the harness's own trouble is a failure too
                tr.fail(f"{type(e).__name__}: {e}")
            finally:
                kill_all(tr.token)
            current = None
            notes = "; ".join(tr.notes)
            stats["mix"] += any("mix of epochs" in n for n in tr.notes)
            stats["inside"] += any("inside the consistency point" in n for n in tr.notes)
            stats["server"] += tr.server_crashed
            stats["recover"] += any("recover died" in n for n in tr.notes)
            stats["orphans"] += bool(tr.orphans)
            if tr.problems:
                problems = "".join(f"\n  - {p}" for p in tr.problems)
                suite.fail_case(f"trial {i}", f"{describe_plan(plan)}\n  happened: {notes}{problems}\n"
                                              f"  replay: {REPLAY} --seed {seed} --mpi {a.mpi} --trial {i}", work)
            else:
                suite.pass_case(f"trial {i}", f"{describe_plan(plan)}\n  happened: {notes or 'no fault landed'}; "
                                              f"{tr.summary}", work)
    finally:
        if current is not None:
            kill_all(current.token)
    print(f"crash: {stats['inside']} program kills inside a consistency point, {stats['server']} server/recover crashes "
          f"({stats['recover']} of recover), {stats['mix']} remotes left mid-epoch before recover, "
          f"{stats['orphans']} trials with processes outliving run; {time.monotonic() - t_start:.0f} s")
    return suite.finish()

if __name__ == "__main__":
    sys.exit(main())
