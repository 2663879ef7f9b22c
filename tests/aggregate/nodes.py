"""N-to-K aggregation by the server job (docs/aggregate.md, "Many nodes"):
simulated nodes (tests/cluster's harness: `{node}` in the node-local
directory, MPMD servers, tests/cluster/as_node.sh), 2 ranks per node, each
rank writing its own member (sizes uneven by +-20 %), real MPICH and Open
MPI servers exchanging the members over MPI.

  nodes N K       --agg-mode leader: the server job drains into K containers per set: the
                  remote holds exactly K containers + 1 set record per set;
                  `paralog extract` of every set and a restart under capture
                  in a new job (local logs deleted) equal the direct run; the
                  servers' counters: each member byte crossed between nodes
                  at most once (none when K = nodes), and a leader never held
                  more receive buffers than its pool
  leader killed,  the leader's server (a sender's) killed (SIGKILL) in the
  sender killed   middle of the second set's transfer: the first set reads
                  whole and equal to the direct run, the interrupted one
                  has no record (an orphaned container); `paralog recover`
                  on every node (an MPI job) publishes every set complete,
                  no orphan left
  own region N K  the same with --agg-mode own: every node writes its own
                  members into its own region of its group's container; the
                  same checks, and no member byte between nodes (0) and no
                  receive buffer at any leader; "(the default)": the same
                  without --agg-mode (own is the default on POSIX remotes)
  region writer   --agg-mode own: a node's server killed (SIGKILL) in the
  killed          middle of its region of the second set: as "leader
                  killed" (old sets whole, the interrupted one without
                  record, recover on every node publishes it, no orphan)
  own region      --agg-mode own, members with holes (CKPT_HOLES=1: each
  holes           rank seeks past the end and writes, then grows its file
                  with ftruncate): extract and a restart under capture equal
                  the direct run, the holes read as zeros, and the
                  containers do not store them (their size is the members'
                  data, not their sizes, plus alignment)
  own region      --agg-mode own, version 2: a later job rewrites node 0's
  kept members    members only; the others are kept from version 1 by the
                  record writer; every member equal to its run
  own region      --agg-mode own, 2 nodes, K=2, node n1's ranks writing
  empty group     empty members (CKPT_EMPTY, created 0600): one container
                  (n0's) + 1 record per set, no empty container file, the
                  servers' log line counts 1 container; extract (bytes and
                  modes) and a restart under capture (sizes 0, mode 0600)
                  equal the direct run (before, group 1 got an empty
                  container file the record listed)
  own region      --agg-mode own, --peer-timeout 2, one node writing its
  slower than     region for about 4 s: the heartbeat keeps the job alive,
  the peer        every set published whole
  timeout
  rank killed     an application rank of node n1 killed (SIGKILL) halfway
                  through its member of the last set (mpirun then ends the
                  others wherever they are): `paralog wait` names the set
                  not published, the server job still publishes the earlier
                  sets whole and equal to the direct run, the interrupted
                  one has nothing on the remote (no record, no container),
                  also after `paralog recover` on every node, which says
                  why; `recover --incomplete` then publishes the members
                  that were finished, flagged incomplete, each equal to the
                  direct run's, the killed rank's not among them (before
                  the fix `paralog wait` said everything committed was
                  drained and exited 0: a set the server job parked had no
                  row in its status)
  renamed into    members written under a temporary name and renamed into
  place           place (CKPT_RENAME=1; MPICH in the own mode, Open MPI in
                  the leader mode): extract and restart equal the direct
                  run, K + 1 files per set
  set removed     a restart job (fresh prefix, new node-local logs, a
                  second server job): `rm -r` under capture on node 0 of
                  the oldest set succeeds, the set and its directory are
                  gone from the remote, `paralog sets` lists the others
"""
import json
import re
import stat
import subprocess

from tests.lib.check import Failed, check
from tests.lib.mpi import launcher
from tests.lib.paralog import clean_env
from tests.lib.paths import BIN
from tests.lib.proc import run
from tests.lib.server import AS_NODE, RANKS_PER_NODE, Cluster

from tests.aggregate import run as agg

# Small members (the suite's time): blocks of 1 MiB, members aligned to 64 KiB.
MEAN = 1_500_000
SERVER_ARGS = ["--buffer", "1M", "--agg-align", "64K", "--agg-buffers", "2"]


def totals(c):
    """The rank-0 server's report: published sets, bytes between nodes,
    leader buffers and pool."""
    log = c.server_log.read_text(errors="replace")
    between = [int(x) for x in re.findall(r"(\d+) bytes between nodes", log)]
    sets = re.findall(r"(\d+) checkpoint set\(s\) published; a leader held at most (\d+) bytes of "
                      r"receive buffers \(pool (\d+)\)", log)
    return between, sets


def write_job(c, flavour, np, extra=None, check_rc=True, steps=None, mean=MEAN):
    """The checkpoint program as an MPI job of `np` ranks on the cluster's
    simulated nodes, under capture (`steps` sets of about `mean` bytes per
    member; `extra`: more environment)."""
    env = c.capture_env(c.env({"RANKS_PER_NODE": str(RANKS_PER_NODE), **(extra or {})}))
    cmd = launcher(flavour, np) + [AS_NODE, agg.ckpt_mpi(flavour), c.prefix, np, steps or agg.STEPS, mean]
    return run(cmd, env=env, timeout=300, check=check_rc)


def written(work, flavour, nodes, remote, args):
    """A server job (options `args`) on `nodes` nodes drains the checkpoint
    job's sets to `remote` and ends: its Cluster."""
    c = Cluster(work, flavour, nodes, str(remote), server_args=args)
    try:
        c.start_servers()
        write_job(c, flavour, nodes * RANKS_PER_NODE)
        c.wait(timeout=300)
    finally:
        c.stop()
    return c


def check_sets(c, work, remote, k, np):
    agg.check_layout(remote, k)
    direct = agg.direct_run(work, np, mean=MEAN)
    rows = agg.sets_json(remote, np, k)
    agg.extract_all(remote, work, direct, np)
    return direct, sum(r["bytes"] for r in rows)


def minimum_between(direct, nodes, k):
    """The member bytes that must cross: in each set and group, every byte
    but the leader's (the node with the most bytes), each once."""
    least = 0
    for step in sorted((direct / "ckpt").iterdir()):
        by_node = [0] * nodes
        for f in step.iterdir():
            rank = int(f.stem.split("-")[1])
            by_node[rank // RANKS_PER_NODE] += f.stat().st_size
        for g in range(k):
            group = [by_node[n] for n in range(nodes) if n * k // nodes == g]
            least += sum(group) - max(group)
    return least


def case_nodes(flavour, nodes, k, mode="leader"):
    """mode "own": each node writes its own region of the container, so
    no member byte crosses between nodes (the counter must say 0) and no
    leader holds receive buffers. mode None: no --agg-mode, which on a
    POSIX remote must be "own"."""
    def case(work):
        remote = work / "remote"
        remote.mkdir()
        np = nodes * RANKS_PER_NODE
        args = ["--aggregate", agg.RULE, *SERVER_ARGS] + (["--agg-mode", mode] if mode else []) + \
            (["--containers", str(k)] if k != nodes else [])
        c = written(work, flavour, nodes, remote, args)
        direct, total = check_sets(c, work, remote, k, np)
        between, sets = totals(c)
        check(sets and int(sets[-1][0]) == agg.STEPS, f"the servers did not report {agg.STEPS} sets: {c.tail()}")
        peak, pool = int(sets[-1][1]), int(sets[-1][2])
        check(peak <= pool, f"a leader held {peak} bytes of receive buffers, more than its pool {pool}")
        sent = between[-1]
        if mode in ("own", None):
            check(sent == 0 and peak == 0, f"each node its own region, yet {sent} member bytes between nodes "
                                           f"and {peak} bytes of receive buffers at a leader")
        else:
            least = minimum_between(direct, nodes, k)
            check(sent == least, f"{sent} bytes between nodes; the least for these groups is {least} "
                                 f"(every byte of a non-leader once, none of a leader's)")
        agg.restart(work, c.prefix, remote, direct, np, MEAN)
        return (f"{agg.STEPS} sets of {np} members in {k} container(s) each, {total} bytes, {sent} "
                f"between nodes; leader buffers at most {peak} of {pool}; extract and restart equal direct")
    return case


def case_renamed(flavour, mode):
    """Members renamed into place (CKPT_RENAME=1: written under a temporary
    name, even ranks one the rule claims, odd ranks one outside it) in a
    server job: extract and restart equal the direct run, K + 1 files per
    set (no temporary file). Before the fix the members were published
    empty."""
    def case(work):
        nodes, k = 2, 1
        remote = work / "remote"
        remote.mkdir()
        np = nodes * RANKS_PER_NODE
        args = ["--aggregate", agg.RULE, *SERVER_ARGS, "--agg-mode", mode, "--containers", str(k)]
        c = Cluster(work, flavour, nodes, str(remote), server_args=args)
        try:
            c.start_servers()
            write_job(c, flavour, np, {"CKPT_RENAME": "1"})
            c.wait(timeout=300)
        finally:
            c.stop()
        direct, total = check_sets(c, work, remote, k, np)
        agg.restart(work, c.prefix, remote, direct, np, MEAN)
        return f"{agg.STEPS} sets of {np} members renamed into place ({mode}), {total} bytes, equal to direct"
    return case


def job_died(c, who, timeout=120):
    """After the job's application: `paralog wait`, then the server job
    must end by the failpoint of its `who` (non-zero, "failpoint reached")."""
    run([BIN, "wait", "--local", c.local, "--job", "t", "--timeout", "120"],
        env=c.env({"PARALOG_NODE": "n0"}), check=False, timeout=200)
    try:
        rc = c.servers.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise Failed(f"the server job went on after its {who} died: {c.tail()}")
    check(rc != 0, f"the server job exited 0 although the {who} was killed: {c.tail()}")
    check("failpoint reached" in c.tail(100000), f"the {who}'s failpoint was not reached: {c.tail()}")


KILL_POINTS = {"leader": "aggregate.mid_transfer", "sender": "aggregate.mid_send",
               "region writer": "aggregate.mid_region"}


def case_killed(flavour, who):
    """who: "leader" (its writers, after the sixth block received),
    "sender" (after its sixth block sent): the second set's transfer; or
    "region writer" (--agg-mode own: a node after the sixth block it wrote
    into its own region, the second set's)."""
    def case(work):
        nodes, k = 2, 1
        remote = work / "remote"
        remote.mkdir()
        np = nodes * RANKS_PER_NODE
        mode = ["--agg-mode", "own" if who == "region writer" else "leader"]
        args = ["--aggregate", agg.RULE, *SERVER_ARGS, "--containers", str(k), *mode]
        c = Cluster(work, flavour, nodes, str(remote), server_args=args)
        # Only a leader's writers (a sender, a node writing its region) reach
        # this point: whichever node does dies at its sixth block (a set takes
        # 3 or 4: the second set's, after the first set was published).
        point = {"PARALOG_FAILPOINT": f"{KILL_POINTS[who]}:6"}
        try:
            c.start_servers({n: point for n in range(nodes)})
            write_job(c, flavour, np)
            job_died(c, who)
        finally:
            c.stop()
        # Complete or absent, never half: a set with a record reads whole and
        # equal to the direct run; the interrupted one has no record.
        direct = agg.direct_run(work, np, mean=MEAN)
        whole, absent, orphans = 0, 0, 0
        for d in agg.set_dirs(remote):
            if (d / "set.plr").exists():
                out = work / "before" / d.name
                run([BIN, "extract", remote, f"ckpt/{d.name}", out])
                for m in sorted(out.iterdir()):
                    agg.same_bytes(direct / "ckpt" / d.name / m.name, m, f"{d.name}/{m.name} before recover")
                whole += 1
            else:
                absent += 1
                orphans += sum(1 for p in d.iterdir() if p.name.endswith(".plc"))
        check(absent >= 1, f"every set has a record although the {who} died mid-transfer: {c.tail()}")
        check(whole >= 1, f"no set was published before the {who} died: {c.tail()}")
        check(orphans >= 1, f"the interrupted set left no container: the {who} did not die mid-transfer")
        r = run(c.node_cmd([BIN, "recover", "--local", c.local, "--remote", remote, "--job", "t",
                            "--aggregate", agg.RULE, "--agg-align", "64K", "--containers", str(k), *mode]),
                env=c.env(), check=False, timeout=300)
        check(r.returncode == 0, f"recover exited {r.returncode}: {r.stdout}{r.stderr}")
        check_sets(c, work, remote, k, np)
        return (f"the {who} died mid-transfer: {whole} set(s) whole, {absent} absent ({orphans} orphaned "
                f"container(s)); recover on every "
                f"node published every set whole (equal to direct), no orphan left")
    return case


def case_rank_killed(flavour):
    def case(work):
        nodes, k = 2, 1
        remote = work / "remote"
        remote.mkdir()
        np = nodes * RANKS_PER_NODE
        last = f"step-{agg.STEPS * 100:06d}"
        victim = RANKS_PER_NODE + 1  # node n1's second rank
        args = ["--aggregate", agg.RULE, *SERVER_ARGS, "--containers", str(k)]
        c = Cluster(work, flavour, nodes, str(remote), server_args=args)
        try:
            c.start_servers()
            r = write_job(c, flavour, np, {"CKPT_DIE": f"{agg.STEPS * 100}:{victim}"}, check_rc=False)
            check(r.returncode != 0, "the program did not fail although a rank was killed")
            r = run([BIN, "wait", "--local", c.local, "--job", "t", "--timeout", "120"],
                    env=c.env({"PARALOG_NODE": "n0"}), check=False, timeout=200)
            said = r.stdout + r.stderr
            check(r.returncode == 3, f"paralog wait exited {r.returncode}, not 3: {said[-600:]} {c.tail()}")
            check(f"ckpt/{last}" in said and "not published" in said,
                  f"paralog wait does not name the set not published: {said[-600:]}")
            try:
                c.servers.wait(timeout=60)
            except subprocess.TimeoutExpired:
                raise Failed(f"the server job did not end after paralog wait: {c.tail()}")
        finally:
            c.stop()
        direct = agg.direct_run(work, np, mean=MEAN)

        def earlier_sets_whole(when):
            sets = agg.set_dirs(remote)
            for d in sets:
                if d.name == last:
                    check(not any(d.iterdir()), f"{when}: the interrupted set left "
                                                f"{sorted(p.name for p in d.iterdir())}")
                    continue
                names = sorted(p.name for p in d.iterdir())
                check(len(names) == k + 1 and "set.plr" in names, f"{when}: {d.name} holds {names}")
                out = work / when / d.name
                run([BIN, "extract", remote, f"ckpt/{d.name}", out])
                for i in range(np):
                    agg.same_bytes(direct / "ckpt" / d.name / f"rank-{i:05d}.dat", out / f"rank-{i:05d}.dat",
                                   f"{when}: {d.name}")
            check(len(sets) == agg.STEPS - 1 or sets[-1].name == last,
                  f"{when}: set directories {[d.name for d in sets]}")

        earlier_sets_whole("before recover")
        recover = [BIN, "recover", "--local", c.local, "--remote", remote, "--job", "t", "--aggregate", agg.RULE,
                   "--agg-align", "64K", "--containers", str(k)]
        r = run(c.node_cmd(recover), env=c.env(), check=False, timeout=300)
        said = r.stdout + r.stderr
        check(r.returncode != 0, f"recover exited 0 with a set it could not publish: {said[-600:]}")
        check(f"checkpoint set ckpt/{last} not published" in said, f"recover does not say why: {said[-800:]}")
        earlier_sets_whole("after recover")
        r = run(c.node_cmd(recover + ["--incomplete"]), env=c.env(), check=False, timeout=300)
        check(r.returncode == 0, f"recover --incomplete exited {r.returncode}: {(r.stdout + r.stderr)[-800:]}")
        rows = {row["set"]: row for row in json.loads(run([BIN, "sets", remote, "--json"]).stdout)}
        row = rows.get(f"ckpt/{last}")
        check(row is not None and row["complete"] is False and 0 < row["members"] < np,
              f"after recover --incomplete: {row}")
        out = work / "incomplete"
        run([BIN, "extract", remote, f"ckpt/{last}", out])
        got = sorted(p.name for p in out.iterdir())
        check(f"rank-{victim:05d}.dat" not in got, f"the killed rank's member was published: {got}")
        for name in got:
            agg.same_bytes(direct / "ckpt" / last / name, out / name, f"a finished member of the incomplete set")
        names = sorted(p.name for p in (remote / "ckpt" / last).iterdir())
        check(len(names) == k + 1, f"after recover --incomplete the set holds {names}: an orphan")
        return (f"{agg.STEPS - 1} set(s) whole, the interrupted one absent, also after recover on every node; "
                f"recover --incomplete published its {len(got)} finished member(s) of {np}, flagged incomplete")
    return case


def case_removed(flavour):
    """rm -r of a set in a restart job: the sets written and drained by a
    first server job, then, on a fresh prefix with new node-local logs, a
    second server job running while `rm -r` (under capture, node 0) deletes
    the oldest set: rm succeeds, the set and its directory are gone from
    the remote, `paralog sets` lists the others (before the fix the server
    job published an empty version whose containers kept the directory,
    and rm's rmdir failed with ENOTEMPTY)."""
    def case(work):
        remote = work / "remote"
        remote.mkdir()
        nodes = 2
        np = nodes * RANKS_PER_NODE
        args = ["--aggregate", agg.RULE, *SERVER_ARGS]
        written(work / "write", flavour, nodes, remote, args)
        first = sorted(r["set"] for r in agg.sets_json(remote, np, nodes))[0]
        c = Cluster(work / "restart", flavour, nodes, str(remote), server_args=args)
        try:
            c.start_servers()
            r = run(["rm", "-r", c.prefix / first], env=c.capture_env(c.env({"PARALOG_NODE": "n0"})),
                    check=False, timeout=180)
            check(r.returncode == 0, f"rm -r {first} exited {r.returncode}: {r.stderr[-600:]}\n{c.tail()}")
            c.wait(timeout=300)
        finally:
            c.stop()
        left = sorted(p.name for p in (remote / first).iterdir()) if (remote / first).exists() else None
        check(left is None, f"{first} is still on the remote, holding {left}")
        rows = json.loads(run([BIN, "sets", remote, "--json"]).stdout)
        check(sorted(r["set"] for r in rows) == [f"ckpt/{d.name}" for d in agg.set_dirs(remote)]
              and len(rows) == agg.STEPS - 1, f"paralog sets lists {rows}")
        return f"{first} removed from the remote by the restart's server job, {len(rows)} set(s) left"
    return case


def case_own_kept(flavour):
    """--agg-mode own, a second version of every set: a later server job
    (fresh prefix, new node-local logs) whose program rewrites only node
    0's members (2 of 4, other bytes): version 2 holds those from the
    second run and the 2 members no epoch touched kept from version 1 (the
    record writer copies them into its own region, every block verified),
    each byte for byte; K containers + 1 record per set, no member byte
    between nodes."""
    def case(work):
        remote = work / "remote"
        remote.mkdir()
        nodes, k = 2, 1
        np = nodes * RANKS_PER_NODE
        args = ["--aggregate", agg.RULE, *SERVER_ARGS, "--agg-mode", "own", "--containers", str(k)]
        written(work / "first", flavour, nodes, remote, args)
        c = Cluster(work / "second", flavour, nodes, str(remote), server_args=args)
        try:
            c.start_servers()
            write_job(c, flavour, RANKS_PER_NODE, {"CKPT_SALT": "5"})
            c.wait(timeout=300)
        finally:
            c.stop()
        agg.check_layout(remote, k)
        rows = json.loads(run([BIN, "sets", remote, "--json"]).stdout)
        check(len(rows) == agg.STEPS and all(r["version"] == 2 and r["members"] == np and r["complete"]
                                             for r in rows), f"after the second job: {rows}")
        between, _ = totals(c)
        check(between and between[-1] == 0, f"bytes between nodes in the second job: {between}")
        first = agg.direct_run(work, np, name="direct1", mean=MEAN)
        second = agg.direct_run(work, RANKS_PER_NODE, salt=5, name="direct2", mean=MEAN)
        for d in agg.set_dirs(remote):
            out = work / "extract" / d.name
            run([BIN, "extract", remote, f"ckpt/{d.name}", out])
            for i in range(np):
                name = f"rank-{i:05d}.dat"
                want = (second if i < RANKS_PER_NODE else first) / "ckpt" / d.name / name
                if i < RANKS_PER_NODE:
                    check(want.read_bytes() != (first / "ckpt" / d.name / name).read_bytes(),
                          "the second run wrote the same bytes as the first: the test proves nothing")
                agg.same_bytes(want, out / name, f"version 2 of {d.name}: {name}")
        return (f"{agg.STEPS} sets at version 2: {RANKS_PER_NODE} members rewritten, {np - RANKS_PER_NODE} kept "
                f"from version 1, each equal to its run; 0 bytes between nodes")
    return case


def own_mode_job(work, flavour, nodes, k, env):
    """One checkpoint job of ckpt.c (with `env`) under a server job in
    --agg-mode own with K containers, to a fresh directory remote: the
    remote and the (stopped) cluster."""
    remote = work / "remote"
    remote.mkdir()
    args = ["--aggregate", agg.RULE, *SERVER_ARGS, "--agg-mode", "own", "--containers", str(k)]
    c = Cluster(work, flavour, nodes, str(remote), server_args=args)
    try:
        c.start_servers()
        write_job(c, flavour, nodes * RANKS_PER_NODE, env)
        c.wait(timeout=300)
    finally:
        c.stop()
    return remote, c


def case_own_holes(flavour):
    """--agg-mode own, 2 nodes, K=1, every member with two holes (its
    second quarter, skipped with lseek, and its last, made by ftruncate):
    the set reads back equal to the direct run (holes as zeros) and each
    container holds only the members' data."""
    def case(work):
        nodes, k = 2, 1
        np = nodes * RANKS_PER_NODE
        holes = {"CKPT_HOLES": "1"}
        remote, c = own_mode_job(work, flavour, nodes, k, holes)
        agg.check_layout(remote, k)
        direct = agg.direct_run(work, np, mean=MEAN, extra=holes)
        agg.sets_json(remote, np, k)
        agg.extract_all(remote, work, direct, np)
        stored = 0
        for d in agg.set_dirs(remote):
            sizes = [(direct / "ckpt" / d.name / f"rank-{i:05d}.dat").stat().st_size for i in range(np)]
            data = sum(2 * (n // 4) for n in sizes)
            # Each member's two data ranges, each at most one alignment (64 KiB) of padding.
            bound = data + 2 * np * (64 << 10)
            got = sum(p.stat().st_size for p in d.glob("*.plc"))
            check(data <= got <= bound < sum(sizes),
                  f"{d.name}: containers of {got} bytes for {data} bytes of data (at most {bound} aligned) "
                  f"in members of {sum(sizes)} bytes: the holes were stored")
            stored += got
        agg.restart(work, c.prefix, remote, direct, np, MEAN, env=clean_env(holes))
        return (f"{agg.STEPS} sets of {np} members with holes: extract and a restart under capture equal "
                f"direct (holes as zeros); containers {stored} bytes, the members' data only")
    return case


def case_own_empty_group(flavour):
    """--agg-mode own, 2 nodes, K=2, every member of node n1 (group 1)
    empty: that group writes no container and the record lists only n0's;
    the empty members are still there, 0 bytes and mode 0600."""
    def case(work):
        nodes, k = 2, 2
        np = nodes * RANKS_PER_NODE
        empty = {"CKPT_EMPTY": str(RANKS_PER_NODE)}
        remote, c = own_mode_job(work, flavour, nodes, k, empty)
        # One container (group 0's) and the record per set: nothing empty.
        agg.check_layout(remote, 1)
        for d in agg.set_dirs(remote):
            sizes = [p.stat().st_size for p in d.glob("*.plc")]
            check(all(sizes), f"{d.name}: an empty container: {sizes}")
        agg.sets_json(remote, np, 1)
        published = [line for line in c.server_log.read_text(errors="replace").splitlines()
                     if "checkpoint set published by the server job" in line]
        counts = [int(m) for line in published for m in re.findall(r"\bcontainers=(\d+)", line)]
        check(len(counts) == agg.STEPS and set(counts) == {1},
              f"the servers' log counts containers {counts} for {agg.STEPS} sets of one container each")
        direct = agg.direct_run(work, np, mean=MEAN, extra=empty)
        agg.extract_all(remote, work, direct, np)
        for d in agg.set_dirs(remote):
            for i in range(np):
                name = f"rank-{i:05d}.dat"
                want = stat.S_IMODE((direct / "ckpt" / d.name / name).stat().st_mode)
                got = stat.S_IMODE((work / "extract" / d.name / name).stat().st_mode)
                check(want == got, f"extracted {d.name}/{name} has mode {oct(got)}, the direct run's {oct(want)}")
        agg.restart(work, c.prefix, remote, direct, np, MEAN, env=clean_env(empty))
        return (f"{agg.STEPS} sets, group 1's {RANKS_PER_NODE} members empty: one container each, "
                f"none empty; extract (bytes, modes 0600) and restart equal direct")
    return case


def case_own_slow_region(flavour):
    """--agg-mode own with --peer-timeout 2: node n1 writes its region
    slowly (2 s after each block: about 4 s a set with its writer threads),
    so node n0 waits for it longer than the timeout; the nodes' heartbeat
    while they write keeps the job alive (without it n0 would wait in one
    collective, and its watchdog end the job), and every set is published
    whole."""
    def case(work):
        remote = work / "remote"
        remote.mkdir()
        nodes, k = 2, 1
        np = nodes * RANKS_PER_NODE
        args = ["--aggregate", agg.RULE, *SERVER_ARGS, "--agg-mode", "own", "--containers", str(k)]
        c = Cluster(work, flavour, nodes, str(remote), server_args=args)
        try:
            c.start_servers({1: {"PARALOG_FAILPOINT_REGION_DELAY_MS": "2000"}}, peer_timeout=2)
            write_job(c, flavour, np)
            c.wait(timeout=300)
            rc = c.servers.wait(timeout=120)
        finally:
            c.stop()
        check(rc == 0 and "no answer from the other servers" not in c.tail(100000),
              f"the server job ended while a node wrote its region: {c.tail()}")
        direct, total = check_sets(c, work, remote, k, np)
        return f"{agg.STEPS} sets published whole while n1 took longer than --peer-timeout 2 s per region"
    return case


def cases():
    out = []
    for flavour in ("mpich", "openmpi"):
        for nodes, ks in ((2, (1, 2)), (4, (1, 2, 4))):
            for k in ks:
                if flavour == "openmpi" and nodes == 4 and k == 2:
                    continue  # the suite's time: MPICH covers it
                out.append((f"{flavour} {nodes} nodes K={k}", case_nodes(flavour, nodes, k)))
        out.append((f"{flavour} leader killed", case_killed(flavour, "leader")))
        out.append((f"{flavour} sender killed", case_killed(flavour, "sender")))
        out.append((f"{flavour} rank killed", case_rank_killed(flavour)))
        # Each node its own region (--agg-mode own): 2 and 4 nodes, K 1, 2.
        # 2 nodes K=1 without --agg-mode: own is the POSIX default.
        out.append((f"{flavour} own region (the default) 2 nodes K=1", case_nodes(flavour, 2, 1, None)))
        for nodes, k in ((2, 2), (4, 1), (4, 2)):
            out.append((f"{flavour} own region {nodes} nodes K={k}", case_nodes(flavour, nodes, k, "own")))
        out.append((f"{flavour} region writer killed", case_killed(flavour, "region writer")))
        out.append((f"{flavour} own region kept members", case_own_kept(flavour)))
        if flavour == "mpich":
            out.append(("mpich own region holes", case_own_holes(flavour)))
            out.append(("mpich own region empty group", case_own_empty_group(flavour)))
        out.append((f"{flavour} set removed", case_removed(flavour)))
        out.append((f"{flavour} renamed into place", case_renamed(flavour, "own" if flavour == "mpich" else "leader")))
    out.append(("mpich own region slower than the peer timeout", case_own_slow_region("mpich")))
    return out
