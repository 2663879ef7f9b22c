#!/usr/bin/python3
"""Array objects on S3 (docs/objects.md "S3", issue 18) against a real
MinIO on loopback (tests/lib/minio.py): `paralog obj` on
`s3://bucket/STORE/NAME`, every read compared byte for byte with numpy
slices of what was put.

  dtypes      every element type, 37x19 in chunks of 8x5 (edge chunks),
              and 1-D, 3-D and one-chunk-larger-than-the-array grids:
              whole gets and random `--slice` slabs; `obj ls`, `obj info`,
              `obj verify --all`, `obj rm`
  chunked     the seed's int32 chunks of 16x4096 per writer on 1, 2 and 4
              writer processes of one chunked put (`obj begin`, concurrent
              `obj write`, `obj commit`); an overlapping write and a commit
              with a chunk missing are refused, nothing published; a chunk
              written in two parts (`obj write --slice`)
  concurrent  4 processes x 6 puts of one name at once: 24 versions
              (create-only PUTs of the version records: none replaced),
              each equal to one put, every put present once
  old version a version an older binary wrote (crates/objects/tests/
              vectors/old_store, whose record names no chunk) put in the
              bucket: `obj get`, `obj view`, `obj verify` read it as before;
              a flipped byte refused
  python      `paralog.objects` (ctypes over the C API) on s3://: puts of
              three dtypes, slabs, a chunked put by two writers, a 3-D put
              whose chunks three writers wrote in parts; overlapping parts
              refused
  damage      another valid chunk object of the version in a chunk's place
              (swapped), a flipped byte, a truncated chunk object: `obj get`,
              `obj verify` and `paralog.objects` refuse naming object,
              version, chunk and the chunk's S3 object
  killed commit  `obj commit` killed before and after its publish, then
              committed again twice: one version, equal to the put
  older commit  what an older binary's commit killed before its publish
              left (`data/<uuid>` named by `head.<uuid>`, `publishing`):
              `obj abort` removes all of it; committed again, version 1
              once, staging removed
  mpi         tests/objects/mpi_put.c (the C API's chunked put over a
              communicator) on s3://, MPICH and Open MPI, 4 ranks of
              16x4096 int32: rank 0 reads it back equal, `obj get` equals
              the formula; the same in chunks of 24 rows that two ranks
              write in parts (no staging left); a rank killed between its chunk object and its
              claim (objects.mid_chunk): nothing published (the dead put
              stays staged until `obj gc --older-than 0` removes it, the
              published version intact), and the program run again
              publishes version 1, its own bytes
  publish search  a logged put's publish (`obj publish`) through
              tests/remote/faultproxy.py, counting requests: it reads none
              of the 6 kept version records (before: all, at every
              publish); a publish killed after its remote commit and
              retried: one version
  retention   `?keep=2`: 5 puts of one name (4 chunks each) leave versions
              4 and 5, each its own bytes; version 3 is gone (`obj get`
              refuses it); the bucket holds exactly the two versions' chunk
              and array-record objects; a name put without keep keeps all
  lost answers  4 puts through tests/remote/faultproxy.py losing half the
              answers after MinIO carried the requests out: 4 versions
              (the client's retries of create-only PUTs get 412 for
              their own records and claims)
  zarr view   every dtype (attributes), the other grids, 3 versions of one
              name and the seed's chunked puts (16x4096 on 1 writer,
              32x4096 on 2, 64x4096 on 4): zarr-python (s3fs) and
              tensorstore (its s3 driver) open each version's view on
              MinIO and read it whole and by random slabs equal to the put
  zarr damage a flipped byte, then a truncated chunk object of a view:
              both readers refuse (crc32c codec), `obj verify` refuses
              naming the chunk; another whole chunk in its place and a
              view chunk deleted: `obj verify` refuses (the readers would
              read the wrong chunk, or fill values)
  view order  `obj commit` killed before and after its publish: no view
              (both readers find no array) until the retried commit makes
              it; readers polling a view while its put commits find no
              array or the whole array, never fill values
  gc          a writer killed between its chunk object and its claim
              (objects.mid_chunk), commits killed before and after their
              publish, a view of a version gone, a view without its
              zarr.json, a put in progress, a put whose commit was killed
              before its publish past the grace of its writes (its array
              record within it): `obj gc` within the grace removes
              nothing; past it, it leaves exactly the published versions'
              keys and the two puts' (the bucket listed; the killed one
              then commits), every version verified; after the live put
              commits, nothing else

Usage: python3 -m tests.objects.s3 [--only SUBSTRING] [--keep]
Ends with "objects-s3: N passed, N failed"."""
import json
import random
import re
import subprocess
import sys
import time

import numpy as np

from tests.lib.check import Suite, check, suite_options
from tests.lib.minio import MinIO
from tests.lib.paths import BIN, ROOT
from tests.lib.proc import run
from tests.objects.run import py_get

BUCKET = "plobjects"
DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64")


class S3:
    """A MinIO with a bucket and an object store in it."""

    def __init__(self, work):
        self.minio, self.env = MinIO.with_bucket(work, BUCKET)
        self.store = f"s3://{BUCKET}/store"
        self.obj("init", self.store)

    def obj(self, *args, check=True):
        return run([BIN, "obj", *args], env=self.env, check=check, timeout=300)

    def at(self, name):
        return f"{self.store}/{name}"

    def info(self, name):
        return json.loads(self.obj("info", self.at(name), "--json").stdout)

    def killed_commit(self, work, name, a, rows, point):
        """A chunked put of the 2-D int32 array `a` (chunks of `rows` whole
        rows, all written from one file), its commit killed at the crash
        point `point`: the put's id and the file."""
        f = work / f"{name.replace('/', '-')}.bin"
        f.write_bytes(a.tobytes())
        shape, chunks = f"{a.shape[0]},{a.shape[1]}", f"{rows},{a.shape[1]}"
        pid = self.obj("begin", self.at(name), "--dtype", "int32", "--shape", shape, "--chunks", chunks).stdout.strip()
        self.obj("write", self.at(name), pid, f, *[x for i in range(a.shape[0] // rows) for x in ("--chunk", f"{i},0")])
        r = run([BIN, "obj", "commit", self.at(name), pid], env={**self.env, "PARALOG_FAILPOINT": point},
                check=False, timeout=300)
        check(r.returncode == -9, f"{name}: commit at {point}: {r.returncode} {r.stderr}")
        return pid, f

    def stop(self):
        self.minio.stop()


def with_s3(fn):
    def go(work):
        s3 = S3(work)
        try:
            return fn(work, s3)
        finally:
            s3.stop()
    return go


def rand_array(rng, dtype, shape):
    raw = rng.randbytes(int(np.prod(shape)) * np.dtype(dtype).itemsize)
    return np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).reshape(shape)


def rand_slab(rng, shape):
    start = [rng.randrange(n) for n in shape]
    stop = [rng.randrange(a + 1, n + 1) for a, n in zip(start, shape)]
    return start, stop


def put_and_check(work, s3, rng, name, a, chunks):
    data = work / f"{name.replace('/', '-')}.bin"
    data.write_bytes(a.tobytes())
    out = s3.obj("put", s3.at(name), data, "--dtype", a.dtype.name, "--shape", ",".join(map(str, a.shape)),
                 "--chunks", ",".join(map(str, chunks))).stdout
    check(f"{name} version 1 " in out, f"put {name}: {out!r}")
    got = work / "got.bin"
    s3.obj("get", s3.at(name), got)
    check(got.read_bytes() == data.read_bytes(), f"{name}: the whole get is not what was put")
    for _ in range(4):
        start, stop = rand_slab(rng, a.shape)
        s3.obj("get", s3.at(name), got, "--slice", ",".join(f"{x}:{y}" for x, y in zip(start, stop)))
        want = a[tuple(slice(x, y) for x, y in zip(start, stop))]
        check(got.read_bytes() == np.ascontiguousarray(want).tobytes(),
              f"{name}: slab {start}..{stop} is not the put's")


@with_s3
def case_dtypes(work, s3):
    rng = random.Random(18)
    for dtype in DTYPES:
        put_and_check(work, s3, rng, f"dtypes/{dtype}", rand_array(rng, dtype, (37, 19)), (8, 5))
    for name, dtype, shape, chunks in (("g/1d", "uint16", (1000,), (64,)),
                                       ("g/3d", "float32", (5, 7, 9), (2, 3, 4)),
                                       ("g/big", "int64", (10, 10), (16, 16))):
        put_and_check(work, s3, rng, name, rand_array(rng, dtype, shape), chunks)
    ls = s3.obj("ls", s3.store).stdout.splitlines()
    check(len(ls) == len(DTYPES) + 3, f"obj ls: {ls}")
    i = s3.info("dtypes/int32")
    check((i["dtype"], i["shape"], i["chunks"], i["grid"]) == ("int32", [37, 19], [8, 5], [5, 4]), f"info: {i}")
    said = s3.obj("verify", s3.at("g/3d"), "--all").stdout
    check("g/3d version 1: 27 chunks verified" in said, said)
    check("deleted as version 2" in s3.obj("rm", s3.at("g/1d")).stdout, "obj rm")
    check(len(s3.obj("ls", s3.store).stdout.splitlines()) == len(DTYPES) + 2, "obj ls after rm")
    r = s3.obj("get", s3.at("g/1d"), work / "x", check=False)
    check(r.returncode == 1 and "deleted (version 2)" in r.stderr, r.stderr)
    s3.obj("get", s3.at("g/1d"), work / "x", "--version", "1")


@with_s3
def case_chunked(work, s3):
    rng = random.Random(4096)
    for writers in (1, 2, 4):
        name = f"seed/{writers}"
        a = rand_array(rng, "int32", (16 * writers, 4096))
        pid = s3.obj("begin", s3.at(name), "--dtype", "int32", "--shape", f"{16 * writers},4096",
                     "--chunks", "16,4096").stdout.strip()
        parts = []
        for w in range(writers):
            p = work / f"part-{writers}-{w}.bin"
            p.write_bytes(a[16 * w:16 * (w + 1)].tobytes())
            parts.append(p)
        procs = [subprocess.Popen([str(BIN), "obj", "write", s3.at(name), pid, str(p), "--chunk", f"{w},0"],
                                  env=s3.env, stderr=subprocess.PIPE, text=True) for w, p in enumerate(parts)]
        for p in procs:
            _, err = p.communicate(timeout=300)
            check(p.returncode == 0, f"obj write: {err}")
        s3.obj("commit", s3.at(name), pid)
        got = work / "got.bin"
        s3.obj("get", s3.at(name), got)
        check(got.read_bytes() == a.tobytes(), f"{writers} writers: not the array put")
    # Refusals: an overlapping write, a missing chunk at the commit.
    pid = s3.obj("begin", s3.at("p"), "--dtype", "uint8", "--shape", "16", "--chunks", "8").stdout.strip()
    eight = work / "8.bin"
    eight.write_bytes(bytes(range(8)))
    s3.obj("write", s3.at("p"), pid, eight, "--chunk", "0")
    r = s3.obj("write", s3.at("p"), pid, eight, "--chunk", "0", check=False)
    check(r.returncode == 1 and "already written by another writer" in r.stderr, r.stderr)
    r = s3.obj("commit", s3.at("p"), pid, check=False)
    check(r.returncode == 1 and "1 of 2 chunks were not written" in r.stderr, r.stderr)
    r = s3.obj("get", s3.at("p"), work / "x", check=False)
    check(r.returncode == 1 and "no version published" in r.stderr, f"a refused commit published: {r.stderr}")
    s3.obj("write", s3.at("p"), pid, eight, "--chunk", "1")
    s3.obj("commit", s3.at("p"), pid)
    s3.obj("get", s3.at("p"), work / "x")
    check((work / "x").read_bytes() == bytes(range(8)) * 2, "the committed put")
    # `obj write --slice`: one chunk of 16 written in two parts.
    pid = s3.obj("begin", s3.at("sl"), "--dtype", "uint8", "--shape", "16", "--chunks", "16").stdout.strip()
    for band, vals in (("0:10", bytes(range(10))), ("10:16", bytes(range(10, 16)))):
        (work / "band.bin").write_bytes(vals)
        s3.obj("write", s3.at("sl"), pid, work / "band.bin", "--slice", band)
    s3.obj("commit", s3.at("sl"), pid)
    s3.obj("get", s3.at("sl"), work / "x")
    check((work / "x").read_bytes() == bytes(range(16)), "the put of two parts")


@with_s3
def case_killed_commit(work, s3):
    """`obj commit` killed (SIGKILL at the library's crash points) before
    and after its publish, then committed again: one version, the put's.
    After the publish, the retry used to publish the put a second time
    (the staging `begin` was still there, and only its absence made the
    commit look for the version by its id)."""
    rng = random.Random(11)
    for k, point in enumerate(("objects.before_commit", "objects.after_commit")):
        name = f"killed/{k}"
        a = rand_array(rng, "int32", (32, 4096))
        pid = s3.obj("begin", s3.at(name), "--dtype", "int32", "--shape", "32,4096", "--chunks", "16,4096").stdout.strip()
        for w in range(2):
            p = work / f"killed-{k}-{w}.bin"
            p.write_bytes(a[16 * w:16 * (w + 1)].tobytes())
            s3.obj("write", s3.at(name), pid, p, "--chunk", f"{w},0")
        r = run([BIN, "obj", "commit", s3.at(name), pid], env={**s3.env, "PARALOG_FAILPOINT": point},
                check=False, timeout=300)
        check(r.returncode == -9 and f"failpoint {point} reached" in r.stderr, f"{point}: {r.returncode} {r.stderr}")
        before = s3.obj("info", s3.at(name), "--json", check=False)
        published = [v["number"] for v in json.loads(before.stdout)["versions"]] if before.returncode == 0 else []
        check(published == ([] if k == 0 else [1]), f"{point}: published before the retry: {published}")
        for _ in range(2):
            said = s3.obj("commit", s3.at(name), pid).stdout
            check("version 1" in said, f"{point}: the retried commit: {said}")
        check([v["number"] for v in s3.info(name)["versions"]] == [1], f"{point}: versions {s3.info(name)['versions']}")
        got = work / "got.bin"
        s3.obj("get", s3.at(name), got)
        check(got.read_bytes() == a.tobytes(), f"{point}: not the array put")
        s3.obj("verify", s3.at(name))
        left = s3.minio.keys(BUCKET, f"store/staging/{pid}")
        check(left == [], f"{point}: staging objects left: {left}")


@with_s3
def case_outlived_commit(work, s3):
    """`obj commit` killed after its publish, before its cleanup; then two
    newer puts of the name with keep=1; then the commit retried. Retention
    used to drop the killed put's version and its chunk objects, and the
    retry published it again without them (a version that did not read),
    the newer put dropped by keep=1. Now the version stays while its
    staging `begin` does, the retry answers it and finishes, and the
    newest put is the latest."""
    rng = random.Random(19)
    a = rand_array(rng, "int32", (8, 16))
    pid, _ = s3.killed_commit(work, "outlived", a, 4, "objects.after_commit")
    for k in range(2):
        b = rand_array(rng, "int32", (8, 16))
        f = work / f"outlived-{k}.bin"
        f.write_bytes(b.tobytes())
        s3.obj("put", s3.at("outlived") + "?keep=1", f, "--dtype", "int32", "--shape", "8,16", "--chunks", "4,16")
    numbers = lambda: [v["number"] for v in s3.info("outlived")["versions"]]  # noqa: E731
    check(numbers() == [1, 3], f"kept while the commit was unfinished: {numbers()}")
    said = s3.obj("commit", s3.at("outlived") + "?keep=1", pid).stdout
    check("outlived version 1 " in said, f"the retried commit: {said}")
    check(numbers() == [3], f"versions after the retry: {numbers()}")
    got = work / "got.bin"
    s3.obj("get", s3.at("outlived"), got)
    check(got.read_bytes() == b.tobytes(), "the latest version is not the newest put")
    s3.obj("verify", s3.at("outlived"), "--all")
    check(s3.minio.keys(BUCKET, f"store/staging/{pid}") == [], "staging objects left")
    return "version 1 kept until the retried commit finished, then dropped; version 3 the latest"


@with_s3
def case_older_commit(work, s3):
    """What an older binary's commit killed before its publish left: the
    array record at a random key `data/<uuid>`, named by the staging
    objects `head.<uuid>` and `publishing` (made here from this binary's
    `data/<id>`). `obj abort` removes it with the put; committed again
    instead, the put is published once and its staging removed."""
    rng = random.Random(17)
    for k, then in enumerate(("abort", "commit")):
        name = f"older/{k}"
        a = rand_array(rng, "int32", (8, 16))
        before = {key for key, _ in s3.minio.keys(BUCKET, "store/data")}
        pid, _ = s3.killed_commit(work, name, a, 4, "objects.before_commit")
        old = "%032x" % rng.getrandbits(128)
        s3.minio.aws("s3", "mv", f"s3://{BUCKET}/store/data/{pid}", f"s3://{BUCKET}/store/data/{old}")
        for mark in (f"head.{old}", "publishing"):
            s3.minio.api("put-object", "--bucket", BUCKET, "--key", f"store/staging/{pid}/{mark}")
        s3.obj(then, s3.at(name), pid)
        left = {key for key, _ in s3.minio.keys(BUCKET, "store/data")} - before
        check(s3.minio.keys(BUCKET, f"store/staging/{pid}") == [], f"{then}: staging objects left")
        if then == "abort":
            check(left == set(), f"abort left chunk objects: {sorted(left)}")
            check(s3.obj("info", s3.at(name), check=False).returncode != 0, "the aborted put is published")
            continue
        check([v["number"] for v in s3.info(name)["versions"]] == [1], f"versions {s3.info(name)['versions']}")
        check("version 1" in s3.obj("commit", s3.at(name), pid).stdout, "a second commit")
        got = work / "got.bin"
        s3.obj("get", s3.at(name), got)
        check(got.read_bytes() == a.tobytes(), "not the array put")
        # The older record's object is left for `obj gc` (no put names it).
        check(f"store/data/{old}" in left and f"store/data/{pid}" in left and len(left) == 4,
              f"chunk objects: {sorted(left)}")
    return "aborted: nothing left; committed: version 1 once"


@with_s3
def case_lost_answers(work, s3):
    """Through tests/remote/faultproxy.py, half the requests' answers lost
    after MinIO carried them out (`reset_after`): the client retries a
    create-only PUT that already happened and gets 412. Whole puts and a
    chunked put by two writers: each put is one version, equal to it."""
    from tests.remote.s3 import FaultProxy
    proxy = FaultProxy(work, s3.minio.port, seed=5, rate=0.5, min_rate=0.4, kinds="reset_after")
    try:
        env = s3.minio.env(endpoint=f"http://127.0.0.1:{proxy.port}")
        rng = random.Random(12)
        puts = []
        for k in range(4):
            a = rand_array(rng, "int16", (24, 10))
            f = work / f"lost-{k}.bin"
            f.write_bytes(a.tobytes())
            r = run([BIN, "obj", "put", s3.at("lost"), f, "--dtype", "int16", "--shape", "24,10", "--chunks", "8,10"],
                    env=env, check=False, timeout=300)
            check(r.returncode == 0, f"put {k} through lost answers: {r.stderr[-600:]}")
            puts.append(a.tobytes())
    finally:
        stats = proxy.stop()
    check(stats["kinds"].get("reset_after", 0) > 0, f"no answer was lost: {stats}")
    versions = [v["number"] for v in s3.info("lost")["versions"]]
    check(versions == list(range(1, len(puts) + 1)), f"{len(puts)} puts made versions {versions}")
    for n, want in enumerate(puts, 1):
        got = work / "got.bin"
        s3.obj("get", s3.at("lost"), got, "--version", str(n))
        check(got.read_bytes() == want, f"version {n} is not put {n}")
    return f"{stats['kinds']['reset_after']} answers lost of {stats['requests']} requests: {stats['fault_ops']}"


@with_s3
def case_publish_search(work, s3):
    """A logged put (`obj put --local`) published (`obj publish`) through
    tests/remote/faultproxy.py injecting nothing, logging every request:
    the publish reads none of the 6 version records the name keeps (its
    search for a version of the put's id is made only when the put's
    array record object exists; before, one GET per kept version at every
    publish), and the remote put it makes is not read back while its
    chunks are copied. Then a put whose remote commit was killed after its
    publish is published again: one version, found by that search."""
    from tests.remote.s3 import FaultProxy
    rng = random.Random(13)
    put = ["--dtype", "int32", "--shape", "8,10", "--chunks", "4,5"]
    for k in range(6):
        f = work / f"kept-{k}.bin"
        f.write_bytes(rng.randbytes(8 * 10 * 4))
        s3.obj("put", s3.at("t"), f, *put)
    data, local = work / "logged.bin", work / "local"
    data.write_bytes(rng.randbytes(8 * 10 * 4))
    local.mkdir()
    s3.obj("put", s3.at("t"), data, *put, "--local", local)
    proxy = FaultProxy(work, s3.minio.port, rate=0, min_rate=0)
    try:
        env = s3.minio.env(endpoint=f"http://127.0.0.1:{proxy.port}")
        run([BIN, "obj", "publish", local], env=env, timeout=300)
    finally:
        stats = proxy.stop()
    check(stats["faults"] == 0, f"the proxy injected faults: {stats}")
    requests = [ln for ln in proxy.log.read_text().splitlines() if " forwarded " in ln]
    reread = [ln for ln in requests if re.search(r" GET \S*/meta/t/v\d{10}\b", ln)]
    check(not reread, "the publish read version records:\n" + "\n".join(reread))
    # The remote put made now is not read back before the copy is whole
    # (its writer's mark): no `begin`, `name`, mark or claim to look for
    # in a put just made (before: 8 GETs for this put of 4 chunks).
    mark = next((i for i, ln in enumerate(requests) if re.search(r" PUT \S*/staging/[0-9a-f]{32}/w[0-9a-f]{32}\b", ln)),
                None)
    check(mark is not None, "no writer's mark was put:\n" + "\n".join(requests))
    early = [ln for ln in requests[:mark] if re.search(r" GET \S*/staging/[0-9a-f]{32}/", ln)]
    check(not early, "the copy read the remote put it had just made:\n" + "\n".join(early))
    check([v["number"] for v in s3.info("t")["versions"]] == list(range(1, 8)), f"versions {s3.info('t')['versions']}")
    got = work / "got.bin"
    s3.obj("get", s3.at("t"), got, "--version", "7")
    check(got.read_bytes() == data.read_bytes(), "version 7 is not the logged put")
    # Killed after its remote publish: the retry finds the version.
    data.write_bytes(rng.randbytes(8 * 10 * 4))
    s3.obj("put", s3.at("t"), data, *put, "--local", local)
    r = run([BIN, "obj", "publish", local], env={**s3.env, "PARALOG_FAILPOINT": "objects.after_commit"},
            check=False, timeout=300)
    check(r.returncode == -9, f"after_commit: {r.returncode} {r.stderr}")
    s3.obj("publish", local)
    check([v["number"] for v in s3.info("t")["versions"]] == list(range(1, 9)), f"versions {s3.info('t')['versions']}")
    s3.obj("get", s3.at("t"), got, "--version", "8")
    check(got.read_bytes() == data.read_bytes(), "version 8 is not the logged put")
    return f"{len(requests)} requests for the publish, none of them a version record"


@with_s3
def case_retention(work, s3):
    rng = random.Random(11)
    datas = []
    for k in range(5):
        f = work / f"r{k}.bin"
        f.write_bytes(rng.randbytes(8 * 10 * 4))
        datas.append(f.read_bytes())
        s3.obj("put", s3.at("r") + "?keep=2", f, "--dtype", "int32", "--shape", "8,10", "--chunks", "4,5")
        s3.obj("put", s3.at("all"), f, "--dtype", "int32", "--shape", "8,10", "--chunks", "4,5")
    check([v["number"] for v in s3.info("r")["versions"]] == [4, 5], f"kept: {s3.info('r')['versions']}")
    check(len(s3.info("all")["versions"]) == 5, "a name put without keep lost versions")
    got = work / "got.bin"
    for n in (4, 5):
        s3.obj("get", s3.at("r"), got, "--version", str(n))
        check(got.read_bytes() == datas[n - 1], f"version {n} is not put {n}")
    r = s3.obj("get", s3.at("r"), got, "--version", "3", check=False)
    check(r.returncode != 0 and "3" in r.stderr, f"a dropped version read: {r.returncode} {r.stderr}")
    data_objects = [k for k, _ in s3.minio.keys(BUCKET, "store/data")]
    # 'r': 2 versions x (4 chunks + 1 array record); 'all': 5 x 5.
    check(len(data_objects) == 2 * 5 + 5 * 5, f"{len(data_objects)} data objects, want {2 * 5 + 5 * 5}")
    # The views of the dropped versions went with them (zarr.json + 4 chunks each).
    views = sorted({k.split("/")[3] for k, _ in s3.minio.keys(BUCKET, "store/zarr/r")})
    check(views == ["v0000000004", "v0000000005"], f"views left of 'r': {views}")
    check(len(s3.minio.keys(BUCKET, "store/zarr/r")) == 2 * 5, "a view of 'r' is not whole")
    return "versions 4 and 5 kept with their objects and views, the rest dropped"


@with_s3
def case_concurrent(work, s3):
    rng = random.Random(7)
    procs, puts = [], {}
    for w in range(4):
        files = []
        for k in range(6):
            f = work / f"w{w}-{k}.bin"
            f.write_bytes(rng.randbytes(6 * 10 * 2))
            puts[f.read_bytes()] = f.name
            files.append(str(f))
        script = "; ".join(f"{BIN} obj put {s3.at('w')} {f} --dtype uint16 --shape 6,10 --chunks 4,4"
                           for f in files)
        procs.append(subprocess.Popen(["sh", "-ec", script], env=s3.env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    for p in procs:
        out, err = p.communicate(timeout=600)
        check(p.returncode == 0, f"a writer: {err}")
    versions = s3.info("w")["versions"]
    check([v["number"] for v in versions] == list(range(1, 25)), f"versions: {versions}")
    seen = []
    for n in range(1, 25):
        got = work / "got.bin"
        s3.obj("get", s3.at("w"), got, "--version", str(n))
        check(got.read_bytes() in puts, f"version {n} is no put (mixed?)")
        seen.append(puts[got.read_bytes()])
    check(sorted(seen) == sorted(puts.values()), f"a put lost or published twice: {sorted(seen)}")


@with_s3
def case_damage(work, s3):
    a = rand_array(random.Random(5), "int32", (64, 4096))
    data = work / "d.bin"
    data.write_bytes(a.tobytes())
    s3.obj("put", s3.at("dmg"), data, "--dtype", "int32", "--shape", "64,4096", "--chunks", "16,4096")
    # The chunk object holding rows 16..32: its bytes then their CRC-32C.
    dest = work / "data"
    keys = s3.minio.download_all(BUCKET, "store/data", dest)
    want = a[16:32].tobytes()
    key = [k for k in keys if (dest / k).read_bytes()[:len(want)] == want]
    check(len(key) == 1, f"chunk [1, 0] in {keys}")
    good = (dest / key[0]).read_bytes()
    # "swapped": chunk [2, 0]'s object (intact, same size) in its place.
    want2 = a[32:48].tobytes()
    other = [(dest / k).read_bytes() for k in keys if (dest / k).read_bytes()[:len(want2)] == want2]
    check(len(other) == 1, f"chunk [2, 0] in {keys}")
    for how, bad, said in (("swapped", other[0], "another chunk"),
                           ("flipped", good[:777] + bytes([good[777] ^ 4]) + good[778:], "checksum mismatch"),
                           ("truncated", good[:-9], "truncated")):
        f = work / "bad"
        f.write_bytes(bad)
        s3.minio.aws("s3api", "put-object", "--bucket", BUCKET, "--key", f"store/data/{key[0]}", "--body", f)
        for cmd in (["get", s3.at("dmg"), work / "out.bin"], ["verify", s3.at("dmg")]):
            r = s3.obj(*cmd, check=False)
            check(r.returncode == 1, f"{how}: obj {cmd[0]} exited {r.returncode}")
            check("dmg version 1: chunk [1, 0]" in r.stderr and f"store/data/{key[0]}" in r.stderr,
                  f"{how}: obj {cmd[0]} said {r.stderr!r}")
            check(said in r.stderr, f"{how}: {r.stderr!r}")
        rc, out = py_get(s3.store, "dmg", env=s3.env)
        check(rc == 1 and "dmg version 1: chunk [1, 0]" in out and said in out,
              f"{how}: paralog.objects said {out!r}")
        print(f"  {how}: {r.stderr.strip()}")
    f.write_bytes(good)
    s3.minio.aws("s3api", "put-object", "--bucket", BUCKET, "--key", f"store/data/{key[0]}", "--body", f)
    s3.obj("verify", s3.at("dmg"))


PY_PUT = """
import sys
import numpy as np
import paralog.objects as po
rng = np.random.default_rng(3)
with po.Store(sys.argv[1]) as s:
    for dt in ("int8", "uint32", "float64"):
        a = rng.integers(0, 100, size=(21, 13)).astype(dt)
        assert s.put("py/" + dt, a, chunks=(4, 5)) == 1
        assert (s.get("py/" + dt) == a).all(), dt
        assert (s.get("py/" + dt, start=(3, 2), count=(9, 7)) == a[3:12, 2:9]).all(), dt
    # A chunked put by two writers of one put, then its commit.
    a = rng.integers(0, 1 << 30, size=(8, 6)).astype("int32")
    pid = s.begin("py/chunked", "int32", (8, 6), (4, 6))
    ws = [s.join("py/chunked", pid, "int32", (8, 6), (4, 6)) for _ in range(2)]
    for i, w in enumerate(ws):
        w.write_chunk((i, 0), a[4 * i:4 * i + 4])
        w.finish()
    assert s.commit("py/chunked", pid) == 1
    assert (s.get("py/chunked") == a).all()
    # Parts: three writers' row bands of 3-D chunks they share, and an
    # edge chunk; then parts that overlap, refused, nothing published.
    a = rng.integers(0, 1 << 16, size=(10, 7, 5)).astype("uint16")
    pid = s.begin("py/parts", "uint16", a.shape, (4, 4, 5))
    for lo, hi in ((0, 3), (3, 7), (7, 10)):
        w = s.join("py/parts", pid, "uint16", a.shape, (4, 4, 5))
        w.write_part((lo, 0, 0), a[lo:hi])
        w.finish()
    assert s.commit("py/parts", pid) == 1
    assert (s.get("py/parts") == a).all()
    pid = s.begin("py/over", "uint16", a.shape, (4, 4, 5))
    for lo, hi in ((0, 3), (2, 10)):
        w = s.join("py/over", pid, "uint16", a.shape, (4, 4, 5))
        w.write_part((lo, 0, 0), a[lo:hi])
        w.finish()
    try:
        s.commit("py/over", pid)
        raise SystemExit("overlapping parts committed")
    except po.ObjectError as e:
        assert e.code == 5 and "chunk [0, 0, 0]: parts written by writers" in str(e), str(e)
    s.abort("py/over", pid)
    print("python ok")
"""


OLD_STORE = ROOT / "crates/objects/tests/vectors/old_store"


@with_s3
def case_old_version(work, s3):
    """A version written before chunk pieces named their chunk (the store in
    crates/objects/tests/vectors/old_store, put in the bucket: its chunk
    pieces hold the whole object's CRC-32C) reads as it did."""
    put = lambda key, f: s3.minio.aws("s3api", "put-object", "--bucket", BUCKET, "--key", f"store/{key}",
                                      "--body", f)
    chunks = sorted(OLD_STORE.glob("data/*/*"))
    for f in chunks:
        put(f"data/{f.name}", f)
    put("meta/old/v0000000001", OLD_STORE / "meta/old/v0000000001")
    want = np.arange(24, dtype="<i4") * 37 - 100
    got = work / "got.bin"
    s3.obj("get", s3.at("old"), got)
    check(got.read_bytes() == want.tobytes(), "the old version's values")
    s3.obj("view", s3.at("old"))
    s3.obj("verify", s3.at("old"))
    # Its chunk objects (36 bytes; the array record is larger), one flipped:
    # refused by name; another intact chunk in its place: read, since the
    # old record cannot say which chunk it is (new versions can: "damage").
    small = [f for f in chunks if f.stat().st_size == 36]
    check(len(small) == 4, f"4 chunk objects in {chunks}")
    good = small[0].read_bytes()
    bad = work / "bad"
    bad.write_bytes(good[:5] + bytes([good[5] ^ 1]) + good[6:])
    put(f"data/{small[0].name}", bad)
    r = s3.obj("get", s3.at("old"), got, check=False)
    check(r.returncode == 1 and "old version 1: chunk [" in r.stderr and "damaged" in r.stderr,
          f"flipped: {r.stderr!r}")
    put(f"data/{small[0].name}", small[1])
    check(s3.obj("get", s3.at("old"), got, check=False).returncode == 0, "an old version's swap")
    put(f"data/{small[0].name}", small[0])
    s3.obj("verify", s3.at("old"))


@with_s3
def case_python(work, s3):
    """`paralog.objects` (over the C API) on s3://: puts, slabs, a chunked put."""
    env = dict(s3.env, PYTHONPATH=str(ROOT / "python"))
    r = run([sys.executable, "-c", PY_PUT, s3.store], env=env, check=False, timeout=300)
    check(r.returncode == 0 and "python ok" in r.stdout, f"python: {(r.stdout + r.stderr)[-1500:]}")
    i = s3.info("py/chunked")
    check((i["dtype"], i["shape"], i["version"]) == ("int32", [8, 6], 1), f"the CLI reads Python's put: {i}")


@with_s3
def case_mpi(work, s3):
    from tests.objects.mpi import FLAVOURS, mpi_put
    got = work / "got.bin"
    for flavour in FLAVOURS:
        name = f"mpi/{flavour}"
        out = mpi_put(flavour, 4, s3.store, name, 16, 7, env=s3.env).stdout
        check("version 1" in out and "read back equal" in out, f"{flavour}: {out}")
        s3.obj("get", s3.at(name), got)
        check(got.read_bytes() == (np.arange(64 * 4096, dtype="<i4") + 7).tobytes(),
              f"{flavour}: obj get of the MPI put is not the formula's")
        s3.obj("verify", s3.at(name), "--all")
        # Chunks of 24 rows written in parts by two ranks each.
        out = mpi_put(flavour, 4, s3.store, f"{name}/parts", 16, 5, mode="parts", env=s3.env).stdout
        check("version 1" in out and "read back equal" in out, f"{flavour} parts: {out}")
        s3.obj("get", s3.at(f"{name}/parts"), got)
        check(got.read_bytes() == (np.arange(64 * 4096, dtype="<i4") + 5).tobytes(),
              f"{flavour}: obj get of the put of parts is not the formula's")
        s3.obj("verify", s3.at(f"{name}/parts"), "--all")
        check(s3.minio.keys(BUCKET, "store/staging") == [], f"{flavour}: staging left after the put of parts")
        r = mpi_put(flavour, 4, s3.store, f"{name}/k", 16, 8, mode="killwriter", check_rc=False, env=s3.env)
        check(r.returncode != 0 and "failpoint objects.mid_chunk reached" in r.stdout + r.stderr,
              f"{flavour}: the writer was not killed: {r.stdout}{r.stderr}")
        check(s3.obj("info", s3.at(f"{name}/k"), "--json", check=False).returncode != 0,
              f"{flavour}: a put whose writer died is visible")
        time.sleep(2)  # older than 0 s by the server's clock (Last-Modified: to the second)
        said = s3.obj("gc", s3.store, "--older-than", "0").stdout
        check("removed 1 abandoned puts" in said, f"{flavour}: obj gc after the killed writer: {said}")
        check(s3.minio.keys(BUCKET, "store/staging") == [], f"{flavour}: staging left after obj gc")
        s3.obj("verify", s3.at(name), "--all")
        out = mpi_put(flavour, 4, s3.store, f"{name}/k", 16, 9, env=s3.env).stdout
        check("version 1" in out and "read back equal" in out, f"{flavour} again: {out}")
        s3.obj("get", s3.at(f"{name}/k"), got)
        check(got.read_bytes() == (np.arange(64 * 4096, dtype="<i4") + 9).tobytes(),
              f"{flavour}: the put after the killed one is not its own")
    return "MPICH and Open MPI: chunked puts over 4 ranks; a killed writer publishes nothing"

def main():
    from tests.objects.s3_views import VIEW_CASES
    a = suite_options().parse_args()
    suite = Suite("objects-s3", keep=a.keep)
    cases = [("dtypes", case_dtypes), ("chunked", case_chunked), ("concurrent", case_concurrent),
             ("damage", case_damage), ("old version", case_old_version), ("python", case_python), ("killed commit", case_killed_commit),
             ("older commit", case_older_commit), ("outlived commit", case_outlived_commit),
             ("lost answers", case_lost_answers), ("mpi", case_mpi), ("retention", case_retention),
             ("publish search", case_publish_search),
             *VIEW_CASES]
    return suite.run(cases, only=a.only)


if __name__ == "__main__":
    sys.exit(main())
