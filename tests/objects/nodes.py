#!/usr/bin/python3
"""Logged array puts across nodes (docs/objects.md "Logged mode across
nodes"): tests/objects/mpi_put.c on 2 simulated nodes x 2 ranks (an MPMD
launch: each node's ranks get their own node-local root, local/n0 and
local/n1), MPICH and Open MPI, on objstore:// and on s3:// (MinIO on
loopback). Rank 0's node commits the put; node 1's ranks commit their
shares on node 1; each node's server (`paralog server --local local/nK`)
copies its shares, and node 0's publishes.

  put [FLAVOUR, REMOTE]  two puts of one name, the first before the
                         servers start (node 1 then holds a share with its
                         2 writers' records, nothing is visible), the
                         second while both run: versions 1 and 2 in commit
                         order, each equal to its array; and a whole
                         logged put from the command line (`obj put
                         --local`) on node 1, published by its server
                         (`obj get`; zarr-python and tensorstore through
                         the Zarr view; h5py, h5dump and a C program
                         through the HDF5 view on objstore://); both
                         node-local stores empty once the servers stop
  parts [FLAVOUR, REMOTE] chunks of 24 rows over ranks of 16
                         (paralog_obj_write_part): a chunk's parts on both
                         nodes, put together on the remote from both
                         nodes' copies; one version, equal through `obj
                         get` and both views; nothing left anywhere
  mpi4py [REMOTE]        tests/objects/py_writer.py (paralog.objects over
                         mpi4py, Open MPI) on the 2 nodes, logged: one
                         version, equal to its array; and with its parts
                         (`write_part`, a chunk's parts on both nodes)
  refusals [FLAVOUR]     a chunk outside the grid, a chunk written on
                         both nodes (refused at the commit, as an overlap),
                         and overlapping parts of a chunk across nodes:
                         every rank fails with the same message; nothing
                         published, no share or chunk left on either node
                         (each share removed by its ranks), nothing staged
  share copier killed    node 1's server killed (SIGKILL) before the put,
                         or at the crash point objects.publish_mid_copy
                         after the first chunk of its share copied: the
                         version stays absent while node 0's server runs;
                         `recover` on node 1 copies (resumes) the share,
                         node 0's server publishes it, once; the same
                         with mpi_put.c's parts (a chunk's parts on both
                         nodes)
  wait for a share      node 1's server not running: `obj publish` on
                         node 0, node 0's server log, `paralog status`
                         (table and --json) name node 1 (and the command
                         that copies its share); `paralog wait` on node 0
                         times out (exit 3) naming it; once node 1's
                         server runs, `wait` there returns 0, then `wait`
                         on node 0 returns 0 with the version published
                         and equal right after
  publisher killed       node 0's server killed before its remote publish
                         (objects.before_commit) and after it
                         (objects.publish_after_remote): `recover` on
                         node 0 publishes it or only cleans up; one
                         version, equal to the array; a second `recover`
                         on each node publishes nothing; the same with
                         mpi_put.c's parts, killed mid-copy of node 0's
                         chunks and parts or before the remote commit

And the cases of tests/objects/nodes_job.py: the nodes' servers as one
server job (`mpirun ... paralog server`), `paralog wait` and `status`
across it, `recover` as a server job.

Usage: python3 -m tests.objects.nodes [--only SUBSTRING] [--keep]
Ends with "objects-nodes: N passed, N failed"."""
import json
import os
import sys
import time

from tests.lib.check import Suite, check, suite_options
from tests.lib.mpi import launcher, mpi_env
from tests.lib.paths import BIN
from tests.lib.proc import run
from tests.lib.server import Server, failpoint_server, wait_failpoint_kill
from tests.objects.crash import expect
from tests.objects.mpi import FLAVOURS, PY_ENV, PY_WRITER, program, rank_errors
from tests.objects.run import at, hdf5_read, store, view_check, zarr_read
from tests.objects.s3 import BUCKET, S3

NODES, PER_NODE, ROWS = 2, 2, 16
REMOTES = ("objstore", "s3")


class Remote:
    """The store (objstore:// in the work directory, or s3:// on a MinIO)
    and the environment its clients need."""

    def __init__(self, work, kind):
        self.work, self.s3 = work, S3(work) if kind == "s3" else None
        self.url = self.s3.store if self.s3 else store(work, "objstore")
        self.env = dict(self.s3.env if self.s3 else os.environ)

    def obj(self, *args, check=True):
        return run([BIN, "obj", *args], env=self.env, check=check, timeout=300)

    def versions(self, name):
        r = self.obj("info", at(self.url, name), "--json", check=False)
        return [v["number"] for v in json.loads(r.stdout)["versions"]] if r.returncode == 0 else []

    def get(self, name, n):
        out = self.work / f"got-{name.replace('/', '_')}-{n}.bin"
        self.obj("get", at(self.url, name), out, "--version", str(n))
        return out.read_bytes()

    def holds_only(self, n_versions, extra=0, chunks=NODES * PER_NODE):
        """The store holds the versions' chunks and array records (`chunks`
        per version, by default one per rank, and one record) and `extra`
        more, and no staging: no copy left over, no part, no remote put
        left behind (the Zarr views on S3 are copies, apart)."""
        want = n_versions * (chunks + 1) + extra
        if self.s3:
            data = self.s3.minio.keys(BUCKET, "store/data")
            staging = self.s3.minio.keys(BUCKET, "store/staging")
        else:
            root = self.work / "store"
            data = [p for p in (root / "data").rglob("*") if p.is_file() and p.stat().st_size]
            staging = list((root / "staging").iterdir()) if (root / "staging").exists() else []
        check(len(data) == want and staging == [], f"the store holds {len(data)} chunk objects (not {want}), "
              f"staging {staging}")

    def stop(self):
        if self.s3:
            self.s3.stop()


def locals_of(work):
    out = []
    for n in range(NODES):
        d = work / "local" / f"n{n}"
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        out.append(d)
    return out


def put_on_nodes(flavour, remote, name, salt, locals_, mode="ok", names=None):
    """mpi_put.c on NODES x PER_NODE ranks, node k's ranks logging under
    locals_[k] (an MPMD launch, one application context per node) and
    named names[k] (default nK); `mode` other than ok: the run (expected
    to fail)."""
    prog, args = program(flavour), [remote.url, name, str(ROWS), str(salt), mode]
    names = names or [f"n{k}" for k in range(len(locals_))]
    # Each node's ranks named as that node (PARALOG_NODE): a put waiting
    # for a share names the node.
    cmd = [*launcher(flavour, PER_NODE), "env", f"PARALOG_NODE={names[0]}", prog, *args, locals_[0]]
    for d, n in zip(locals_[1:], names[1:]):
        cmd += [":", "-n", str(PER_NODE), "env", f"PARALOG_NODE={n}", prog, *args, d]
    r = run(cmd, env=mpi_env(remote.env), check=False, timeout=300)
    if mode not in ("ok", "parts"):
        return r
    check(r.returncode == 0 and "logged" in r.stdout, f"{flavour} {name}: exit {r.returncode}: {r.stdout}{r.stderr}")


def left(local):
    """What the node-local store still holds: puts, shares, chunk files."""
    root = local / ".paralog-objects"
    staging = sorted(p.name for p in (root / "staging").iterdir()) if (root / "staging").exists() else []
    chunks = sorted(p.name for p in (root / "data").rglob("*") if p.is_file()) if (root / "data").exists() else []
    return staging + chunks


def shares(local):
    """The share records (`s<writer>`) in a node-local store's puts."""
    return sorted(p.name for p in (local / ".paralog-objects" / "staging").glob("*/s*") if len(p.name) == 33)


def wait_versions(remote, name, want, servers, timeout=120):
    deadline = time.time() + timeout
    while remote.versions(name) != want and time.time() < deadline:
        for s in servers:
            died = s.died()
            if died:
                raise died
        time.sleep(0.2)
    check(remote.versions(name) == want, f"{name}: versions {remote.versions(name)}, not {want}")


def each_equal(remote, name, salts):
    for n, salt in enumerate(salts, 1):
        check(remote.get(name, n) == expect(salt, NODES * PER_NODE, ROWS), f"{name} version {n} is not its put")
        remote.obj("verify", at(remote.url, name), "--version", str(n))


def view_checks(remote, name, salts, chunk_rows=ROWS):
    checks = []
    shape = [ROWS * NODES * PER_NODE, 4096]
    for n, salt in enumerate(salts, 1):
        want = remote.work / f"want-{salt}.bin"
        want.write_bytes(expect(salt, NODES * PER_NODE, ROWS))
        i = json.loads(remote.obj("info", at(remote.url, name), "--version", str(n), "--json").stdout)
        checks.append(view_check(i, want, "int32", shape, [chunk_rows, 4096],
                                 [[[3, 7], [ROWS * 3, 100]], [[ROWS - 1, 0], [2, 4096]]],
                                 attrs={"writer": "mpi_put"}))
    zarr_read(remote.work, checks, env=remote.env)
    if not remote.s3:
        hdf5_read(remote.work, checks)


def servers_on(work, remote, locals_, envs=None):
    return [Server(d, work / "remote", {**remote.env, **((envs or {}).get(k, {}))}, log=work / f"server-n{k}.log")
            for k, d in enumerate(locals_)]


class Trial:
    """One case's remote, the nodes' local roots and the servers it runs;
    leaving it kills every server still running and stops the remote."""

    def __init__(self, work, kind):
        self.work, self.remote, self.locals = work, Remote(work, kind), locals_of(work)
        self.servers = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for s in self.servers:
            s.kill()
        self.remote.stop()

    def start(self, locals_=None, envs=None):
        """Servers on `locals_` (default: every node)."""
        self.servers += servers_on(self.work, self.remote, self.locals if locals_ is None else locals_, envs)
        return self.servers

    def stop(self):
        """Drain and stop every server."""
        for s in self.servers:
            s.drain_and_stop()
        self.servers = []

    def nothing_left(self, what=""):
        for d in self.locals:
            check(left(d) == [], f"{what}left in {d.name}: {left(d)}")


def case_put(flavour, kind):
    def go(work):
        with Trial(work, kind) as trial:
            remote, locals_ = trial.remote, trial.locals
            salts = (11, 22)
            # The first put before the servers start: node 0 holds the
            # committed put, node 1 a share of it with its two writers'
            # records; nothing is visible.
            put_on_nodes(flavour, remote, "nodes/t", salts[0], locals_)
            check(remote.versions("nodes/t") == [], "visible before it was published")
            check(len(shares(locals_[1])) == PER_NODE and shares(locals_[0]) == [],
                  f"shares: node 0 {shares(locals_[0])}, node 1 {shares(locals_[1])}")
            servers = trial.start()
            put_on_nodes(flavour, remote, "nodes/t", salts[1], locals_)
            # A whole logged put from the command line (`obj put --local`)
            # on node 1, published by its own server.
            cli = work / "cli.bin"
            cli.write_bytes(os.urandom(24 * 40 * 8))
            said = remote.obj("put", at(remote.url, "cli/t"), cli, "--dtype", "float64", "--shape", "24,40",
                              "--chunks", "8,16", "--local", locals_[1]).stdout
            check("logged put" in said, said)
            wait_versions(remote, "nodes/t", [1, 2], servers)
            wait_versions(remote, "cli/t", [1], servers)
            check(remote.get("cli/t", 1) == cli.read_bytes(), "the logged command-line put is not its array")
            trial.stop()
            each_equal(remote, "nodes/t", salts)
            remote.holds_only(2, extra=3 * 3 + 1)  # cli/t: 3 x 3 chunks and its array record
            view_checks(remote, "nodes/t", salts)
            trial.nothing_left()
        return "2 versions published from 2 nodes, each read equal"
    return go


def case_parts(flavour, kind):
    """mpi_put.c's parts: chunks of 24 rows over ranks of 16, so that
    chunk 0 is rank 0's and part of rank 1's rows (node 0), chunk 1 the
    rest of rank 1's and rank 2's (node 1: put together on the remote from
    both nodes' parts), chunk 2 rank 3's (an edge chunk, whole). Each
    node's server copies its parts; one version, equal, through both views;
    nothing left on either node or in the store's staging."""
    def go(work):
        with Trial(work, kind) as trial:
            remote, locals_ = trial.remote, trial.locals
            put_on_nodes(flavour, remote, "nodes/p", 5, locals_, mode="parts")
            check(remote.versions("nodes/p") == [], "visible before it was published")
            check(len(shares(locals_[1])) == PER_NODE, f"shares on node 1: {shares(locals_[1])}")
            servers = trial.start()
            wait_versions(remote, "nodes/p", [1], servers)
            trial.stop()
            each_equal(remote, "nodes/p", [5])
            remote.holds_only(1, chunks=3)
            view_checks(remote, "nodes/p", [5], chunk_rows=ROWS + ROWS // 2)
            trial.nothing_left()
        return "a chunk of parts from 2 nodes published whole, read equal"
    return go


def case_mpi4py(kind, mode=None):
    """tests/objects/py_writer.py (paralog.objects over mpi4py, Open MPI)
    on the 2 nodes, logged: published by the servers, equal. `mode` parts:
    its rows by `write_part` into chunks of 1.5 x ROWS rows, a chunk's
    parts on both nodes."""
    def go(work):
        import numpy as np
        with Trial(work, kind) as trial:
            remote, locals_ = trial.remote, trial.locals
            servers = trial.start()
            args = [sys.executable, PY_WRITER, remote.url, "py/t", str(ROWS), "5", *([mode] if mode else [])]
            cmd = [*launcher("openmpi", PER_NODE), *args, f"local={locals_[0]}"]
            for d in locals_[1:]:
                cmd += [":", "-n", str(PER_NODE), *args, f"local={d}"]
            r = run(cmd, env=mpi_env({**remote.env, **PY_ENV}), check=False, timeout=300)
            check(r.returncode == 0 and "logged" in r.stdout, f"mpi4py: exit {r.returncode}: {r.stdout}{r.stderr}")
            wait_versions(remote, "py/t", [1], servers)
            trial.stop()
            want = (np.arange(ROWS * NODES * PER_NODE * 64, dtype="<f8") + 5).tobytes()
            check(remote.get("py/t", 1) == want, "the mpi4py put is not its array")
            trial.nothing_left()
        return "published from 2 nodes, equal"
    return go


def case_refusals(flavour):
    """A chunk outside the grid (written on node 1), and rank 0's chunk
    written again by the last rank (node 1): every rank fails with the
    same message, naming the chunk; nothing published, no node keeps a
    share or a chunk of it, nothing staged in the store."""
    def go(work):
        remote, locals_ = Remote(work, "objstore"), locals_of(work)
        last = NODES * PER_NODE - 1
        cases = (("outside", f"rank 0: r: put ", "1 of 4 chunks were not written (first: [[3, 0]])"),
                 ("overlap", "rank 0: r: put ", "chunk [0, 0] was already written by another writer"),
                 ("partsoverlap", "rank 0: r: put ", "chunk [1, 0]: parts written by writers "))
        for mode, said, also in cases:
            r = put_on_nodes(flavour, remote, "r", 3, locals_, mode)
            check(r.returncode != 0 and said in r.stdout and also in r.stdout, f"{mode}: {r.stdout}{r.stderr}")
            errors = rank_errors(r.stdout)
            check(sorted(errors) == list(range(last + 1)) and len(set(errors.values())) == 1,
                  f"{mode}: not the same error on every rank: {errors}")
            check(remote.versions("r") == [], f"{mode}: published")
            for d in locals_:
                check(left(d) == [], f"{mode}: left in {d.name}: {left(d)}")
            staging = work / "store" / "staging"
            check(not staging.exists() or list(staging.iterdir()) == [], f"{mode}: staged in the store")
        return "refused on every rank, nothing left"
    return go


def killed_server(work, remote, local, k, point):
    """Node k's server with the crash point `point`, started; its process."""
    log = work / f"server-n{k}.log"
    return failpoint_server(local, work / "remote", log, point, remote.env), log


def recover(work, remote, local):
    return run([BIN, "recover", "--local", local, "--remote", work / "remote"], env=remote.env,
               timeout=300).stdout


def case_share_killed(flavour, kind, point, mode="ok"):
    """Node 1's server killed: at `point` in its share's copy (after the
    first chunk or part copied), or (None) with SIGKILL before the put, so
    that it copies nothing. `mode` parts: mpi_put.c's parts (node 1 holds
    a part of a chunk whose other part is node 0's, and a whole chunk)."""
    def go(work):
        with Trial(work, kind) as trial:
            remote, locals_ = trial.remote, trial.locals
            if point:
                p, log = killed_server(work, remote, locals_[1], 1, point)
            else:
                servers_on(work, remote, locals_[1:])[0].kill()
            servers = trial.start(locals_[:1])
            put_on_nodes(flavour, remote, "k", 7, locals_, mode=mode)
            if point:
                wait_failpoint_kill(p, log, point)
            time.sleep(1.0)  # node 0's server has had rounds: the share is not whole there
            check(remote.versions("k") == [], f"published without node 1's whole share: {remote.versions('k')}")
            check(len(shares(locals_[1])) == PER_NODE, f"node 1's shares: {shares(locals_[1])}")
            recover(work, remote, locals_[1])
            wait_versions(remote, "k", [1], servers)
            trial.stop()
            for d in locals_:
                check("published" not in recover(work, remote, d), f"a second recover on {d.name} published")
            each_equal(remote, "k", (7,))
            remote.holds_only(1, chunks=3 if mode == "parts" else NODES * PER_NODE)
            trial.nothing_left()
        return "absent while node 1's share was not copied; published once after recover there"
    return go


def paralog(remote, *args, timeout=300):
    return run([BIN, *map(str, args)], env=remote.env, check=False, timeout=timeout)


def case_wait_share(flavour, kind):
    def go(work):
        with Trial(work, kind) as trial:
            remote, (l0, l1) = trial.remote, trial.locals
            put_on_nodes(flavour, remote, "w", 5, trial.locals)
            said = remote.obj("publish", l0).stdout
            share = "waits for the share of node n1 (2 writer(s), node-local directory "
            check(said.startswith("array w put ") and share in said and f"paralog server --local {l1}" in said, said)
            node0 = trial.start([l0])[0]
            r = paralog(remote, "wait", "--local", l0, "--job", "t", "--timeout", "2")
            check(r.returncode == 3 and "the time ran out" in r.stderr and share in r.stderr,
                  f"wait: exit {r.returncode}: {r.stdout}{r.stderr}")
            check(remote.versions("w") == [], "published without node 1's share")
            st = json.loads(paralog(remote, "status", "--local", l0, "--job", "t", "--json").stdout)
            puts = [(p["name"], p["state"], p["waits_for"], p["share"]) for p in st["puts"]]
            check(puts == [("w", "waiting", ["n1"], False)], f"status: {st['puts']}")
            table = paralog(remote, "status", "--local", l0, "--job", "t", "--once").stdout
            check("logged array puts: 0 published, 1 not published" in table and share in table, table)
            check(share in node0.text(), f"the server's log: {node0.text()[-800:]}")
            trial.start([l1])
            r = paralog(remote, "wait", "--local", l1, "--job", "t", "--timeout", "60")
            check(r.returncode == 0, f"wait on node 1: exit {r.returncode}: {r.stdout}{r.stderr}")
            r = paralog(remote, "wait", "--local", l0, "--job", "t", "--timeout", "60")
            now = remote.versions("w")
            check(r.returncode == 0 and "1 logged array put(s) published" in r.stdout,
                  f"wait on node 0: exit {r.returncode}: {r.stdout}{r.stderr}")
            check(now == [1], f"published when wait returned: {now}")
            for s in trial.servers:
                check(s.p.wait(timeout=60) == 0, f"a server exited {s.p.returncode}")
            trial.servers = []
            each_equal(remote, "w", (5,))
            # Node 1's share directory goes once the version is published:
            # its next round (here `obj publish`, its server having exited).
            check(remote.obj("publish", l1).stdout == "", "node 1 published")
            trial.nothing_left()
        return "node 1 named while its server did not run; wait returned once published"
    return go


def case_publisher_killed(flavour, kind, point, mode="ok"):
    """Node 0's server killed at `point` (mode parts: mpi_put.c's parts, a
    chunk put together on the remote from both nodes' parts), then
    `recover` on node 0: published once, nothing left."""
    def go(work):
        with Trial(work, kind) as trial:
            remote, locals_ = trial.remote, trial.locals
            p, log = killed_server(work, remote, locals_[0], 0, point)
            trial.start(locals_[1:])
            put_on_nodes(flavour, remote, "p", 9, locals_, mode=mode)
            wait_failpoint_kill(p, log, point)
            before = remote.versions("p")
            published = point == "objects.publish_after_remote"
            check(before == ([1] if published else []), f"after the kill: versions {before}")
            # Killed mid-copy, node 0 may not have waited for node 1's
            # server yet: its share copied first (`recover` on node 0
            # would say it waits for it).
            deadline = time.time() + 60
            while shares(locals_[1]) and time.time() < deadline:
                time.sleep(0.1)
            check(shares(locals_[1]) == [], f"node 1's share not copied: {shares(locals_[1])}")
            said = recover(work, remote, locals_[0])
            check("published logged array p version 1 " in said, said)
            trial.stop()
            for d in locals_:
                check("published" not in recover(work, remote, d), f"a second recover on {d.name} published")
            check(remote.versions("p") == [1], f"versions {remote.versions('p')}")
            each_equal(remote, "p", (9,))
            # Killed before its publish, the remote commit had written the
            # version's array record, named by the put's id on a directory
            # and on S3: the retry writes that same file or object again,
            # so nothing is left over (docs/objects-format.md "A chunked PUT
            # in progress", "On S3"; before, S3's retry wrote its own
            # object and left the first for `obj gc`).
            remote.holds_only(1, chunks=3 if mode == "parts" else NODES * PER_NODE)
            trial.nothing_left()
        return f"{'published' if published else 'absent'} at the kill; once after recover"
    return go


def main():
    a = suite_options().parse_args()
    suite = Suite("objects-nodes", keep=a.keep)
    cases = []
    for kind in REMOTES:
        for flavour in FLAVOURS:
            cases.append((f"put [{flavour}, {kind}]", case_put(flavour, kind)))
            cases.append((f"parts [{flavour}, {kind}]", case_parts(flavour, kind)))
            if kind == "objstore":
                cases.append((f"refusals [{flavour}]", case_refusals(flavour)))
        cases.append((f"mpi4py [openmpi, {kind}]", case_mpi4py(kind)))
        cases.append((f"mpi4py parts [openmpi, {kind}]", case_mpi4py(kind, "parts")))
        cases.append((f"wait for a share [mpich, {kind}]", case_wait_share("mpich", kind)))
        cases.append((f"share copier killed before the put [openmpi, {kind}]",
                      case_share_killed("openmpi", kind, None)))
        cases.append((f"share copier killed mid copy [mpich, {kind}]",
                      case_share_killed("mpich", kind, "objects.publish_mid_copy")))
        cases.append((f"share copier killed mid copy of parts [openmpi, {kind}]",
                      case_share_killed("openmpi", kind, "objects.publish_mid_copy", "parts")))
        for point in ("objects.before_commit", "objects.publish_after_remote"):
            cases.append((f"publisher killed at {point} [openmpi, {kind}]",
                          case_publisher_killed("openmpi", kind, point)))
        for point in ("objects.publish_mid_copy", "objects.before_commit"):
            cases.append((f"publisher of parts killed at {point} [mpich, {kind}]",
                          case_publisher_killed("mpich", kind, point, "parts")))
    # The same puts published by a server job (tests/objects/nodes_job.py).
    from tests.objects.nodes_job import cases as job_cases
    cases += job_cases(FLAVOURS)
    return suite.run(cases, only=a.only)


if __name__ == "__main__":
    sys.exit(main())
