#!/usr/bin/python3
"""Kill -9 during array puts (docs/objects.md "Crashes"), then the
documented way back: each version is complete or absent, published
exactly once, never mixed with another put's chunks.

The kills are SIGKILLs at the library's crash points (PARALOG_FAILPOINT,
paralog_objects::CRASH_POINTS), in real MPICH and Open MPI programs
(tests/objects/mpi_put.c, 4 ranks of 16x4096 int32) and in a real node
server, plus one at a random time:

  writer     a writing rank killed between its durable chunk file and its
             claim (the others reach the commit; mpirun ends the job):
             nothing published; `obj gc` removes the put and every chunk
             file (the dead rank's too); the program run again publishes
             version 1. Direct (objstore://) and logged. Also killed
             after its claim's temporary name, before any byte of its
             chunk file: `obj gc` removes that empty file too (the
             temporary name names it).
  part       the same for a rank writing a part of a chunk another rank
             also writes (chunks of 24 rows over ranks of 16), killed
             after its bytes are in the shared chunk file, before its
             claim: nothing published, `obj gc` leaves no chunk file, the
             program run again publishes version 1. Direct and logged.
  committer  rank 0 killed in the commit, before and after it publishes.
             Direct (the id from `obj puts`, which shows the put complete
             and publishing or published): before, nothing is visible and
             `obj commit URL ID`
             publishes the put as version 1 (once: a second commit answers
             1 again); after, version 1 is there whole and `obj commit`
             answers 1 and makes its views. Logged: before the local
             `logged` mark, `recover` publishes nothing and `obj gc` of the
             node-local store removes it; after, `recover` publishes it
             once.
  server     the node server killed while publishing logged puts (after
             the first chunk copied; right after the remote publish,
             before the version's views; after the remote commit, before
             the local cleanup; during the local cleanup), and at a random
             time during 6 puts of 2 MiB:
             `recover` publishes what is left, every put exactly once and
             in commit order; a second `recover` publishes nothing.
  outlived   the server killed after a logged put's remote publish (and
             `obj commit` after its publish), then two newer puts of the
             name with keep=1, then `recover` (the commit retried): the
             killed put's version is kept until the retry finishes, is
             not published again, and the newest put stays the latest.

Usage: python3 -m tests.objects.crash [--only SUBSTRING] [--keep]
Ends with "objects-crash: N passed, N failed"."""
import os
import random
import sys
import time

from tests.lib.check import Suite, check, suite_options
from tests.lib.paths import BIN
from tests.lib.proc import run
from tests.lib.server import Server, failpoint_server, wait_failpoint_kill
from tests.objects.mpi import FLAVOURS, mpi_put
from tests.objects.run import at, info, obj, store

RANKS, ROWS = 4, 16


def expect(salt, ranks=RANKS, rows=ROWS):
    """The bytes mpi_put.c puts: (global row * 4096 + column + salt), int32."""
    import numpy as np
    return (np.arange(rows * ranks * 4096, dtype="<i4") + salt).tobytes()


def versions(url, name):
    r = obj("info", at(url, name), "--json", check=False)
    if r.returncode != 0:
        return []
    import json
    return [v["number"] for v in json.loads(r.stdout)["versions"]]


def got(work, url, name, version):
    out = work / f"got-{name.replace('/', '_')}-{version}.bin"
    obj("get", at(url, name), out, "--version", str(version))
    return out.read_bytes()


def staged(root):
    d = root / "staging"
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def chunk_files(root):
    """The store's chunk files and records that hold bytes. A rank that
    mpirun kills between creating a chunk file and writing its claim's
    temporary name leaves an empty file no put names (docs/objects.md:
    `recover --gc` collects it after an hour): not counted."""
    return sorted(p for p in (root / "data").rglob("*") if p.is_file() and p.stat().st_size)


def killed(r, point):
    check(r.returncode != 0, f"the program was not killed at {point}: {r.stdout}")
    check(f"failpoint {point} reached" in r.stdout + r.stderr, f"{point} not reached: {r.stdout}{r.stderr}")


def recover(work, local):
    return run([BIN, "recover", "--local", local, "--remote", work / "remote"], timeout=300).stdout


def only_version_is(work, url, name, salt):
    """Exactly one version of `name`, equal to the put of `salt`, verified
    (every chunk's checksum, both views complete)."""
    check(versions(url, name) == [1], f"{name}: versions {versions(url, name)}")
    check(got(work, url, name, 1) == expect(salt), f"{name}: version 1 is not the put")
    obj("verify", at(url, name))


WRITER_KILLS = {"objects.mid_chunk": "killwriter", "objects.claim_staged": "killclaim"}


def case_writer(flavour, logged, point):
    def go(work):
        url, root, local = store(work, "objstore"), work / "store", work / "local"
        lg = dict(local=str(local)) if logged else {}
        r = mpi_put(flavour, RANKS, url, "k", ROWS, 3, mode=WRITER_KILLS[point], check_rc=False, **lg)
        killed(r, point)
        where = local / ".paralog-objects" if logged else root
        if logged:
            check("published" not in recover(work, local), "recover published a put whose writer died")
        check(versions(url, "k") == [], "a put whose writer died is visible")
        # At objects.claim_staged no rank may have written a byte yet (mpirun
        # kills the others at once): the dead rank's empty file is checked
        # below instead.
        check(len(staged(where)) == 1 and (chunk_files(where) or point == "objects.claim_staged"),
              f"the dead put: {staged(where)}")
        listed = obj("puts", where).stdout.splitlines()
        check(len(listed) == 1 and listed[0].startswith(f"{staged(where)[0]} k: ")
              and f"/{RANKS} chunks" in listed[0] and f"{RANKS}/{RANKS} chunks" not in listed[0],
              f"obj puts: {listed}")
        # The chunk files that claims under their temporary names name (the
        # dead rank's; at objects.claim_staged still empty, which
        # chunk_files does not count). A temporary name torn by mpirun's
        # kill of another rank names none (its chunk file is still empty).
        named = [where / "data" / str(int.from_bytes(b[32:36], "little")) / b[16:32].hex()
                 for b in (p.read_bytes() for p in (where / "staging").glob("*/.claim.*"))
                 if len(b) == 60 and b.startswith(b"PLGCLAIM")]
        check(point != "objects.claim_staged" or any(p.is_file() for p in named),
              f"no claim under its temporary name names the dead rank's chunk file: {named}")
        said = obj("gc", where, "--older-than", "0").stdout
        check("removed 1 abandoned puts" in said, said)
        check(staged(where) == [] and chunk_files(where) == [],
              f"left after gc: {staged(where)} {chunk_files(where)[:4]}")
        left = [p for p in named if p.exists()]
        check(left == [], f"chunk files named by claims' temporary names left after gc: {left}")
        out = mpi_put(flavour, RANKS, url, "k", ROWS, 4, **lg).stdout
        if logged:
            check(recover(work, local).count("published logged array k version 1") == 1, "not published")
        only_version_is(work, url, "k", 4)
        check(chunk_files(root) and len(chunk_files(root)) == RANKS + 1,
              f"the store holds {len(chunk_files(root))} files, not the version's {RANKS} chunks and record: {out}")
    return go


def case_parts_writer(flavour, logged):
    """A rank writing a part of a chunk that another rank also writes
    (chunks of 24 rows over ranks of 16, mpi_put.c "partskill") killed
    after its bytes are in the shared chunk file, before its claim: nothing
    published (recover publishes nothing), `obj gc` removes the put and
    every chunk file, the program run again publishes version 1, its own
    bytes."""
    def go(work):
        url, root, local = store(work, "objstore"), work / "store", work / "local"
        lg = dict(local=str(local)) if logged else {}
        r = mpi_put(flavour, RANKS, url, "k", ROWS, 3, mode="partskill", check_rc=False, **lg)
        killed(r, "objects.mid_chunk")
        where = local / ".paralog-objects" if logged else root
        if logged:
            check("published" not in recover(work, local), "recover published a put whose writer died")
        check(versions(url, "k") == [], "a put whose writer died is visible")
        check(len(staged(where)) == 1 and chunk_files(where), f"the dead put: {staged(where)}")
        said = obj("gc", where, "--older-than", "0").stdout
        check("removed 1 abandoned puts" in said, said)
        check(staged(where) == [] and chunk_files(where) == [],
              f"left after gc: {staged(where)} {chunk_files(where)[:4]}")
        mpi_put(flavour, RANKS, url, "k", ROWS, 4, mode="parts", **lg)
        if logged:
            check(recover(work, local).count("published logged array k version 1") == 1, "not published")
        only_version_is(work, url, "k", 4)
        # 64 rows in chunks of 24: 3 chunk files and the array record.
        check(len(chunk_files(root)) == 4, f"the store holds {len(chunk_files(root))} files, not 3 chunks and a record")
    return go


def case_committer(flavour, point, logged):
    def go(work):
        url, root, local = store(work, "objstore"), work / "store", work / "local"
        lg = dict(local=str(local)) if logged else {}
        r = mpi_put(flavour, RANKS, url, "c", ROWS, 5, check_rc=False, env={"PARALOG_FAILPOINT": point}, **lg)
        killed(r, point)
        before = point == "objects.before_commit"
        if logged:
            said = recover(work, local)
            check(said.count("published logged array c version 1") == (0 if before else 1), said)
            check("published" not in recover(work, local), "a second recover published again")
            if before:
                check(versions(url, "c") == [], "a put killed before its local commit was published")
                where = local / ".paralog-objects"
                check("removed 1 abandoned puts" in obj("gc", where, "--older-than", "0").stdout, "gc")
                check(staged(where) == [] and chunk_files(where) == [], "left in the node-local store")
                return "not committed: never published, collected by gc"
            only_version_is(work, url, "c", 5)
            return "committed: published once by recover"
        # The put's id, as a user finds it.
        listed = obj("puts", url).stdout.splitlines()
        check(len(listed) == 1 and f" c: {RANKS}/{RANKS} chunks, {RANKS} writers finished" in listed[0]
              and (", publishing" if before else ", published as version 1") in listed[0], f"obj puts: {listed}")
        ids = [listed[0].split()[0]]
        check(ids == staged(root), f"obj puts {ids}, staged {staged(root)}")
        if before:
            check(versions(url, "c") == [], "visible before its commit published")
        else:
            check(versions(url, "c") == [1] and got(work, url, "c", 1) == expect(5),
                  "published before the kill, but not whole")
        for _ in range(2):
            said = obj("commit", at(url, "c"), ids[0]).stdout
            check("version 1" in said, f"commit again: {said}")
        only_version_is(work, url, "c", 5)
        check(staged(root) == [], f"left staged: {staged(root)}")
        # The retried commit wrote the array record again under the same
        # name (the put's id): no second one is left over.
        check(len(chunk_files(root)) == RANKS + 1,
              f"the store holds {len(chunk_files(root))} files, not the version's {RANKS} chunks and record")
        return "published once by `obj commit URL ID`"
    return go


def logged_puts(work, url, local, n, rng, rows=64):
    """n logged whole puts of one name (float64, rows x 4096 in chunks of
    4 rows: 2 MiB each at 64 rows), committed locally; their bytes."""
    datas = []
    for k in range(n):
        data = work / f"p{k}.bin"
        data.write_bytes(rng.randbytes(rows * 4096 * 8))
        obj("put", at(url, "s"), data, "--dtype", "float64", "--shape", f"{rows},4096", "--chunks", "4,4096",
            "--local", local)
        datas.append(data.read_bytes())
    return datas


def each_once(work, url, datas):
    """One version per put, in commit order, each equal to its put; the
    store holds their chunk files and records and nothing else that has
    bytes (a remote put a killed publisher left was resumed, its chunks
    copied before the kill kept, not copied twice)."""
    vs = versions(url, "s")
    check(vs == list(range(1, len(datas) + 1)), f"versions {vs}, for {len(datas)} puts")
    for n, d in enumerate(datas, 1):
        check(got(work, url, "s", n) == d, f"version {n} is not put {n}")
    obj("verify", at(url, "s"), "--all")
    files = chunk_files(work / "store")
    want = sum(len(d) // (4 * 4096 * 8) + 1 for d in datas)
    check(len(files) == want, f"the store holds {len(files)} chunk files and records, not {want}")


def case_server(point):
    def go(work):
        url, local, rng = store(work, "objstore"), work / "local", random.Random(point)
        local.mkdir(mode=0o700)  # the puts are logged first: the server finds them all at once
        datas = logged_puts(work, url, local, 3, rng, rows=16)
        server_killed_at(work, local, point)
        published = len(versions(url, "s"))
        check(published == (0 if point == "objects.publish_mid_copy" else 1), f"published before: {published}")
        # A put published before the kill is reported with the version it
        # already had (recover only cleaned up after it), unless the kill
        # came during that cleanup (the next round only removes what is left).
        said = recover(work, local)
        reported = (2, 3) if point == "objects.publish_mid_cleanup" else (1, 2, 3)
        check(all(f"published logged array s version {n} " in said for n in reported)
              and said.count("published logged array s") == len(reported), said)
        check("published" not in recover(work, local), "a second recover published again")
        each_once(work, url, datas)
        check(staged(local / ".paralog-objects") == [], "left in the node-local store")
    return go


def server_killed_at(work, local, point):
    """A node server started on `local`, killed at the crash point `point`."""
    log = work / "server.log"
    wait_failpoint_kill(failpoint_server(local, work / "remote", log, point), log, point)


def newer_puts(work, url, rng, n):
    """n direct whole puts of `s` (16 x 4096 float64) by another writer: the last one's bytes."""
    for k in range(n):
        data = work / f"newer{k}.bin"
        data.write_bytes(rng.randbytes(16 * 4096 * 8))
        obj("put", at(url, "s"), data, "--dtype", "float64", "--shape", "16,4096", "--chunks", "4,4096")
    return data.read_bytes()


def outlived(work, url, version, newest):
    """The killed put's version kept past keep=1 while its commit was
    unfinished, then, once finished, only the newest put's version."""
    vs = versions(url, "s")
    check(vs == [version], f"versions after the retry: {vs}, want [{version}] (the newest put's)")
    check(got(work, url, "s", version) == newest, "the latest version is not the newest put")
    obj("verify", at(url, "s"), "--all")
    check(staged(work / "store") == [], f"the store's staging: {staged(work / 'store')}")


def case_publisher_outlived(work):
    """The node server killed after a logged put's remote publish, before
    it retired the put; then two newer puts of the name with keep=1. The
    retry used to find no version of the put (retention had dropped it)
    and publish it again, as the latest: the older put replaced the newer
    one, whose version keep=1 then dropped. Now the version stays until
    the publisher's retry finishes, then goes; nothing is published again."""
    url, local, rng = store(work, "objstore", keep=1), work / "local", random.Random(5)
    local.mkdir(mode=0o700)
    logged_puts(work, url, local, 1, rng, rows=16)
    server_killed_at(work, local, "objects.publish_after_remote")
    check(versions(url, "s") == [1], f"published before: {versions(url, 's')}")
    newest = newer_puts(work, url, rng, 2)
    check(versions(url, "s") == [1, 3], f"kept while the publisher's put was unfinished: {versions(url, 's')}")
    said = recover(work, local)
    check(said.count("published logged array s version 1 ") == 1 and said.count("published") == 1, said)
    outlived(work, url, 3, newest)
    check(staged(local / ".paralog-objects") == [], "left in the node-local store")
    return "version 1 kept until recover retired it, then dropped; version 3 the latest"


def case_committer_outlived(work):
    """`obj commit` killed after its publish, before its cleanup; then two
    newer puts of the name with keep=1; then the commit retried. The
    retry used to publish the put again, with the chunk files retention
    had removed (a version that read "No such file"), and keep=1 dropped
    the newer put's. Now it answers the version it published."""
    url, rng = store(work, "objstore", keep=1), random.Random(6)
    spec = ["--dtype", "float64", "--shape", "16,4096", "--chunks", "4,4096"]
    pid = obj("begin", at(url, "s"), *spec).stdout.strip()
    data = rng.randbytes(16 * 4096 * 8)
    f = work / "killed.bin"
    f.write_bytes(data)
    obj("write", at(url, "s"), pid, f, *[x for i in range(4) for x in ("--chunk", f"{i},0")])
    point = "objects.after_commit"
    killed(run([BIN, "obj", "commit", at(url, "s"), pid], check=False, timeout=300,
               env={**os.environ, "PARALOG_FAILPOINT": point}), point)
    newest = newer_puts(work, url, rng, 2)
    check(versions(url, "s") == [1, 3], f"kept while the commit was unfinished: {versions(url, 's')}")
    check(got(work, url, "s", 1) == data, "version 1 is not the killed commit's put")
    r = obj("commit", at(url, "s"), pid)
    check("s version 1 " in r.stdout and "warning" not in r.stderr, f"the retried commit: {r.stdout}{r.stderr}")
    outlived(work, url, 3, newest)
    return "version 1 kept until the retried commit finished, then dropped; version 3 the latest"


def case_server_random(work):
    url, local, rng = store(work, "objstore"), work / "local", random.Random(time.time_ns())
    local.mkdir(mode=0o700)
    datas = logged_puts(work, url, local, 6, rng)
    server = Server(local, work / "remote", os.environ.copy())
    delay = rng.uniform(0.05, 1.0)
    time.sleep(delay)
    server.kill()
    before = len(versions(url, "s"))
    recover(work, local)
    check("published" not in recover(work, local), "a second recover published again")
    each_once(work, url, datas)
    check(staged(local / ".paralog-objects") == [], "left in the node-local store")
    return f"killed after {delay:.2f} s with {before} of 6 published; recover published the rest once"


def main():
    a = suite_options().parse_args()
    suite = Suite("objects-crash", keep=a.keep)
    cases = []
    for flavour in FLAVOURS:
        for logged in (False, True):
            how = "logged" if logged else "direct"
            for point in WRITER_KILLS:
                cases.append((f"writer killed at {point} [{flavour}, {how}]", case_writer(flavour, logged, point)))
            cases.append((f"writer of a part killed [{flavour}, {how}]", case_parts_writer(flavour, logged)))
            for point in ("objects.before_commit", "objects.after_commit"):
                cases.append((f"committer killed at {point} [{flavour}, {how}]",
                              case_committer(flavour, point, logged)))
    # objects.after_commit in the server: its remote commit killed after
    # the publish, before the views (recover left version 1 without its
    # Zarr view until publish_one committed again).
    # objects.publish_mid_cleanup: killed while removing the published
    # put's node-local directory (the random-time kill once left a claim
    # there that no round removed).
    for point in ("objects.publish_mid_copy", "objects.after_commit", "objects.publish_after_remote",
                  "objects.publish_mid_cleanup"):
        cases.append((f"server killed at {point}", case_server(point)))
    cases.append(("server killed at a random time", case_server_random))
    cases.append(("publisher killed after its publish, newer puts with keep=1", case_publisher_outlived))
    cases.append(("committer killed after its publish, newer puts with keep=1", case_committer_outlived))
    return suite.run(cases, only=a.only)


if __name__ == "__main__":
    sys.exit(main())
