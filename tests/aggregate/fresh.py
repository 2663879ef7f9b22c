"""Restart in a new job on a fresh prefix (docs/aggregate.md, "Restart
reads"), run by tests/aggregate/run.py. The sets are written under
`paralog run --aggregate` to a remote other than the prefix; then the prefix
and the node-local log are deleted (a restart on another machine, or after
the prefix was cleaned) and a new job, with a fresh empty prefix, a fresh
--local and one process instead of the writer's six, restarts:

  fresh prefix posix|objstore
                  RESTART below lists ckpt/ (os.listdir, glob, `ls`, `ls -l`), stats
                  the set directories, picks the newest set, lists it (the
                  same three ways), and copies every member out: the names
                  are the direct run's, the copies its bytes; then the
                  checkpoint writer's own restart read (stat, open, read,
                  pread, lseek, readdir, glob of every set)
  fresh prefix subdirs posix|objstore
                  members in directories of their own (rule `out/{set}/**`,
                  out/sN/nodeM/rK.dat): on a fresh prefix os.walk of out/
                  lists and stats the directories of members inside each set
                  (no remote holds them as directories) and copies the tree
                  out equal to the direct run's
"""
import shutil

from tests.lib.check import check
from tests.lib.compare import tree, tree_difference
from tests.lib.paralog import paralog_run, remove_local
from tests.lib.paths import PY
from tests.lib.proc import run

RULE = "ckpt/{set}/rank-*.dat"
RANKS, STEPS, MEAN = 6, 3, 300_000

RESTART = r'''
import glob, os, stat, subprocess, sys
prefix, out = sys.argv[1], sys.argv[2]
ck = os.path.join(prefix, "ckpt")

def listed(d):
    """The names of d three ways, which must agree."""
    a = sorted(os.listdir(d))
    b = sorted(os.path.basename(p) for p in glob.glob(os.path.join(glob.escape(d), "*")))
    c = sorted(subprocess.run(["ls", "-1", d], capture_output=True, text=True, check=True).stdout.split())
    assert a == b == c, f"{d}: listdir {a}, glob {b}, ls {c}"
    # ls -l stats and asks for the attributes of every entry.
    r = subprocess.run(["ls", "-l", d], capture_output=True, text=True)
    assert r.returncode == 0 and not r.stderr, f"ls -l {d}: {r.returncode} {r.stderr}"
    assert len(r.stdout.splitlines()) == len(a) + 1, f"ls -l {d}: {r.stdout}"
    return a

assert os.path.isdir(ck), f"{ck} is not a directory"
sets = listed(ck)
for s in sets:
    m = os.stat(os.path.join(ck, s)).st_mode
    assert stat.S_ISDIR(m), f"{s}: mode {m:o}"
newest = sets[-1]
members = listed(os.path.join(ck, newest))
for m in members:
    src = os.path.join(ck, newest, m)
    assert os.stat(src).st_size > 0, src
    os.makedirs(os.path.join(out, newest), exist_ok=True)
    with open(src, "rb") as a, open(os.path.join(out, newest, m), "wb") as b:
        b.write(a.read())
print("sets", " ".join(sets))
print("restarted from", newest, "with", len(members), "members")
'''


def fresh_prefix(work, objstore, program, extra):
    """Run `program(prefix)` under paralog (options `extra`) to a POSIX
    remote or an object layout, then remove the prefix's directories and
    the node-local log, as on another machine: (the empty prefix, the
    remote's URL)."""
    prefix, local = work / "prefix", work / "local"
    remote = work / ("store" if objstore else "remote")
    prefix.mkdir()
    remote.mkdir()
    url = f"objstore://{remote}" if objstore else remote
    paralog_run(local, prefix, program(prefix), remote=url, extra=extra)
    shutil.rmtree(prefix)
    remove_local(local)
    prefix.mkdir()
    return prefix, url


def case_fresh(agg, objstore):
    def case(work):
        prefix, url = fresh_prefix(work, objstore, lambda p: [agg.ckpt(), p, RANKS, STEPS, MEAN],
                                   ("--aggregate", RULE, "--containers", "2"))
        direct = agg.direct_run(work, RANKS)
        out = work / "restored"
        r = paralog_run(work / "local2", prefix, [PY, "-c", RESTART, prefix, out], remote=url, job="restart",
                        check=False)
        check(r.returncode == 0, f"the restart failed: {r.stdout[-600:]} {r.stderr[-1200:]}")
        sets = sorted(p.name for p in (direct / "ckpt").iterdir())
        check(f"sets {' '.join(sets)}\n" in r.stdout, f"ckpt/ lists {r.stdout!r}, not {sets}")
        newest = sets[-1]
        diff = tree_difference(tree(direct / "ckpt" / newest), tree(out / newest),
                               names=("in the direct run", "restored"))
        check(not diff, f"the restored set differs: {diff}")
        check(not any(prefix.iterdir()), f"the restart left {sorted(prefix.iterdir())} in the prefix")
        r = paralog_run(work / "local3", prefix, [agg.ckpt(), prefix, RANKS, STEPS, MEAN, "verify"], remote=url,
                        job="verify", check=False)
        check(r.returncode == 0 and "verified" in r.stdout, f"restart read: {r.stdout[-800:]} {r.stderr[-800:]}")
        kind = "object layout" if objstore else "POSIX remote"
        return f"{kind}: ckpt/ listed {len(sets)} sets, {newest} restored equal to the direct run"
    return case


NESTED = r'''
import os, sys
root = sys.argv[1]
for s in range(2):
    for node in range(2):
        d = os.path.join(root, "out", f"s{s}", f"node{node}")
        os.makedirs(d, exist_ok=True)
        for r in range(2):
            with open(os.path.join(d, f"r{r}.dat"), "wb") as f:
                f.write(bytes((s * 31 + node * 7 + r + i) % 251 for i in range(50_000 + 1000 * r)))
'''


def case_subdirs(agg, objstore):
    def case(work):
        prefix, url = fresh_prefix(work, objstore, lambda p: [PY, "-c", NESTED, p], ("--aggregate", "out/{set}/**"))
        direct = work / "direct"
        direct.mkdir()
        run([PY, "-c", NESTED, direct])
        copy = work / "copied"
        paralog_run(work / "local2", prefix, [PY, "-c", agg.COPY_OUT, prefix / "out", copy], remote=url,
                    job="restart")
        diff = tree_difference(tree(direct / "out"), tree(copy), names=("in the direct run", "read back"))
        check(not diff, f"the tree read back on a fresh prefix differs: {diff}")
        n = sum(1 for v in tree(copy).values() if v is not None)
        return f"{n} members in set subdirectories walked and read back equal to the direct run"
    return case


def cases(agg):
    return [
        ("fresh prefix posix", case_fresh(agg, False)),
        ("fresh prefix objstore", case_fresh(agg, True)),
        ("fresh prefix subdirs posix", case_subdirs(agg, False)),
        ("fresh prefix subdirs objstore", case_subdirs(agg, True)),
    ]
