"""Checkpoint sets on S3 against a real MinIO on loopback (docs/aggregate.md,
"Sets on S3"), run by tests/aggregate/run.py. Members of 4.4 to 6.6 MB
(some above 5 MiB) and `part_size=5M`, so that every container is a
multipart upload of several parts packed across members:

  s3 mpich K=1, s3 openmpi K=2
                  4 MPI ranks write 2 checkpoints under `paralog run
                  --aggregate --containers K --remote s3://...`: the bucket
                  holds exactly K container objects + 1 set record per set
                  (the keys listed), the containers have several parts;
                  `paralog sets s3://` lists them complete; `paralog
                  extract s3://` of every set equals the direct run. Then a
                  second job of 2 ranks rewrites members 0 and 1 of every
                  set: version 2, again K + 1 objects per set, members 0-1
                  the second run's and 2-3 the first's (copied)
  s3 kept containers
                  K=4 (a member per container), ranks 0-1 rewritten by a
                  second job: the containers of ranks 2-3 are the same keys
                  in version 2 (nothing copied), extracted equal
  s3 smaller K    K=2, then a second job with K=1 that empties member 0 of
                  every set (open "w", close): version 2 is one container
                  holding the 3 members kept (copied) and member 0 empty;
                  the bucket holds exactly that container and the record,
                  nothing empty (before, a container of version 1 was
                  listed again and the copies had no room: the publish
                  failed with "every container is kept from the replaced
                  version")
  s3 crash at P   a second job's server killed at P (aggregate.mid_containers:
                  an unfinished multipart upload is left, found through its
                  marker object;
                  aggregate.before_record: complete orphan containers): every
                  set extracts as its first version; `paralog recover
                  --aggregate` collects the orphans, aborts the uploads
                  (ListMultipartUploads of their keys shows none) and removes
                  the markers (K + 1 keys per set), and publishes the second
                  version (K + 1 objects per set, equal to the second run)
  s3 small        members of 300 kB, K=2: each container is one PUT (no
                  multipart upload), extracted equal to the direct run
  s3 damage       a container object rewritten with one byte flipped:
                  `paralog extract` refuses it naming the key and the
                  block's offset. A restart job (`--aggregate`, the node-local
                  log gone) that stats and opens the members: EIO, with one
                  line per member naming its set and `paralog extract`
"""
import json
from pathlib import Path

from tests.lib.check import check
from tests.lib.compare import same_bytes
from tests.lib.minio import MinIO
from tests.lib.mpi import launcher, mpi_env
from tests.lib.paralog import clean_env, paralog_run
from tests.lib.paths import BIN
from tests.lib.proc import run

BUCKET = "plsets"
RULE = "ckpt/{set}/rank-*.dat"
RANKS, STEPS, MEAN = 4, 2, 5_500_000
QUERY = "?part_size=5M"


def with_minio(fn):
    def go(work):
        minio, _ = MinIO.with_bucket(work, BUCKET)
        try:
            return fn(work, minio)
        finally:
            minio.stop()
    return go


def aws_env(minio, extra=None):
    env = {k: v for k, v in minio.env().items() if k.startswith("AWS_")}
    env.update(extra or {})
    return env


def set_keys(minio, prefix):
    """{set directory: sorted object names} under s3://BUCKET/prefix/ckpt."""
    out = {}
    for key, _ in minio.keys(BUCKET, f"{prefix}/ckpt"):
        rel = key.removeprefix(f"{prefix}/")
        d, _, name = rel.rpartition("/")
        out.setdefault(d, []).append(name)
    return {d: sorted(n) for d, n in out.items()}


def check_keys(minio, prefix, k, sets):
    """Exactly K containers + 1 record per set, nothing else."""
    keys = set_keys(minio, prefix)
    check(sorted(keys) == sorted(sets), f"set directories in the bucket: {sorted(keys)}, not {sets}")
    for d, names in keys.items():
        containers = [n for n in names if n.endswith(".plc")]
        check(len(containers) == k and names == sorted(containers + ["set.plr"]),
              f"{d}: {names}, not {k} containers + set.plr")
    return keys


def parts(minio, key):
    """The parts of a multipart object; 0 for one made by a single PUT (its
    ETag has no `-N`)."""
    h = minio.api("head-object", "--bucket", BUCKET, "--key", key, "--part-number", "1")
    return h.get("PartsCount") if "-" in h["ETag"] else 0


MARK = ".set.plr.upload-"


def uploads_left(minio, prefix, keys):
    """Unfinished multipart uploads of the containers that have an upload
    marker in `keys` (MinIO lists uploads by an object's exact key only)."""
    left = []
    for d, names in keys.items():
        for n in names:
            if n.startswith(MARK):
                left += minio.uploads(BUCKET, f"{prefix}/{d}/{n.removeprefix(MARK)}")
    return left


def extract(url, env, work, label, s):
    out = work / label / s.replace("/", "_")
    run([BIN, "extract", url, s, out], env=env)
    return out


def check_members(agg_dir, want_for, what):
    """Every extracted member equals want_for(name)."""
    names = sorted(p.name for p in agg_dir.iterdir())
    check(names == [f"rank-{i:05d}.dat" for i in range(RANKS)], f"{what}: extracted {names}")
    for n in names:
        same_bytes(want_for(n), agg_dir / n, f"{what}/{n}")


def direct_mpi(work, flavour, np, name, salt=None):
    d = work / name
    d.mkdir()
    from tests.aggregate.run import ckpt_mpi
    env = mpi_env({"CKPT_MPIIO": "0", **({"CKPT_SALT": str(salt)} if salt else {})}, drop=("PARALOG_",))
    run([*launcher(flavour, np), ckpt_mpi(flavour), d, np, STEPS, MEAN], env=env)
    return d


def case_mpi(flavour, k):
    @with_minio
    def case(work, minio):
        from tests.aggregate.run import ckpt_mpi
        prog = ckpt_mpi(flavour)
        prefix, local = work / "prefix", work / "local"
        prefix.mkdir()
        pre = f"{flavour}-k{k}"
        url = f"s3://{BUCKET}/{pre}{QUERY}"
        agg = ("--aggregate", RULE, "--containers", str(k))
        env = mpi_env(aws_env(minio, {"CKPT_MPIIO": "0"}), drop=("PARALOG_",))
        paralog_run(local, prefix, [*launcher(flavour, RANKS), prog, prefix, RANKS, STEPS, MEAN], mpi=flavour,
                    remote=url, extra=agg, env=env)
        first = direct_mpi(work, flavour, RANKS, "direct")
        sets = [f"ckpt/{p.name}" for p in sorted((first / "ckpt").iterdir())]
        keys = check_keys(minio, pre, k, sets)
        counts = [parts(minio, f"{pre}/{d}/{n}") for d in sets for n in keys[d] if n.endswith(".plc")]
        check(all(c >= 2 for c in counts), f"containers of one part: {counts} (parts are 5 MiB)")
        rows = json.loads(run([BIN, "sets", url, "--json"], env=minio.env()).stdout)
        check([r["set"] for r in rows] == sets, f"paralog sets: {rows}")
        for r in rows:
            check(r["complete"] is True and r["members"] == RANKS and r["containers"] == k and r["version"] == 1,
                  f"{r}")
        for s in sets:
            out = extract(url, minio.env(), work, "v1", s)
            check_members(out, lambda n, s=s: first / s / n, f"version 1 of {s}")
        # Version 2: ranks 0 and 1 rewrite their members, 2 and 3 are copied.
        env2 = mpi_env(aws_env(minio, {"CKPT_MPIIO": "0", "CKPT_SALT": "5"}), drop=("PARALOG_",))
        paralog_run(local, prefix, [*launcher(flavour, 2), prog, prefix, 2, STEPS, MEAN], mpi=flavour,
                    remote=url, extra=agg, env=env2, job="second")
        second = direct_mpi(work, flavour, 2, "direct2", salt=5)
        check_keys(minio, pre, k, sets)
        rows = json.loads(run([BIN, "sets", url, "--json"], env=minio.env()).stdout)
        check(all(r["version"] == 2 and r["members"] == RANKS for r in rows), f"after the second job: {rows}")
        for s in sets:
            out = extract(url, minio.env(), work, "v2", s)
            check_members(out, lambda n, s=s: (second if n < "rank-00002" else first) / s / n,
                          f"version 2 of {s}")
        return (f"{len(sets)} sets x {RANKS} members in {k} container(s) of {min(counts)}-{max(counts)} parts, "
                f"then version 2 (2 members rewritten, 2 copied), K + 1 keys per set")
    return case


def case_crash(point):
    @with_minio
    def case(work, minio):
        from tests.aggregate.run import ckpt
        k = 2
        prefix, local = work / "prefix", work / "local"
        prefix.mkdir()
        pre = "crash"
        url = f"s3://{BUCKET}/{pre}{QUERY}"
        agg = ("--aggregate", RULE, "--containers", str(k))
        paralog_run(local, prefix, [ckpt(), prefix, RANKS, STEPS, MEAN], remote=url, extra=agg, env=minio.env())
        first, second = work / "first", work / "second"
        for d, salt in ((first, "0"), (second, "5")):
            d.mkdir()
            run([ckpt(), d, RANKS, STEPS, MEAN], env=clean_env({"CKPT_SALT": salt}))
        sets = [f"ckpt/{p.name}" for p in sorted((first / "ckpt").iterdir())]
        env = {**minio.env(), "PARALOG_FAILPOINT": point, "CKPT_SALT": "5"}
        r = paralog_run(local, prefix, [ckpt(), prefix, RANKS, STEPS, MEAN], remote=url, env=env, extra=agg,
                        check=False, job="second")
        check(r.returncode != 0, "the server did not die at the failpoint")
        for s in sets:
            out = extract(url, minio.env(), work, "after-crash", s)
            check_members(out, lambda n, s=s: first / s / n, f"{s} after the crash")
        keys = set_keys(minio, pre)
        orphans = sum(1 for d in sets for n in keys[d] if n.endswith(".plc") and not n.startswith(MARK)) - k * len(sets)
        left = uploads_left(minio, pre, keys)
        if point == "aggregate.mid_containers":
            check(left, "no unfinished multipart upload after a crash in the middle of a container")
        else:
            check(orphans > 0, f"no orphaned container after the crash: {keys}")
        r = run([BIN, "recover", "--local", local, "--remote", url, *agg], env=minio.env(), check=False)
        check(r.returncode == 0, f"recover failed: {r.stdout[-800:]} {r.stderr[-800:]}")
        check_keys(minio, pre, k, sets)
        after = [u for d, names in keys.items() for n in names if n.startswith(MARK)
                 for u in minio.uploads(BUCKET, f"{pre}/{d}/{n.removeprefix(MARK)}")]
        check(not after, f"multipart uploads left after recover: {after}")
        for s in sets:
            out = extract(url, minio.env(), work, "after-recover", s)
            check_members(out, lambda n, s=s: second / s / n, f"{s} after recover")
        return (f"{orphans} orphaned container(s) and {len(left)} unfinished upload(s) after the crash, "
                f"none after recover; every set the second version")
    return case


@with_minio
def case_damage(work, minio):
    from tests.aggregate.run import ckpt
    prefix, local = work / "prefix", work / "local"
    prefix.mkdir()
    pre = "damage"
    url = f"s3://{BUCKET}/{pre}{QUERY}"
    paralog_run(local, prefix, [ckpt(), prefix, RANKS, STEPS, MEAN], remote=url, env=minio.env(),
                extra=("--aggregate", RULE, "--containers", "1"))
    s = sorted(set_keys(minio, pre))[1]
    cname = next(n for n in set_keys(minio, pre)[s] if n.endswith(".plc"))
    key = f"{pre}/{s}/{cname}"
    copy = work / "container"
    minio.aws("s3", "cp", "--no-progress", f"s3://{BUCKET}/{key}", copy)
    b = bytearray(copy.read_bytes())
    at = 3_000_000
    b[at] ^= 0x10
    copy.write_bytes(bytes(b))
    minio.aws("s3", "cp", "--no-progress", copy, f"s3://{BUCKET}/{key}")
    block = at // (1 << 20) * (1 << 20)
    e = run([BIN, "extract", url, s, work / "ex"], env=minio.env(), check=False)
    want = f"s3://{BUCKET}/{key} at offset {block}:"
    check(e.returncode != 0 and want in e.stderr, f"extract of a damaged set: {e.returncode} {e.stderr[-600:]}")
    # The restart read under capture, in a new job (the node-local log gone).
    import shutil
    shutil.rmtree(local, ignore_errors=True)
    r = paralog_run(work / "l2", prefix, [ckpt(), prefix, RANKS, STEPS, MEAN, "verify"], job="r", remote=url,
                    env=minio.env(), check=False, extra=("--aggregate", RULE))
    check(r.returncode != 0, "a restart read of a member on S3 succeeded")
    member = prefix / s / "rank-00000.dat"
    line = (f"paralog: {member}: in the checkpoint set {s} on S3, which capture cannot read "
            f"(no network I/O in the program): run `paralog extract s3://{BUCKET}/{pre} {s} OUT`")
    check(line in r.stderr, f"no line naming the set and paralog extract: {r.stderr[-800:]}")
    check(f"{member}: Input/output error" in r.stdout + r.stderr, f"not EIO: {r.stdout[-600:]} {r.stderr[-400:]}")
    return f"extract refused naming the key and offset {block}; the restart read failed with EIO and the line"


@with_minio
def case_small(work, minio):
    from tests.aggregate.run import ckpt
    prefix, local = work / "prefix", work / "local"
    prefix.mkdir()
    pre, ranks, mean, k = "small", 3, 300_000, 2
    url = f"s3://{BUCKET}/{pre}"
    paralog_run(local, prefix, [ckpt(), prefix, ranks, STEPS, mean], remote=url, env=minio.env(),
                extra=("--aggregate", RULE, "--containers", str(k)))
    direct = work / "direct"
    direct.mkdir()
    run([ckpt(), direct, ranks, STEPS, mean])
    sets = [f"ckpt/{p.name}" for p in sorted((direct / "ckpt").iterdir())]
    keys = check_keys(minio, pre, k, sets)
    counts = [parts(minio, f"{pre}/{d}/{n}") for d in sets for n in keys[d] if n.endswith(".plc")]
    check(counts == [0] * len(counts), f"a container smaller than a part is not one PUT: {counts}")
    for s in sets:
        out = extract(url, minio.env(), work, "x", s)
        names = sorted(p.name for p in out.iterdir())
        check(names == [f"rank-{i:05d}.dat" for i in range(ranks)], f"{s}: extracted {names}")
        for n in names:
            same_bytes(direct / s / n, out / n, f"{s}/{n}")
    return f"{len(sets)} sets of {ranks} small members, {k} containers each as one PUT, extracted equal"


@with_minio
def case_kept(work, minio):
    """K=4, one member per container: a second job rewrites ranks 0 and 1;
    the containers of ranks 2 and 3 are listed again as they are."""
    from tests.aggregate.run import ckpt
    prefix, local = work / "prefix", work / "local"
    prefix.mkdir()
    pre, k = "kept", 4
    url = f"s3://{BUCKET}/{pre}{QUERY}"
    agg = ("--aggregate", RULE, "--containers", str(k))
    paralog_run(local, prefix, [ckpt(), prefix, RANKS, STEPS, MEAN], remote=url, env=minio.env(), extra=agg)
    first, second = work / "first", work / "second"
    for d, n, salt in ((first, RANKS, "0"), (second, 2, "5")):
        d.mkdir()
        run([ckpt(), d, n, STEPS, MEAN], env=clean_env({"CKPT_SALT": salt}))
    sets = [f"ckpt/{p.name}" for p in sorted((first / "ckpt").iterdir())]
    v1 = check_keys(minio, pre, k, sets)
    paralog_run(local, prefix, [ckpt(), prefix, 2, STEPS, MEAN], remote=url, job="second", extra=agg,
                env={**minio.env(), "CKPT_SALT": "5"})
    v2 = check_keys(minio, pre, k, sets)
    for s in sets:
        kept = sorted(set(v1[s]) & set(v2[s]) - {"set.plr"})
        check(len(kept) == 2 and all("-v000001-" in n for n in kept), f"{s}: kept containers {kept} of {v2[s]}")
        out = extract(url, minio.env(), work, "v2", s)
        check_members(out, lambda n, s=s: (second if n < "rank-00002" else first) / s / n, f"version 2 of {s}")
    return f"{len(sets)} sets: 2 of {k} containers listed again unchanged by version 2, 2 written new"


EMPTY = r'''
import sys
for p in sys.argv[1:]:
    open(p, "w").close()
'''


@with_minio
def case_smaller_k(work, minio):
    from tests.aggregate.run import ckpt
    from tests.lib.paths import PY
    prefix, local = work / "prefix", work / "local"
    prefix.mkdir()
    pre, mean = "smaller", 300_000
    url = f"s3://{BUCKET}/{pre}"
    paralog_run(local, prefix, [ckpt(), prefix, RANKS, STEPS, mean], remote=url, env=minio.env(),
                extra=("--aggregate", RULE, "--containers", "2"))
    first = work / "first"
    first.mkdir()
    run([ckpt(), first, RANKS, STEPS, mean])
    sets = [f"ckpt/{p.name}" for p in sorted((first / "ckpt").iterdir())]
    check_keys(minio, pre, 2, sets)
    paralog_run(local, prefix, [PY, "-c", EMPTY, *(prefix / s / "rank-00000.dat" for s in sets)], remote=url,
                env=minio.env(), extra=("--aggregate", RULE, "--containers", "1"), job="second")
    keys = check_keys(minio, pre, 1, sets)
    sizes = {key: n for key, n in minio.keys(BUCKET, pre)}
    check(all(n > 0 for n in sizes.values()), f"an empty object: {sizes}")
    rows = json.loads(run([BIN, "sets", url, "--json"], env=minio.env()).stdout)
    check(all(r["version"] == 2 and r["members"] == RANKS and r["containers"] == 1 for r in rows),
          f"after the second job: {rows}")
    empty = work / "empty"
    empty.write_bytes(b"")
    for s in sets:
        out = extract(url, minio.env(), work, "v2", s)
        check_members(out, lambda n, s=s: empty if n == "rank-00000.dat" else first / s / n, f"version 2 of {s}")
    return f"{len(keys)} sets: version 2 in 1 container, member 0 emptied, the other {RANKS - 1} copied"


def cases():
    return [
        ("s3 mpich K=1", case_mpi("mpich", 1)),
        ("s3 openmpi K=2", case_mpi("openmpi", 2)),
        ("s3 crash at aggregate.mid_containers", case_crash("aggregate.mid_containers")),
        ("s3 crash at aggregate.before_record", case_crash("aggregate.before_record")),
        ("s3 damage", case_damage),
        ("s3 small", case_small),
        ("s3 kept containers", case_kept),
        ("s3 smaller K", case_smaller_k),
    ]
