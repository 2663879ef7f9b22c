"""Checkpoint sets on the object layout (docs/aggregate.md),
run by tests/aggregate/run.py:

  objstore K=2    the one-node case on `--remote objstore:///ROOT`: every set
                  is exactly K container objects + 1 set record object
                  (meta/ckpt/<set>/) and no member is an object of its own;
                  `paralog sets` lists them complete; `paralog extract` of
                  every set and a restart in a new job (node-local log
                  deleted: stat, read, pread, lseek, readdir, glob, then the
                  tree copied out with os.walk) equal the direct run
  objstore damage a flipped byte in a container's chunk: the restart read
                  fails with EIO naming the chunk and the offset, and
                  `paralog extract` refuses it the same way
  objstore kept containers
                  K=4, one member per container: a second job rewrites
                  members 0 and 1; version 2 lists the container objects of
                  members 2 and 3 again (the same objects: nothing copied),
                  K + 1 objects per set, no loose chunk, extract equal
                  (before, every kept member was copied into new containers)
  objstore crash at P
                  a second job's server killed at P while it publishes the
                  first set's second version: in the middle of its
                  containers (aggregate.mid_containers: an unpublished chunk
                  and its marker left), between its containers and its
                  record (aggregate.before_record: orphaned container
                  objects), or right after the record (aggregate.after_record:
                  the replaced version's containers left); every set reads
                  whole as its first version or its second, through `paralog
                  extract` and through capture in a new job (os.walk copy);
                  `paralog recover --aggregate` collects what was left and
                  publishes the second: K + 1 objects per set, no marker, no
                  chunk that no version names (before the fix, after
                  aggregate.after_record the replaced version's containers
                  stayed: its record is still a kept version)
"""
import json
import shutil
from pathlib import Path

from tests.lib.check import Failed, check
from tests.lib.compare import same_bytes, tree, tree_difference
from tests.lib.paralog import clean_env, paralog_run
from tests.lib.paths import BIN, PY
from tests.lib.proc import run

from tests.aggregate.objnodes import MARKER, check_clean, unreferenced_chunks

RULE = "ckpt/{set}/rank-*.dat"
RANKS, STEPS, MEAN = 6, 3, 300_000


def objects(store, set_name):
    return sorted(p.name for p in (store / "meta" / "ckpt" / set_name).iterdir())


def run_into_store(agg, work, k):
    prefix, local, store = work / "prefix", work / "local", work / "store"
    prefix.mkdir()
    store.mkdir()
    url = f"objstore://{store}"
    paralog_run(local, prefix, [agg.ckpt(), prefix, RANKS, STEPS, MEAN], remote=url,
                extra=("--aggregate", RULE, "--containers", str(k)))
    return prefix, store, url


def case_objstore(agg, k):
    def case(work):
        prefix, store, url = run_into_store(agg, work, k)
        direct = agg.direct_run(work, RANKS)
        sets = sorted(p.name for p in (direct / "ckpt").iterdir())
        check(sorted(p.name for p in (store / "meta" / "ckpt").iterdir()) == sets,
              f"objects under meta/ckpt: {sorted((store / 'meta' / 'ckpt').iterdir())}")
        for s in sets:
            names = objects(store, s)
            containers = [n for n in names if n.endswith(".plc")]
            check(len(containers) == k and names == sorted(containers + ["set.plr"]),
                  f"{s}: {names}, not {k} containers + set.plr")
        rows = json.loads(run([BIN, "sets", url, "--json"]).stdout)
        check([r["set"] for r in rows] == [f"ckpt/{s}" for s in sets], f"paralog sets: {rows}")
        for r in rows:
            check(r["complete"] is True and r["members"] == RANKS and r["containers"] == k, f"{r}")
        for s in sets:
            out = work / "extract" / s
            run([BIN, "extract", url, f"ckpt/{s}", out])
            files = sorted(p.name for p in out.iterdir())
            check(files == sorted(p.name for p in (direct / "ckpt" / s).iterdir()), f"{s}: extracted {files}")
            for name in files:
                same_bytes(direct / "ckpt" / s / name, out / name, f"extracted {s}/{name}")
        agg.restart(work, prefix, url, direct, RANKS)
        return f"{STEPS} sets of {RANKS} members as {k} container objects + 1 record each, read back three ways"
    return case


def case_objstore_damage(agg):
    def case(work):
        prefix, store, url = run_into_store(agg, work, 1)
        shutil.rmtree(work / "local", ignore_errors=True)
        s = sorted(p.name for p in (store / "meta" / "ckpt").iterdir())[1]
        cname = next(n for n in objects(store, s) if n.endswith(".plc"))
        # The container's chunk: the one data file its version names (its
        # UUID in hex, as the layout's golden vector spells it).
        # (docs/objstore.md: header length at 12, name length at 56, the
        # first piece's chunk UUID 16 bytes into it).
        vrec = (store / "meta" / "ckpt" / s / cname / "v0000000001").read_bytes()
        first = int.from_bytes(vrec[12:16], "little") + int.from_bytes(vrec[56:58], "little")
        uuid = vrec[first + 16:first + 32].hex()
        chunk = next(store.glob(f"data/*/{uuid}"))
        b = bytearray(chunk.read_bytes())
        b[200_000] ^= 0x10
        chunk.write_bytes(bytes(b))
        block = 200_000 // (1 << 20) * (1 << 20)
        r = paralog_run(work / "l2", prefix, [agg.ckpt(), prefix, RANKS, STEPS, MEAN, "verify"], job="r",
                        remote=url, check=False)
        check(r.returncode != 0, "a flipped container byte went unnoticed")
        check("Input/output error" in r.stdout + r.stderr, f"no EIO: {r.stdout[-500:]}")
        check(f"{chunk}: corrupt at offset {block}:" in r.stderr,
              f"the error does not name the chunk and offset: {r.stderr[-800:]}")
        e = run([BIN, "extract", url, f"ckpt/{s}", work / "ex"], check=False)
        check(e.returncode != 0 and f"{chunk} at offset {block}:" in e.stderr,
              f"extract of a damaged set: {e.returncode} {e.stderr[-600:]}")
        return "EIO and a refused extract, naming the chunk and the offset"
    return case


def versions_of(url, work, label, first, second, sets):
    """Every set extracted: 1 or 2, the run it equals whole (Failed when
    it is neither)."""
    out = []
    for s in sets:
        got = work / label / s
        run([BIN, "extract", url, f"ckpt/{s}", got])
        names = sorted(p.name for p in got.iterdir())
        for v, want in ((1, first), (2, second)):
            d = want / "ckpt" / s
            if names == sorted(p.name for p in d.iterdir()) and \
                    all((got / n).read_bytes() == (d / n).read_bytes() for n in names):
                out.append(v)
                break
        else:
            raise Failed(f"{s} extracted ({label}) is neither version whole: {names}")
    return out


def read_under_capture(agg, work, prefix, url, label):
    """The sets copied out through capture (os.walk, open, read) by a new
    job with a node-local directory of its own."""
    copy = work / label
    # (Short names: the server's socket path must stay under 108 bytes.)
    paralog_run(work / "rl", prefix, [PY, "-c", agg.COPY_OUT, prefix / "ckpt", copy], job="rd", remote=url)
    return copy


def case_objstore_crash(agg, point):
    def case(work):
        k = 2
        prefix, store, url = run_into_store(agg, work, k)
        first = agg.direct_run(work, RANKS)
        second = agg.direct_run(work, RANKS, salt=5, name="second")
        sets = sorted(p.name for p in (first / "ckpt").iterdir())
        local = work / "local"
        shutil.rmtree(local, ignore_errors=True)
        env = clean_env({"PARALOG_FAILPOINT": point, "CKPT_SALT": "5"})
        r = paralog_run(local, prefix, [agg.ckpt(), prefix, RANKS, STEPS, MEAN], remote=url, env=env,
                        extra=("--aggregate", RULE, "--containers", str(k)), check=False, job="second")
        check(r.returncode != 0, "the server did not die at the failpoint")
        # Complete or absent: each set whole, its first version or its second.
        versions = versions_of(url, work, "after-crash", first, second, sets)
        read = read_under_capture(agg, work, prefix, url, "read-after-crash")
        for s, v in zip(sets, versions):
            diff = tree_difference(tree((first, second)[v - 1] / "ckpt" / s), tree(read / s),
                                   names=(f"version {v}", "read under capture"))
            check(not diff, f"{s} read under capture after the crash: {diff}")
        names = [n for s in sets for n in objects(store, s)]
        markers = [n for n in names if n.startswith(MARKER)]
        orphans = sum(1 for n in names if n.endswith(".plc")) - k * len(sets)
        loose = unreferenced_chunks(store)
        if point == "aggregate.mid_containers":
            check(markers and loose and versions == [1] * len(sets),
                  f"no unpublished chunk with its marker: markers {markers}, loose {loose}, versions {versions}")
            left = f"{len(loose)} unpublished chunk(s) with {len(markers)} marker(s)"
        elif point == "aggregate.before_record":
            check(orphans > 0 and versions == [1] * len(sets),
                  f"no orphaned container object after the crash ({names}, versions {versions})")
            left = f"{orphans} orphaned container object(s)"
        else:
            check(2 in versions and orphans > 0,
                  f"no set published with the replaced containers left: versions {versions}, {names}")
            left = f"{orphans} container object(s) of a replaced version"
        r = run([BIN, "recover", "--local", local, "--remote", url, "--aggregate", RULE, "--containers", str(k)],
                env=clean_env(), check=False)
        check(r.returncode == 0, f"recover failed: {r.stdout[-800:]} {r.stderr[-800:]}")
        check_clean(store, k, [f"ckpt/{s}" for s in sets])
        check(versions_of(url, work, "after-recover", first, second, sets) == [2] * len(sets),
              "a set after recover is not the second run's")
        return (f"sets at versions {versions} after the crash, {left}; recover left K + 1 objects per set, "
                f"no marker or loose chunk, all version 2")
    return case


def case_objstore_kept(agg):
    """K=4, one member per container: a second job rewrites members 0 and
    1; the container objects of members 2 and 3 are listed again by
    version 2 (the same objects, nothing copied), the others written new."""
    def case(work):
        ranks, k = 4, 4
        prefix, local, store = work / "prefix", work / "local", work / "store"
        prefix.mkdir()
        store.mkdir()
        url = f"objstore://{store}"
        agg_args = ("--aggregate", RULE, "--containers", str(k))
        paralog_run(local, prefix, [agg.ckpt(), prefix, ranks, STEPS, MEAN], remote=url, extra=agg_args)
        first = agg.direct_run(work, ranks)
        second = agg.direct_run(work, 2, salt=5, name="second")
        sets = sorted(p.name for p in (first / "ckpt").iterdir())
        v1 = {s: objects(store, s) for s in sets}
        paralog_run(local, prefix, [agg.ckpt(), prefix, 2, STEPS, MEAN], remote=url, extra=agg_args, job="second",
                    env=clean_env({"CKPT_SALT": "5"}))
        check_clean(store, k, [f"ckpt/{s}" for s in sets])
        for s in sets:
            kept = sorted(set(v1[s]) & set(objects(store, s)) - {"set.plr"})
            check(len(kept) == 2 and all("-v000001-" in n for n in kept),
                  f"{s}: container objects listed again {kept} of {objects(store, s)}")
            out = work / "v2" / s
            run([BIN, "extract", url, f"ckpt/{s}", out])
            for i in range(ranks):
                name = f"rank-{i:05d}.dat"
                same_bytes((second if i < 2 else first) / "ckpt" / s / name, out / name, f"version 2 of {s}/{name}")
        return f"{len(sets)} sets: 2 of {k} container objects listed again unchanged by version 2, 2 written new"
    return case


def cases(agg):
    return [
        ("objstore K=2", case_objstore(agg, 2)),
        ("objstore damage", case_objstore_damage(agg)),
        ("objstore kept containers", case_objstore_kept(agg)),
    ] + [
        (f"objstore crash at {p}", case_objstore_crash(agg, p))
        for p in ("aggregate.mid_containers", "aggregate.before_record", "aggregate.after_record")
    ]
