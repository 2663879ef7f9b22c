#!/usr/bin/python3
"""S3 remote tests against a real MinIO started on loopback (a free port, a
temporary data directory, stopped at the end, also on failure). Objects are
verified with a standard S3 client (awscli, target/pylib) talking to MinIO
directly. Cases:

  programs      every capture test program (tests/mpi; one MPI mode each:
                MPICH, or Open MPI/OMPIO for the Open MPI-only ones) under
                `paralog run --remote s3://...`: every object equals the
                direct MPI-IO file byte for byte and no other object exists;
                the programs alternate between the default upload policy and
                ?upload=epoch&part_size=5M
  sizes         files of 0 B, 1 B, 5 MiB, 5 MiB + 1, 30 MiB with
                ?part_size=5M&max_parts=4 (5 MiB is one PUT, 5 MiB + 1 two
                parts, 30 MiB four parts of 8 MiB: the part size grew) and
                with the defaults (8 MiB parts); part layout read back with
                head-object --part-number; every object carries a CRC32C of
                the whole object (checksum type FULL_OBJECT) equal to the
                CRC32C of the expected bytes; one object also read back with
                `paralog get s3://`
  extents       a 40 MiB file with holes written as 5,000 scattered extents
                of 512 B to 16 KiB in 3 opens x 2 epochs, drained by a server
                of our own with PARALOG_LOG=debug: its log shows server-side
                copies of unchanged parts, and the object equals the expected
                bytes (per epoch uploads and per close uploads); an object
                assembled with copies has no whole-object checksum (its parts
                carried Content-MD5: MinIO refuses copies into an upload
                with a checksum algorithm)
  reopen        a file drained to S3, then reopened by the program the way
                HDF5's H5Fcreate(H5F_ACC_TRUNC) does (truncate only if not
                empty): the program must see the size of the file it wrote,
                and the object must be exactly the direct POSIX result
  faults        paralog talks to MinIO through tests/remote/faultproxy.py,
                which answers 500/503, delays, resets before or after MinIO
                saw the request, on at least 5% of the requests: every
                object completes and verifies; the counts are printed
  resets        connections reset while part bodies are sent (the proxy's
                "reset" fault only, on half the requests; three 60 MiB objects
                in 5 MiB parts), drained by a server of our own: it must
                retry, not die (its exit status is checked)
  minio-kill    MinIO is SIGKILLed while the server uploads the parts of a
                40 MiB object (drain slowed by --max-rate) and stays down:
                `paralog run` gives up (--wait-timeout, exit 3); MinIO comes
                back; `paralog recover` aborts the stale multipart upload and
                completes the object; list-multipart-uploads is empty
  minio-restart MinIO is SIGKILLed mid-upload and restarted 10 s later while
                `paralog run` still waits: the server's retries complete the
                object
  permanent     errors that retrying cannot fix end `paralog run` at once
                (exit 3, well under --wait-timeout 120) with a message naming
                the bucket and the S3 error: a bucket that does not exist
                (NoSuchBucket), an access key id MinIO does not know
                (InvalidAccessKeyId)
  credentials   the secret key appears in no output of paralog (stdout,
                stderr, server logs) of this whole run, nor with a wrong
                secret key (signature errors), nor with SDK trace logging
  rename        rotated atomic checkpoints (tests/correctness/progs/
                rotate_crash.py: tmp + fsync + rename, a key replaced each
                save, the oldest unlinked), whole under `paralog run`, and
                killed between fsync and rename then `paralog recover`: the
                bucket holds exactly the keys and bytes of the program run
                (or stopped there) without paralog, no unfinished upload

Usage: python3 -m tests.remote.s3 [--only NAME] [--keep] [--fault-seed N]
Prints one line per case and ends with "s3: N passed, N failed".
"""

import base64
import functools
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.lib.check import Failed, Suite, check, suite_options
from tests.lib.compare import files, first_difference, same_bytes
from tests.lib.minio import MinIO
from tests.lib.mpi import MODES, PROGRAMS, build_tests, run_direct
from tests.lib.paralog import capture_env, clean_env, jobs_left, paralog_run, run_captured
from tests.lib.paths import BIN, PY, RUN_DIRECT
from tests.lib.proc import TRANSCRIPTS, kill_tree, run
from tests.lib.server import Server
from tests.remote import writer
from tests.remote.objreader import crc32c

BUCKET = "paralog-test"
MIB = 1 << 20
HERE = Path(__file__).resolve().parent
FAULTPROXY = HERE / "faultproxy.py"
WRITER = HERE / "writer.py"


@functools.lru_cache(maxsize=16)
def crc32c_b64(data):
    """CRC32C (Castagnoli) as S3's x-amz-checksum-crc32c header: big-endian,
    base64. Plain Python (about 15 MB/s): for small objects."""
    return base64.b64encode(crc32c(data).to_bytes(4, "big")).decode()


assert crc32c_b64(b"Hello, World!") == "TVUQaA=="  # S3's documented example


def whole_checksum(minio, key):
    """(ChecksumCRC32C, ChecksumType) of an object, (None, None) if none."""
    h = minio.api("head-object", "--bucket", BUCKET, "--key", key, "--checksum-mode", "ENABLED")
    return h.get("ChecksumCRC32C"), h.get("ChecksumType")


def compare_tree(minio, prefix, want, work, what):
    """The objects under prefix/ are exactly `want` (name -> bytes)."""
    got = work / "got"
    shutil.rmtree(got, ignore_errors=True)
    keys = minio.download_all(BUCKET, prefix, got)
    check(keys == sorted(want), f"{what}: objects {keys[:8]} != expected files {sorted(want)[:8]}")
    # `s3 sync` leaves out nothing, but check the listing too (sizes).
    listed = dict((k.removeprefix(prefix + "/"), s) for k, s in minio.keys(BUCKET, prefix))
    for name, body in want.items():
        check(listed.get(name) == len(body), f"{what}: {name}: listed size {listed.get(name)}, want {len(body)}")
        same_bytes(body, got / name, f"{what}: {name}")


# --- programs ----------------------------------------------------------------

def program_case(minio, mode, prog, extra, work, url_query):
    flavour, io = MODES[mode]
    args = extra.get(mode, [])
    direct, pfs, local = work / "direct", work / "pfs", work / "local"
    pfs.mkdir(parents=True)
    run_direct(flavour, io, prog, direct, *args, env=clean_env())
    prefix = f"progs/{mode}-{prog.replace('.', '_')}"
    url = f"s3://{BUCKET}/{prefix}{url_query}"
    paralog_run(local, pfs, [RUN_DIRECT, flavour, io, prog, pfs, *args], url, mpi=flavour, env=minio.env(),
                extra=["--wait-timeout", "300"])
    outputs = files(direct, snapshots=False)
    check(outputs, "the direct run wrote no file")
    want = {f: (direct / f).read_bytes() for f in outputs}
    compare_tree(minio, prefix, want, work, "remote")
    stray = [str(p.relative_to(pfs)) for p in pfs.rglob("*") if p.is_file()]
    check(not stray, f"files appeared in the prefix with an S3 remote: {stray[:5]}")
    check(not jobs_left(local), f"node-local data left after a complete drain: {jobs_left(local)}")
    total = sum(len(b) for b in want.values())
    return f"{len(outputs)} object(s), {total} bytes, equal to direct MPI-IO ({url_query or 'defaults'})"


# --- sizes -------------------------------------------------------------------

def parts_of(minio, key):
    """(parts count or None for a single PUT, length of part 1)."""
    h = minio.api("head-object", "--bucket", BUCKET, "--key", key, "--part-number", "1")
    etag = h["ETag"].strip('"')
    n = h.get("PartsCount")
    if "-" not in etag:
        n = None
    return n, h["ContentLength"]


def sizes_case(minio, work, query, layout):
    pfs, local = work / "pfs", work / "local"
    pfs.mkdir(parents=True)
    prefix = f"sizes/{'defaults' if not query else 'small-parts'}"
    paralog_run(local, pfs, [PY, WRITER, "write", "sizes", pfs], f"s3://{BUCKET}/{prefix}{query}",
                env=minio.env(), extra=["--wait-timeout", "300"])
    want = writer.expected(writer.plan("sizes"))
    compare_tree(minio, prefix, want, work, "sizes")
    seen = []
    for name, (n_parts, part1) in layout.items():
        got = parts_of(minio, f"{prefix}/{name}")
        check(got == (n_parts, part1), f"{name}: (parts, part 1 bytes) = {got}, want {(n_parts, part1)}")
        seen.append(f"{name}={'PUT' if n_parts is None else f'{n_parts}x{part1 >> 20}MiB'}")
        # MinIO checked the whole-object CRC32C paralog sent against the
        # parts' before it completed the upload; computed here too, for
        # the objects small enough for a plain-Python CRC (five1.bin is
        # 2 parts with 5 MiB parts).
        crc, kind = whole_checksum(minio, f"{prefix}/{name}")
        check(crc and kind == "FULL_OBJECT", f"{name}: no whole-object CRC32C ({crc}, {kind})")
        if len(want[name]) <= 6 * MIB:
            check(crc == crc32c_b64(want[name]), f"{name}: whole-object CRC32C {crc}, want {crc32c_b64(want[name])}")
    # The same bytes through paralog's own reader.
    out = work / "get.bin"
    run([BIN, "get", f"s3://{BUCKET}/{prefix}/five1.bin", out], env=minio.env())
    same_bytes(want["five1.bin"], out, "paralog get s3://")
    return f"0 B, 1 B, 5 MiB, 5 MiB+1, 30 MiB verified, each with a whole-object CRC32C; {' '.join(seen)}"


# --- extents -----------------------------------------------------------------

def extents_case(minio, work, query):
    pfs, local = work / "pfs", work / "local"
    pfs.mkdir(parents=True)
    prefix = f"extents/{'epoch' if 'upload=epoch' in query else 'close'}"
    env = minio.env()
    env["PARALOG_LOG"] = "debug"
    srv = Server(local, f"s3://{BUCKET}/{prefix}{query}", env)
    try:
        run_captured([PY, WRITER, "write", "extents", pfs], pfs, local, srv.remote, base=clean_env())
        st = srv.drain_and_stop(timeout_s=300)
    finally:
        srv.kill()
    check(st and st["epochs_pending"] == 0 and not st["damaged"],
          f"drain incomplete: {json.dumps(st)[:600] if st else None}")
    p = writer.plan("extents")
    check(writer.count_extents(p) == 5000, "the plan does not have 5,000 extents")
    compare_tree(minio, prefix, writer.expected(p), work, "extents")
    log = srv.text()
    parts = re.findall(r'part key=\S+ part=(\d+) bytes=(\d+) how="?([a-z -]+?)"?$', log, re.M)
    copies = sum(1 for *_, how in parts if how == "server-side copy")
    uploads = sum(1 for *_, how in parts if how == "upload")
    check(copies >= 1, f"no server-side copy in the debug log ({uploads} part uploads)")
    # The last upload copied parts: Content-MD5 per part, no checksum
    # algorithm on the upload, so no whole-object checksum.
    crc, kind = whole_checksum(minio, f"{prefix}/scattered.bin")
    check(crc is None, f"an object assembled with server-side copies has a CRC32C ({crc}, {kind})")
    return (f"5,000 extents, 6 epochs in 3 opens, object equal; {copies} part(s) copied server-side, "
            f"{uploads} uploaded ({query})")


# --- a captured file reopened after its drain --------------------------------

def reopen_case(minio, work, query):
    """A file drained to S3, then reopened by the program: the program must
    see the file it wrote (its size), and a truncation it makes because the
    file is not empty must reach the object. Deterministic: the first open
    is drained (a drain request to our own server) before the reopen."""
    pfs, local = work / "pfs", work / "local"
    pfs.mkdir(parents=True)
    prefix = f"reopen/{'epoch' if 'upload=epoch' in query else 'close'}"
    srv = Server(local, f"s3://{BUCKET}/{prefix}{query}", minio.env())
    try:
        run_captured([PY, WRITER, "junk", pfs / "f.bin", str(MIB)], pfs, local, srv.remote, base=clean_env())
        st = srv.drain_and_stop(timeout_s=60)
        check(st["epochs_pending"] == 0 and st["epochs_drained"] >= 1, f"first open not drained: {json.dumps(st)[:300]}")
        srv = Server(local, f"s3://{BUCKET}/{prefix}{query}", minio.env())
        r = run_captured([PY, WRITER, "reopen", pfs / "f.bin"], pfs, local, srv.remote, base=clean_env(), check=False)
        st = srv.drain_and_stop(timeout_s=60)
    finally:
        srv.kill()
    seen = r.stdout.strip()
    want = bytes(1000) + b"N" * 100
    got = work / "got.bin"
    minio.aws("s3", "cp", "--no-progress", f"s3://{BUCKET}/{prefix}/f.bin", got)
    body = got.read_bytes()
    problems = []
    if r.returncode != 0:
        problems.append(f"the reopening program failed: {r.stderr.strip()[-300:]}")
    if seen != f"size seen {MIB} end {MIB}":
        problems.append(f"the reopening program saw \"{seen}\" for the {MIB}-byte file it had written")
    if body != want:
        problems.append(f"the object is {len(body)} bytes, want {len(want)} ({first_difference(want, body)})")
    check(not problems, "; ".join(problems))
    return "the reopen saw the drained file's size; the object is exactly the direct POSIX result"


# --- faults ------------------------------------------------------------------

class FaultProxy:
    def __init__(self, work, upstream_port, seed=1, rate=0.12, min_rate=0.06, kinds=None):
        self.log = work / "faultproxy.log"
        self.p = subprocess.Popen([PY, str(FAULTPROXY), "--upstream", f"127.0.0.1:{upstream_port}",
                                   "--rate", str(rate), "--min-rate", str(min_rate), "--seed", str(seed),
                                   "--log", str(self.log), "--log-all", *(["--kinds", kinds] if kinds else [])],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        line = self.p.stdout.readline()
        m = re.match(r"listening 127\.0\.0\.1:(\d+)", line)
        if not m:
            self.p.kill()
            raise Failed(f"faultproxy did not start: {line}{self.p.stderr.read()[-500:]}")
        self.port = int(m.group(1))

    def stop(self):
        """Stop it; its counters."""
        if self.p.poll() is None:
            self.p.terminate()
        try:
            out, err = self.p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            kill_tree(self.p)
            out, err = self.p.communicate()
        for line in out.splitlines():
            if line.startswith("{"):
                return json.loads(line)
        raise Failed(f"faultproxy printed no counters: {out[-300:]}{err[-300:]}")


def faults_case(suite, minio, work, seed):
    proxy = FaultProxy(work, minio.port, seed=seed)
    suite.cleanup.append(lambda: kill_tree(proxy.p))
    env = minio.env(endpoint=f"http://127.0.0.1:{proxy.port}")
    runs = [("mixed", "?upload=epoch&part_size=5M"), ("sizes", "?part_size=5M&max_parts=4"), ("mixed", "")]
    want_all = {}
    t0 = time.time()
    try:
        for i, (plan, query) in enumerate(runs):
            pfs, local = work / f"pfs{i}", work / f"local{i}"
            pfs.mkdir(parents=True)
            prefix = f"faults/{i}-{plan}"
            paralog_run(local, pfs, [PY, WRITER, "write", plan, pfs], f"s3://{BUCKET}/{prefix}{query}", env=env,
                        extra=["--wait-timeout", "240"], timeout=400)
            want_all[prefix] = writer.expected(writer.plan(plan))
    finally:
        stats = proxy.stop()
    took = time.time() - t0
    for prefix, want in want_all.items():
        compare_tree(minio, prefix, want, work, prefix)
    n, f = stats["requests"], stats["faults"]
    check(n > 0 and f / n >= 0.05, f"only {f} faults in {n} requests")
    stale = [ku for prefix, want in want_all.items() for name in want for ku in minio.uploads(BUCKET, f"{prefix}/{name}")]
    log = proxy.log.read_text()
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(stats["kinds"].items()))
    ops = ", ".join(f"{k} {v}" for k, v in sorted(stats["fault_ops"].items()))
    objects = sum(len(w) for w in want_all.values())
    note = ""
    if stale:
        # An upload no later request names: its CreateMultipartUpload answer
        # was lost (the SDK's retry made another one).
        lost = sum(1 for _, u in stale if u not in log)
        note = (f"; NOTE: {len(stale)} multipart upload(s) left behind after a successful run ({lost} never "
                f"named again: a lost CreateMultipartUpload answer; {len(stale) - lost} used, then neither "
                f"completed nor aborted)")
    return (f"{objects} objects verified after {f} faults in {n} requests ({100 * f / n:.0f}%; {kinds}; "
            f"by operation: {ops}) in {took:.0f} s{note}")


def pending_many_case(minio, work, query):
    """Several epochs and opens of each file pending at once (captured with
    no server running), then one `recover`: every upload after a file's
    first must start from the object the first made, not from nothing (a
    drain that called every one of them "fresh" left zeros where the
    earlier epochs wrote)."""
    pfs, local = work / "pfs", work / "local"
    pfs.mkdir(parents=True)
    prefix = f"pending{query.replace('?', '-').replace('=', '-').replace('&', '-')}"
    remote = f"s3://{BUCKET}/{prefix}{query}"
    run_captured([PY, WRITER, "write", "mixed", pfs], pfs, local, remote, base=minio.env())
    r = run([BIN, "recover", "--local", local, "--remote", remote, "--json"], env=minio.env())
    rows = json.loads(r.stdout)["files"]
    check(all("error" not in row for row in rows), f"recover: {r.stdout[-600:]}")
    want = writer.expected(writer.plan("mixed"))
    compare_tree(minio, prefix, want, work, prefix)
    return f"{len(want)} objects equal the program's files after one recover of {sum(r['drained_epochs'] for r in rows)} epochs"


def reset_case(suite, minio, work, rounds=3):
    """Connections reset while part bodies are being sent (the proxy reads
    the head and part of the body, then resets): the server must retry, not
    die. Our own server, so that its exit status is seen; a few rounds, as
    whether a reset lands mid-body depends on timing."""
    proxy = FaultProxy(work, minio.port, seed=3, rate=0.5, min_rate=0.4, kinds="reset")
    suite.cleanup.append(lambda: kill_tree(proxy.p))
    size = 60 * MIB
    want = writer.expected(writer.plan("big", size))["big.bin"]
    try:
        for i in range(rounds):
            pfs, local = work / f"pfs{i}", work / f"local{i}"
            pfs.mkdir(parents=True)
            srv = Server(local, f"s3://{BUCKET}/reset/{i}?part_size=5M",
                         minio.env(endpoint=f"http://127.0.0.1:{proxy.port}"))
            try:
                run_captured([PY, WRITER, "write", "big", pfs, str(size)], pfs, local, srv.remote, base=clean_env())
                st = srv.drain_and_stop(timeout_s=240)
            finally:
                srv.kill()
            check(st["epochs_pending"] == 0, f"round {i}: drain incomplete: {json.dumps(st)[:400]}")
            got = work / "got.bin"
            minio.aws("s3", "cp", "--no-progress", f"s3://{BUCKET}/reset/{i}/big.bin", got)
            same_bytes(want, got, f"round {i}: object")
    finally:
        stats = proxy.stop()
    return (f"{stats['faults']} connection resets in {stats['requests']} requests "
            f"({stats['fault_ops'].get('UploadPart', 0)} during part uploads), {rounds} objects of {size >> 20} MiB: "
            f"the server retried, objects verified")


# --- MinIO killed mid-upload -------------------------------------------------

def start_slow_run(minio, work, prefix, wait_timeout):
    pfs, local = work / "pfs", work / "local"
    pfs.mkdir(parents=True)
    env = minio.env()
    env["PARALOG_LOG"] = "debug"
    size = 40 * MIB
    args = [BIN, "run", "--prefix", pfs, "--local", local, "--job", "t", "--remote", f"s3://{BUCKET}/{prefix}",
            "--mpi", "none", "--buffer", "1M", "--max-rate", "4M", "--wait-timeout", str(wait_timeout),
            "--", PY, WRITER, "write", "big", pfs, str(size)]
    proc = subprocess.Popen([str(a) for a in args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
    log = local / ".paralog-server-t.log"
    deadline = time.time() + 60
    while time.time() < deadline:
        if log.exists() and 'how="upload"' in log.read_text(errors="replace"):
            return proc, local, size
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    kill_tree(proc)
    out, err = proc.communicate()
    raise Failed(f"no part upload started: {err[-600:]}")


def finish_run(proc, local, timeout):
    """Wait for the run; its output and the last text of its server log (run
    deletes the log after a complete drain)."""
    log = local / ".paralog-server-t.log"
    text = ""
    deadline = time.time() + timeout
    while proc.poll() is None and time.time() < deadline:
        if log.exists():
            text = log.read_text(errors="replace")
        time.sleep(0.2)
    try:
        out, err = proc.communicate(timeout=max(1, deadline - time.time()))
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        out, err = proc.communicate()
        raise Failed(f"paralog run did not return within {timeout} s")
    if log.exists():
        text = log.read_text(errors="replace")
    TRANSCRIPTS.append(("paralog run (minio killed)", out + err))
    TRANSCRIPTS.append(("server log (minio killed)", text))
    return proc.returncode, out, err, text


def minio_kill_case(suite, minio, work):
    prefix = "kill"
    proc, local, size = start_slow_run(minio, work, prefix, wait_timeout=12)
    minio.kill()
    try:
        rc, out, err, log = finish_run(proc, local, timeout=120)
        check(rc == 3, f"paralog run exited {rc} with MinIO down, want 3: {err[-600:]}")
        # It gave up at --wait-timeout and stopped its server, which did
        # not die (a server that dies also makes run exit 3).
        check("server stopped" in log, f"the server did not stop normally: {log[-600:]}")
        check("paralog recover" in err, f"run did not name the recover command: {err[-400:]}")
    finally:
        minio.start()
    want = writer.expected(writer.plan("big", size))["big.bin"]
    key = f"{prefix}/big.bin"
    stale = minio.uploads(BUCKET, key)
    check(stale, "no stale multipart upload after the kill (the kill did not land mid-upload?)")
    partial = [k for k, _ in minio.keys(BUCKET, prefix)]
    r = run([BIN, "recover", "--local", local, "--remote", f"s3://{BUCKET}/{prefix}", "--json"], env=minio.env())
    rows = json.loads(r.stdout)["files"]
    check(len(rows) == 1 and rows[0].get("drained_epochs") == 1 and not rows[0].get("error"),
          f"recover: {r.stdout[-600:]}")
    aborted = rows[0].get("aborted_uploads")
    check(aborted == len(stale), f"recover aborted {aborted} upload(s), {len(stale)} were stale")
    got = work / "got.bin"
    minio.aws("s3", "cp", "--no-progress", f"s3://{BUCKET}/{key}", got)
    same_bytes(want, got, "object after recover")
    left = minio.uploads(BUCKET, key)
    check(not left, f"multipart uploads left after recover: {left}")
    r2 = run([BIN, "recover", "--local", local, "--remote", f"s3://{BUCKET}/{prefix}", "--json"], env=minio.env())
    rows2 = json.loads(r2.stdout)["files"]
    check(all(r.get("drained_epochs", 0) == 0 for r in rows2), f"a second recover drained again: {r2.stdout[-300:]}")
    return (f"run gave up (exit 3) with MinIO down; {len(stale)} stale upload(s){' and a partial object' if partial else ''}; "
            f"recover aborted {aborted}, object ({size >> 20} MiB) verified, no upload left")


OUTAGE = 10


def minio_restart_case(suite, minio, work):
    prefix = "restart"
    proc, local, size = start_slow_run(minio, work, prefix, wait_timeout=150)
    minio.kill()
    time.sleep(OUTAGE)
    minio.start()
    rc, out, err, log = finish_run(proc, local, timeout=200)
    check(rc == 0, f"paralog run exited {rc} after MinIO came back: {err[-600:]}")
    failures = log.count("drain failed; local data kept")
    want = writer.expected(writer.plan("big", size))["big.bin"]
    got = work / "got.bin"
    minio.aws("s3", "cp", "--no-progress", f"s3://{BUCKET}/{prefix}/big.bin", got)
    same_bytes(want, got, "object after the restart")
    stale = minio.uploads(BUCKET, f"{prefix}/big.bin")
    note = (f"; NOTE: {len(stale)} stale multipart upload(s) left (nothing aborts them after a run that succeeded)"
            if stale else "")
    return (f"MinIO killed mid-upload and restarted {OUTAGE} s later: {failures} failed drain attempt(s) "
            f"retried, object verified{note}")


# --- permanent errors --------------------------------------------------------

def permanent_case(minio, work):
    """Errors that retrying cannot fix stop the drain of the file at once:
    `paralog run` returns well before --wait-timeout, exit 3, naming the
    bucket and the error; the local data is kept for `paralog recover`."""
    bucket = f"no-such-bucket-{int(time.time())}"
    wrong_key = minio.env()
    wrong_key["AWS_ACCESS_KEY_ID"] = "plunknown" + minio.user[::-1]
    # (error, remote, environment, bucket to name, size: 12 MiB is a
    # multipart upload, 1000 bytes one PUT)
    runs = [("NoSuchBucket", f"s3://{bucket}/p", minio.env(), bucket, 12 * MIB),
            ("InvalidAccessKeyId", f"s3://{BUCKET}/permanent", wrong_key, BUCKET, 1000)]
    said = []
    for i, (code, url, env, named, size) in enumerate(runs):
        pfs, local = work / f"pfs{i}", work / f"local{i}"
        pfs.mkdir(parents=True)
        t0 = time.time()
        r = paralog_run(local, pfs, [PY, WRITER, "write", "big", pfs, str(size)], url, env=env,
                        extra=["--wait-timeout", "120"], check=False, timeout=200)
        took = time.time() - t0
        err = r.stderr
        check(r.returncode == 3, f"{code}: paralog run exited {r.returncode}, want 3: {err[-400:]}")
        check(took < 30, f"{code}: paralog run took {took:.0f} s: retried an error that cannot go away")
        lines = [l for l in err.splitlines() if "NOT DRAINED" in l]
        check(lines and all(code in l and f"s3://{named}/" in l and "not retried" in l for l in lines),
              f"{code}: the message does not name the bucket {named} and the error: {err[-600:]}")
        check(all("(refused by the remote)" in l for l in lines),
              f"{code}: not reported as refused by the remote (a damaged record?): {lines}")
        check("paralog recover" in err, f"{code}: run did not name the recover command: {err[-400:]}")
        check(jobs_left(local), f"{code}: the local data was not kept")
        said.append(f"{code} in {took:.1f} s")
    check(not minio.keys(BUCKET, "permanent"), "an object appeared with an unknown access key")
    return "run failed at once (exit 3), naming the bucket and the error: " + ", ".join(said)


# --- credentials -------------------------------------------------------------

def credentials_case(minio, work):
    secret = minio.secret
    # A wrong secret key: signature errors, printed and logged.
    wrong = "plwrong-" + secret[-12:][::-1] + "x9"
    pfs, local = work / "pfs", work / "local"
    pfs.mkdir(parents=True)
    r = paralog_run(local, pfs, [PY, WRITER, "write", "big", pfs, "1000"], f"s3://{BUCKET}/creds",
                    env=minio.env(secret=wrong), extra=["--wait-timeout", "6"], check=False)
    check(r.returncode == 3, f"with a wrong secret key, run exited {r.returncode}, want 3")
    log = (local / ".paralog-server-t.log").read_text(errors="replace")
    check("SignatureDoesNotMatch" in log or "signature" in log.lower(),
          f"the server log does not show the signature error: {log[-400:]}")
    leaks = [lbl for lbl, text in [("run output", r.stdout + r.stderr), ("server log", log)] if wrong in text]
    check(not leaks, f"the (wrong) secret key appears in: {leaks}")
    shutil.rmtree(local)
    # SDK trace logging (signing, credentials provider, HTTP).
    env = minio.env()
    env["PARALOG_LOG"] = ("trace,aws_config=trace,aws_credential_types=trace,aws_sigv4=trace,"
                          "aws_smithy_runtime=trace,aws_smithy_runtime_api=trace,aws_sdk_s3=trace,aws_runtime=trace")
    srv = Server(local, f"s3://{BUCKET}/creds", env)
    try:
        run_captured([PY, WRITER, "write", "big", pfs, "3000"], pfs, local, srv.remote, base=clean_env())
        srv.drain_and_stop(timeout_s=60)
    finally:
        srv.kill()
    trace = srv.text()
    check(len(trace.splitlines()) > 50, f"trace logging produced only {len(trace.splitlines())} lines")
    check(secret not in trace, "the secret key appears in the server's trace log")
    # Everything paralog printed in this run of the tests.
    found = [lbl for lbl, text in TRANSCRIPTS if secret in text]
    check(not found, f"the secret key appears in: {found[:5]}")
    n = len(TRANSCRIPTS)
    akid = sum(1 for _, text in TRANSCRIPTS if minio.user in text)
    return (f"secret key absent from {n} outputs and logs (incl. a wrong-key run and a {len(trace.splitlines())}-line "
            f"SDK trace log; the access key id appears in {akid})")


# --- main --------------------------------------------------------------------

ROTATE = HERE.parent / "correctness/progs/rotate_crash.py"


def rename_case(minio, work, point, query):
    """Renames reach S3 as the final keys only, each PUT whole (S3 has no
    rename): equal to the program run, or stopped at `point`, without
    paralog."""
    direct, pfs, local = work / "direct", work / "pfs", work / "local"
    direct.mkdir(parents=True)
    pfs.mkdir()
    prefix = f"rename/{point}{query.replace('?', '-').replace('=', '-').replace('&', '-')}"
    url = f"s3://{BUCKET}/{prefix}{query}"
    run([PY, ROTATE, direct, point, "4" if point == "done" else "3", "stop"], env=clean_env())
    if point == "done":
        paralog_run(local, pfs, [PY, ROTATE, pfs, "none", "0", "stop"], remote=url, env=minio.env())
    else:
        env = {**minio.env(), **capture_env(pfs, local, job=None, remote=url, base=minio.env())}
        p = run([PY, ROTATE, pfs, point, "3", "kill"], env=env, check=False)
        check(p.returncode == -9, f"the program was not killed (exit {p.returncode}): {p.stderr[-300:]}")
        run([BIN, "recover", "--local", local, "--remote", url], env=minio.env())
    want = {str(f.relative_to(direct)): f.read_bytes() for f in direct.rglob("*") if f.is_file()}
    got_dir = work / "got"
    keys = minio.download_all(BUCKET, prefix, got_dir)
    check(keys == sorted(want), f"the bucket holds {keys}, the direct run {sorted(want)}")
    for k in keys:
        same_bytes(want[k], got_dir / k, f"{k} against the direct run")
        check(not minio.uploads(BUCKET, f"{prefix}/{k}"), f"an unfinished upload of {k} is left")


def main():
    ap = suite_options()
    ap.add_argument("--fault-seed", type=int, default=1, help="the fault proxy's seed")
    a = ap.parse_args()
    suite = Suite("s3", keep=a.keep)

    def want(name):
        return not a.only or a.only in name

    programs = [c for c in PROGRAMS if c[1] != "outside_prefix"]
    cases = []
    for i, (name, prog, extra, modes) in enumerate(programs):
        mode = "mpich" if "mpich" in modes else "ompio"
        query = "" if i % 2 == 0 else "?upload=epoch&part_size=5M"
        cases.append((f"programs {mode} {name}",
                      lambda w, m=mode, p=prog, x=extra, q=query: program_case(minio, m, p, x, w, q)))
    cases += [
        ("sizes part_size=5M max_parts=4", lambda w: sizes_case(
            minio, w, "?part_size=5M&max_parts=4",
            {"empty.bin": (None, 0), "one.bin": (None, 1), "five.bin": (None, 5 * MIB),
             "five1.bin": (2, 5 * MIB), "big.bin": (4, 8 * MIB)})),
        ("sizes defaults", lambda w: sizes_case(
            minio, w, "", {"empty.bin": (None, 0), "one.bin": (None, 1), "five.bin": (None, 5 * MIB),
                          "five1.bin": (None, 5 * MIB + 1), "big.bin": (4, 8 * MIB)})),
        ("extents upload=epoch", lambda w: extents_case(minio, w, "?upload=epoch&part_size=5M")),
        ("extents upload=close", lambda w: extents_case(minio, w, "?part_size=5M")),
        ("reopen after drain", lambda w: reopen_case(minio, w, "")),
        ("reopen after drain upload=epoch", lambda w: reopen_case(minio, w, "?upload=epoch")),
        ("many epochs pending, one recover", lambda w: pending_many_case(minio, w, "")),
        ("many epochs pending, one recover upload=epoch", lambda w: pending_many_case(minio, w, "?upload=epoch")),
        (f"faults seed={a.fault_seed}", lambda w: faults_case(suite, minio, w, a.fault_seed)),
        ("resets mid-upload", lambda w: reset_case(suite, minio, w)),
        ("minio-kill", lambda w: minio_kill_case(suite, minio, w)),
        ("minio-restart", lambda w: minio_restart_case(suite, minio, w)),
        ("permanent errors", lambda w: permanent_case(minio, w)),
        ("credentials", lambda w: credentials_case(minio, w)),
        ("rename done", lambda w: rename_case(minio, w, "done", "")),
        ("rename done upload=epoch", lambda w: rename_case(minio, w, "done", "?upload=epoch")),
        ("rename synced, recover", lambda w: rename_case(minio, w, "synced", "")),
        ("rename renamed, recover", lambda w: rename_case(minio, w, "renamed", "")),
    ]
    cases = [(label, fn) for label, fn in cases if want(label)]
    minio = MinIO(suite.base)
    try:
        if any(label.startswith("programs") for label, _ in cases):
            build_tests()
        minio.start()
        minio.mb(BUCKET)
        for label, fn in cases:
            suite.case(label, fn)
    except Exception as e:  # MinIO or awscli missing, a port taken, ...
        suite.failed += 1
        print(f"FAIL setup: {type(e).__name__}: {e}", flush=True)
    finally:
        minio.stop()
        suite.run_cleanup()
        if not a.keep:  # the objects (hundreds of MiB); failed cases keep their own directories
            shutil.rmtree(minio.data, ignore_errors=True)
    return suite.finish()


if __name__ == "__main__":
    sys.exit(main())
