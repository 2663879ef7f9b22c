#!/usr/bin/python3
"""Logged array puts (docs/objects.md, "Logged mode"): `paralog obj put
--local L` writes the chunks to the node-local directory and commits there;
the node server (`paralog server --local L`) publishes each committed put to
its store in the background, and `paralog recover` publishes what a killed
server left, exactly once. Each on objstore:// and a plain directory.

  server   3 logged puts of one name while the server runs: 3 versions,
           each equal to its put (obj get, zarr-python, tensorstore, h5py);
           the node-local log is empty after the server stops
  recover  the server killed (SIGKILL) before 2 logged puts: nothing is
           visible, `recover` publishes both (one version each), a second
           `recover` publishes nothing more
  wait     a logged put of 8 MiB made before the server starts (absent),
           another while it runs, then `paralog wait`: it returns 0 only
           once both are published (read equal right after it returns,
           before anything else), saying so; the server then exits 0
  damaged  a logged put whose chunk was damaged on the node: `paralog
           wait` ends at once, exit 3, naming the array, the put id and
           why (FAILED), `status` says so (the table: exit 2); the server
           keeps it
  run      `paralog run -- paralog obj put --local L` (the program makes a
           logged put in run's node-local directory): published, equal,
           when run returns; nothing left on the node
  chunked  `obj begin|write|commit --local`: two writer processes, a
           commit refused while a chunk is missing (nothing published),
           then committed; `paralog wait`: the version equal to the
           chunks written; an aborted logged put leaves nothing

Usage: python3 -m tests.objects.logged [--only SUBSTRING] [--keep]
Ends with "objects-logged: N passed, N failed"."""
import json
import os
import random
import sys
import time

from tests.lib.check import Suite, check, suite_options
from tests.lib.paths import BIN
from tests.lib.proc import run
from tests.lib.server import Server
from tests.objects.run import KINDS, at, hdf5_read, info, obj, slab, store, view_check, zarr_read

SHAPE, CHUNKS = [48, 40], [16, 16]


def logged_put(work, url, local, k, rng):
    data = work / f"v{k}.bin"
    data.write_bytes(rng.randbytes(48 * 40 * 8))
    said = obj("put", at(url, "t"), data, "--dtype", "float64", "--shape", "48,40", "--chunks", "16,16",
               "--local", local).stdout
    check("logged put" in said, said)
    return data


def versions_of(url, name):
    r = obj("info", at(url, name), "--json", check=False)
    return [v["number"] for v in json.loads(r.stdout)["versions"]] if r.returncode == 0 else []


def versions(url):
    return versions_of(url, "t")


def check_versions(work, url, datas):
    checks = []
    for n, data in enumerate(datas, 1):
        got = work / f"got{n}.bin"
        obj("get", at(url, "t"), got, "--version", str(n))
        check(got.read_bytes() == data.read_bytes(), f"version {n} is not its put")
        obj("verify", at(url, "t"), "--version", str(n))
    views = info(at(url, "t"))
    checks.append(view_check(views, datas[-1], "float64", SHAPE, CHUNKS, [slab(random.Random(1), SHAPE)]))
    zarr_read(work, checks)
    hdf5_read(work, checks)


def staged(local):
    d = local / ".paralog-objects" / "staging"
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def case_server(kind):
    def go(work):
        url, local, rng = store(work, kind), work / "local", random.Random(5)
        server = Server(local, work / "remote", os.environ.copy())
        try:
            datas = [logged_put(work, url, local, k, rng) for k in range(3)]
            deadline = time.time() + 60
            while len(versions(url)) < 3 and time.time() < deadline:
                time.sleep(0.1)
            check(versions(url) == [1, 2, 3], f"published: {versions(url)}; log: {server.text()[-800:]}")
        finally:
            server.drain_and_stop()
        check_versions(work, url, datas)
        check(staged(local) == [], f"left in the node-local log: {staged(local)}")
    return go


def case_recover(kind):
    def go(work):
        url, local, rng = store(work, kind), work / "local", random.Random(6)
        server = Server(local, work / "remote", os.environ.copy())
        server.kill()
        datas = [logged_put(work, url, local, k, rng) for k in range(2)]
        check(versions(url) == [], "a logged put is visible before it is published")
        said = run([BIN, "recover", "--local", local, "--remote", work / "remote"], timeout=300).stdout
        check(said.count("published logged array t") == 2, said)
        said = run([BIN, "recover", "--local", local, "--remote", work / "remote"], timeout=300).stdout
        check("published" not in said and versions(url) == [1, 2], f"{said} {versions(url)}")
        check_versions(work, url, datas)
        check(staged(local) == [], f"left in the node-local log: {staged(local)}")
    return go


def big_put(work, url, local, k):
    """A logged put of 8 MiB in 16 chunks (its publish takes a while)."""
    data = work / f"big{k}.bin"
    data.write_bytes(os.urandom(1024 * 1024 * 8))
    said = obj("put", at(url, "big"), data, "--dtype", "float64", "--shape", "1024,1024", "--chunks", "64,1024",
               "--local", local).stdout
    check("logged put" in said, said)
    return data


def case_wait(kind):
    def go(work):
        url, local = store(work, kind), work / "local"
        first = big_put(work, url, local, 0)
        check(versions_of(url, "big") == [], "a logged put is visible before a server ran")
        server = Server(local, work / "remote", os.environ.copy())
        try:
            second = big_put(work, url, local, 1)
            r = run([BIN, "wait", "--local", local, "--job", "t", "--timeout", "120"], check=False, timeout=300)
            # Right after it returns, before anything else: both published.
            now = versions_of(url, "big")
            check(r.returncode == 0, f"wait: exit {r.returncode}: {r.stdout}{r.stderr}")
            check(now == [1, 2], f"published when wait returned: {now}; log: {server.text()[-800:]}")
            check("2 logged array put(s) published" in r.stdout, r.stdout)
            check(server.p.wait(timeout=60) == 0, f"the server exited {server.p.returncode}")
        finally:
            server.kill()
        for n, data in enumerate((first, second), 1):
            got = work / f"got-big{n}.bin"
            obj("get", at(url, "big"), got, "--version", str(n))
            check(got.read_bytes() == data.read_bytes(), f"version {n} is not its put")
        check(staged(local) == [], f"left in the node-local log: {staged(local)}")
        return "absent before, both published when wait returned"
    return go


def case_damaged(kind):
    def go(work):
        url, local = store(work, kind), work / "local"
        data = work / "d.bin"
        data.write_bytes(os.urandom(32 * 16 * 8))
        said = obj("put", at(url, "d"), data, "--dtype", "float64", "--shape", "32,16", "--chunks", "16,16",
                   "--local", local).stdout
        pid = said.split("logged put ")[1].split()[0]
        chunk = sorted(p for p in (local / ".paralog-objects" / "data").rglob("*") if p.is_file())[0]
        b = bytearray(chunk.read_bytes())
        b[5] ^= 0xFF
        chunk.write_bytes(bytes(b))
        server = Server(local, work / "remote", os.environ.copy())
        try:
            t0 = time.time()
            r = run([BIN, "wait", "--local", local, "--job", "t", "--timeout", "60"], check=False, timeout=300)
            took = time.time() - t0
            check(r.returncode == 3 and "not everything could be drained" in r.stderr
                  and f"array d put {pid} (FAILED): not published: d: put {pid}: logged chunk" in r.stderr
                  and "fails its claim" in r.stderr and took < 30,
                  f"wait: exit {r.returncode} after {took:.1f} s: {r.stdout}{r.stderr}")
            st = run([BIN, "status", "--local", local, "--job", "t", "--json"], check=False)
            puts = [(p["name"], p["id"], p["state"]) for p in json.loads(st.stdout)["puts"]]
            check(puts == [("d", pid, "failed")], f"status --json: {puts}")
            table = run([BIN, "status", "--local", local, "--job", "t", "--once"], check=False)
            check(table.returncode == 2 and f"array d put {pid} (FAILED)" in table.stdout,
                  f"status: exit {table.returncode}: {table.stdout}")
            check(server.p.poll() is None, "the server stopped with a put it could not publish")
            check(versions_of(url, "d") == [] and pid in " ".join(staged(local)), "the damaged put was not kept")
        finally:
            server.kill()
        return "wait ended at once naming the put; kept on the node"
    return go


def case_run(kind):
    def go(work):
        url, local, prefix = store(work, kind), work / "local", work / "prefix"
        prefix.mkdir()
        data = work / "run.bin"
        data.write_bytes(os.urandom(1024 * 1024 * 8))
        put = [BIN, "obj", "put", at(url, "r"), data, "--dtype", "float64", "--shape", "1024,1024", "--chunks",
               "64,1024", "--local", local]
        r = run([BIN, "run", "--mpi", "none", "--prefix", prefix, "--local", local, "--remote", work / "remote",
                 "--", *put], check=False, timeout=300)
        now = versions_of(url, "r")
        check(r.returncode == 0 and now == [1], f"run: exit {r.returncode}, versions {now}: {r.stdout}{r.stderr}")
        got = work / "got-r.bin"
        obj("get", at(url, "r"), got)
        check(got.read_bytes() == data.read_bytes(), "the logged put made under run is not its array")
        check(staged(local) == [], f"left in the node-local log: {staged(local)}")
        return "published when run returned"
    return go


def case_chunked(kind):
    def go(work):
        import numpy as np
        url, local = store(work, kind), work / "local"
        server = Server(local, work / "remote", os.environ.copy())
        try:
            obj_url = at(url, "c")
            pid = obj("begin", obj_url, "--dtype", "float64", "--shape", "48,48", "--chunks", "16,16",
                      "--local", local).stdout.strip()
            blocks = {(i, j): np.random.default_rng(i * 3 + j).random((16, 16)) for i in range(3) for j in range(3)}
            for writer, rows in ((0, (0,)), (1, (1, 2))):
                coords = [(i, j) for i in rows for j in range(3)]
                f = work / f"w{writer}.bin"
                f.write_bytes(b"".join(blocks[c].astype("<f8").tobytes() for c in coords))
                if writer == 1:
                    r = obj("commit", obj_url, pid, "--local", local, check=False)
                    check(r.returncode != 0 and "not written" in r.stderr, f"a commit with chunks missing: {r.stderr}")
                obj("write", obj_url, pid, f, *[a for c in coords for a in ("--chunk", f"{c[0]},{c[1]}")],
                    "--local", local)
            said = obj("commit", obj_url, pid, "--local", local).stdout
            check(f"logged put {pid} committed" in said, said)
            r = run([BIN, "wait", "--local", local, "--job", "t", "--timeout", "120"], check=False, timeout=300)
            now = versions_of(url, "c")
            check(r.returncode == 0 and now == [1], f"wait: exit {r.returncode}, versions {now}: {r.stdout}{r.stderr}")
            server.p.wait(timeout=60)
        finally:
            server.kill()
        want = np.block([[blocks[(i, j)] for j in range(3)] for i in range(3)]).astype("<f8").tobytes()
        got = work / "got-c.bin"
        obj("get", at(url, "c"), got)
        check(got.read_bytes() == want, "the logged chunked put is not the chunks written")
        # Aborted: nothing left in the node-local log.
        pid = obj("begin", at(url, "a"), "--dtype", "int8", "--shape", "4", "--chunks", "2", "--local", local).stdout.strip()
        f = work / "a.bin"
        f.write_bytes(b"\x01\x02")
        obj("write", at(url, "a"), pid, f, "--chunk", "0", "--local", local)
        obj("abort", at(url, "a"), pid, "--local", local)
        check(staged(local) == [], f"left in the node-local log: {staged(local)}")
        return "committed on the node, published, equal; abort leaves nothing"
    return go


def main():
    a = suite_options().parse_args()
    suite = Suite("objects-logged", keep=a.keep)
    cases = []
    for kind in KINDS:
        cases += [(f"server [{kind}]", case_server(kind)), (f"recover [{kind}]", case_recover(kind)),
                  (f"wait [{kind}]", case_wait(kind)), (f"chunked [{kind}]", case_chunked(kind)), (f"run [{kind}]", case_run(kind)),
                  (f"damaged [{kind}]", case_damaged(kind))]
    return suite.run(cases, only=a.only)


if __name__ == "__main__":
    sys.exit(main())
