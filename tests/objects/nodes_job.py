"""Logged array puts published by a server job (docs/objects.md "Logged
puts in a server job"): the cases of tests/objects/nodes.py's suite in
which the 2 simulated nodes' servers are one MPI job (`mpirun ... paralog
server`, an MPMD launch naming each node; tests/lib/server.py's
Cluster), not one-node servers. The put is tests/objects/mpi_put.c on
2 nodes x 2 ranks, to objstore:// (and the first case also to s3://, a
MinIO on loopback).

  server job [FLAVOUR]   a put committed before the job starts and one
                         while it runs; `paralog wait` sent to node 1's
                         server (whose node only holds shares: the
                         versions are node 0's to publish) returns 0 with
                         both versions readable right after; the job
                         ends 0; `obj get`, zarr-python, tensorstore,
                         h5py, h5dump and a C program read each equal to
                         its array; nothing left on either node
  status and wait [mpich]  a put of nodes n0 and n2, the job on n0 and n1:
                         `paralog status` on n1 (table and --json) shows
                         node n0's put waiting for n2; `wait --timeout 2`
                         on n0 ends 3 naming n2; once `recover` on n2
                         copied its share, `wait` on n1 returns 0 with the
                         version readable
  damaged [mpich]        a logged put whose chunk was damaged on node 0:
                         `wait` on node 1 ends 3 naming the put, node n0
                         and why (FAILED); the servers end NOT DRAINED;
                         the put is kept on node 0
  killed mid-publish [openmpi: node 0; mpich: node 1]  that node's
                         server killed (SIGKILL) at objects.publish_mid_copy
                         (node 0: its own writers' chunks; node 1: its
                         share), which ends the job: nothing visible;
                         `recover` as a server job publishes the version
                         once, whole; a second one publishes nothing
"""
import json
import os
import subprocess
import time

from tests.lib.check import Failed, check
from tests.lib.paths import BIN
from tests.lib.proc import run
from tests.lib.server import Cluster
from tests.objects.nodes import (NODES, Remote, each_equal, left, locals_of, put_on_nodes,
                                 view_checks)
from tests.objects.run import at


def job(work, flavour, per_node_env=None, remote=None):
    """The server job on nodes n0 and n1 (node-local roots local/nK, the
    ones locals_of makes), started; with the S3 environment of `remote`
    when the store is on S3 (the servers publish there)."""
    (work / "remote").mkdir(exist_ok=True)
    aws = remote.env if remote is not None and remote.s3 else None
    c = Cluster(work, flavour, NODES, work / "remote", aws_env=aws)
    c.start_servers(per_node_env)
    return c


def paralog_on(c, node, *args, timeout=120):
    """A paralog command of node nK of the job (its PARALOG_NODE)."""
    return run([BIN, *map(str, args)], env=c.env({"PARALOG_NODE": f"n{node}"}), check=False, timeout=timeout)


def wait_on(c, node, timeout=120):
    return paralog_on(c, node, "wait", "--local", c.local, "--job", "t", "--timeout", timeout,
                      timeout=timeout + 30)


def nothing_left(locals_):
    for d in locals_:
        check(left(d) == [], f"left in {d.name}: {left(d)}")


def case_job(flavour, kind="objstore"):
    def go(work):
        remote, locals_ = Remote(work, kind), locals_of(work)
        try:
            salts = (31, 32)
            put_on_nodes(flavour, remote, "job/t", salts[0], locals_)
            c = job(work, flavour, remote=remote)
            try:
                put_on_nodes(flavour, remote, "job/t", salts[1], locals_)
                r = wait_on(c, 1)
                now = remote.versions("job/t")
                said = c.waited(r)
            finally:
                c.stop()
            check(now == [1, 2], f"versions when wait returned: {now}")
            check("2 logged array put(s) published" in said, said)
            each_equal(remote, "job/t", salts)
            view_checks(remote, "job/t", salts)
            remote.holds_only(2)
            nothing_left(locals_)
        finally:
            remote.stop()
        return "2 versions published by the server job, readable when wait on node 1 returned"
    return go


def status_puts(c, node):
    st = json.loads(paralog_on(c, node, "status", "--local", c.local, "--job", "t", "--json").stdout)
    return [(p["name"], p["state"], p["waits_for"], p["share"], p.get("node")) for p in st["puts"]]


def case_status_wait(flavour):
    def go(work):
        remote = Remote(work, "objstore")
        l0, l1, l2 = locals_of(work) + [work / "local" / "n2"]
        l2.mkdir(mode=0o700)
        put_on_nodes(flavour, remote, "w", 5, [l0, l2], names=["n0", "n2"])
        c, w = job(work, flavour), None
        try:
            want = [("w", "waiting", ["n2"], False, "n0")]
            deadline = time.time() + 60
            while status_puts(c, 1) != want and time.time() < deadline:
                time.sleep(0.2)
            check(status_puts(c, 1) == want, f"status on n1: {status_puts(c, 1)}")
            table = paralog_on(c, 1, "status", "--local", c.local, "--job", "t", "--once").stdout
            share = "waits for the share of node n2 (2 writer(s), node-local directory "
            check("logged array puts: 0 published, 1 not published" in table and "(node n0) put" in table
                  and share in table, table)
            r = wait_on(c, 0, timeout=2)
            check(r.returncode == 3 and "the time ran out" in r.stderr and share in r.stderr,
                  f"wait: exit {r.returncode}: {r.stdout}{r.stderr}")
            check(remote.versions("w") == [], "published without node n2's share")
            # A wait on n1 (the job finishes since the first wait): it
            # returns only once n0 published, after n2's share is copied.
            cmd = [BIN, "wait", "--local", c.local, "--job", "t", "--timeout", "120"]
            w = subprocess.Popen(list(map(str, cmd)), env=c.env({"PARALOG_NODE": "n1"}), text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            time.sleep(1.0)
            check(w.poll() is None and remote.versions("w") == [],
                  f"wait on n1 returned ({w.poll()}) before n2's share was copied")
            # n2 is no node of the job: its own recover copies its share.
            r = run([BIN, "recover", "--local", l2, "--remote", work / "remote"], env=remote.env, check=False, timeout=120)
            check(r.returncode == 0, f"recover on n2: {r.stdout}{r.stderr}")
            out, err = w.communicate(timeout=150)
            now = remote.versions("w")
            said = c.waited(subprocess.CompletedProcess(cmd, w.returncode, out, err))
        finally:
            if w and w.poll() is None:
                w.kill()
                w.wait()
            c.stop()
        check(now == [1] and "1 logged array put(s) published" in said, f"versions {now}: {said}")
        each_equal(remote, "w", (5,))
        remote.holds_only(1)
        # n2's share directory goes at its next round after the publish.
        check(remote.obj("publish", l2).stdout == "", "n2 published")
        nothing_left([l0, l1, l2])
        return "n0's put named waiting for n2 on n1's status; wait returned once published"
    return go


def case_killed(flavour, node):
    """Node `node`'s server killed after the first chunk it copied: node
    0's own writers' chunks, or node 1's share (node 0 cannot publish)."""
    def go(work):
        remote, locals_ = Remote(work, "objstore"), locals_of(work)
        point = "objects.publish_mid_copy"
        c = job(work, flavour, {node: {"PARALOG_FAILPOINT": point}})
        try:
            put_on_nodes(flavour, remote, "k", 7, locals_)
            try:
                rc = c.servers.wait(timeout=120)
            except subprocess.TimeoutExpired:
                raise Failed(f"the server job did not end at {point}: {c.tail()}")
        finally:
            c.stop()
        check(rc != 0 and f"failpoint {point} reached" in c.tail(4000), f"not killed at {point} ({rc}): {c.tail()}")
        check(remote.versions("k") == [], f"visible after the kill: {remote.versions('k')}")
        cmd = c.node_cmd([BIN, "recover", "--local", c.local, "--remote", work / "remote", "--job", "t"])
        r = run(cmd, env=c.env(), check=False, timeout=300)
        check(r.returncode == 0 and "1 logged array put(s) published" in r.stdout,
              f"recover: exit {r.returncode}: {r.stdout}{r.stderr}")
        check(remote.versions("k") == [1], f"versions after recover: {remote.versions('k')}")
        again = run(cmd, env=c.env(), check=False, timeout=300)
        check(again.returncode == 0 and "logged array put" not in again.stdout,
              f"a second recover: exit {again.returncode}: {again.stdout}{again.stderr}")
        check(remote.versions("k") == [1], f"versions after a second recover: {remote.versions('k')}")
        each_equal(remote, "k", (7,))
        remote.holds_only(1)
        nothing_left(locals_)
        return "absent at the kill; published once by recover as a server job"
    return go


def case_damaged(flavour):
    """A logged put (`obj put --local`, node 0) whose chunk was damaged on
    the node: the job's `wait` (sent to node 1) ends 3, naming the put,
    its node and why; the servers end 3 (NOT DRAINED); the put is kept."""
    def go(work):
        remote, (l0, l1) = Remote(work, "objstore"), locals_of(work)
        data = work / "d.bin"
        data.write_bytes(os.urandom(32 * 16 * 8))
        said = remote.obj("put", at(remote.url, "d"), data, "--dtype", "float64", "--shape", "32,16",
                          "--chunks", "16,16", "--local", l0).stdout
        pid = said.split("logged put ")[1].split()[0]
        chunk = sorted(p for p in (l0 / ".paralog-objects" / "data").rglob("*") if p.is_file())[0]
        b = bytearray(chunk.read_bytes())
        b[5] ^= 0xFF
        chunk.write_bytes(bytes(b))
        c = job(work, flavour)
        try:
            r = wait_on(c, 1, timeout=60)
            rc = c.servers.wait(timeout=60)
        finally:
            c.stop()
        check(r.returncode == 3 and "not everything could be drained" in r.stderr
              and f"array d (node n0) put {pid} (FAILED): not published: d: put {pid}: logged chunk" in r.stderr
              and "fails its claim" in r.stderr, f"wait: exit {r.returncode}: {r.stdout}{r.stderr}")
        check(rc != 0 and f"NOT DRAINED: logged array d put {pid} (node n0): " in c.tail(4000),
              f"the server job exited {rc}: {c.tail()}")
        check(remote.versions("d") == [] and left(l0) != [] and left(l1) == [],
              f"versions {remote.versions('d')}, left on n0 {left(l0)}, on n1 {left(l1)}")
        return "wait and the servers ended 3 naming the damaged put and its node; kept on node 0"
    return go


def cases(flavours):
    out = [(f"server job [{f}]", case_job(f)) for f in flavours]
    out.append(("server job, s3:// [mpich]", case_job("mpich", "s3")))
    out.append(("server job: status and wait [mpich]", case_status_wait("mpich")))
    out.append(("server job: a damaged put [mpich]", case_damaged("mpich")))
    out.append(("server job killed mid-publish on node 0, recover as a server job [openmpi]",
                case_killed("openmpi", 0)))
    out.append(("server job killed mid-copy of node 1's share, recover as a server job [mpich]",
                case_killed("mpich", 1)))
    return out
