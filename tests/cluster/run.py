#!/usr/bin/python3
"""Many nodes on one machine: simulated nodes (PARALOG_NODE, each with its own
node-local directory through `{node}` in PARALOG_LOCAL), 2 ranks each, the
servers started as one MPI job (one per node), real MPICH and Open MPI.

For 2, 3 and 4 nodes, every program is run directly (the reference) and
under capture; `paralog wait` ends the server job once everything is
drained, and the remote file must equal the direct one byte for byte (HDF5:
h5diff). Remotes: a POSIX directory, the object layout (read back with
`paralog get`) and S3 (a real MinIO on loopback).

Renames: the atomic-save pattern (tmp + fsync + os.replace, replacing a
checkpoint, rotation that unlinks the oldest) by one process on each of 2
nodes, drained by the server job with the one-node drain's rename step:
the remote's names and bytes equal a direct run, no temporary is left.

Failures: a server killed mid-drain (a failpoint) makes the whole server
job stop within a bounded time; `paralog recover` run as an MPI job
finishes the drain. Ranks of one node killed in the middle of a
consistency point: that epoch is not committed anywhere and never reaches
the remote.

Usage: python3 -m tests.cluster.run [--only SUBSTRING] [--keep] [--quick]
"""

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.lib.check import Failed, Suite, check, suite_options
from tests.lib.compare import files, same_bytes, same_files, tree, tree_difference
from tests.lib.minio import MinIO
from tests.lib.mpi import DEFAULT_IO, launcher, mpi_env, program, reference
from tests.lib.paths import BIN, PY, ROOT
from tests.lib.proc import run
from tests.lib.server import AS_NODE, RANKS_PER_NODE, Cluster, Server

PYPROGS = ROOT / "tests/correctness/progs/pyprogs.py"

# (label, program, args, output files, hdf5)
PROGRAMS = [
    ("header_subarray", "header_subarray", [], False),
    ("noncontig_holes", "noncontig_holes", [], False),
    ("size_ops", "size_ops", ["--no-preallocate"], False),
    # Every epoch overwrites blocks that other ranks (other nodes) wrote in
    # earlier epochs, and shrinks and grows the file.
    ("epochs", "epochs", ["--epochs=6", "--kib=96"], False),
    ("hdf5", "hdf5_writer", [], True),
]

FLAVOURS = DEFAULT_IO


class Remotes:
    """The three remotes: where to drain, and how to read a file back."""

    def __init__(self, base, minio):
        self.base = Path(base)
        self.minio = minio
        self.n = 0

    def make(self, kind, work):
        self.n += 1
        if kind == "posix":
            d = Path(work) / "remote"
            d.mkdir()
            return str(d), {}
        if kind == "objstore":
            d = Path(work) / "objstore"
            d.mkdir()
            return f"objstore://{d}?dirs=3&keep=2", {}
        bucket = f"cl{self.n}"
        self.minio.mb(bucket)
        return f"s3://{bucket}/out", self.minio.env()

    def fetch(self, kind, url, names, dest):
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        if kind == "posix":
            for n in names:
                (dest / n).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(Path(url) / n, dest / n)
        elif kind == "objstore":
            for n in names:
                (dest / n).parent.mkdir(parents=True, exist_ok=True)
                run([BIN, "get", f"{url.split('?')[0]}/{n}", dest / n])
        else:
            bucket = url.removeprefix("s3://").split("/")[0]
            self.minio.download_all(bucket, "out", dest)


def drain_case(remotes, kind, flavour, nodes, label, prog, args, hdf5, server_args=()):
    def case(work):
        np = nodes * RANKS_PER_NODE
        ref = work / "direct"
        reference(flavour, prog, args, ref, np)
        url, aws = remotes.make(kind, work)
        c = Cluster(work, flavour, nodes, url, aws, server_args)
        try:
            c.start_servers()
            c.run_app(prog, args, c.prefix)
            ended = time.time_ns()
            c.status()
            said = c.wait()
        finally:
            c.stop()
        got = work / "got"
        remotes.fetch(kind, url, files(ref), got)
        n = same_files(ref, got, hdf5)
        if kind == "posix":
            # A drained file has the time its bytes were committed (what
            # stat answered before the drain), not the drain's.
            late = [f for f in files(ref) if (Path(url) / f).stat().st_mtime_ns > ended]
            check(not late, f"drained files carry the drain's time, not their commit's: {late}")
        reported = node_reports_add_up(c, said)
        return f"{n} file(s) equal direct MPI-IO ({said.removeprefix('paralog wait: ')}); {reported}"
    return case


def node_reports_add_up(c, said):
    """Each node's `paralog report` counts the bytes its own logs gave the
    remote: over the nodes they add up to what the servers drained."""
    m = re.search(r"(\d+) epoch\(s\), (\d+) bytes", said)
    check(m, f"paralog wait did not say what was drained: {said}")
    drained = int(m.group(2))
    per_node = []
    for n in range(c.nodes):
        r = run([BIN, "report", "--local", c.work / "local" / f"n{n}", "--job", "t",
                 "--out", c.work / f"report-n{n}.html", "--json"], check=False, timeout=60)
        check(r.returncode == 0, f"paralog report on node n{n} failed: {r.stderr[-400:]}")
        per_node.append(json.loads(r.stdout)["summary"]["bytes_drained"])
    check(sum(per_node) == drained,
          f"the nodes' reports drained {per_node} bytes, the servers {drained}")
    return f"node reports {'+'.join(map(str, per_node))} = {drained} bytes drained"


def s3_parts_case(remotes, flavour, nodes, upload):
    """A file of several S3 parts (5 MiB): each part is uploaded by the
    server holding most of its bytes, the others send it theirs once, and
    the leader completes the one shared upload. upload=epoch: every epoch
    is a new version on top of the previous object (read back for the parts
    the epoch only partly writes, copied server-side where it keeps whole
    parts)."""
    def case(work):
        np = nodes * RANKS_PER_NODE
        args = ["--epochs=4", f"--kib={4096 // nodes}"]
        ref = work / "direct"
        reference(flavour, "epochs", args, ref, np)
        url, aws = remotes.make("s3", work)
        url += f"?part_size=5M&upload={upload}"
        c = Cluster(work, flavour, nodes, url, aws)
        try:
            c.start_servers()
            c.run_app("epochs", args, c.prefix)
            said = c.wait()
        finally:
            c.stop()
        got = work / "got"
        remotes.fetch("s3", url, ["epochs.dat"], got)
        size = (ref / "epochs.dat").stat().st_size
        check(size > 10 << 20, f"epochs.dat is {size} bytes: not several parts")
        same_files(ref, got)
        m = re.search(r"(\d+) bytes\)?, .*?(\d+) bytes between nodes, parts uploaded by node ([\d/]+)", said)
        check(m, f"paralog wait did not report the parts: {said}")
        drained, between = int(m.group(1)), int(m.group(2))
        parts = [int(n) for n in m.group(3).split("/")]
        check(len(parts) == nodes and sum(1 for n in parts if n) >= 2,
              f"the parts were not spread over the servers: {parts}")
        # Each byte crosses at most once, and a part's owner holds its
        # largest share: well under all of them cross.
        check(0 < between < drained, f"{between} bytes between nodes of {drained} drained")
        return f"equal direct MPI-IO; parts by node {parts}, {between} of {drained} bytes between nodes"
    return case


def s3_outage_case(remotes, flavour):
    """MinIO dies while the servers share an upload and comes back 15 s
    later (longer than the SDK's own retries): the servers agree on a
    retry, the leader's abort fails (MinIO is down), and a later attempt
    must first abort what the failed one left, then make the file whole.
    No unfinished upload may remain."""
    def case(work):
        nodes, np = 2, 2 * RANKS_PER_NODE
        args = ["--epochs=2", "--kib=16384"]
        ref = work / "direct"
        reference(flavour, "epochs", args, ref, np)
        url, aws = remotes.make("s3", work)
        bucket = url.removeprefix("s3://").split("/")[0]
        c = Cluster(work, flavour, nodes, url + "?part_size=5M", aws)
        minio = remotes.minio
        try:
            c.run_app("epochs", args, c.prefix)  # no server yet: the logs wait
            c.start_servers()
            time.sleep(0.2)
            minio.kill()
            time.sleep(15)
            minio.start()
            said = c.wait(timeout=300)
        finally:
            if minio.p is None or minio.p.poll() is not None:
                minio.start()
            c.stop()
        got = work / "got"
        remotes.fetch("s3", url, ["epochs.dat"], got)
        same_files(ref, got)
        left = minio.uploads(bucket, "out/epochs.dat")
        check(not left, f"unfinished uploads remain: {left}")
        log = c.tail(200000)
        retried = log.count("drain failed; local data kept, retrying")
        check(retried > 0, f"the outage never reached the servers (the upload ended first?): {log[-800:]}")
        return f"equal direct MPI-IO after {retried} failed attempt(s); no unfinished upload left"
    return case


def server_killed_case(remotes, kind, flavour, parts=False):
    """Node n1's server dies in the middle of writing an epoch's bytes.
    parts: an S3 upload of several parts, shared by the servers; n1 dies
    after uploading its first part."""
    def case(work):
        nodes, np = 2, 2 * RANKS_PER_NODE
        args = ["--epochs=4", "--kib=2048" if parts else "--kib=256"]
        ref = work / "direct"
        reference(flavour, "epochs", args, ref, np)
        url, aws = remotes.make(kind, work)
        if parts:
            url += "?part_size=5M"
        c = Cluster(work, flavour, nodes, url, aws)
        try:
            # POSIX: the second piece node n1 writes; S3: the first window
            # of the one upload (at close) that n1 sends its bytes for, or
            # the second part of the shared upload.
            point = "cluster.mid_write:1" if kind == "s3" and not parts else "cluster.mid_write:2"
            c.start_servers({1: {"PARALOG_FAILPOINT": point}})
            c.run_app("epochs", args, c.prefix)
            t = time.time()
            try:
                rc = c.servers.wait(timeout=120)
            except subprocess.TimeoutExpired:
                raise Failed(f"the server job went on for 120 s after a server died: {c.tail()}")
            stopped = time.time() - t
            check(rc != 0, f"the server job exited 0 although a server died: {c.tail()}")
        finally:
            c.stop()
        # Every local log is still there; recover as an MPI job finishes.
        r = run(c.node_cmd([BIN, "recover", "--local", c.local, "--remote", url, "--job", "t"]),
               env=c.env(), check=False, timeout=300)
        check(r.returncode == 0, f"recover exited {r.returncode}: {r.stdout}{r.stderr}")
        got = work / "got"
        remotes.fetch(kind, url, files(ref), got)
        same_files(ref, got)
        again = run(c.node_cmd([BIN, "recover", "--local", c.local, "--remote", url, "--job", "t"]),
                   env=c.env(), check=False, timeout=300)
        check(again.returncode == 0 and " 0 epoch(s)" in again.stdout,
              f"a second recover changed something: {again.stdout}{again.stderr}")
        return f"server job stopped {stopped:.1f} s after the failpoint; recover made the file equal direct MPI-IO; a second recover drained nothing"
    return case


def quiet_rounds_case(remotes, flavour, nodes=4):
    """Idle rounds send nothing: once a run is drained and nothing changes,
    the servers' rounds exchange no summary bytes (only changes travel,
    docs/cluster.md "What a round costs"), the counters agree across
    nodes, and the drained file still equals direct MPI-IO."""
    def case(work):
        args = ["--epochs=4", "--kib=64"]
        ref = work / "direct"
        reference(flavour, "epochs", args, ref, nodes * RANKS_PER_NODE)
        url, aws = remotes.make("posix", work)
        c = Cluster(work, flavour, nodes, url, aws)
        try:
            c.start_servers()
            c.run_app("epochs", args, c.prefix)
            cost = c.quiet_rounds()
            said = c.wait()
        finally:
            c.stop()
        got = work / "got"
        remotes.fetch("posix", url, files(ref), got)
        same_files(ref, got)
        return (f"{cost[0]['rounds']} rounds, idle ones sent nothing; each server received "
                f"{cost[0]['bytes_received']} bytes of summaries in all; {said.removeprefix('paralog wait: ')}")
    return case


def app_killed_case(remotes, kind, flavour):
    """Rank 2 (node n1) dies inside the consistency point of epoch 3: epochs
    1-2 are committed everywhere; epoch 3 must never reach the remote."""
    def case(work):
        nodes, np = 2, 2 * RANKS_PER_NODE
        args = ["--epochs=5", "--kib=64"]
        ref = work / "direct"
        reference(flavour, "epochs", args + ["--snapshot"], ref, np)
        url, aws = remotes.make(kind, work)
        c = Cluster(work, flavour, nodes, url, aws)
        try:
            c.start_servers()
            r = c.run_app("epochs", args + ["--kill-in-sync=3:2:0"], c.prefix, check_rc=False, timeout=120)
            check(r.returncode != 0, "the program survived its rank's SIGKILL")
            said = c.wait()
        finally:
            c.stop()
        got = work / "got"
        remotes.fetch(kind, url, ["epochs.dat"], got)
        # Epoch 3 reached its agreement on no rank (rank 2 never joined it).
        same_bytes(ref / "epochs.dat.epoch2", got / "epochs.dat", "epochs.dat after the kill")
        return f"remote holds exactly epoch 2 ({said.removeprefix('paralog wait: ')})"
    return case


def lost_log_case(remotes, kind, flavour):
    """Node n1's node-local directory is wiped after the run, before the
    servers start: the committed epochs lack ranks 2 and 3 everywhere. The
    servers must refuse the file, name the node, and apply nothing."""
    def case(work):
        nodes, np = 2, 2 * RANKS_PER_NODE
        args = ["--epochs=3", "--kib=64"]
        url, aws = remotes.make(kind, work)
        c = Cluster(work, flavour, nodes, url, aws)
        c.run_app("epochs", args, c.prefix)
        shutil.rmtree(work / "local" / "n1")
        try:
            c.start_servers()
            r = run([BIN, "wait", "--local", c.local, "--job", "t", "--timeout", "120"],
                    env=c.env({"PARALOG_NODE": "n0"}), check=False, timeout=180)
            rc = c.servers.wait(timeout=60)
        finally:
            c.stop()
        said = r.stdout + r.stderr
        check(r.returncode == 3, f"paralog wait exited {r.returncode}, not 3: {said}")
        check(rc == 3, f"the server job exited {rc}, not 3: {c.tail()}")
        check("n1" in said and "rank 2" in said and "rank 3" in said,
              f"the report does not name node n1 and ranks 2, 3: {said}")
        check(not (Path(url) / "epochs.dat").exists(), "bytes of the file reached the remote")
        check(any((work / "local" / "n0").rglob("*.data")), "node n0's records were deleted")
        return "refused, named node n1 and ranks 2, 3; nothing applied; node n0's records kept"
    return case


def rename_case(flavour, nodes=2):
    """The atomic-save pattern by one POSIX process on each node, into a
    directory of its own (pyprogs.py atomic: four saves of ckpt through
    ckpt.tmp + fsync + os.replace, then five rotated saves of which the
    oldest are unlinked). The server job drains the renames (it parked
    them before, until `paralog recover`): `paralog wait` succeeds, and the
    remote holds the direct run's tree, with no temporary."""
    def case(work):
        ref = work / "direct"
        for n in range(nodes):
            (ref / f"n{n}").mkdir(parents=True)
            run([PY, PYPROGS, "atomic", ref / f"n{n}"])
        remote = work / "remote"
        remote.mkdir()
        c = Cluster(work, flavour, nodes, str(remote))
        for n in range(nodes):
            (c.prefix / f"n{n}").mkdir()
            (remote / f"n{n}").mkdir()
        try:
            c.start_servers()
            cmd = ["/bin/sh", "-c", f'exec {PY} {PYPROGS} atomic {c.prefix}/"$PARALOG_NODE"']
            run(c.node_cmd(cmd), env=c.capture_env(c.env()), timeout=300)
            said = c.wait()
        finally:
            c.stop()
        got = tree(remote)
        why = tree_difference(tree(ref), got)
        check(not why, f"remote differs from the direct run: {why}")
        left = [k for k in got if k.endswith(".tmp") or ".paralog-" in k]
        check(not left, f"temporaries left on the remote: {left}")
        return f"{len(got)} names equal the direct run; {said.removeprefix('paralog wait: ')}"
    return case


def single_server_wait_case(flavour):
    """`paralog wait` with an ordinary one-node server (no MPI launcher):
    it returns once everything is drained, and the server exits 0."""
    def case(work):
        np = RANKS_PER_NODE
        ref = work / "direct"
        reference(flavour, "epochs", ["--epochs=4", "--kib=128"], ref, np)
        remote = work / "remote"
        remote.mkdir()
        c = Cluster(work, flavour, 1, str(remote))
        server = Server(work / "local" / "n0", remote, mpi_env(), job="t", log=c.server_log, timeout=30)
        try:
            c.run_app("epochs", ["--epochs=4", "--kib=128"], c.prefix)
            r = run([BIN, "wait", "--local", c.local, "--job", "t", "--timeout", "120"],
                    env=c.env({"PARALOG_NODE": "n0"}), check=False, timeout=180)
            check(r.returncode == 0, f"paralog wait exited {r.returncode}: {r.stdout}{r.stderr}")
            rc = server.p.wait(timeout=60)
            check(rc == 0, f"server exited {rc}: {c.tail()}")
        finally:
            server.kill()
        same_files(ref, remote)
        return f"equal direct MPI-IO; {r.stdout.strip().removeprefix('paralog wait: ')}; the server exited 0"
    return case


def all_cases(remotes, quick):
    """Every (label, case); with quick, 2 and 4 nodes, POSIX and S3 only."""
    cases = []
    cases.append(("mpich one server, paralog wait", single_server_wait_case("mpich")))
    for flavour in FLAVOURS:
        for nodes in (2, 3, 4):
            for label, prog, args, hdf5 in PROGRAMS:
                cases.append((f"{flavour} {nodes} nodes {label} posix",
                              drain_case(remotes, "posix", flavour, nodes, label, prog, args, hdf5)))
        for nodes in (2, 4):
            for kind in ("objstore", "s3"):
                for label, prog, args, hdf5 in PROGRAMS:
                    cases.append((f"{flavour} {nodes} nodes {label} {kind}",
                                  drain_case(remotes, kind, flavour, nodes, label, prog, args, hdf5)))
        # The servers' collective MPI-IO instead of independent writes.
        for nodes in (2, 4):
            for label, prog, args, hdf5 in PROGRAMS:
                if label in ("epochs", "noncontig_holes", "hdf5"):
                    cases.append((f"{flavour} {nodes} nodes {label} mpi-io",
                                  drain_case(remotes, "posix", flavour, nodes, label, prog, args, hdf5,
                                             ["--posix-writes", "collective"])))
        for nodes in (2, 4):
            for upload in ("close", "epoch"):
                cases.append((f"{flavour} {nodes} nodes s3 parts {upload}",
                              s3_parts_case(remotes, flavour, nodes, upload)))
        for kind in ("posix", "objstore", "s3"):
            cases.append((f"{flavour} server killed mid-drain {kind}", server_killed_case(remotes, kind, flavour)))
        cases.append((f"{flavour} s3 outage in a shared upload", s3_outage_case(remotes, flavour)))
        cases.append((f"{flavour} server killed mid-drain s3 parts",
                      server_killed_case(remotes, "s3", flavour, parts=True)))
        cases.append((f"{flavour} application killed on one node", app_killed_case(remotes, "posix", flavour)))
        cases.append((f"{flavour} 4 nodes idle rounds send nothing", quiet_rounds_case(remotes, flavour)))
        cases.append((f"{flavour} node-local log lost on one node", lost_log_case(remotes, "posix", flavour)))
        cases.append((f"{flavour} 2 nodes atomic save renames posix", rename_case(flavour)))
    if quick:
        cases = [(label, fn) for label, fn in cases if not (" 3 nodes" in label or "objstore" in label)]
    return cases


def main():
    ap = suite_options()
    ap.add_argument("--quick", action="store_true", help="2 and 4 nodes, POSIX and S3 only")
    a = ap.parse_args()
    suite = Suite("cluster", keep=a.keep)
    minio = MinIO(suite.base)
    cases = all_cases(Remotes(suite.base, minio), a.quick)
    minio.start()
    # Suite.run stops it at the end, also on a signal or an error.
    suite.cleanup.append(minio.stop)
    return suite.run(cases, only=a.only)


if __name__ == "__main__":
    sys.exit(main())
