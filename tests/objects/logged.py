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
from tests.objects.run import KINDS, at, hdf5_read, info, obj, slab, store, zarr_read

SHAPE, CHUNKS = [48, 40], [16, 16]


def logged_put(work, url, local, k, rng):
    data = work / f"v{k}.bin"
    data.write_bytes(rng.randbytes(48 * 40 * 8))
    said = obj("put", at(url, "t"), data, "--dtype", "float64", "--shape", "48,40", "--chunks", "16,16",
               "--local", local).stdout
    check("logged put" in said, said)
    return data


def versions(url):
    r = obj("info", at(url, "t"), "--json", check=False)
    return [v["number"] for v in json.loads(r.stdout)["versions"]] if r.returncode == 0 else []


def check_versions(work, url, datas):
    checks = []
    for n, data in enumerate(datas, 1):
        got = work / f"got{n}.bin"
        obj("get", at(url, "t"), got, "--version", str(n))
        check(got.read_bytes() == data.read_bytes(), f"version {n} is not its put")
        obj("verify", at(url, "t"), "--version", str(n))
    views = info(at(url, "t"))
    checks.append({"view": views["zarr"], "file": views["hdf5"], "expect": str(datas[-1]), "dtype": "float64",
                   "shape": SHAPE, "chunks": CHUNKS, "slabs": [slab(random.Random(1), SHAPE)]})
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


def main():
    a = suite_options().parse_args()
    suite = Suite("objects-logged", keep=a.keep)
    cases = []
    for kind in KINDS:
        cases += [(f"server [{kind}]", case_server(kind)), (f"recover [{kind}]", case_recover(kind))]
    return suite.run(cases, only=a.only)


if __name__ == "__main__":
    sys.exit(main())
