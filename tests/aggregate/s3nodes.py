"""Checkpoint sets on S3 written by a server job (docs/aggregate.md, "Sets
on S3" and "Many nodes"), against a real MinIO on loopback: 2 simulated
nodes (tests/lib/server.py's Cluster), 2 ranks each, members of 4.4 to
6.6 MB (+-20 %, some above 5 MiB) and `part_size=5M`, so that every
container is a multipart upload of several parts packed across members
(and across the nodes whose members its leader received).

  s3 nodes mpich K=1, s3 nodes openmpi K=2
                  the server job drains 2 checkpoints of 4 members (Open
                  MPI: written with MPI-IO on MPI_COMM_SELF): the bucket
                  holds exactly K container objects + 1 set record per set
                  (the keys listed), each container of several parts, no
                  upload marker and no unfinished multipart upload;
                  `paralog sets` lists them complete, and `paralog extract`
                  of every member equals the direct run's file. Then a
                  restart job started without `--aggregate` (`paralog run`,
                  a new node-local directory) reads the members: EIO, with
                  one line per member naming its set and `paralog extract`
  s3 nodes kept container
                  K=2, then a second server job in which only node 0's
                  ranks rewrite their members (CKPT_WRITERS=2): in each
                  set's version 2 the container of node 1's members is the
                  same key, the same size, as in version 1 (listed again,
                  nothing copied: before, the server job copied node 1's
                  members into the first container), and the one container
                  written new holds no more than node 0's member bytes and
                  their alignment; every member extracts equal to its
                  run's (node 0's the second, node 1's the first)
  s3 nodes kept first container
                  the same with node 1's ranks rewriting (CKPT_SKIP=2):
                  node 0's container (the first group's) is listed again and
                  the first group writes nothing; no empty object (before,
                  the first group always wrote a container: it copied node
                  0's members into a new one, and wrote an empty one when it
                  had nothing at all)
  s3 nodes leader killed
                  a second server job (a restart job rewriting every
                  member) whose leader is killed (SIGKILL, failpoint
                  aggregate.mid_transfer) at its sixth block received, in
                  the middle of its container's upload: every set reads
                  whole as its first version; an unfinished multipart upload
                  and its marker are left; `paralog recover` on every node
                  (an MPI job) aborts it, deletes the marker and publishes
                  every set's second version (K + 1 keys per set, equal to
                  the second run), no upload left
  s3 nodes record writer killed
                  the same, the record writer killed after every leader
                  reported its container complete and before the record's
                  PUT (aggregate.before_record): complete orphan containers
                  are left, the previous version reads whole; `recover`
                  deletes them and publishes the second version
  s3 own region mpich K=1, s3 own region openmpi K=2
                  --agg-mode own: each node uploads its own members as its
                  own parts of its group's container upload, members of
                  +-80 % (CKPT_SPREAD) so that regions are uneven and some
                  under S3's 5 MiB part minimum (MPICH: both nodes' regions
                  of the first set, so the smaller is the container's last
                  part and the other padded to 5 MiB; Open MPI, MPI-IO:
                  node 0's region of the second set is two parts, node 1's
                  container of the first set one part of 4.2 MiB): K
                  containers + 1 record per set, each container exactly
                  the size and part count the placement rule gives, no
                  marker or upload left, 0 member bytes between nodes (the
                  servers' counter), `paralog extract` equals the direct run;
                  Open MPI: then the restart job's reads fail with EIO
                  naming the set and `paralog extract` (as above)
  s3 own region kept container
                  "s3 nodes kept container" with --agg-mode own (Open MPI):
                  node 1's container listed again, node 0's members in the
                  one container uploaded new
  s3 own region writer killed
                  --agg-mode own, a node's server killed (SIGKILL, failpoint
                  aggregate.mid_region) in the middle of its region of the
                  second set: the first set reads whole, the second has no
                  record and leaves its open upload(s) and marker(s);
                  `paralog recover --agg-mode own` on every node aborts
                  them and publishes it whole: K + 1 keys per set, no
                  upload left, every member equal to the direct run
  s3 own region empty group
                  --agg-mode own, K=2, node n1's members all empty (and
                  0600: CKPT_EMPTY): one container + 1 record per set (no
                  empty object), no marker or upload left, `paralog
                  extract` equals the direct run, the empty members with
                  mode 0600 (before, group 1's container was completed as
                  an empty object the record listed)
"""
import json

from tests.lib.check import check
from tests.lib.compare import same_bytes
from tests.lib.paralog import paralog_run
from tests.lib.paths import BIN
from tests.lib.proc import run
from tests.lib.server import RANKS_PER_NODE, Cluster

from tests.aggregate import run as agg
from tests.aggregate import s3
from tests.aggregate import nodes
from tests.aggregate.nodes import job_died
from tests.aggregate.s3 import BUCKET, MARK, RULE, QUERY, with_minio

NODES = 2
NP = NODES * RANKS_PER_NODE
STEPS, MEAN = 2, 5_500_000
# Blocks of 1 MiB between nodes, blocks aligned to 64 KiB in a container.
SERVER_ARGS = ["--buffer", "1M", "--agg-align", "64K", "--agg-buffers", "2"]


def write_job(c, flavour, extra=None, check_rc=True):
    return nodes.write_job(c, flavour, NP, extra, check_rc, steps=STEPS, mean=MEAN)


def direct(work, name, salt=None):
    return agg.direct_run(work, NP, salt, name=name, steps=STEPS, mean=MEAN)


def cluster(work, flavour, minio, url, k, per_node_env=None, mode="leader"):
    args = ["--aggregate", RULE, *SERVER_ARGS, "--containers", str(k), "--agg-mode", mode]
    c = Cluster(work, flavour, NODES, url, aws_env=s3.aws_env(minio), server_args=args)
    c.start_servers(per_node_env)
    return c


def uploads_under(minio, prefix):
    """The unfinished multipart uploads MinIO lists under `prefix/` (its
    running process lists those it created)."""
    r = minio.api("list-multipart-uploads", "--bucket", BUCKET, "--prefix", f"{prefix}/") or {}
    return [(u["Key"], u["UploadId"]) for u in r.get("Uploads", []) or []]


def check_clean(minio, pre, k, sets, marked=()):
    """K containers + set.plr per set and nothing else; no upload left
    (those of the containers in `marked` looked up by their exact keys)."""
    keys = s3.check_keys(minio, pre, k, sets)
    left = uploads_under(minio, pre) + [u for key in marked for u in minio.uploads(BUCKET, key)]
    check(not left, f"unfinished multipart uploads left: {left}")
    return keys


def check_versions(minio, url, work, label, sets, want_dir, version):
    rows = json.loads(run([BIN, "sets", url, "--json"], env=minio.env()).stdout)
    check([r["set"] for r in rows] == sets, f"{label}: paralog sets lists {rows}")
    for r in rows:
        check(r["complete"] is True and r["members"] == NP and r["version"] == version,
              f"{label}: {r} (not complete version {version} of {NP} members)")
    for s in sets:
        out = s3.extract(url, minio.env(), work, label, s)
        names = sorted(p.name for p in out.iterdir())
        check(names == [f"rank-{i:05d}.dat" for i in range(NP)], f"{label} {s}: extracted {names}")
        for n in names:
            same_bytes(want_dir / s / n, out / n, f"{label}: {s}/{n}")


def case_sets(flavour, k):
    @with_minio
    def case(work, minio):
        pre = f"job-{flavour}-k{k}"
        url = f"s3://{BUCKET}/{pre}{QUERY}"
        c = cluster(work, flavour, minio, url, k)
        try:
            write_job(c, flavour, {"CKPT_MPIIO": "1" if flavour == "openmpi" else "0"})
            c.wait(timeout=300)
        finally:
            c.stop()
        first = direct(work, "direct")
        sets = [f"ckpt/{p.name}" for p in sorted((first / "ckpt").iterdir())]
        keys = check_clean(minio, pre, k, sets)
        counts = [s3.parts(minio, f"{pre}/{d}/{n}") for d in sets for n in keys[d] if n.endswith(".plc")]
        check(all(n >= 2 for n in counts), f"containers of one part: {counts} (parts are 5 MiB)")
        check_versions(minio, url, work, "v1", sets, first, 1)
        restart_refused(work, minio, c.prefix, pre, url, sets)
        return (f"{len(sets)} sets x {NP} members from {NODES} nodes in {k} container(s) of "
                f"{min(counts)}-{max(counts)} parts, K + 1 keys per set, no upload left, extract equals direct; "
                f"a restart without --aggregate: EIO naming the set and paralog extract")
    return case


def restart_refused(work, minio, prefix, pre, url, sets, mean=MEAN):
    """A restart job started WITHOUT --aggregate (`paralog run`, a new
    node-local directory) reading the members back: capture cannot read S3,
    so each read fails with EIO and one line naming the set and `paralog
    extract` (before, such a job listed no sets and the reads found no
    file: ENOENT, as if the checkpoint did not exist)."""
    r = paralog_run(work / "restart-local", prefix, [agg.ckpt(), prefix, NP, STEPS, mean, "verify"], job="r",
                    remote=url, env=minio.env(), check=False)
    check(r.returncode != 0, "a restart read of a member on S3 succeeded")
    said = r.stdout + r.stderr
    for s in sets:
        member = prefix / s / "rank-00000.dat"
        line = (f"paralog: {member}: in the checkpoint set {s} on S3, which capture cannot read "
                f"(no network I/O in the program): run `paralog extract s3://{BUCKET}/{pre} {s} OUT`")
        check(line in r.stderr, f"no line naming {s} and paralog extract: {r.stderr[-800:]}")
        check(f"{member}: Input/output error" in said, f"{member}: not EIO: {said[-800:]}")


def case_killed(flavour, point, who):
    @with_minio
    def case(work, minio):
        k = 1
        pre = f"killed-{flavour}"
        url = f"s3://{BUCKET}/{pre}{QUERY}"
        c = cluster(work / "first", flavour, minio, url, k)
        try:
            write_job(c, flavour)
            c.wait(timeout=300)
        finally:
            c.stop()
        first, second = direct(work, "direct"), direct(work, "direct2", salt="5")
        sets = [f"ckpt/{p.name}" for p in sorted((first / "ckpt").iterdir())]
        check_clean(minio, pre, k, sets)
        # A restart job rewrites every member: each set's version 2. Only a
        # set's leader (its record writer) reaches the point.
        fp = {n: {"PARALOG_FAILPOINT": point} for n in range(NODES)}
        c = cluster(work / "second", flavour, minio, url, k, fp)
        try:
            write_job(c, flavour, {"CKPT_SALT": "5"}, check_rc=False)
            job_died(c, who, timeout=180)
        finally:
            c.stop()
        # The previous version reads whole; the interrupted attempt left
        # what the point says, and nothing else.
        check_versions(minio, url, work, "after the crash", sets, first, 1)
        keys = s3.set_keys(minio, pre)
        marks = [f"{pre}/{d}/{n.removeprefix(MARK)}" for d, names in keys.items() for n in names
                 if n.startswith(MARK)]
        containers = sum(1 for names in keys.values() for n in names if n.endswith(".plc"))
        if point.startswith("aggregate.mid_transfer"):
            left = [u for key in marks for u in minio.uploads(BUCKET, key)]
            check(marks and left, f"no unfinished upload (with its marker) after the leader died "
                                  f"mid-transfer: {keys}")
            what = f"{len(left)} unfinished upload(s), {len(marks)} marker(s)"
        else:
            check(containers > k * len(sets) and not marks,
                  f"no complete orphan container after the record writer died before the record: {keys}")
            what = f"{containers - k * len(sets)} complete orphan container(s)"
        recover = [BIN, "recover", "--local", c.local, "--remote", url, "--job", "t", "--aggregate", RULE,
                   "--agg-align", "64K", "--containers", str(k)]
        r = run(c.node_cmd(recover), env=c.env(), check=False, timeout=300)
        check(r.returncode == 0, f"recover exited {r.returncode}: {(r.stdout + r.stderr)[-800:]}")
        check_clean(minio, pre, k, sets, marks)
        check_versions(minio, url, work, "after recover", sets, second, 2)
        return (f"the {who} died: every set read as version 1, {what} left; recover on every node "
                f"collected them and published version 2 (equal to the second run), K + 1 keys per set")
    return case


def containers_of(keys, pre, s):
    """{key: size} of the container objects of set `s` among `keys`."""
    return {k: n for k, n in keys.items() if k.startswith(f"{pre}/{s}/") and k.endswith(".plc")}


def case_kept(flavour, node=0, mode="leader"):
    """`node`: the node whose ranks rewrite their members in the second
    job (the other's container is listed again); `mode`: --agg-mode."""
    @with_minio
    def case(work, minio):
        k = 2
        pre = f"kept-{flavour}-{node}-{mode}"
        url = f"s3://{BUCKET}/{pre}{QUERY}"
        # Only `node`'s ranks write in the second job.
        only = {"CKPT_WRITERS": str(RANKS_PER_NODE)} if node == 0 else {"CKPT_SKIP": str(RANKS_PER_NODE)}
        rewritten = range(node * RANKS_PER_NODE, (node + 1) * RANKS_PER_NODE)
        for label, extra in (("first", {}), ("second", {"CKPT_SALT": "5", **only})):
            c = cluster(work / label, flavour, minio, url, k, mode=mode)
            try:
                write_job(c, flavour, extra)
                c.wait(timeout=300)
            finally:
                c.stop()
            if label == "first":
                first = direct(work, "direct")
                sets = [f"ckpt/{p.name}" for p in sorted((first / "ckpt").iterdir())]
                v1 = {key: size for key, size in minio.keys(BUCKET, pre)}
        second = direct(work, "direct2", salt="5")
        check_clean(minio, pre, k, sets)
        v2 = {key: size for key, size in minio.keys(BUCKET, pre)}
        # What version 2 should hold: `node`'s members rewritten, the other's kept.
        want = work / "want"
        for s in sets:
            (want / s).mkdir(parents=True)
            for i in range(NP):
                src = second if i in rewritten else first
                name = f"rank-{i:05d}.dat"
                (want / s / name).write_bytes((src / s / name).read_bytes())
        check_versions(minio, url, work, "v2", sets, want, 2)
        written = 0
        for s in sets:
            now, before = containers_of(v2, pre, s), containers_of(v1, pre, s)
            kept = {kk: sz for kk, sz in now.items() if before.get(kk) == sz}
            new = {kk: sz for kk, sz in now.items() if kk not in before}
            check(len(kept) == 1 and all("-v000001-" in kk for kk in kept) and len(new) == 1,
                  f"{s}: containers of version 2 {sorted(now)}, of version 1 {sorted(before)}: not one "
                  f"listed again unchanged and one written new")
            # Nothing empty: every object is a container the record names.
            check(all(sz > 0 for sz in now.values()), f"{s}: an empty container in version 2: {now}")
            mine = sum((second / s / f"rank-{i:05d}.dat").stat().st_size for i in rewritten)
            # Blocks of 1 MiB, each at a multiple of 64 KiB.
            bound = mine + (mine // (1 << 20) + 2 * RANKS_PER_NODE) * (64 << 10)
            got = sum(new.values())
            check(mine <= got <= bound, f"{s}: {got} container bytes written for version 2; node {node}'s "
                                        f"members are {mine} bytes (at most {bound} aligned): the others' "
                                        f"were copied")
            written += got
        return (f"{len(sets)} sets: version 2 lists node {1 - node}'s container of version 1 again (same key "
                f"and size) and writes {written} bytes new (node {node}'s members only); every member "
                f"extracts equal")
    return case


# --agg-mode own: members of +-80 %, so that node regions are uneven and
# some are under S3's 5 MiB minimum part (`own_sizes`).
OWN_SPREAD = 80
MIB = 1 << 20
ALIGN = 64 << 10


def own_expected(direct, k, part=5 * MIB):
    """{set: [(size, parts)] per container}: the placement rule of
    docs/aggregate.md (each node's region a whole number of parts; the
    smallest region under 5 MiB last, other regions padded to 5 MiB and to
    the alignment), computed here from the direct run's sizes."""
    up = lambda n, a: -(-n // a) * a  # noqa: E731
    out = {}
    for step in sorted((direct / "ckpt").iterdir()):
        regions = {}
        for f in sorted(step.iterdir()):
            node = int(f.stem.split("-")[1]) // RANKS_PER_NODE
            end = regions.get(node, 0)
            regions[node] = (up(end, ALIGN) if end else 0) + f.stat().st_size
        containers = []
        for g in range(k):
            live = [(n, r) for n, r in sorted(regions.items()) if n * k // NODES == g and r > 0]
            small = min((x for x in live if x[1] < 5 * MIB), key=lambda x: (x[1], x[0]), default=None)
            if small:
                live = [x for x in live if x != small] + [small]
            rooms = [up(max(r, 5 * MIB), ALIGN) for _, r in live[:-1]] + [live[-1][1]]
            containers.append((sum(rooms), sum(max(1, r // part) for r in rooms)))
        out[f"ckpt/{step.name}"] = containers
    return out


def check_own(minio, pre, k, sets, direct, c, marked=()):
    """K containers + 1 record per set of the sizes and part counts the
    placement rule gives, no upload left, 0 member bytes between nodes."""
    keys = check_clean(minio, pre, k, sets, marked)
    sizes = dict(minio.keys(BUCKET, pre))
    want = own_expected(direct, k)
    for d in sets:
        got = [(sizes[f"{pre}/{d}/{n}"], s3.parts(minio, f"{pre}/{d}/{n}"))
               for n in keys[d] if n.endswith(".plc")]
        # A single part shows as a multipart object of 1 part.
        check(got == want[d], f"{d}: containers (size, parts) {got}, the rule gives {want[d]}")
    between, _ = nodes.totals(c)
    check(between and between[-1] == 0, f"member bytes between nodes: {between} (each node its own parts)")
    return want


def case_own(flavour, k, mean, extra=None, restart=False):
    @with_minio
    def case(work, minio):
        pre = f"own-{flavour}-k{k}"
        url = f"s3://{BUCKET}/{pre}{QUERY}"
        c = cluster(work, flavour, minio, url, k, mode="own")
        try:
            nodes.write_job(c, flavour, NP, {"CKPT_SPREAD": str(OWN_SPREAD), **(extra or {})},
                            steps=STEPS, mean=mean)
            c.wait(timeout=300)
        finally:
            c.stop()
        first = agg.direct_run(work, NP, name="direct", steps=STEPS, mean=mean, spread=OWN_SPREAD)
        sets = [f"ckpt/{p.name}" for p in sorted((first / "ckpt").iterdir())]
        want = check_own(minio, pre, k, sets, first, c)
        check_versions(minio, url, work, "own", sets, first, 1)
        if restart:
            restart_refused(work, minio, c.prefix, pre, url, sets, mean)
        return (f"{len(sets)} sets x {NP} members from {NODES} nodes, containers (bytes, parts) {want}, "
                f"0 bytes between nodes, K + 1 keys, no upload left, extract equals direct"
                + ("; a restart: EIO naming the set and paralog extract" if restart else ""))
    return case


def case_own_killed(flavour):
    @with_minio
    def case(work, minio):
        k, mean = 1, 4_000_000
        pre = f"own-killed-{flavour}"
        url = f"s3://{BUCKET}/{pre}{QUERY}"
        # The first set takes each node 5 to 7 blocks of 1 MiB, the second
        # 10 to 12: whichever node reaches its 12th block dies in the
        # middle of its region of the second set.
        fp = {n: {"PARALOG_FAILPOINT": "aggregate.mid_region:12"} for n in range(NODES)}
        c = cluster(work, flavour, minio, url, k, fp, mode="own")
        try:
            nodes.write_job(c, flavour, NP, {"CKPT_SPREAD": str(OWN_SPREAD)}, check_rc=False,
                            steps=STEPS, mean=mean)
            job_died(c, "region writer", timeout=180)
        finally:
            c.stop()
        first = agg.direct_run(work, NP, name="direct", steps=STEPS, mean=mean, spread=OWN_SPREAD)
        sets = [f"ckpt/{p.name}" for p in sorted((first / "ckpt").iterdir())]
        # The first set whole, the second without record; its open
        # upload(s) and marker(s) left.
        check_versions(minio, url, work, "after the crash", sets[:1], first, 1)
        keys = s3.set_keys(minio, pre)
        check("set.plr" not in keys.get(sets[1], []), f"{sets[1]} has a record after the crash: {keys}")
        marks = [f"{pre}/{d}/{n.removeprefix(MARK)}" for d, names in keys.items() for n in names
                 if n.startswith(MARK)]
        left = [u for key in marks for u in minio.uploads(BUCKET, key)]
        check(marks and left, f"no open upload (with its marker) after a region writer died: {keys}")
        recover = [BIN, "recover", "--local", c.local, "--remote", url, "--job", "t", "--aggregate", RULE,
                   "--agg-align", "64K", "--containers", str(k), "--agg-mode", "own"]
        r = run(c.node_cmd(recover), env=c.env(), check=False, timeout=300)
        check(r.returncode == 0, f"recover exited {r.returncode}: {(r.stdout + r.stderr)[-800:]}")
        check_clean(minio, pre, k, sets, marks)
        check_versions(minio, url, work, "after recover", sets, first, 1)
        return (f"a region writer died in the second set: the first read whole, {len(left)} open upload(s) "
                f"and {len(marks)} marker(s) left; recover on every node aborted them and published the "
                f"second set whole, K + 1 keys per set, no upload left")
    return case


def case_own_empty_group(flavour):
    @with_minio
    def case(work, minio):
        pre = f"own-empty-{flavour}"
        url = f"s3://{BUCKET}/{pre}{QUERY}"
        empty = {"CKPT_EMPTY": str(RANKS_PER_NODE)}
        c = cluster(work, flavour, minio, url, 2, mode="own")
        try:
            write_job(c, flavour, empty)
            c.wait(timeout=300)
        finally:
            c.stop()
        first = agg.direct_run(work, NP, name="direct", steps=STEPS, mean=MEAN, extra=empty)
        sets = [f"ckpt/{p.name}" for p in sorted((first / "ckpt").iterdir())]
        keys = check_clean(minio, pre, 1, sets)
        sizes = dict(minio.keys(BUCKET, pre))
        got = [sizes[f"{pre}/{d}/{n}"] for d in sets for n in keys[d] if n.endswith(".plc")]
        check(all(got), f"an empty container object: {got}")
        check_versions(minio, url, work, "own", sets, first, 1)
        for d in sets:
            out = work / "own" / d.replace("/", "_")
            for i in range(RANKS_PER_NODE, NP):
                m = out / f"rank-{i:05d}.dat"
                check(m.stat().st_size == 0 and m.stat().st_mode & 0o7777 == 0o600,
                      f"{d}/{m.name}: {m.stat().st_size} bytes, mode {oct(m.stat().st_mode & 0o7777)}")
        return (f"{len(sets)} sets, node n1's members empty: one container object each ({got} bytes), "
                f"no empty object, no upload left, extract equals direct (empty members 0600)")
    return case


def cases():
    return [
        ("s3 nodes mpich K=1", case_sets("mpich", 1)),
        ("s3 nodes openmpi K=2", case_sets("openmpi", 2)),
        ("s3 nodes kept container", case_kept("mpich")),
        ("s3 nodes kept first container", case_kept("mpich", node=1)),
        ("s3 nodes leader killed", case_killed("mpich", "aggregate.mid_transfer:6", "leader")),
        ("s3 nodes record writer killed", case_killed("openmpi", "aggregate.before_record", "record writer")),
        ("s3 own region mpich K=1", case_own("mpich", 1, 2_500_000)),
        ("s3 own region openmpi K=2", case_own("openmpi", 2, 4_000_000, {"CKPT_MPIIO": "1"}, restart=True)),
        ("s3 own region writer killed", case_own_killed("mpich")),
        ("s3 own region kept container", case_kept("openmpi", mode="own")),
        ("s3 own region empty group", case_own_empty_group("mpich")),
    ]
