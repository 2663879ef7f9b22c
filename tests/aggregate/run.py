#!/usr/bin/python3
"""N-to-K checkpoint aggregation end to end (docs/aggregate.md, issue 16).

A file-per-process checkpoint writer (progs/ckpt.c: every rank writes
ckpt/step-NNNNNN/rank-RRRRR.dat with POSIX calls, sizes uneven by up to
+-20 %) runs under `paralog run --aggregate 'ckpt/{set}/rank-*.dat'`, and
directly. Cases:

  posix K=1|2|4   forked processes; the remote (the prefix) holds exactly K
                  containers + 1 set record per set; `paralog sets` lists
                  them complete; `paralog extract` of every set equals the
                  direct run's files byte for byte; then, with the node-local
                  log deleted, a new `paralog run` job reads every member
                  back (stat, open, read, pread, lseek, opendir/readdir) and
                  copies the tree out with Python's os.walk: equal to the
                  direct run
  mpich|openmpi 4 ranks [MPI-IO]
                  the same writer with MPI (4 ranks, each its own file with
                  POSIX calls, or with MPI-IO on MPI_COMM_SELF), K=2, a
                  separate remote directory
  outside rule    a rule matching ranks 0-2 only: ranks 3-5 drain as plain
                  files next to the set, and the restart sees all six; a
                  second rule that matches nothing is named at the end of
                  the run
  damage          a flipped container byte and a truncated set record: the
                  restart read fails with EIO, naming the file and offset
  rewrite         a later job without --aggregate patches a member in place
                  (open "r+b", write 5 bytes): the set gets version 2 with
                  the patch over the old bytes, the other members kept, and
                  no plain file appears beside it
  killed rank     a rank killed (SIGKILL) halfway through its member of the
                  last set: the earlier sets are published and equal to a
                  direct run, the interrupted one never appears (no record,
                  no container), also after `paralog recover`, which says
                  why and keeps its local data; `recover --incomplete` then
                  publishes it with the finished members, flagged incomplete
  crash at P      the server killed (PARALOG_FAILPOINT=P) at each crash point
                  of a publish (between members, before the publish, between
                  the containers and the record, after the record, after the
                  progress records) while every set gets a second version:
                  each set reads whole as the first version or the second;
                  `paralog recover --aggregate` then publishes the second,
                  collects the orphans (K + 1 files per set), leaves no local
                  record, and a second recover changes nothing

  renamed into place K=2|s3, numpy renamed, modes, member renamed out ...
                  members written under a temporary name and renamed into
                  place, or renamed out of a published set: see
                  tests/aggregate/renames.py

  objstore K=2, objstore damage, objstore crash
                  sets on the object layout: see tests/aggregate/objstore.py

  s3 mpich|openmpi K=1|2, s3 crash at P, s3 damage
                  sets on S3 (a real MinIO): see tests/aggregate/s3.py

  fresh prefix posix|objstore
                  a restart in a new job whose prefix and node-local log are
                  gone: see tests/aggregate/fresh.py

  nodes, leader killed
                  the server job on 2 and 4 simulated nodes: see
                  tests/aggregate/nodes.py

  s3 nodes ...    the server job writing sets on S3 (a real MinIO): see
                  tests/aggregate/s3nodes.py

  objstore nodes ...
                  the server job writing sets on the object layout: see
                  tests/aggregate/objnodes.py

Usage: python3 -m tests.aggregate.run [--only SUBSTRING] [--keep]
Ends with "aggregate: N passed, N failed".
"""
import json
import os
import shutil
import sys
from pathlib import Path

from tests.lib.check import Suite, check, fail, suite_options
from tests.lib.compare import same_bytes, tree, tree_difference
from tests.lib.mpi import compile_program, launcher, mpi_env
from tests.lib.paralog import clean_env, paralog_run
from tests.lib.paths import BIN, PY, TARGET
from tests.lib.proc import run

HERE = Path(__file__).resolve().parent
SRC = HERE / "progs" / "ckpt.c"
OUT = TARGET / "aggregate-tests"
RULE = "ckpt/{set}/rank-*.dat"
RANKS, STEPS, MEAN = 6, 3, 300_000


def ckpt():
    return compile_program("gcc", SRC, OUT / "ckpt", "-O2", "-Wall", "-Wno-format-truncation")


def ckpt_mpi(flavour="mpich"):
    return compile_program(f"mpicc.{flavour}", SRC, OUT / f"ckpt-{flavour}", "-O2", "-Wall",
                           "-Wno-format-truncation", "-DUSE_MPI")


def set_dirs(remote):
    return sorted(p for p in (remote / "ckpt").iterdir() if p.is_dir())


def check_layout(remote, k, steps=STEPS, plain=0):
    """Exactly K containers + 1 record per set (and `plain` plain files)."""
    sets = set_dirs(remote)
    check(len(sets) == steps, f"{len(sets)} set directories, not {steps}: {sets}")
    for d in sets:
        names = sorted(p.name for p in d.iterdir())
        containers = [n for n in names if n.endswith(".plc")]
        others = [n for n in names if not n.endswith(".plc") and n != "set.plr"]
        check("set.plr" in names, f"{d}: no set record: {names}")
        check(len(containers) == k, f"{d}: {len(containers)} containers, not {k}: {names}")
        check(len(others) == plain, f"{d}: {others} beside the set")


def sets_json(remote, n_members, k):
    r = run([BIN, "sets", remote, "--json"])
    rows = json.loads(r.stdout)
    check(len(rows) == STEPS, f"paralog sets lists {len(rows)} sets")
    for row in rows:
        check(row["complete"] is True, f"{row['set']} is not complete: {row}")
        check(row["members"] == n_members, f"{row['set']}: {row['members']} members, not {n_members}")
        check(row["containers"] == k, f"{row['set']}: {row['containers']} containers, not {k}")
    return rows


def extract_all(remote, work, direct, n_members):
    """`paralog extract` of every set equals the direct run's files."""
    for d in set_dirs(remote):
        out = work / "extract" / d.name
        run([BIN, "extract", remote, f"ckpt/{d.name}", out])
        files = sorted(p.name for p in out.iterdir())
        check(len(files) == n_members, f"{d.name}: extracted {files}")
        for name in files:
            same_bytes(direct / "ckpt" / d.name / name, out / name, f"extracted {d.name}/{name}")


COPY_OUT = r'''
import os, shutil, sys
src, dst = sys.argv[1], sys.argv[2]
n = 0
for d, dirs, files in os.walk(src):
    for f in files:
        p = os.path.join(d, f)
        t = os.path.join(dst, os.path.relpath(p, src))
        os.makedirs(os.path.dirname(t), exist_ok=True)
        with open(p, "rb") as a, open(t, "wb") as b:
            shutil.copyfileobj(a, b)
        n += 1
print(n, "files")
'''


def restart(work, prefix, remote, direct, n_ranks, mean=MEAN, env=None):
    """A new job, the first job's node-local log gone: the program's own
    reads, then every file of the tree copied out through os.walk (`env`:
    the program's, e.g. CKPT_HOLES)."""
    local = work / "local2"
    shutil.rmtree(work / "local", ignore_errors=True)
    r = paralog_run(local, prefix, [ckpt(), prefix, n_ranks, STEPS, mean, "verify"], job="restart",
                    remote=None if remote == prefix else remote, env=env)
    check("verified" in r.stdout, f"restart read: {r.stdout[-800:]} {r.stderr[-800:]}")
    copy = work / "copied"
    paralog_run(local, prefix, [PY, "-c", COPY_OUT, prefix / "ckpt", copy], job="restart2",
                remote=None if remote == prefix else remote)
    diff = tree_difference(tree(direct / "ckpt"), tree(copy), names=("in the direct run", "read back under capture"))
    check(not diff, f"restart copy differs: {diff}")


def direct_run(work, n_ranks, salt=None, name="direct", steps=STEPS, mean=MEAN, extra=None, spread=None):
    """The direct run's files in work/NAME (the serial program writes the
    bytes every rank of the MPI program writes; `extra`: more of its
    environment, e.g. CKPT_HOLES; `spread`: CKPT_SPREAD)."""
    direct = work / name
    direct.mkdir(exist_ok=True)
    env = clean_env({**({"CKPT_SALT": str(salt)} if salt else {}),
                     **({"CKPT_SPREAD": str(spread)} if spread is not None else {}), **(extra or {})})
    run([ckpt(), direct, n_ranks, steps, mean], env=env)
    return direct


def case_posix(k):
    def case(work):
        prefix, local = work / "prefix", work / "local"
        prefix.mkdir()
        paralog_run(local, prefix, [ckpt(), prefix, RANKS, STEPS, MEAN],
                    extra=("--aggregate", RULE, "--containers", str(k)))
        direct = direct_run(work, RANKS)
        check_layout(prefix, k)
        rows = sets_json(prefix, RANKS, k)
        extract_all(prefix, work, direct, RANKS)
        restart(work, prefix, prefix, direct, RANKS)
        total = sum(r["bytes"] for r in rows)
        return f"{STEPS} sets of {RANKS} members in {k} container(s), {total} bytes, read back twice"
    return case


def case_mpi(flavour, mpiio):
    def case(work):
        prefix, local, remote = work / "prefix", work / "local", work / "remote"
        prefix.mkdir()
        remote.mkdir()
        prog = ckpt_mpi(flavour)
        env = mpi_env({"CKPT_MPIIO": "1" if mpiio else "0"}, drop=("PARALOG_",))
        launch = launcher(flavour, 4)
        paralog_run(local, prefix, [*launch, prog, prefix, 4, STEPS, MEAN], mpi=flavour, remote=remote,
                    extra=("--aggregate", RULE, "--containers", "2"), env=env)
        direct = work / "direct"
        direct.mkdir()
        run([*launch, prog, direct, 4, STEPS, MEAN], env=env)
        check_layout(remote, 2)
        check(not any((prefix / "ckpt").rglob("*.dat")) if (prefix / "ckpt").exists() else True,
              "rank files in the prefix: the remote is elsewhere")
        sets_json(remote, 4, 2)
        extract_all(remote, work, direct, 4)
        restart(work, prefix, remote, direct, 4)
        how = "MPI-IO on MPI_COMM_SELF" if mpiio else "POSIX calls"
        return f"4 {flavour} ranks ({how}), 3 sets in 2 containers each, read back"
    return case


def case_outside_rule(work):
    prefix, local = work / "prefix", work / "local"
    prefix.mkdir()
    r = paralog_run(local, prefix, [ckpt(), prefix, RANKS, STEPS, MEAN],
                    extra=("--aggregate", "ckpt/{set}/rank-0000[0-2].dat", "--containers", "2",
                           "--aggregate", "chkpt/{set}/*.dat"))
    check("--aggregate chkpt/{set}/*.dat: the rule matched none" in r.stderr,
          f"a rule that matched nothing was not reported: {r.stderr[-600:]}")
    check("ckpt/{set}/rank-0000[0-2].dat: the rule matched none" not in r.stderr, "the rule that matched was reported")
    direct = direct_run(work, RANKS)
    check_layout(prefix, 2, plain=3)
    for d in set_dirs(prefix):
        for r in range(3, RANKS):
            same_bytes(direct / "ckpt" / d.name / f"rank-{r:05d}.dat", d / f"rank-{r:05d}.dat",
                       "a file outside the rule")
    restart(work, prefix, prefix, direct, RANKS)
    return "ranks 0-2 in the sets, 3-5 plain files beside them, all read back"


def case_damage(work):
    prefix, local = work / "prefix", work / "local"
    prefix.mkdir()
    paralog_run(local, prefix, [ckpt(), prefix, 3, STEPS, MEAN], extra=("--aggregate", RULE))
    shutil.rmtree(local, ignore_errors=True)
    step = set_dirs(prefix)[1]
    container = next(step.glob("*.plc"))
    b = bytearray(container.read_bytes())
    b[200_000] ^= 0x10
    container.write_bytes(bytes(b))
    r = paralog_run(work / "l2", prefix, [ckpt(), prefix, 3, STEPS, MEAN, "verify"], job="r", check=False)
    check(r.returncode != 0, "a flipped container byte went unnoticed")
    check("Input/output error" in r.stdout + r.stderr, f"no EIO: {r.stdout[-500:]}")
    check(str(container) in r.stderr and "corrupt at offset" in r.stderr,
          f"the error does not name the container and offset: {r.stderr[-800:]}")
    # The other sets still read.
    bad_lines = [l for l in r.stdout.splitlines() if "step-" in l]
    check(all(step.name in l for l in bad_lines), f"problems outside the damaged set: {bad_lines[:5]}")
    # A truncated set record.
    rec = set_dirs(prefix)[2] / "set.plr"
    rec.write_bytes(rec.read_bytes()[:-7])
    r = paralog_run(work / "l3", prefix, [ckpt(), prefix, 3, STEPS, MEAN, "verify"], job="r2", check=False)
    check(r.returncode != 0, "a truncated set record went unnoticed")
    check(str(rec) in r.stderr and "at offset 16" in r.stderr,
          f"the error does not name the record and offset: {r.stderr[-800:]}")
    return "EIO with the container and the record named"


def case_killed_rank(work):
    prefix, local = work / "prefix", work / "local"
    prefix.mkdir()
    env = clean_env({"CKPT_DIE": f"{STEPS * 100}:2"})
    r = paralog_run(local, prefix, [ckpt(), prefix, RANKS, STEPS, MEAN], extra=("--aggregate", RULE), env=env,
                    check=False)
    check(r.returncode != 0, "the program did not fail")
    direct = direct_run(work, RANKS)
    sets = set_dirs(prefix)
    last = sets[-1]
    check(not any(last.iterdir()), f"the interrupted set left {sorted(p.name for p in last.iterdir())}")
    for d in sets[:-1]:
        out = work / "extract" / d.name
        run([BIN, "extract", prefix, f"ckpt/{d.name}", out])
        for i in range(RANKS):
            same_bytes(direct / "ckpt" / d.name / f"rank-{i:05d}.dat", out / f"rank-{i:05d}.dat", "a finished set")
    r = run([BIN, "recover", "--local", local, "--aggregate", RULE], env=clean_env(), check=False)
    check(r.returncode == 1, f"recover exit {r.returncode}: {r.stdout[-600:]}")
    check(f"checkpoint set ckpt/{last.name} not published" in r.stdout + r.stderr,
          f"recover does not say why: {r.stdout[-600:]} {r.stderr[-300:]}")
    check(not any(last.iterdir()), "recover published the interrupted set")
    # `recover --incomplete`: the members that were finished, flagged so.
    r = run([BIN, "recover", "--local", local, "--aggregate", RULE, "--incomplete"], env=clean_env(), check=False)
    check(r.returncode == 0, f"recover --incomplete: {r.stdout[-600:]} {r.stderr[-300:]}")
    rows = {row["set"]: row for row in json.loads(run([BIN, "sets", prefix, "--json"]).stdout)}
    row = rows[f"ckpt/{last.name}"]
    check(row["complete"] is False and row["members"] == RANKS - 1, f"after recover --incomplete: {row}")
    check("NO (members missing)" in run([BIN, "sets", prefix]).stdout, "`paralog sets` does not say it")
    out = work / "incomplete"
    run([BIN, "extract", prefix, f"ckpt/{last.name}", out])
    for i in range(RANKS):
        if i != 2:
            same_bytes(direct / "ckpt" / last.name / f"rank-{i:05d}.dat", out / f"rank-{i:05d}.dat",
                       "a finished member of the incomplete set")
    check(not (out / "rank-00002.dat").exists(), "the killed rank's member was published")
    return (f"{len(sets) - 1} sets published, the interrupted one absent, also after recover; "
            f"recover --incomplete publishes its {RANKS - 1} finished members flagged incomplete")


PATCH = r'''
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(10)
    f.write(b"HELLO")
'''


def case_rewrite(work):
    prefix, local = work / "prefix", work / "local"
    prefix.mkdir()
    paralog_run(local, prefix, [ckpt(), prefix, 3, STEPS, MEAN], extra=("--aggregate", RULE))
    direct = direct_run(work, 3)
    shutil.rmtree(local, ignore_errors=True)
    step = set_dirs(prefix)[0]
    paralog_run(local, prefix, [PY, "-c", PATCH, step / "rank-00001.dat"], job="patch")
    check_layout(prefix, 1)
    rows = {r["set"]: r for r in json.loads(run([BIN, "sets", prefix, "--json"]).stdout)}
    check(rows[f"ckpt/{step.name}"]["version"] == 2, f"versions: {rows}")
    want = bytearray((direct / "ckpt" / step.name / "rank-00001.dat").read_bytes())
    want[10:15] = b"HELLO"
    patched = direct / "ckpt" / step.name / "rank-00001.dat"
    patched.write_bytes(bytes(want))
    extract_all(prefix, work, direct, 3)
    restart_copy = work / "copied"
    paralog_run(work / "l2", prefix, [PY, "-c", COPY_OUT, prefix / "ckpt", restart_copy], job="read")
    diff = tree_difference(tree(direct / "ckpt"), tree(restart_copy))
    check(not diff, f"read back: {diff}")
    return "version 2 holds the patch, the other members as they were"


CRASH_POINTS = ["aggregate.mid_containers", "aggregate.before_publish", "aggregate.before_record",
                "aggregate.after_record", "aggregate.after_progress"]


def case_crash(point):
    def case(work):
        prefix, local = work / "prefix", work / "local"
        prefix.mkdir()
        k = 2
        agg = ("--aggregate", RULE, "--containers", str(k))
        paralog_run(local, prefix, [ckpt(), prefix, RANKS, STEPS, MEAN], extra=agg)
        first = direct_run(work, RANKS)
        shutil.rmtree(local, ignore_errors=True)
        second = work / "second"
        second.mkdir()
        run([ckpt(), second, RANKS, STEPS, MEAN], env=clean_env({"CKPT_SALT": "5"}))
        # The second run rewrites every set; its server dies at `point`
        # while it publishes the first of them.
        env = clean_env({"PARALOG_FAILPOINT": point, "CKPT_SALT": "5"})
        r = paralog_run(local, prefix, [ckpt(), prefix, RANKS, STEPS, MEAN], extra=agg, env=env, check=False,
                        job="second")
        check(r.returncode != 0, "the server did not die at the failpoint")
        # Every set reads whole: the first version, or the second.
        versions = []
        for d in set_dirs(prefix):
            out = work / "after-crash" / d.name
            run([BIN, "extract", prefix, f"ckpt/{d.name}", out])
            got = [(out / f"rank-{i:05d}.dat").read_bytes() for i in range(RANKS)]
            want1 = [(first / "ckpt" / d.name / f"rank-{i:05d}.dat").read_bytes() for i in range(RANKS)]
            want2 = [(second / "ckpt" / d.name / f"rank-{i:05d}.dat").read_bytes() for i in range(RANKS)]
            check(got in (want1, want2), f"{d.name} after the crash is neither version")
            versions.append(1 if got == want1 else 2)
        r = run([BIN, "recover", "--local", local, "--aggregate", RULE, "--containers", str(k)],
                env=clean_env(), check=False)
        check(r.returncode == 0, f"recover failed: {r.stdout[-800:]} {r.stderr[-800:]}")
        check_layout(prefix, k)
        extract_all(prefix, work, second, RANKS)
        left = [p for p in local.rglob("e*.data")]
        check(not left, f"local records left after recover: {left[:3]}")
        # Recover again changes nothing.
        before = sorted(p.name for d in set_dirs(prefix) for p in d.iterdir())
        run([BIN, "recover", "--local", local, "--aggregate", RULE, "--containers", str(k)], env=clean_env())
        after = sorted(p.name for d in set_dirs(prefix) for p in d.iterdir())
        check(before == after, "a second recover changed the remote")
        return f"after the crash the sets were versions {versions}; recover published the second, K + 1 files each"
    return case


def main():
    a = suite_options().parse_args()
    for cc in ("mpicc.mpich", "mpicc.openmpi"):
        if not shutil.which(cc):
            fail(f"{cc} is missing (scripts/setup.sh installs MPICH and Open MPI)")
    suite = Suite("aggregate", keep=a.keep)
    cases = [(f"posix K={k}", case_posix(k)) for k in (1, 2, 4)]
    cases += [
        ("mpich 4 ranks", case_mpi("mpich", False)),
        ("openmpi 4 ranks", case_mpi("openmpi", False)),
        ("mpich 4 ranks MPI-IO", case_mpi("mpich", True)),
        ("openmpi 4 ranks MPI-IO", case_mpi("openmpi", True)),
        ("outside rule", case_outside_rule),
        ("damage", case_damage),
        ("rewrite", case_rewrite),
        ("killed rank", case_killed_rank),
    ]
    cases += [(f"crash at {p}", case_crash(p)) for p in CRASH_POINTS]
    # Members renamed into place: tests/aggregate/renames.py.
    from tests.aggregate import renames
    cases += renames.cases(sys.modules[__name__])
    # The object layout: tests/aggregate/objstore.py; S3: s3.py.
    from tests.aggregate import objstore
    cases += objstore.cases(sys.modules[__name__])
    from tests.aggregate import s3
    cases += s3.cases()
    # A restart in a new job on a fresh prefix: tests/aggregate/fresh.py.
    from tests.aggregate import fresh
    cases += fresh.cases(sys.modules[__name__])
    from tests.aggregate import fresh_tools
    cases += fresh_tools.cases()
    # Many nodes (the server job): tests/aggregate/nodes.py.
    from tests.aggregate import nodes
    cases += nodes.cases()
    from tests.aggregate import s3nodes
    cases += s3nodes.cases()
    from tests.aggregate import objnodes
    cases += objnodes.cases()
    sys.exit(suite.run(cases, only=a.only))


if __name__ == "__main__":
    os.umask(0o022)
    main()
