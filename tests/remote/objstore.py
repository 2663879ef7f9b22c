#!/usr/bin/python3
"""Tests of the versioned object layout (`--remote objstore:///ROOT?...`),
docs/objstore.md. Cases:

  readers     a writer publishes 100 versions of one object (100 epochs of
              one open, each rewriting the whole file with words that name
              the epoch, sizes changing, cut first when it shrinks) under
              `paralog run --remote objstore:///...?keep=3`, while a reader
              loop reads the newest version again and again, alternately with
              `paralog get` and with tests/remote/objreader.py (an
              independent decoder that checks the record and every block's
              CRC-32C): every read is exactly one epoch's file (never a
              partial version or a mix) or a clean "not yet", epochs never go
              backwards, the record's epoch is the content's, and the final
              version is epoch 100; then the same with keep=1 and no pause
              (retention deleting under the readers)
  crash FP    the server kills itself at a failpoint (drain.mid_write,
              before_fsync, after_fsync, after_progress) while publishing
              epoch 2 of 3: every version kept is complete and equal to the
              file at its epoch (the previous one is still readable);
              `paralog recover` publishes the rest, the last version is the
              final file, no epoch is published twice, and a second recover
              adds no version (`paralog get --list`)
  retention race  `paralog get` read the newest version's record; before it
              opens the chunk (delayed 3 s with strace), a new version is
              published and retention (keep=1) deletes the chunk: the get
              must start again from the newest version (docs/objstore.md);
              skipped without strace
  retention   with keep=K (3 and 1), 10 epochs of scattered writes (later
              versions reuse chunks of earlier epochs): exactly the last K
              version records remain, every kept version reads back equal to
              the file at its epoch, and the chunks on disk are exactly the
              ones the kept versions use (no temporary records left)

  rerun       one program run twice (two jobs, different output) to one
              root: the second run's bytes are the latest version
  missing root  a root that does not exist: paralog run stops at once
  broken pipe `paralog get --list` into a closed pipe ends quietly
  orphans     `paralog recover --gc` removes unreferenced chunks older than
              an hour, keeps referenced and young ones
  rename      rotated atomic checkpoints (tests/correctness/progs/
              rotate_crash.py) under `paralog run`: every final name's latest
              version equals the direct run's file, the names the program
              removed read as absent, and every version ever published of
              ckpt/latest is one whole save (never a half-written one)

Usage: python3 -m tests.remote.objstore [--only NAME] [--keep]
Prints one line per case and ends with "objstore: N passed, N failed".
"""

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.lib import posix_writer as pw
from tests.lib.check import Failed, Suite, check, suite_options
from tests.lib.compare import first_difference, same_bytes
from tests.lib.paralog import clean_env, paralog_run, run_captured
from tests.lib.paths import BIN, POSIX_WRITER, PY
from tests.lib.proc import kill_tree, run
from tests.lib.server import Server
from tests.remote import objreader, writer

WRITER = Path(__file__).resolve().parent / "writer.py"


def get_list(root, name):
    """`paralog get --list`: [(version, size, (open, epoch))]."""
    r = run([BIN, "get", "--list", f"objstore://{root}/{name}"])
    out = []
    for line in r.stdout.splitlines():
        m = re.match(r"version (\d+): (\d+) bytes.*, epoch (\d+):(\d+)$", line)
        check(m, f"unexpected --list line: {line!r}")
        out.append((int(m.group(1)), int(m.group(2)), (int(m.group(3)), int(m.group(4)))))
    return out


def get_version(root, name, out, version=None):
    args = [BIN, "get", f"objstore://{root}/{name}", out] + (["--version", str(version)] if version else [])
    return run(args, check=False)


# --- readers -----------------------------------------------------------------

def check_content(data, last_epoch):
    """The epoch whose whole file `data` is; Failed if it is a partial or
    mixed version."""
    check(len(data) >= 16, f"read {len(data)} bytes: not a version of this file")
    e = int.from_bytes(data[:8], "little")
    check(1 <= e <= 10_000, f"first word names epoch {e}")
    want = writer.version_bytes(e)
    if data != want:
        raise Failed(f"a read is not exactly epoch {e}'s file (partial or mixed version): {first_difference(want, data)}")
    check(e >= last_epoch, f"epochs went backwards: read epoch {e} after epoch {last_epoch}")
    return e


def readers_case(work, n, pause_ms, keep, python_reader=True):
    pfs, local, root = work / "pfs", work / "local", work / "store"
    pfs.mkdir(parents=True)
    root.mkdir()
    name = "versions.bin"
    url = f"objstore://{root}?keep={keep}"
    args = [BIN, "run", "--prefix", pfs, "--local", local, "--job", "t", "--remote", url, "--mpi", "none",
            "--wait-timeout", "120", "--", PY, WRITER, "write", "versions", pfs, str(n), str(pause_ms)]
    proc = subprocess.Popen([str(a) for a in args], env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
    counts = {"get": 0, "python": 0, "not yet": 0, "restarts": 0, "starved": 0}
    epochs_seen = set()
    last = 0
    out = work / "read.bin"
    i = 0
    deadline = time.time() + 300
    try:
        while True:
            done = proc.poll() is not None
            check(time.time() < deadline, "the writer did not finish in 300 s")
            if i % 2 == 0 or not python_reader:
                r = get_version(root, name, out)
                if r.returncode == 0:
                    e = check_content(out.read_bytes(), last)
                    counts["get"] += 1
                else:
                    err = r.stderr.strip()
                    clean = "no object store holds an object" in err or "no version published yet" in err
                    check(clean and not epochs_seen,
                          f"paralog get failed{' after a version was seen' if epochs_seen else ''}: {err[-400:]}")
                    counts["not yet"] += 1
                    e = None
            else:
                try:
                    got = objreader.read_latest(root, name)
                except objreader.Starved:
                    counts["starved"] += 1
                    got, e = False, None
                except objreader.Damaged as x:
                    raise Failed(f"python reader: {x}")
                if got is False:
                    pass
                elif got is None:
                    check(not epochs_seen, "the object's versions disappeared after one was seen")
                    counts["not yet"] += 1
                    e = None
                else:
                    v, data, restarts = got
                    e = check_content(data, last)
                    check(commit_no(v.epoch) == e, f"version {v.number} records epoch {v.epoch} but holds epoch {e}'s file")
                    check(v.size == len(data) and not v.deleted, f"version {v.number}: size {v.size}, deleted {v.deleted}")
                    counts["python"] += 1
                    counts["restarts"] += restarts
            if e is not None:
                epochs_seen.add(e)
                last = e
            i += 1
            if done:
                break
        stdout, stderr = proc.communicate()
    finally:
        kill_tree(proc)
    check(proc.returncode == 0, f"paralog run exited {proc.returncode}: {stderr[-600:]}")
    check(f"closed {name} after {n} epoch(s)" in stdout, f"the writer did not finish: {stdout[-300:]}")
    check(last == n, f"the final read is epoch {last}, want {n}")
    lst = get_list(root, name)
    check([commit_no(v[2]) for v in lst] == list(range(n - keep + 1, n + 1)),
          f"kept versions {lst}, want the epochs {n - keep + 1}..{n}")
    check(lst[-1][0] == n, f"the last version is number {lst[-1][0]}, want {n} (one per epoch)")
    check(len(epochs_seen) >= 5, f"the readers saw only {len(epochs_seen)} distinct epochs: no real overlap")
    return (f"{i} reads ({counts['get']} paralog get, {counts['python']} python reader, {counts['not yet']} not yet; "
            f"{counts['restarts']} python restart(s) after retention"
            f"{', %d starved' % counts['starved'] if counts['starved'] else ''}), {len(epochs_seen)} distinct epochs, "
            f"never partial or mixed; final version {lst[-1][0]} = epoch {n}")


# --- crash during publish ----------------------------------------------------

EPOCHS, PER_EPOCH = 3, 1 << 20


def expected_at(e):
    return pw.expected(EPOCHS, PER_EPOCH, e)


def commit_no(epoch):
    """Which commit of the POSIX writer a version's recorded epoch is: a
    one-process writer makes each commit a generation of its own, epoch 1
    (docs/format.md), so the generation counts its commits."""
    return epoch[0]


def check_versions(root, name, work, what):
    """Every kept version reads back equal to the file at its epoch; returns
    the list."""
    lst = get_list(root, name)
    for number, size, (g, e) in lst:
        out = work / f"v{number}"
        r = get_version(root, name, out, number)
        check(r.returncode == 0, f"{what}: version {number} unreadable: {r.stderr.strip()[-300:]}")
        same_bytes(expected_at(commit_no((g, e))), out, f"{what}: version {number} (epoch {g}:{e})")
        got = objreader.version(root, name, number)
        check(got.epoch == (g, e) and got.size == size, f"{what}: version {number}: python reader disagrees")
        check(objreader.read_version(root, got) == out.read_bytes(), f"{what}: version {number}: python reader reads other bytes")
    return lst


def crash_case(work, fp):
    pfs, local, root = work / "pfs", work / "local", work / "store"
    pfs.mkdir(parents=True)
    root.mkdir()
    name = "c.bin"
    url = f"objstore://{root}?keep=10&dirs=2"
    env = clean_env({"PARALOG_FAILPOINT": fp})
    r = paralog_run(local, pfs, [PY, POSIX_WRITER, "write", pfs / name, str(EPOCHS), str(PER_EPOCH)], url,
                    env=env, check=False, extra=["--wait-timeout", "60"])
    check(f"committed {EPOCHS}" in r.stdout, f"the program did not finish: {r.stdout[-300:]}{r.stderr[-300:]}")
    check(r.returncode == 3, f"paralog run exited {r.returncode} after the server crashed, want 3: {r.stderr[-500:]}")
    log = (local / ".paralog-server-t.log").read_text(errors="replace")
    check("failpoint reached" in log, f"the failpoint {fp} was not reached: {log[-300:]}")
    before = check_versions(root, name, work, "after the crash") if (root / "meta" / name).exists() else []
    epochs_before = [v[2] for v in before]
    r = run([BIN, "recover", "--local", local, "--remote", url, "--json"])
    after = check_versions(root, name, work, "after recover")
    check(after, "recover published nothing")
    check(commit_no(after[-1][2]) == EPOCHS, f"the last version is epoch {after[-1][2]}, want epoch {EPOCHS}")
    same_bytes(expected_at(EPOCHS), work / f"v{after[-1][0]}", "the last version after recover")
    eps = [v[2] for v in after]
    check(eps == sorted(set(eps)), f"an epoch was published twice or out of order: {after}")
    check([v[0] for v in after] == list(range(1, len(after) + 1)), f"version numbers {after}")
    check(after[:len(before)] == before, f"recover changed the versions kept before it: {before} -> {after}")
    run([BIN, "recover", "--local", local, "--remote", url, "--json"])
    again = get_list(root, name)
    check(again == after, f"a second recover changed the versions: {after} -> {again}")
    # Chunks a crash left unreferenced (written before the publish).
    used = {(p[3], p[2]) for v in after for p in objreader.version(root, name, v[0]).pieces}
    orphans = [c for c in objreader.chunks_on_disk(root) if c not in used]
    tmp = [p.name for p in (root / "meta" / name).iterdir() if p.name.startswith(".") and p.name != ".lock"]
    prev = f"epoch {commit_no(epochs_before[-1])}" if epochs_before else "none yet"
    note = f"; {len(orphans)} unreferenced chunk(s) and {len(tmp)} temporary record(s) left" if orphans or tmp else ""
    return (f"after the crash: {len(before)} version(s), latest {prev}, complete; recover -> versions of epochs "
            f"{[commit_no(ep) for ep in eps]}, last = final file; second recover added nothing{note}")


# --- retention ---------------------------------------------------------------

def retention_case(work, keep, n=10, per=512 << 10):
    pfs, local, root = work / "pfs", work / "local", work / "store"
    pfs.mkdir(parents=True)
    root.mkdir()
    name = "r.bin"
    paralog_run(local, pfs, [PY, POSIX_WRITER, "write", pfs / name, str(n), str(per)], f"objstore://{root}?keep={keep}&dirs=3",
                env=clean_env(), extra=["--wait-timeout", "120"])
    meta = root / "meta" / name
    # The name's directory holds its version records and the lock on
    # their numbers (docs/objstore.md), nothing else.
    entries = sorted(p.name for p in meta.iterdir())
    records = [e for e in entries if e != ".lock"]
    check(records == [f"v{k:010d}" for k in range(n - keep + 1, n + 1)],
          f"version records {entries}, want the last {keep} of {n} (and .lock)")
    used = set()
    for k in range(n - keep + 1, n + 1):
        v = objreader.version(root, name, k)
        check(commit_no(v.epoch) == k, f"version {k} records epoch {v.epoch}")
        data = objreader.read_version(root, v)
        want = pw.expected(n, per, k)
        check(data == want, f"version {k}: {first_difference(want, data)}")
        out = work / "get.bin"
        r = get_version(root, name, out, k)
        check(r.returncode == 0, f"paralog get --version {k}: {r.stderr.strip()[-300:]}")
        same_bytes(want, out, f"paralog get --version {k}")
        used |= {(p[3], p[2]) for p in v.pieces}
    on_disk = set(objreader.chunks_on_disk(root))
    check(on_disk == used, f"{len(on_disk)} chunk(s) on disk, the kept versions use {len(used)} "
          f"({len(on_disk - used)} unused left, {len(used - on_disk)} missing)")
    # Each epoch writes one chunk: more chunks in use than versions kept
    # means chunks of older, deleted versions had to stay.
    check(len(used) > keep, f"the kept versions use only {len(used)} chunk(s): the test did not reuse old chunks")
    return (f"{keep} version record(s) of {n} kept, all equal to the file at their epoch; {len(on_disk)} chunk(s) on "
            f"disk = the chunks they use ({len(used) - keep} of them written for older, deleted versions)")


# --- a reader whose version is removed by retention under it ----------------

def race_case(work):
    """`paralog get` has read the newest version's record; before it opens
    the chunk, a new version is published and retention (keep=1) deletes
    the old one's chunk. docs/objstore.md: the reader starts again from the
    newest version. Made deterministic with strace: the get's open of the
    chunk is delayed 3 s (inject delay_enter), during which we publish."""
    if not shutil.which("strace"):
        return "SKIP: strace is not installed"
    probe = subprocess.run(["strace", "-qq", "-e", "trace=none", "true"], capture_output=True)
    if probe.returncode != 0:
        return "SKIP: strace cannot trace here (ptrace not permitted)"
    pfs, local, root = work / "pfs", work / "local", work / "store"
    pfs.mkdir(parents=True)
    root.mkdir()
    name = "race.bin"
    srv = Server(local, f"objstore://{root}?keep=1", clean_env())
    try:
        run_captured([PY, WRITER, "junk", pfs / name, str(1 << 20)], pfs, local, srv.remote, base=clean_env())
        st = srv.drain_and_stop(timeout_s=60)
        check(st["epochs_pending"] == 0, "version 1 not published")
        v1 = objreader.version(root, name, objreader.versions(root, name)[-1])
        chunks = sorted({str(objreader.chunk_path(root, p[3], p[2])) for p in v1.pieces})
        check(len(chunks) == 1, f"version 1 uses {len(chunks)} chunks, want 1")
        out = work / "got.bin"
        get = subprocess.Popen(["strace", "-f", "-qq", "-o", str(work / "strace.log"), "-e", "trace=openat",
                                "-P", chunks[0], "-e", "inject=openat:delay_enter=3000000:when=1",
                                str(BIN), "get", f"objstore://{root}/{name}", str(out)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        time.sleep(0.5)
        srv = Server(local, f"objstore://{root}?keep=1", clean_env())
        run_captured([PY, WRITER, "junk", pfs / name, str(2 << 20)], pfs, local, srv.remote, base=clean_env())
        st = srv.drain_and_stop(timeout_s=60)
        check(st["epochs_pending"] == 0, "version 2 not published")
        check(not Path(chunks[0]).exists(), "retention did not delete version 1's chunk")
        check(get.poll() is None, "paralog get ended before the delayed open: the race was not set up")
        try:
            _, err = get.communicate(timeout=60)
        finally:
            kill_tree(get)
    finally:
        srv.kill()
    check(get.returncode == 0, f"paralog get failed when retention removed the version it was reading (docs/objstore.md: "
          f"it starts again from the newest version): {err.strip()[-400:]}")
    same_bytes(b"J" * (2 << 20), out, "paralog get after the race")
    return "version 1's chunk deleted under `paralog get`: it read version 2 instead"


# --- defects of the layout seen by users (issue 14) ----------------------------

WRITE_ONE = "import sys; open(sys.argv[1], 'wb').write(sys.argv[2].encode() * 1000)"


def rerun_case(work):
    """The same program run twice (two jobs) with different output under
    one object root: the second run's bytes are the latest version, as on
    S3 and POSIX remotes (before: taken for "already published" because
    the latest version recorded the same epoch number, and lost)."""
    root = work / "store"
    root.mkdir()
    remote = f"objstore://{root}"
    for i, word in enumerate(("first", "second")):
        prefix, local = work / f"prefix{i}", work / f"local{i}"
        prefix.mkdir()
        paralog_run(local, prefix, [PY, "-c", WRITE_ONE, prefix / "out.dat", word], remote, job=f"run{i}")
    versions = get_list(root, "out.dat")
    check(len(versions) == 2, f"expected 2 versions, --list shows {versions}")
    out = work / "got"
    r = get_version(root, "out.dat", out)
    check(r.returncode == 0, f"paralog get failed: {r.stderr[-300:]}")
    check(out.read_bytes() == b"second" * 1000, "the latest version is not the second run's bytes")
    return "2 versions, the latest is the second run's"


ROTATE = Path(__file__).resolve().parent.parent / "correctness/progs/rotate_crash.py"


def rename_case(work):
    """Renames publish the final name whole, once per rename."""
    direct, prefix, local, root = work / "direct", work / "prefix", work / "local", work / "store"
    for d in (direct, prefix, root):
        d.mkdir()
    run([PY, ROTATE, direct, "none", "0", "stop"])
    paralog_run(local, prefix, [PY, ROTATE, prefix, "none", "0", "stop"], f"objstore://{root}")
    want = {str(f.relative_to(direct)): f.read_bytes() for f in direct.rglob("*") if f.is_file()}
    check(sorted(want) == ["ckpt/latest", "ckpt/step-003", "ckpt/step-004"], f"direct run left {sorted(want)}")
    for name, content in want.items():
        r = get_version(root, name, work / "got")
        check(r.returncode == 0, f"paralog get {name}: {r.stderr[-300:]}")
        same_bytes(content, work / "got", name)
    for gone in ("ckpt/step-000", "ckpt/step-002", "ckpt/.step.tmp", "ckpt/latest.tmp"):
        r = get_version(root, gone, work / "gone")
        check(r.returncode != 0, f"{gone}, removed by the program, reads back from the store")
    saves = {bytes((k * 41 + i * 3) % 251 for i in range(150000 + 977 * k)) for k in range(5)}
    versions = get_list(root, "ckpt/latest")
    for v, _, _ in versions:
        r = get_version(root, "ckpt/latest", work / "v", v)
        check(r.returncode == 0 and (work / "v").read_bytes() in saves,
              f"version {v} of ckpt/latest is not one whole save")
    return f"{len(versions)} versions of ckpt/latest, each a whole save"


def missing_root_case(work):
    """An object root that does not exist: `paralog run` stops at once with
    one line naming it and a non-zero status (before: retried forever)."""
    prefix, local = work / "prefix", work / "local"
    prefix.mkdir()
    t0 = time.time()
    r = paralog_run(local, prefix, [PY, "-c", WRITE_ONE, prefix / "out.dat", "x"], f"objstore://{work}/absent",
                    check=False, timeout=60)
    check(r.returncode != 0, "paralog run succeeded with a missing object root")
    check(f"{work}/absent" in r.stderr and "does not exist" in r.stderr, f"no line naming the root: {r.stderr[-300:]}")
    check(time.time() - t0 < 30, "it took more than 30 s to refuse")
    return f"refused in {time.time() - t0:.1f} s"


def broken_pipe_case(work):
    """`paralog get --list` into a pipe whose reader is gone ends quietly
    (no panic, no backtrace), as Unix tools do."""
    root = work / "store"
    root.mkdir()
    prefix, local = work / "prefix", work / "local"
    prefix.mkdir()
    paralog_run(local, prefix, [PY, "-c", WRITE_ONE, prefix / "out.dat", "x"], f"objstore://{root}")
    rd, wr = os.pipe()
    os.close(rd)
    p = subprocess.run([str(BIN), "get", "--list", f"objstore://{root}/out.dat"], stdout=wr,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    os.close(wr)
    check("panick" not in p.stderr and "backtrace" not in p.stderr, f"it panicked: {p.stderr[-300:]}")
    check(p.returncode == 0, f"exit {p.returncode}: {p.stderr[-300:]}")
    return "ended quietly"


def orphans_case(work):
    """`paralog recover --gc` removes chunks no version references once
    they are older than an hour (a crash before a publish leaves them), and
    keeps every referenced chunk and every young one."""
    root = work / "store"
    root.mkdir()
    prefix, local = work / "prefix", work / "local"
    prefix.mkdir()
    paralog_run(local, prefix, [PY, "-c", WRITE_ONE, prefix / "out.dat", "kept"], f"objstore://{root}")
    before = set(objreader.chunks_on_disk(root))
    data = sorted((root / "data").iterdir())[0]
    old, young = data / ("ab" * 16), data / ("cd" * 16)
    old.write_bytes(b"orphan")
    young.write_bytes(b"in flight")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    r = run([BIN, "recover", "--local", local, "--remote", f"objstore://{root}", "--gc"], check=False)
    check(r.returncode == 0, f"recover --gc exited {r.returncode}: {r.stderr[-300:]}")
    check(not old.exists(), "the old unreferenced chunk is still there")
    check(young.exists(), "a young unreferenced chunk (a put in progress) was removed")
    check(before <= set(objreader.chunks_on_disk(root)), "a referenced chunk was removed")
    out = work / "got"
    check(get_version(root, "out.dat", out).returncode == 0 and out.read_bytes() == b"kept" * 1000,
          "the object no longer reads back")
    return "the old orphan removed, referenced and young chunks kept"


def main():
    a = suite_options().parse_args()
    suite = Suite("objstore", keep=a.keep)
    cases = [
        ("readers keep=3", lambda w: readers_case(w, 100, 20, 3)),
        # Each version is deleted as soon as the next one is published:
        # readers race retention (rarely lost; "retention race" makes that
        # race certain).
        ("readers keep=1", lambda w: readers_case(w, 100, 2, 1, python_reader=False)),
        ("retention race", race_case),
    ]
    for fp in ("drain.mid_write:3", "drain.before_fsync:2", "drain.after_fsync:2", "drain.after_progress:2"):
        cases.append((f"crash {fp}", lambda w, fp=fp: crash_case(w, fp)))
    for keep in (3, 1):
        cases.append((f"retention keep={keep}", lambda w, k=keep: retention_case(w, k)))
    cases += [("rename", rename_case), ("rerun", rerun_case), ("missing root", missing_root_case),
              ("broken pipe", broken_pipe_case), ("orphans", orphans_case)]
    return suite.run(cases, only=a.only)


if __name__ == "__main__":
    sys.exit(main())
