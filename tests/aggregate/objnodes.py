"""Checkpoint sets on the object layout written by a server job
(docs/aggregate.md, "On the object layout" and "Many nodes"): 2 simulated
nodes (tests/lib/server.py's Cluster), 2 ranks each, members of 1.2 to
1.8 MB (+-20 %), blocks of 1 MiB between nodes; the leaders' containers
are chunks of the layout, the record writer publishes the set record
through the layout.

  objstore nodes mpich K=1, objstore nodes openmpi K=2
                  the server job drains 3 checkpoints of 4 members (Open
                  MPI: written with MPI-IO on MPI_COMM_SELF): every set is
                  exactly K container objects + 1 record object, no chunk
                  marker, no chunk that no version names; `paralog sets`
                  lists them complete; `paralog extract` of every member
                  and a restart under capture in a new job (the node-local
                  logs deleted) equal the direct run byte for byte
  objstore nodes kept container
                  K=2, a second server job in which only node 0's ranks
                  rewrite their members: version 2 lists node 1's container
                  object of version 1 again (nothing copied), every member
                  extracts equal to its run's
  objstore nodes first group empty
                  K=2, only node 1's ranks write: one container object and
                  the record per set, nothing empty (before, the first group
                  published an empty container object the record listed)
  objstore nodes leader killed
                  a second server job (a restart job rewriting every
                  member) whose leader is killed (SIGKILL, failpoint
                  aggregate.mid_transfer) at its sixth block received, in
                  the middle of its container's chunk: every set reads
                  whole as its first version or its second; the unpublished
                  chunk is left with its marker; `paralog recover` on every
                  node (an MPI job) removes both and publishes every set's
                  second version (equal to the second run), no orphan left
  objstore nodes record writer killed
                  the same, the record writer killed after every leader
                  published its container and before the record
                  (aggregate.before_record): container objects no record
                  lists are left, the previous version reads whole;
                  `recover` removes them and publishes the second version
"""
import json

from tests.lib.check import check
from tests.lib.compare import same_bytes
from tests.lib.paths import BIN
from tests.lib.proc import run
from tests.lib.server import RANKS_PER_NODE, Cluster

from tests.aggregate import run as agg
from tests.aggregate import nodes
from tests.aggregate.nodes import job_died

NODES = 2
NP = NODES * RANKS_PER_NODE
STEPS, MEAN = agg.STEPS, 1_500_000
SERVER_ARGS = ["--buffer", "1M", "--agg-align", "64K", "--agg-buffers", "2"]
MARKER = ".set.plr.chunk."


def write_job(c, flavour, extra=None, check_rc=True):
    return nodes.write_job(c, flavour, NP, extra, check_rc, steps=STEPS, mean=MEAN)


def direct(work, name, salt=None):
    return agg.direct_run(work, NP, salt, name=name, steps=STEPS, mean=MEAN)


def cluster(work, flavour, url, k, per_node_env=None):
    args = ["--aggregate", agg.RULE, *SERVER_ARGS, "--containers", str(k)]
    c = Cluster(work, flavour, NODES, url, server_args=args)
    c.start_servers(per_node_env)
    return c


def set_objects(store, s):
    return sorted(p.name for p in (store / "meta" / s).iterdir())


def chunk_of(vrec):
    """The chunk (UUID in hex) of a version record's first piece
    (docs/objstore.md: header length at 12, name length at 56, the piece's
    chunk UUID 16 bytes into it); None for a version with no piece."""
    first = int.from_bytes(vrec[12:16], "little") + int.from_bytes(vrec[56:58], "little")
    uuid = vrec[first + 16:first + 32]
    return uuid.hex() if len(uuid) == 16 else None


def unreferenced_chunks(store):
    """The chunk files under data/ that no version record names (every
    container and record is one chunk, named by each of its pieces)."""
    named = set()
    for v in (store / "meta").rglob("v" + "[0-9]" * 10):
        named.add(chunk_of(v.read_bytes()))
    return sorted(p.name for p in store.glob("data/*/*") if p.name not in named)


def check_clean(store, k, sets):
    """K container objects + set.plr per set, no marker, no loose chunk."""
    for s in sets:
        names = set_objects(store, s)
        containers = [n for n in names if n.endswith(".plc")]
        check(len(containers) == k and names == sorted(containers + ["set.plr"]),
              f"{s}: {names}, not {k} container objects + set.plr (a marker or an orphan left)")
    loose = unreferenced_chunks(store)
    check(not loose, f"chunks no version names: {loose}")


def check_versions(url, work, label, sets, want, version, k):
    """`paralog sets` lists every set complete at `version`; every member
    extracted equals `want` (a dict set -> directory, or one directory)."""
    rows = json.loads(run([BIN, "sets", url, "--json"]).stdout)
    check([r["set"] for r in rows] == sets, f"{label}: paralog sets lists {rows}")
    for r in rows:
        v = version(r["set"]) if callable(version) else version
        check(r["complete"] is True and r["members"] == NP and r["version"] == v and r["containers"] == k,
              f"{label}: {r} (not complete version {v} of {NP} members in {k} containers)")
    for s in sets:
        out = work / label / s
        run([BIN, "extract", url, s, out])
        names = sorted(p.name for p in out.iterdir())
        check(names == [f"rank-{i:05d}.dat" for i in range(NP)], f"{label} {s}: extracted {names}")
        w = want(s) if callable(want) else want
        for n in names:
            same_bytes(w / s / n, out / n, f"{label}: {s}/{n}")


def case_sets(flavour, k):
    def case(work):
        store = work / "store"
        store.mkdir()
        url = f"objstore://{store}"
        c = cluster(work, flavour, url, k)
        try:
            write_job(c, flavour, {"CKPT_MPIIO": "1" if flavour == "openmpi" else "0"})
            c.wait(timeout=300)
        finally:
            c.stop()
        first = direct(work, "direct")
        sets = [f"ckpt/{p.name}" for p in sorted((first / "ckpt").iterdir())]
        check_clean(store, k, sets)
        check_versions(url, work, "v1", sets, first, 1, k)
        agg.restart(work, c.prefix, url, first, NP, MEAN)
        return (f"{len(sets)} sets x {NP} members from {NODES} nodes as {k} container object(s) + 1 record "
                f"each, no marker or loose chunk; extract and a restart under capture equal direct")
    return case


def case_killed(flavour, point, who):
    def case(work):
        k = 1
        store = work / "store"
        store.mkdir()
        url = f"objstore://{store}"
        c = cluster(work / "first", flavour, url, k)
        try:
            write_job(c, flavour)
            c.wait(timeout=300)
        finally:
            c.stop()
        first, second = direct(work, "direct"), direct(work, "direct2", salt="5")
        sets = [f"ckpt/{p.name}" for p in sorted((first / "ckpt").iterdir())]
        check_clean(store, k, sets)
        # A restart job rewrites every member: each set's version 2.
        fp = {n: {"PARALOG_FAILPOINT": point} for n in range(NODES)}
        c = cluster(work / "second", flavour, url, k, fp)
        try:
            write_job(c, flavour, {"CKPT_SALT": "5"}, check_rc=False)
            job_died(c, who, timeout=180)
        finally:
            c.stop()
        # Complete or absent, never half: each set is its first version or
        # its second, whole.
        rows = {r["set"]: r["version"] for r in json.loads(run([BIN, "sets", url, "--json"]).stdout)}
        check(sorted(rows) == sets and set(rows.values()) <= {1, 2}, f"after the crash: {rows}")
        check(1 in rows.values(), f"every set got its second version although the {who} died: {rows}")
        check_versions(url, work, "after the crash", sets, lambda s: first if rows[s] == 1 else second,
                       lambda s: rows[s], k)
        markers = [f"{s}/{n}" for s in sets for n in set_objects(store, s) if n.startswith(MARKER)]
        containers = sum(1 for s in sets for n in set_objects(store, s) if n.endswith(".plc"))
        loose = unreferenced_chunks(store)
        if point.startswith("aggregate.mid_transfer"):
            check(markers and loose, f"no unpublished chunk with its marker after the leader died "
                                     f"mid-transfer: markers {markers}, loose chunks {loose}")
            what = f"{len(loose)} unpublished chunk(s) with {len(markers)} marker(s)"
        else:
            check(containers > k * len(sets) and not markers,
                  f"no orphan container object after the record writer died before the record: "
                  f"{containers} containers, markers {markers}")
            what = f"{containers - k * len(sets)} orphan container object(s)"
        recover = [BIN, "recover", "--local", c.local, "--remote", url, "--job", "t", "--aggregate", agg.RULE,
                   "--agg-align", "64K", "--containers", str(k)]
        r = run(c.node_cmd(recover), env=c.env(), check=False, timeout=300)
        check(r.returncode == 0, f"recover exited {r.returncode}: {(r.stdout + r.stderr)[-800:]}")
        check_clean(store, k, sets)
        check_versions(url, work, "after recover", sets, second, 2, k)
        return (f"the {who} died: sets at versions {sorted(rows.values())}, each whole, {what} left; recover "
                f"on every node collected them and published version 2 (equal to the second run), no orphan")
    return case


def case_kept(flavour):
    """K=2, then a second server job in which only node 0's ranks rewrite
    their members (CKPT_WRITERS=2): each set's version 2 lists node 1's
    container object of version 1 again (the same object, nothing copied)
    and one container object written new; every member extracts equal to
    its run's; no marker, no loose chunk."""
    def case(work):
        k = 2
        store = work / "store"
        store.mkdir()
        url = f"objstore://{store}"
        v1 = {}
        for label, extra in (("first", {}), ("second", {"CKPT_SALT": "5", "CKPT_WRITERS": str(RANKS_PER_NODE)})):
            c = cluster(work / label, flavour, url, k)
            try:
                write_job(c, flavour, extra)
                c.wait(timeout=300)
            finally:
                c.stop()
            if label == "first":
                first = direct(work, "direct")
                sets = [f"ckpt/{p.name}" for p in sorted((first / "ckpt").iterdir())]
                v1 = {s: set_objects(store, s) for s in sets}
        second = direct(work, "direct2", salt="5")
        check_clean(store, k, sets)
        check_versions(url, work, "v2", sets,
                       lambda s: _mixed(work, s, first, second), 2, k)
        for s in sets:
            now = set_objects(store, s)
            kept = sorted(set(v1[s]) & set(now) - {"set.plr"})
            check(len(kept) == 1 and "-v000001-" in kept[0],
                  f"{s}: container objects of version 2 {now}, of version 1 {v1[s]}: not one listed again")
        return (f"{len(sets)} sets: version 2 lists node 1's container object of version 1 again and writes "
                f"one new (node 0's members); every member extracts equal, no marker or loose chunk")
    return case


def case_first_group_empty(flavour):
    """K=2, only node 1's ranks write (CKPT_SKIP=2): the first group has
    nothing to write, so each set is one container object (node 1's) and
    the record, nothing empty (before, the first group always wrote a
    container: an empty object listed by the record)."""
    def case(work):
        k = 2
        store = work / "store"
        store.mkdir()
        url = f"objstore://{store}"
        c = cluster(work, flavour, url, k)
        try:
            write_job(c, flavour, {"CKPT_SKIP": str(RANKS_PER_NODE)})
            c.wait(timeout=300)
        finally:
            c.stop()
        want = direct(work, "direct")
        sets = [f"ckpt/{p.name}" for p in sorted((want / "ckpt").iterdir())]
        check_clean(store, 1, sets)
        rows = json.loads(run([BIN, "sets", url, "--json"]).stdout)
        check([(r["set"], r["members"], r["containers"]) for r in rows] == [(s, NP - RANKS_PER_NODE, 1) for s in sets],
              f"paralog sets: {rows}")
        for s in sets:
            out = work / "x" / s
            run([BIN, "extract", url, s, out])
            names = sorted(p.name for p in out.iterdir())
            check(names == [f"rank-{i:05d}.dat" for i in range(RANKS_PER_NODE, NP)], f"{s}: extracted {names}")
            for n in names:
                same_bytes(want / s / n, out / n, f"{s}/{n}")
        return f"{len(sets)} sets of node 1's members: one container object + the record each, nothing empty"
    return case


def _mixed(work, s, first, second):
    """A directory holding set `s` as version 2 should: node 0's members
    from `second`, node 1's from `first`."""
    want = work / "want"
    if not (want / s).exists():
        (want / s).mkdir(parents=True)
        for i in range(NP):
            name = f"rank-{i:05d}.dat"
            src = second if i < RANKS_PER_NODE else first
            (want / s / name).write_bytes((src / s / name).read_bytes())
    return want


def cases():
    return [
        ("objstore nodes mpich K=1", case_sets("mpich", 1)),
        ("objstore nodes openmpi K=2", case_sets("openmpi", 2)),
        ("objstore nodes kept container", case_kept("mpich")),
        ("objstore nodes first group empty", case_first_group_empty("openmpi")),
        ("objstore nodes leader killed", case_killed("mpich", "aggregate.mid_transfer:6", "leader")),
        ("objstore nodes record writer killed",
         case_killed("openmpi", "aggregate.before_record", "record writer")),
    ]
