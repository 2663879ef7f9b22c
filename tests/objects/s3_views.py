"""The Zarr view and `obj gc` of array objects on S3 (docs/objects.md
"S3"), cases of tests/objects/s3.py's suite (`python3 -m tests.objects.s3
--only "zarr view"`): real MinIO on loopback, zarr-python 3 through s3fs
and tensorstore through its own s3 driver (target/objects-venv), each
view compared byte for byte with what was put. The cases are listed in
tests/objects/s3.py's docstring."""
import json
import random
import subprocess
import time

from tests.lib.check import check
from tests.lib.paths import BIN
from tests.lib.proc import run
from tests.objects.run import READER, VENV_PY, view_check, zarr_read
from tests.objects.s3 import BUCKET, DTYPES, rand_array, rand_slab, with_s3

def put_file(work, s3, name, a, chunks, *extra, env=None):
    """`obj put` of the array `a`; returns the file holding its bytes."""
    data = work / f"{name.replace('/', '-')}-{random.getrandbits(32):08x}.bin"
    data.write_bytes(a.tobytes())
    run([BIN, "obj", "put", s3.at(name), data, "--dtype", a.dtype.name, "--shape", ",".join(map(str, a.shape)),
         "--chunks", ",".join(map(str, chunks)), *extra], env=env or s3.env, timeout=300)
    return data


def s3_view_check(s3, rng, name, data, a, chunks, version=None, attrs=None):
    """A zarr_reader check of the view of a version, with 10 random slabs."""
    i = s3.info(name) if version is None else json.loads(
        s3.obj("info", s3.at(name), "--version", str(version), "--json").stdout)
    check(i["views"] == "made" and i["zarr"].startswith("s3://"), f"{name}: views {i['views']} at {i['zarr']}")
    slabs = []
    for _ in range(10):
        start, stop = rand_slab(rng, a.shape)
        slabs.append([start, [y - x for x, y in zip(start, stop)]])
    return view_check(i, data, a.dtype.name, a.shape, chunks, slabs, attrs=attrs or {})


@with_s3
def case_zarr_view(work, s3):
    rng = random.Random(31)
    attrs = {"units": "K", "step": 3}
    checks = []
    for dtype in DTYPES:
        a = rand_array(rng, dtype, (37, 19))
        f = put_file(work, s3, f"z/{dtype}", a, (8, 5), "--attrs", json.dumps(attrs))
        checks.append(s3_view_check(s3, rng, f"z/{dtype}", f, a, (8, 5), attrs=attrs))
    for name, dtype, shape, chunks in (("g/1d", "uint16", (1000,), (64,)),
                                       ("g/3d", "float32", (5, 7, 9), (2, 3, 4)),
                                       ("g/big", "int64", (10, 10), (16, 16))):
        a = rand_array(rng, dtype, shape)
        checks.append(s3_view_check(s3, rng, name, put_file(work, s3, name, a, chunks), a, chunks))
    # Every version of one name, each its own view.
    for n in range(1, 4):
        a = rand_array(rng, "float64", (12, 9))
        f = put_file(work, s3, "vers", a, (5, 4))
        checks.append(s3_view_check(s3, rng, "vers", f, a, (5, 4), version=n))
    # The seed's chunked puts: one chunk per writer process.
    for rows, writers in ((16, 1), (32, 2), (64, 4)):
        name = f"seed/{rows}x{writers}"
        a = rand_array(rng, "int32", (rows * writers, 4096))
        pid = s3.obj("begin", s3.at(name), "--dtype", "int32", "--shape", f"{rows * writers},4096",
                     "--chunks", f"{rows},4096").stdout.strip()
        procs = []
        for w in range(writers):
            p = work / f"seed-{rows}-{w}.bin"
            p.write_bytes(a[rows * w:rows * (w + 1)].tobytes())
            procs.append(subprocess.Popen([str(BIN), "obj", "write", s3.at(name), pid, str(p), "--chunk", f"{w},0"],
                                          env=s3.env, stderr=subprocess.PIPE, text=True))
        for p in procs:
            _, err = p.communicate(timeout=300)
            check(p.returncode == 0, f"obj write: {err}")
        s3.obj("commit", s3.at(name), pid)
        whole = work / f"seed-{rows}.bin"
        whole.write_bytes(a.tobytes())
        checks.append(s3_view_check(s3, rng, name, whole, a, (rows, 4096)))
        said = s3.obj("verify", s3.at(name)).stdout
        check(f"Zarr view {checks[-1]['view']} complete" in said, said)
    zarr_read(work, checks, env=s3.env)
    return f"{len(checks)} views read by zarr-python and tensorstore"


@with_s3
def case_zarr_damage(work, s3):
    a = rand_array(random.Random(6), "int32", (64, 4096))
    put_file(work, s3, "dmg", a, (16, 4096))
    view = s3.info("dmg")["zarr"]
    key = "store/zarr/dmg/v0000000001/c/1/0"
    good = work / "good"
    s3.minio.aws("s3api", "get-object", "--bucket", BUCKET, "--key", key, good)
    g = good.read_bytes()
    check(g[:-4] == a[16:32].tobytes(), "the view's chunk [1, 0] is not rows 16..32 and their CRC")
    bad = work / "bad"
    for how, b, said in (("flipped", g[:777] + bytes([g[777] ^ 4]) + g[778:], "checksum mismatch"),
                         ("truncated", g[:-9], "bytes in the Zarr view")):
        bad.write_bytes(b)
        s3.minio.aws("s3api", "put-object", "--bucket", BUCKET, "--key", key, "--body", bad)
        out = zarr_read(work, [{"view": view, "refuse": True}], env=s3.env)
        check("refused by zarr-python" in out and "refused by tensorstore" in out, out)
        r = s3.obj("verify", s3.at("dmg"), check=False)
        check(r.returncode == 1 and "dmg version 1: chunk [1, 0]" in r.stderr and said in r.stderr,
              f"{how}: obj verify said {r.stderr!r}")
        print("\n".join(f"  {how}: {line}" for line in out.splitlines()))
    # Another whole chunk in its place: its CRC-32C holds (the readers
    # read it), but `obj verify` compares it with the version's own.
    other = work / "other"
    s3.minio.aws("s3api", "get-object", "--bucket", BUCKET, "--key", key.replace("/c/1/0", "/c/0/0"), other)
    s3.minio.aws("s3api", "put-object", "--bucket", BUCKET, "--key", key, "--body", other)
    r = s3.obj("verify", s3.at("dmg"), check=False)
    check(r.returncode == 1 and "dmg version 1: chunk [1, 0]" in r.stderr and "a whole chunk, but another" in r.stderr,
          f"a swapped view chunk: {r.stderr!r}")
    s3.minio.aws("s3api", "delete-object", "--bucket", BUCKET, "--key", key)
    r = s3.obj("verify", s3.at("dmg"), check=False)
    check(r.returncode == 1 and "readers would see fill values" in r.stderr, f"a missing view chunk: {r.stderr!r}")
    s3.minio.aws("s3api", "put-object", "--bucket", BUCKET, "--key", key, "--body", good)
    s3.obj("verify", s3.at("dmg"))


@with_s3
def case_view_order(work, s3):
    """No view before its version, and never a partial one."""
    rng = random.Random(12)
    for k, point in enumerate(("objects.before_commit", "objects.after_commit")):
        name = f"order/{k}"
        a = rand_array(rng, "int32", (32, 4096))
        pid, f = s3.killed_commit(work, name, a, 8, point)
        view = f"s3://{BUCKET}/store/zarr/{name}/v0000000001"
        check(s3.minio.keys(BUCKET, f"store/zarr/{name}") == [], f"{point}: view objects before the view")
        zarr_read(work, [{"view": view, "absent": True}], env=s3.env)
        if k == 1:
            i = s3.info(name)
            check(i["views"].startswith("missing: not made"), f"{point}: views {i['views']}")
            r = s3.obj("verify", s3.at(name), check=False)
            check(r.returncode == 1 and "the Zarr view is missing" in r.stderr, r.stderr)
        s3.obj("commit", s3.at(name), pid)
        zarr_read(work, [s3_view_check(s3, rng, name, f, a, (8, 4096))], env=s3.env)
    # Readers polling the view of the next version while it is committed
    # (64 chunks, so the copies take a while).
    a = rand_array(rng, "int32", (64, 4096))
    f = work / "polled.bin"
    f.write_bytes(a.tobytes())
    flag = work / "committed"
    spec = work / "poll.json"
    spec.write_text(json.dumps([{"view": f"s3://{BUCKET}/store/zarr/polled/v0000000001", "poll_until": str(flag),
                                 "expect": str(f), "dtype": "int32", "shape": [64, 4096]}]))
    with open(spec) as inp:
        reader = subprocess.Popen([str(VENV_PY), str(READER)], stdin=inp, env=s3.env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        time.sleep(2)  # the reader's imports
        s3.obj("put", s3.at("polled"), f, "--dtype", "int32", "--shape", "64,4096", "--chunks", "1,4096")
        flag.touch()
        out, err = reader.communicate(timeout=300)
    check(reader.returncode == 0, f"a reader polling the view: {out}{err[-800:]}")
    return out.strip()


def bucket(s3):
    return {k for k, _ in s3.minio.keys(BUCKET, "store")}


@with_s3
def case_gc(work, s3):
    """What dead writers and commits leave, collected; nothing published
    or in progress touched."""
    rng = random.Random(21)
    kept = {}  # name -> (file, chunk count) of each published version
    a = rand_array(rng, "uint16", (16, 10))
    kept["clean"] = (put_file(work, s3, "clean", a, (4, 10)), 4)
    published = bucket(s3)

    def begun(name, rows):
        b = rand_array(rng, "int32", (rows, 64))
        f = work / f"{name}.bin"
        f.write_bytes(b.tobytes())
        pid = s3.obj("begin", s3.at(name), "--dtype", "int32", "--shape", f"{rows},64", "--chunks", "4,64").stdout.strip()
        return f, pid

    # A writer killed between its chunk object and its claim.
    f, dead = begun("dead", 8)
    r = run([BIN, "obj", "write", s3.at("dead"), dead, f, "--chunk", "0,0", "--chunk", "1,0"],
            env={**s3.env, "PARALOG_FAILPOINT": "objects.mid_chunk"}, check=False, timeout=300)
    check(r.returncode == -9, f"mid_chunk: {r.returncode} {r.stderr}")
    # Commits killed before (their array record written) and after the publish.
    for name, point in (("before", "objects.before_commit"), ("after", "objects.after_commit")):
        f, pid = begun(name, 8)
        s3.obj("write", s3.at(name), pid, f, "--chunk", "0,0", "--chunk", "1,0")
        r = run([BIN, "obj", "commit", s3.at(name), pid], env={**s3.env, "PARALOG_FAILPOINT": point},
                check=False, timeout=300)
        check(r.returncode == -9, f"{point}: {r.returncode} {r.stderr}")
    kept["after"] = (work / "after.bin", 2)
    s3.obj("view", s3.at("after"))
    # What view makers killed would leave: a whole view of a version gone
    # (retention killed between the record and the view), and a view
    # without its zarr.json (killed before it: readers find no array).
    for k in ("zarr.json", "c/0/0"):
        s3.minio.aws("s3api", "copy-object", "--bucket", BUCKET, "--copy-source",
                     f"{BUCKET}/store/zarr/clean/v0000000001/{k}", "--key", f"store/zarr/gone/v0000000001/{k}")
    s3.minio.aws("s3api", "delete-object", "--bucket", BUCKET, "--key", "store/zarr/after/v0000000001/zarr.json")
    # Written now, committed past the grace: its commit writes no staging
    # object, only its array record, which keeps the put alive.
    late_f, late = begun("late", 8)
    s3.obj("write", s3.at("late"), late, late_f, "--chunk", "0,0", "--chunk", "1,0")
    said = s3.obj("gc", s3.store).stdout
    check("removed 0 abandoned puts, 0 chunk objects" in said, f"gc within the grace removed: {said}")
    # Past a grace of 5 s (Last-Modified is to the second; the live put's
    # begin and write, and the gc's start, must stay well within it).
    time.sleep(8)
    r = run([BIN, "obj", "commit", s3.at("late"), late], env={**s3.env, "PARALOG_FAILPOINT": "objects.before_commit"},
            check=False, timeout=300)
    check(r.returncode == -9, f"late commit: {r.returncode} {r.stderr}")
    f, live = begun("live", 8)
    halves = [work / "live-0.bin", work / "live-1.bin"]
    for i, h in enumerate(halves):
        h.write_bytes(f.read_bytes()[1024 * i:1024 * (i + 1)])
    s3.obj("write", s3.at("live"), live, halves[0], "--chunk", "0,0")  # one chunk claimed, not finished
    said = s3.obj("gc", s3.store, "--older-than", "5").stdout
    check("removed 3 abandoned puts, 4 chunk objects no version uses, 2 Zarr views" in said, f"obj gc: {said}")
    check(s3.info("after")["views"].startswith("missing"), "a view without zarr.json is not missing")
    check(s3.minio.keys(BUCKET, "store/zarr/after") == [], "the half view is left")
    s3.obj("view", s3.store, "--missing")
    left = bucket(s3)
    check(not any(f"staging/{p}" in k for k in left for p in (dead,)), "the dead writer's put is left")
    staging = {k.split("/")[2] for k in left if k.startswith("store/staging/")}
    check(staging == {live, late}, f"puts left: {staging}, want only the live one {live} and {late}")
    s3.obj("commit", s3.at("late"), late)
    kept["late"] = (late_f, 2)
    left = bucket(s3)
    # The published versions' keys and the live put's, nothing else: the
    # records and views by name, the chunk objects by count (every one is
    # read by verify) plus the live put's one chunk.
    want_meta = {k for k in published if not k.startswith("store/data/")} | {
        f"store/{d}/{n}/v0000000001{k}" for n in ("after", "late")
        for d, k in (("meta", ""), ("zarr", "/zarr.json"), ("zarr", "/c/0/0"), ("zarr", "/c/1/0"))}
    got_meta = {k for k in left if not k.startswith(("store/data/", "store/staging/"))}
    check(got_meta == want_meta, f"records and views: {sorted(got_meta ^ want_meta)}")
    data = [k for k in left if k.startswith("store/data/")]
    want = sum(n + 1 for _, n in kept.values()) + 1
    check(len(data) == want, f"{len(data)} chunk objects left, want {want} (the versions' and the live put's)")
    for name, (f, _) in kept.items():
        s3.obj("verify", s3.at(name))
        got = work / "got.bin"
        s3.obj("get", s3.at(name), got)
        check(got.read_bytes() == f.read_bytes(), f"{name}: not its put after gc")
    # The live put goes on after the collection, and commits.
    s3.obj("write", s3.at("live"), live, halves[1], "--chunk", "1,0")
    s3.obj("commit", s3.at("live"), live)
    kept["live"] = (work / "live.bin", 2)
    got = work / "got.bin"
    s3.obj("get", s3.at("live"), got)
    check(got.read_bytes() == (work / "live.bin").read_bytes(), "the live put after gc")
    said = s3.obj("gc", s3.store, "--older-than", "0").stdout
    check("removed 0 abandoned puts, 0 chunk objects" in said, f"gc after everything published: {said}")
    left = bucket(s3)
    check(not any(k.startswith("store/staging/") or ".gc-clock" in k for k in left), f"left: {sorted(left)}")
    check(len([k for k in left if k.startswith("store/data/")]) == sum(n + 1 for _, n in kept.values()),
          "chunk objects after the last gc")
    for name in kept:
        s3.obj("verify", s3.at(name), "--all")
    return said.strip()


VIEW_CASES = [("zarr view", case_zarr_view), ("zarr damage", case_zarr_damage), ("view order", case_view_order),
              ("gc", case_gc)]
