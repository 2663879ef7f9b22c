"""Members renamed into place (docs/aggregate.md, "Renames"), run by
tests/aggregate/run.py. Before the fix a member written under a temporary
name and renamed into place was published empty (0 bytes, "complete"),
and a member created 0600 came back 0644.

  renamed into place K=2
                  ckpt with CKPT_RENAME=1: every member is written under a
                  temporary name in its set directory (even ranks a name the
                  rule claims, odd ranks a name outside it), fsynced and
                  renamed into place: K containers + 1 record per set and no
                  temporary file on the remote; `paralog extract` and a
                  restart under capture in a new job equal the direct run
  renamed into place s3
                  the same on S3 (a real MinIO): K containers + 1 record per
                  set in the bucket, every member extracted equal to the
                  direct run
  member renamed out posix|objstore
                  a member of a published set renamed out of it in the same
                  job (`mv ckpt/s1/rank-0.dat keep/`): the renamed file on
                  the remote equals the direct run's (before the fix it was
                  drained empty: its bytes are in the set's container, not
                  in a file of its name), and the set it left is gone
  member renamed out, crash, posix|objstore
                  the same, the server killed (failpoint drain.before_fsync)
                  in the drain of the renamed file, after the rename was
                  committed: one `paralog recover` brings the remote to the
                  direct run (the set without the member, its bytes at the
                  new name) and leaves no local record (before the fix the
                  first recover kept the set waiting for the renamed file
                  and exited 1; a second one published it)
  member renamed out, crash, posix, server job
                  the same, recover run as a server job of one node
                  (mpirun.mpich -n 1): its rounds drain the plain files
                  before the sets, so it needed no change
  numpy renamed, modes
                  real numpy: `np.save` to a temporary name then `os.replace`
                  (the usual checkpoint idiom), a member created 0600, a
                  member renamed twice (a -> b -> member) and one written in
                  place: every member's bytes and permission bits, through
                  `paralog extract` and through `os.stat`/`np.load` under
                  capture in a new job, equal those of the same script run
                  directly
"""
import json
import os
import shutil
import stat

from tests.lib.check import check
from tests.lib.mpi import launcher
from tests.lib.compare import same_bytes
from tests.lib.paralog import clean_env, paralog_run
from tests.lib.paths import BIN, PY
from tests.lib.proc import run

NUMPY_WRITER = r'''
import os, sys
import numpy as np
root = sys.argv[1]
for s in range(2):
    d = os.path.join(root, "ckpt", f"step-{s}")
    os.makedirs(d, exist_ok=True)
    for r in range(3):
        a = np.arange(40000 + 5000 * r, dtype="i8") * (s + 1) + r
        tmp = os.path.join(d, f"rank-{r}.npy.part")
        np.save(tmp, a)  # writes rank-R.npy.part.npy, which the rule claims too
        os.replace(tmp + ".npy", os.path.join(d, f"rank-{r}.npy"))
    fd = os.open(os.path.join(d, "rank-private.npy"), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        np.save(f, np.full(1000, s, dtype="f8"))
    a, b = os.path.join(d, ".a.tmp"), os.path.join(d, ".b.tmp")
    with open(a, "wb") as f:
        f.write(bytes(range(256)) * 300)
    os.rename(a, b)
    os.rename(b, os.path.join(d, "rank-twice.npy"))
'''

READER = r'''
import os, stat, sys, hashlib
root = sys.argv[1]
for dirpath, dirs, names in sorted(os.walk(root)):
    dirs.sort()
    for n in sorted(names):
        p = os.path.join(dirpath, n)
        st = os.stat(p)
        with open(p, "rb") as f:
            h = hashlib.sha256(f.read()).hexdigest()[:16]
        print(os.path.relpath(p, root), oct(stat.S_IMODE(st.st_mode)), st.st_size, h)
'''


def case_ckpt(agg):
    def case(work):
        prefix, local = work / "prefix", work / "local"
        prefix.mkdir()
        k = 2
        paralog_run(local, prefix, [agg.ckpt(), prefix, agg.RANKS, agg.STEPS, agg.MEAN],
                    extra=("--aggregate", agg.RULE, "--containers", str(k)),
                    env=clean_env({"CKPT_RENAME": "1"}))
        direct = agg.direct_run(work, agg.RANKS)
        agg.check_layout(prefix, k)
        rows = agg.sets_json(prefix, agg.RANKS, k)
        agg.extract_all(prefix, work, direct, agg.RANKS)
        agg.restart(work, prefix, prefix, direct, agg.RANKS)
        total = sum(r["bytes"] for r in rows)
        return (f"{agg.STEPS} sets of {agg.RANKS} members renamed into place, {total} bytes, "
                f"no temporary file on the remote, read back twice")
    return case


def case_ckpt_s3(agg):
    from tests.aggregate import s3

    def case(work, minio):
        prefix, local = work / "prefix", work / "local"
        prefix.mkdir()
        k, ranks = 2, 4
        url = f"s3://{s3.BUCKET}/ren"
        env = s3.aws_env(minio)
        paralog_run(local, prefix, [agg.ckpt(), prefix, ranks, agg.STEPS, agg.MEAN], remote=url,
                    extra=("--aggregate", agg.RULE, "--containers", str(k)),
                    env=clean_env({**env, "CKPT_RENAME": "1"}))
        direct = agg.direct_run(work, ranks)
        sets = sorted(f"ckpt/{d.name}" for d in (direct / "ckpt").iterdir())
        s3.check_keys(minio, "ren", k, sets)
        for name in sets:
            out = s3.extract(url, clean_env(env), work, "extract", name)
            for m in sorted((direct / name).iterdir()):
                same_bytes(m, out / m.name, f"{name}/{m.name} extracted from S3")
        return f"{len(sets)} sets of {ranks} members renamed into place, on S3, equal to direct"
    return s3.with_minio(case)


def listing(root, env=None, capture=None):
    cmd = [PY, "-c", READER, root]
    if capture is None:
        return run(cmd, env=env).stdout
    local, prefix, remote = capture
    return paralog_run(local, prefix, cmd, remote=remote, job="restart").stdout


def case_numpy(work):
    rule = "ckpt/{set}/rank-*"
    prefix, local, remote = work / "prefix", work / "local", work / "remote"
    prefix.mkdir()
    remote.mkdir()
    script = work / "writer.py"
    script.write_text(NUMPY_WRITER)
    # The direct run, with the umask paralog's run has.
    direct = work / "direct"
    direct.mkdir()
    run([PY, script, direct], env=clean_env())
    want = listing(direct, env=clean_env())
    paralog_run(local, prefix, [PY, script, prefix], remote=remote, extra=("--aggregate", rule))
    sets = sorted(p.name for p in (remote / "ckpt").iterdir())
    check(sets == ["step-0", "step-1"], f"sets on the remote: {sets}")
    for s in sets:
        names = sorted(p.name for p in (remote / "ckpt" / s).iterdir())
        check("set.plr" in names and all(n == "set.plr" or n.endswith(".plc") for n in names),
              f"ckpt/{s} on the remote holds {names}: a temporary file or a plain member beside the set")
        run([BIN, "extract", remote, f"ckpt/{s}", work / "extract" / "ckpt" / s])
    for p in sorted((direct / "ckpt").rglob("*")):
        if p.is_file():
            q = work / "extract" / p.relative_to(direct)
            same_bytes(p, q, f"extracted {p.relative_to(direct)}")
            a, b = stat.S_IMODE(p.stat().st_mode), stat.S_IMODE(q.stat().st_mode)
            check(a == b, f"extracted {p.relative_to(direct)} has mode {oct(b)}, the direct run's {oct(a)}")
    got = listing(work / "extract", env=clean_env())
    check(got == want, f"extract differs from the direct run:\n{got}\nvs\n{want}")
    # A restart in a new job: the prefix and the node-local log gone.
    shutil.rmtree(prefix)
    prefix.mkdir()
    shutil.rmtree(local, ignore_errors=True)  # paralog run leaves its trash to a detached rm
    got = listing(prefix, capture=(work / "local2", prefix, remote))
    check(got == want, f"read back under capture differs from the direct run:\n{got}\nvs\n{want}")
    private = [l for l in want.splitlines() if "rank-private" in l]
    check(private and all(" 0o600 " in l for l in private), f"the private members' modes: {private}")
    return f"{len(want.splitlines())} members (np.save + os.replace, 0600, renamed twice) equal in bytes and modes"


RENAMED_OUT = r'''
import os, sys, time
root, wait = sys.argv[1], float(sys.argv[2])
for s in (1, 2):
    d = os.path.join(root, "ckpt", f"s{s}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "rank-0.dat"), "wb") as f:
        f.write(bytes(range(s, 256)) * 1000)
time.sleep(wait)  # the server publishes s1 (s2 is newer) and drops its local records
if len(sys.argv) > 3:  # or until s1's record is on the remote
    deadline = time.time() + 120
    while not os.path.exists(sys.argv[3]) and time.time() < deadline:
        time.sleep(0.05)
os.makedirs(os.path.join(root, "keep"), exist_ok=True)
os.rename(os.path.join(root, "ckpt", "s1", "rank-0.dat"), os.path.join(root, "keep", "r0.dat"))
'''


def renamed_out_remote(kind, work):
    """(store, url) of a renamed-out case: a directory or an object layout."""
    store = work / "store"
    store.mkdir()
    return store, str(store) if kind == "posix" else f"objstore://{store}"


def check_renamed_out(kind, work, store, url, direct):
    """The remote after the renamed-out script: s1 gone (its one member
    left), keep/r0.dat and s2 equal to the direct run."""
    sets = run([BIN, "sets", url, "--json"]).stdout
    check('"ckpt/s1"' not in sets and '"ckpt/s2"' in sets, f"paralog sets after s1 lost its member: {sets}")
    got = work / "got.dat"
    if kind == "posix":
        got = store / "keep" / "r0.dat"
    else:
        run([BIN, "get", f"{url}/keep/r0.dat", got])
    same_bytes(direct / "keep" / "r0.dat", got, "the member renamed out of its set")
    out = work / "s2"
    run([BIN, "extract", url, "ckpt/s2", out])
    same_bytes(direct / "ckpt" / "s2" / "rank-0.dat", out / "rank-0.dat", "ckpt/s2 extracted")
    return got.stat().st_size


def renamed_out_setup(kind, work):
    """The renamed-out cases' directories, remote and script, and the
    direct run they compare with."""
    prefix, local = work / "prefix", work / "local"
    prefix.mkdir()
    store, url = renamed_out_remote(kind, work)
    script = work / "w.py"
    script.write_text(RENAMED_OUT)
    direct = work / "direct"
    run([PY, script, direct, "0"], env=clean_env())
    return prefix, local, store, url, script, direct


def case_renamed_out(kind):
    def case(work):
        prefix, local, store, url, script, direct = renamed_out_setup(kind, work)
        paralog_run(local, prefix, [PY, script, prefix, "2"], remote=url,
                    extra=("--aggregate", "ckpt/{set}/rank-*"))
        size = check_renamed_out(kind, work, store, url, direct)
        return f"keep/r0.dat equal to direct ({size} bytes); s1 gone, s2 whole"
    return case


def case_renamed_out_crash(kind, mpi=None):
    """The server killed in the drain of the renamed file (before its
    fsync: nothing of the rename is remote), after s1 was published; then
    one recover must do it all (mpi: recover as a server job of one node,
    started by that MPI's launcher: the server job's rounds)."""
    def case(work):
        prefix, local, store, url, script, direct = renamed_out_setup(kind, work)
        record = store / ("ckpt" if kind == "posix" else "meta/ckpt") / "s1" / "set.plr"
        rule = ("--aggregate", "ckpt/{set}/rank-*")
        r = paralog_run(local, prefix, [PY, script, prefix, "0", record], remote=url, extra=rule,
                        env=clean_env({"PARALOG_FAILPOINT": "drain.before_fsync"}), check=False)
        check(r.returncode != 0, f"the server did not die at its failpoint: {r.stdout[-400:]}{r.stderr[-400:]}")
        sets = run([BIN, "sets", url, "--json"]).stdout
        check('"ckpt/s1"' in sets, f"s1 is not on the remote before recover (not the crash window): {sets}")
        recover = [BIN, "recover", "--local", local, "--remote", url, *rule]
        if mpi:
            recover = launcher(mpi, 1) + recover
        r = run(recover, env=clean_env(), check=False, timeout=300)
        said = r.stdout + r.stderr
        check(r.returncode == 0, f"one recover did not finish (exit {r.returncode}): {r.stdout[-800:]}{r.stderr[-400:]}")
        size = check_renamed_out(kind, work, store, url, direct)
        if kind == "posix":
            names = sorted(p.name for p in (store / "keep").iterdir())
            check(names == ["r0.dat"], f"keep/ on the remote holds {names}: the crashed drain's temporary")
        left = sorted(str(p.relative_to(local)) for p in local.rglob("e*.data"))
        check(not left, f"local records left after recover: {left[:3]}")
        # A second recover finds nothing to do.
        r = run([BIN, "recover", "--local", local, "--remote", url, *rule, "--json"], env=clean_env())
        rows = json.loads(r.stdout)["files"]
        check(all(row["drained_epochs"] == 0 for row in rows), f"a second recover drained again: {rows}")
        if mpi:
            check("paralog recover: 1 node(s)" in said, f"recover did not run as a server job: {said[-600:]}")
            return f"one recover as a server job ({mpi}): keep/r0.dat equal to direct ({size} bytes), s1 gone, s2 whole"
        return f"one recover after the crash: keep/r0.dat equal to direct ({size} bytes), s1 gone, s2 whole"
    return case


def cases(agg):
    return [("renamed into place K=2", case_ckpt(agg)), ("renamed into place s3", case_ckpt_s3(agg)),
            ("numpy renamed, modes", case_numpy),
            ("member renamed out posix", case_renamed_out("posix")),
            ("member renamed out objstore", case_renamed_out("objstore")),
            ("member renamed out, crash, posix", case_renamed_out_crash("posix")),
            ("member renamed out, crash, objstore", case_renamed_out_crash("objstore")),
            ("member renamed out, crash, posix, server job", case_renamed_out_crash("posix", "mpich"))]
