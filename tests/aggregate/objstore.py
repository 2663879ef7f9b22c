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
  objstore crash  a second job's server killed between its containers and
                  its record (aggregate.before_record): every set reads
                  whole as the first version, the killed publish's container
                  objects are orphans; `paralog recover --aggregate` collects
                  them and publishes the second (K + 1 objects per set, equal
                  to the second direct run)
"""
import json
import shutil
from pathlib import Path

from tests.lib.check import check
from tests.lib.compare import same_bytes
from tests.lib.paralog import clean_env, paralog_run
from tests.lib.paths import BIN
from tests.lib.proc import run

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


def extract_equal(url, work, label, want, sets):
    """Every set extracted: True when it equals the direct run `want`."""
    same = []
    for s in sets:
        out = work / label / s
        run([BIN, "extract", url, f"ckpt/{s}", out])
        same.append(all((out / p.name).read_bytes() == p.read_bytes() for p in (want / "ckpt" / s).iterdir()))
    return same


def case_objstore_crash(agg):
    def case(work):
        k = 2
        prefix, store, url = run_into_store(agg, work, k)
        first = agg.direct_run(work, RANKS)
        sets = sorted(p.name for p in (first / "ckpt").iterdir())
        local = work / "local"
        shutil.rmtree(local, ignore_errors=True)
        second = work / "second"
        second.mkdir()
        run([agg.ckpt(), second, RANKS, STEPS, MEAN], env=clean_env({"CKPT_SALT": "5"}))
        env = clean_env({"PARALOG_FAILPOINT": "aggregate.before_record", "CKPT_SALT": "5"})
        r = paralog_run(local, prefix, [agg.ckpt(), prefix, RANKS, STEPS, MEAN], remote=url, env=env,
                        extra=("--aggregate", RULE, "--containers", str(k)), check=False, job="second")
        check(r.returncode != 0, "the server did not die at the failpoint")
        check(all(extract_equal(url, work, "after-crash", first, sets)),
              "a set after the crash is not its first version whole")
        containers = sum(1 for s in sets for n in objects(store, s) if n.endswith(".plc"))
        check(containers > k * len(sets), f"no orphaned container object after the crash ({containers})")
        r = run([BIN, "recover", "--local", local, "--remote", url, "--aggregate", RULE, "--containers", str(k)],
                env=clean_env(), check=False)
        check(r.returncode == 0, f"recover failed: {r.stdout[-800:]} {r.stderr[-800:]}")
        for s in sets:
            names = objects(store, s)
            check(len(names) == k + 1 and "set.plr" in names, f"{s} after recover: {names}")
        check(all(extract_equal(url, work, "after-recover", second, sets)),
              "a set after recover is not the second run's")
        return f"{containers - k * len(sets)} orphaned container object(s) collected, every set the second version"
    return case


def cases(agg):
    return [
        ("objstore K=2", case_objstore(agg, 2)),
        ("objstore damage", case_objstore_damage(agg)),
        ("objstore crash", case_objstore_crash(agg)),
    ]
