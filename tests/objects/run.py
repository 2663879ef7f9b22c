#!/usr/bin/python3
"""Array objects end to end (docs/objects.md, issue 18):
the `paralog obj` commands write arrays, and zarr-python 3 and tensorstore
(PyPI, in the virtual environment scripts/setup.sh --test makes) read every
version's Zarr view, h5py, h5dump and a C program its HDF5 view, byte for
byte equal to what was put. Each case runs on an
`objstore://` store (4 storage directories) and on a plain directory.

  dtypes     every element type, 37x19 in chunks of 8x5 (edge chunks),
             attributes; zarr reads the whole array and random slabs,
             `paralog obj get --slice` random slabs; `obj verify` passes;
             the HDF5 view read by h5py (whole, slabs), an unmodified C
             program and h5dump (whole, a slab)
  grids      1-D with an edge chunk, 3-D with edge chunks in every
             dimension, a chunk larger than the array: both views read
  seed       the seed's int32 chunks of 16x4096, 32x4096, 64x4096 per
             writer on 1, 2 and 4 writer processes of one chunked put
             (`obj begin`, concurrent `obj write`, `obj commit`); Zarr
             and HDF5 views read
  parts      chunks written in parts by several processes (`obj write
             --slice`): 16 rows per writer into chunks of 64 rows (4
             writers at once), column bands of 37x19 float32 in chunks of
             8x5; `obj get`, `obj verify`, both views read the array;
             overlapping parts refused, nothing published, abort clean
  versions   40 versions of one name, each view and `obj get --version`
             equal to its own put
  writers    4 processes x 10 puts of one name at once: 40 versions, none
             lost or mixed, each equal to its put
  polling    `obj get` of the latest in a loop while 2 processes commit 15
             versions each (keep=1 on objstore://: retention drops the
             version being read): every read whole and of one put
  killed     a writer killed (SIGKILL) halfway through its 64 chunks: the
             commit refuses and publishes nothing, `obj abort` leaves no
             chunk file, a new put commits as version 1
  damage     another valid chunk of the version written over a chunk
             (swapped), a flipped byte, a truncated chunk: `obj get`,
             `obj verify` and `paralog.objects` refuse naming object,
             version and chunk; zarr-python and tensorstore refuse to
             read the view of the last two (the crc32c codec); an HDF5 view that maps another version's
             chunks is refused by `obj verify`, `obj view` makes it again;
             a missing chunk file is an error through the HDF5 view
             (h5py), never zeros
  refusals   bad names, overlapping chunk writes, a missing chunk at commit
             (nothing published), a buffer of the wrong size, a chunk
             outside the grid; `obj gc` removes a put
             whose writer died and keeps a live one

Usage: python3 -m tests.objects.run [--only SUBSTRING] [--keep]
Ends with "objects: N passed, N failed"."""
import json
import os
import random
import struct
import subprocess
import sys
import time
from pathlib import Path

from tests.lib.check import Suite, check, fail, suite_options
from tests.lib.mpi import compile_program
from tests.lib.paths import BIN, ROOT, TARGET
from tests.lib.proc import run

VENV_PY = TARGET / "objects-venv" / "bin" / "python"
READER = Path(__file__).resolve().parent / "zarr_reader.py"
H5_READER_PY = Path(__file__).resolve().parent / "h5_reader.py"
H5_READER_C = Path(__file__).resolve().parent / "h5_reader.c"
H5_READER = TARGET / "objects-h5-reader"
SIZES = {"int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "uint16": 2,
         "uint32": 4, "uint64": 8, "float32": 4, "float64": 8}
KINDS = ("objstore", "plain")


def store(work, kind, keep=100):
    """A new store's URL: objstore:// or a plain directory."""
    root = work / "store"
    root.mkdir()
    url = f"objstore://{root}?dirs=4&keep={keep}" if kind == "objstore" else str(root)
    obj("init", url)
    return url


def at(url, name):
    """The URL of object `name` in the store `url`."""
    base, _, query = url.partition("?")
    return f"{base}/{name}" + (f"?{query}" if query else "")


def obj(*args, check=True):
    return run([BIN, "obj", *args], check=check, timeout=300)


def info(url):
    return json.loads(obj("info", url, "--json").stdout)


PY_GET = """
import sys
import paralog.objects as po
with po.Store(sys.argv[1]) as s:
    try:
        s.get(sys.argv[2])
    except po.ObjectError as e:
        sys.exit(f"refused: {e}")
print("read")
"""


def py_get(store_url, name, env=None):
    """`paralog.objects` (over the C API) reads the latest version of `name`:
    its exit code and what it said (a refusal exits 1 with the error)."""
    env = dict(env or os.environ, PYTHONPATH=str(ROOT / "python"))
    r = run([sys.executable, "-c", PY_GET, store_url, name], env=env, check=False, timeout=300)
    return r.returncode, r.stdout + r.stderr


def view_check(views, expect, dtype, shape, chunks, slabs, **more):
    """One version's check for zarr_read and hdf5_read: its views (as `obj
    info --json` names them: "zarr", and "hdf5" where the store has one),
    the file of the values put (`expect`), the array's dtype, shape and
    grid, the slabs to read; `more`: "attrs", "files" and the like."""
    c = {"view": views["zarr"], "expect": str(expect), "dtype": dtype, "shape": list(shape),
         "chunks": list(chunks), "slabs": slabs, **more}
    if views.get("hdf5"):
        c["file"] = views["hdf5"]
    return c


def zarr_read(work, checks, env=None):
    """zarr-python and tensorstore read each check (tests/objects/zarr_reader.py);
    `env`: the AWS settings of views on S3."""
    spec = work / f"checks-{random.getrandbits(32):08x}.json"
    spec.write_text(json.dumps(checks))
    with open(spec) as f:
        r = run([VENV_PY, READER], stdin=f, env=env, check=False, timeout=300)
    check(r.returncode == 0, f"zarr-python: {(r.stdout + r.stderr).strip()[-1500:]}")
    return r.stdout


def h5_reader():
    """The unmodified C reader (tests/objects/h5_reader.c), built with Debian's HDF5."""
    flags = run(["pkg-config", "--cflags", "--libs", "hdf5-mpich"]).stdout.split()
    return compile_program("mpicc.mpich", H5_READER_C, H5_READER, "-O2", "-Wall", "-Werror", libs=flags)


def hdf5_read(work, checks):
    """Each version's HDF5 view read equal to what was put by h5py (whole and
    slabs), by an unmodified C program and by h5dump (whole and a slab)."""
    import numpy as np
    spec = work / f"h5checks-{random.getrandbits(32):08x}.json"
    spec.write_text(json.dumps(checks))
    with open(spec) as f:
        r = run([sys.executable, H5_READER_PY], stdin=f, check=False, timeout=300)
    check(r.returncode == 0, f"h5py: {(r.stdout + r.stderr).strip()[-1500:]}")
    out = work / "h5.out"
    for c in checks:
        want = np.fromfile(c["expect"], dtype=np.dtype(c["dtype"]).newbyteorder("<")).reshape(c["shape"])
        start, count = c["slabs"][0]
        sl = tuple(slice(a, a + n) for a, n in zip(start, count))
        csv = lambda v: ",".join(map(str, v))  # noqa: E731
        reads = [([h5_reader(), c["file"], out], want),
                 ([h5_reader(), c["file"], out, csv(start), csv(count)], want[sl]),
                 (["h5dump", "-d", "/data", "-b", "LE", "-o", out, c["file"]], want),
                 (["h5dump", "-d", "/data", "-s", csv(start), "-c", csv(count), "-b", "LE", "-o", out,
                   c["file"]], want[sl])]
        for cmd, exp in reads:
            out.unlink(missing_ok=True)
            run(cmd, timeout=300)
            check(out.read_bytes() == exp.tobytes(), f"{Path(cmd[0]).name} {cmd[2:]}: not the array put")
    return r.stdout


def slab(rng, shape):
    start = [rng.randrange(n) for n in shape]
    return start, [1 + rng.randrange(n - a) for n, a in zip(shape, start)]


def slice_arg(start, count):
    return ",".join(f"{a}:{a + n}" for a, n in zip(start, count))


def case_dtypes(kind):
    def go(work):
        url = store(work, kind)
        rng = random.Random(18)
        attrs = {"units": "K", "step": 3, "axes": ["y", "x"]}
        checks = []
        for dtype, size in SIZES.items():
            shape, chunks = [37, 19], [8, 5]
            data = work / f"{dtype}.bin"
            data.write_bytes(rng.randbytes(37 * 19 * size))
            name = at(url, f"dtypes/{dtype}")
            obj("put", name, data, "--dtype", dtype, "--shape", "37,19", "--chunks", "8,5",
                "--attrs", json.dumps(attrs))
            files = []
            for k in range(5):
                start, count = slab(rng, shape)
                out = work / f"{dtype}-{k}.slab"
                obj("get", name, out, "--slice", slice_arg(start, count))
                files.append([start, count, str(out)])
            obj("verify", name)
            views = info(name)
            checks.append(view_check(views, data, dtype, shape, chunks, [slab(rng, shape) for _ in range(20)],
                                     attrs=attrs, files=files))
        zarr_read(work, checks)
        hdf5_read(work, checks)
        ls = obj("ls", url).stdout.splitlines()
        check(len(ls) == len(SIZES), f"obj ls lists {len(ls)} objects, not {len(SIZES)}: {ls}")
    return go


def case_seed(kind):
    def go(work):
        url = store(work, kind)
        rng = random.Random(4096)
        checks = []
        for rows in (16, 32, 64):
            for writers in (1, 2, 4):
                name = at(url, f"seed/{rows}x4096/{writers}")
                shape = [rows * writers, 4096]
                pid = obj("begin", name, "--dtype", "int32", "--shape", f"{shape[0]},4096",
                          "--chunks", f"{rows},4096").stdout.strip()
                parts = []
                for w in range(writers):
                    part = work / f"seed-{rows}-{writers}-{w}.bin"
                    part.write_bytes(rng.randbytes(rows * 4096 * 4))
                    parts.append(part)
                # The writers at once, each its own chunk, as ranks would.
                procs = [subprocess.Popen([str(BIN), "obj", "write", name, pid, str(p), "--chunk", f"{w},0"],
                                          stderr=subprocess.PIPE, text=True)
                         for w, p in enumerate(parts)]
                for p in procs:
                    _, err = p.communicate(timeout=300)
                    check(p.returncode == 0, f"obj write: {err}")
                obj("commit", name, pid)
                whole = work / f"seed-{rows}-{writers}.bin"
                whole.write_bytes(b"".join(p.read_bytes() for p in parts))
                obj("verify", name)
                views = info(name)
                checks.append(view_check(views, whole, "int32", shape, [rows, 4096],
                                         [slab(rng, shape) for _ in range(10)]))
        zarr_read(work, checks)
        hdf5_read(work, checks)
    return go


def case_parts(kind):
    """Chunks written in parts by several processes (`obj write --slice`):
    the seed's 16 rows per writer into chunks of 64 rows (4 writers at
    once), and 3 writers of column bands of a 37x19 float32 in chunks of
    8x5 (edge chunks); `obj get`, `obj verify` and both views read the
    array; parts that overlap are refused at the commit, nothing
    published, and `obj abort` leaves no chunk file."""
    def go(work):
        import numpy as np
        url = store(work, kind)
        rng = random.Random(64)
        checks = []
        for name, dtype, shape, chunks, bands in (
                ("rows", "int32", [64, 4096], [64, 4096], [f"{16 * w}:{16 * w + 16}" for w in range(4)]),
                ("cols", "float32", [37, 19], [8, 5], [":,0:7", ":,7:12", ":,12:19"])):
            a = np.frombuffer(rng.randbytes(int(np.prod(shape)) * 4), dtype=f"<{dtype[0]}4").reshape(shape)
            if dtype == "float32":
                a = np.nan_to_num(a)
            pid = obj("begin", at(url, name), "--dtype", dtype, "--shape", ",".join(map(str, shape)),
                      "--chunks", ",".join(map(str, chunks))).stdout.strip()
            procs = []
            for w, band in enumerate(bands):
                f = work / f"{name}-{w}.bin"
                box = tuple(slice(*(int(x) if x else None for x in d.split(":"))) for d in band.split(","))
                f.write_bytes(np.ascontiguousarray(a[box]).tobytes())
                procs.append(subprocess.Popen([str(BIN), "obj", "write", at(url, name), pid, str(f),
                                               "--slice", band], stderr=subprocess.PIPE, text=True))
            for p in procs:
                _, err = p.communicate(timeout=300)
                check(p.returncode == 0, f"obj write --slice: {err}")
            check(f"{name} version 1 " in obj("commit", at(url, name), pid).stdout, f"{name}: commit")
            whole = work / f"{name}.bin"
            whole.write_bytes(a.tobytes())
            got = work / "got.bin"
            obj("get", at(url, name), got)
            check(got.read_bytes() == whole.read_bytes(), f"{name}: obj get is not the array")
            obj("verify", at(url, name))
            views = info(at(url, name))
            checks.append(view_check(views, whole, dtype, shape, chunks, [slab(rng, shape) for _ in range(6)]))
        zarr_read(work, checks)
        hdf5_read(work, checks)
        before = sorted((work / "store" / "data").rglob("*"))
        pid = obj("begin", at(url, "over"), "--dtype", "uint8", "--shape", "8,6", "--chunks", "8,6").stdout.strip()
        for band in ("0:5", "4:8"):
            f = work / "band.bin"
            f.write_bytes(bytes(range(6)) * (int(band[2]) - int(band[0])))
            obj("write", at(url, "over"), pid, f, "--slice", band)
        r = obj("commit", at(url, "over"), pid, check=False)
        check(r.returncode == 1 and "over: put " in r.stderr and "chunk [0, 0]: parts written by writers " in r.stderr
              and "nothing was published" in r.stderr, f"overlapping parts: {r.stderr}")
        check(obj("info", at(url, "over"), check=False).returncode == 1, "overlapping parts were published")
        obj("abort", at(url, "over"), pid)
        check(sorted((work / "store" / "data").rglob("*")) == before, "abort left a part's chunk file")
    return go


def case_grids(kind):
    """Other chunk grids: 1-D with an edge chunk, 3-D with edge chunks in
    every dimension, one chunk larger than the array; both views read."""
    def go(work):
        url = store(work, kind)
        rng = random.Random(3)
        checks = []
        for name, dtype, shape, chunks in (("g/1d", "uint16", [1000], [64]),
                                           ("g/3d", "float32", [5, 7, 9], [2, 3, 4]),
                                           ("g/big", "int64", [10, 10], [16, 16])):
            n = 1
            for x in shape:
                n *= x
            data = work / f"{name.replace('/', '-')}.bin"
            data.write_bytes(rng.randbytes(n * SIZES[dtype]))
            obj("put", at(url, name), data, "--dtype", dtype, "--shape", ",".join(map(str, shape)),
                "--chunks", ",".join(map(str, chunks)))
            obj("verify", at(url, name))
            views = info(at(url, name))
            checks.append(view_check(views, data, dtype, shape, chunks, [slab(rng, shape) for _ in range(8)]))
        zarr_read(work, checks)
        hdf5_read(work, checks)
    return go


def case_versions(kind):
    def go(work):
        url = store(work, kind, keep=50)
        name = at(url, "v")
        rng = random.Random(40)
        checks = []
        for i in range(40):
            data = work / f"v{i}.bin"
            data.write_bytes(rng.randbytes(6 * 10 * 2))
            out = obj("put", name, data, "--dtype", "uint16", "--shape", "6,10", "--chunks", "4,4").stdout
            check(f"version {i + 1} " in out, f"put {i}: {out}")
            checks.append({"view": info(name)["zarr"], "expect": str(data), "dtype": "uint16",
                           "shape": [6, 10], "chunks": [4, 4], "slabs": [slab(rng, [6, 10])]})
        for i in range(40):
            got = work / f"got{i}.bin"
            obj("get", name, got, "--version", str(i + 1))
            check(got.read_bytes() == (work / f"v{i}.bin").read_bytes(), f"version {i + 1} is not its put")
        check(len(info(name)["versions"]) == 40, "not 40 versions kept")
        zarr_read(work, checks)
    return go


def case_writers(kind):
    def go(work):
        url = store(work, kind, keep=100)
        name = at(url, "w")
        for w in range(4):
            for i in range(10):
                v = float(w * 100 + i)
                # One value per put: a mixed version would show two.
                (work / f"w{w}-{i}.bin").write_bytes(struct.pack("<32d", *[v] * 32))
        script = (f'for i in $(seq 0 9); do "{BIN}" obj put "{name}" "{work}/w$W-$i.bin" '
                  '--dtype float64 --shape 4,8 --chunks 2,8 || exit 1; done')
        procs = [subprocess.Popen(["bash", "-c", script], env={"W": str(w), "PATH": "/usr/bin:/bin"},
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for w in range(4)]
        made = {}
        for w, p in enumerate(procs):
            out, err = p.communicate(timeout=300)
            check(p.returncode == 0, f"writer {w}: {err}")
            for i, line in enumerate(out.splitlines()):
                n = int(line.split(" version ")[1].split()[0])
                check(n not in made, f"version {n} returned to two puts")
                made[n] = work / f"w{w}-{i}.bin"
        check(sorted(made) == list(range(1, 41)), f"versions {sorted(made)}")
        check(len(info(name)["versions"]) == 40, "not 40 versions kept")
        checks = [{"view": str(Path(info(name)["zarr"]).parent / f"v{n:010d}"), "expect": str(f),
                   "dtype": "float64", "shape": [4, 8], "chunks": [2, 8]} for n, f in sorted(made.items())]
        zarr_read(work, checks)
    return go


def case_polling(kind):
    """Readers polling the latest version while 2 processes commit 15
    versions each; on objstore:// with keep=1, so retention drops the
    version a reader holds under it (`obj get` then reads the newest)."""
    N = 64 * 4096

    def go(work):
        url = store(work, kind, keep=1)
        name = at(url, "poll")
        for w in range(2):
            for i in range(15):
                v = w * 100 + i
                (work / f"p{w}-{i}.bin").write_bytes(struct.pack("<q", v) * N)
        # 2 MiB in 8 chunks: a read takes long enough to meet a commit.
        script = (f'for i in $(seq 0 14); do "{BIN}" obj put "{name}" "{work}/p$W-$i.bin" '
                  '--dtype int64 --shape 64,4096 --chunks 8,4096 >/dev/null || exit 1; done')
        procs = [subprocess.Popen(["bash", "-c", script], env={"W": str(w), "PATH": "/usr/bin:/bin"},
                                  stderr=subprocess.PIPE, text=True) for w in range(2)]
        reads = retried = 0
        out = work / "poll.bin"
        while any(p.poll() is None for p in procs):
            r = obj("get", name, out, check=False)
            if r.returncode != 0 and "no version published" in r.stderr:
                continue
            check(r.returncode == 0, f"obj get while committing: {r.stderr}")
            vals = struct.unpack(f"<{N}q", out.read_bytes())
            check(len(set(vals)) == 1, f"a mixed version: {sorted(set(vals))[:5]}")
            reads += 1
            retried += "replaced it" in r.stderr
        for p in procs:
            check(p.wait() == 0, f"writer: {p.stderr.read()}")
        check(reads > 0, "no read happened while the writers committed")
        got = [v["number"] for v in info(name)["versions"]]
        check(got == ([30] if kind == "objstore" else list(range(1, 31))), f"versions kept: {got}")
        return f"{reads} reads, {retried} of them moved to a newer version"
    return go


def case_killed(kind):
    """A writer killed (SIGKILL) in the middle of its chunks: the commit
    refuses and publishes nothing; `obj abort` removes the put and its
    chunk files; a new put of the same name then commits as version 1."""
    def go(work):
        url = store(work, kind)
        name = at(url, "k")
        shape = "256,4096"
        part = work / "all.bin"
        part.write_bytes(random.Random(9).randbytes(256 * 4096 * 4))
        pid = obj("begin", name, "--dtype", "int32", "--shape", shape, "--chunks", "4,4096").stdout.strip()
        chunks = [a for i in range(64) for a in ("--chunk", f"{i},0")]
        p = subprocess.Popen([str(BIN), "obj", "write", name, pid, str(part), *chunks],
                             stderr=subprocess.PIPE)
        staging = work / "store" / "staging" / pid
        deadline = time.time() + 60
        while len(list(staging.glob("c*"))) < 3 and time.time() < deadline and p.poll() is None:
            time.sleep(0.005)
        p.kill()
        p.wait()
        claimed = len(list(staging.glob("c*")))
        check(0 < claimed < 64, f"the writer was killed after {claimed} of 64 chunks (the test wants the middle)")
        r = obj("commit", name, pid, check=False)
        check(r.returncode == 1 and "did not finish" in r.stderr, f"commit after a killed writer: {r.stderr}")
        check(obj("ls", url).stdout == "", "a refused commit published something")
        obj("abort", name, pid)
        # Every chunk file the writer made is gone (an empty one may stay if
        # the kill fell between its creation and its claim's temporary
        # name: microseconds).
        data = [f for f in (work / "store" / "data").rglob("*") if f.is_file() and f.stat().st_size]
        check(data == [], f"{len(data)} chunk files left after abort")
        obj("put", name, part, "--dtype", "int32", "--shape", shape, "--chunks", "4,4096")
        check(info(name)["version"] == 1, "the new put is not version 1")
        obj("verify", name)
        return f"killed after {claimed} chunks"
    return go


def case_damage(kind):
    def go(work):
        url = store(work, kind)
        name = at(url, "dmg")
        data = work / "d.bin"
        data.write_bytes(random.Random(5).randbytes(64 * 4096 * 4))
        obj("put", name, data, "--dtype", "int32", "--shape", "64,4096", "--chunks", "16,4096")
        view = Path(info(name)["zarr"])
        chunk = view / "c" / "1" / "0"  # a hard link to the version's chunk file
        good = chunk.read_bytes()
        # "swapped": another valid chunk of the version (same size, intact
        # trailer) written over it: the version's record names each chunk.
        other = (view / "c" / "2" / "0").read_bytes()
        for how, bad, said in (("swapped", other, "another chunk"),
                               ("flipped", good[:777] + bytes([good[777] ^ 4]) + good[778:], "checksum"),
                               ("truncated", good[:-9], "truncated")):
            chunk.write_bytes(bad)  # in place: the view's link and the version's file
            for cmd in (["get", name, work / "out.bin"], ["verify", name]):
                r = obj(*cmd, check=False)
                check(r.returncode == 1, f"{how}: obj {cmd[0]} exited {r.returncode}")
                check("dmg version 1: chunk [1, 0]" in r.stderr and said in r.stderr,
                      f"{how}: obj {cmd[0]} said {r.stderr!r}")
            rc, out = py_get(url, "dmg")
            check(rc == 1 and "dmg version 1: chunk [1, 0]" in out and said in out,
                  f"{how}: paralog.objects said {out!r}")
            if how == "swapped":
                # The Zarr view's readers check the chunk's own CRC-32C only:
                # a swap is for `obj verify` to find, not them.
                print(f"  {how}: {r.stderr.strip()}")
                continue
            said = zarr_read(work, [{"view": str(view), "refuse": True}])
            check("refused by zarr-python" in said and "refused by tensorstore" in said, said)
            print("\n".join(f"  {how}: {line}" for line in said.splitlines()))
        chunk.write_bytes(good)
        obj("verify", name)
        # The HDF5 view's mappings are checked: version 1's view replaced by
        # version 2's (other chunk files) is refused, naming the chunk.
        obj("put", name, data, "--dtype", "int32", "--shape", "64,4096", "--chunks", "16,4096")
        h5 = [Path(info(f"{name}")["hdf5"]).with_name(f"v{n:010}.h5") for n in (1, 2)]
        h5[0].write_bytes(h5[1].read_bytes())
        r = obj("verify", name, "--version", "1", check=False)
        check(r.returncode == 1 and "dmg version 1: chunk [0, 0]" in r.stderr and "mapping 0" in r.stderr,
              f"a swapped HDF5 view: {r.stderr!r}")
        obj("view", name, "--version", "2")
        h5[0].unlink()
        made = obj("view", name, "--version", "1").stdout
        check(str(h5[0]) in made, f"obj view: {made!r}")
        check("HDF5 view" in obj("verify", name, "--all").stdout, "verify --all")
        # HDF5 reads a missing chunk file as an error, never as zeros (the
        # Zarr view's hard link keeps the bytes; the HDF5 view names the file).
        src = [line for line in run(["h5dump", "-p", "-H", "-d", "/chunks/1", h5[1]]).stdout.splitlines()
               if "FILENAME" in line][0].split()[1]
        Path(src).rename(work / "moved")
        r = run([sys.executable, "-c", f"import h5py; h5py.File({str(h5[1])!r}, 'r')['data'][16:32]"],
                check=False)
        check(r.returncode != 0 and "unable to open external raw data file" in r.stderr,
              f"a missing chunk read through the HDF5 view: {r.returncode} {r.stderr[-300:]}")
        r = obj("verify", name, "--version", "2", check=False)
        check(r.returncode == 1 and "dmg version 2: chunk [1, 0]" in r.stderr, r.stderr)
        (work / "moved").rename(src)
    return go


def case_refusals(kind):
    def go(work):
        url = store(work, kind)
        src = work / "a.bin"
        src.write_bytes(bytes(64))
        for bad in (".hidden", "a/v0000000001"):
            r = obj("put", at(url, bad), src, "--dtype", "uint8", "--shape", "64", "--chunks", "8", check=False)
            check(r.returncode == 1 and "object name" in r.stderr, f"{bad}: {r.stderr!r}")
        r = obj("put", at(url, "../x"), src, "--dtype", "uint8", "--shape", "64", "--chunks", "8", check=False)
        check(r.returncode == 1 and ".." in r.stderr, f"../x: {r.stderr!r}")
        r = obj("put", at(url, "a"), src, "--dtype", "int32", "--shape", "64", "--chunks", "8", check=False)
        check(r.returncode == 1 and "64 bytes given" in r.stderr, r.stderr)
        name = at(url, "p")
        pid = obj("begin", name, "--dtype", "uint8", "--shape", "16", "--chunks", "8").stdout.strip()
        eight = work / "8.bin"
        eight.write_bytes(bytes(range(8)))
        obj("write", name, pid, eight, "--chunk", "0")
        r = obj("write", name, pid, eight, "--chunk", "0", check=False)
        check(r.returncode == 1 and "already written by another writer" in r.stderr, r.stderr)
        r = obj("write", name, pid, eight, "--chunk", "2", check=False)
        check(r.returncode == 1 and "outside the chunk grid" in r.stderr, r.stderr)
        r = obj("commit", name, pid, check=False)
        check(r.returncode == 1 and "1 of 2 chunks were not written" in r.stderr, r.stderr)
        check(obj("ls", url).stdout == "", "a refused commit published something")
        obj("write", name, pid, eight, "--chunk", "1")
        obj("commit", name, pid)
        got = work / "p.bin"
        obj("get", name, got)
        check(got.read_bytes() == bytes(range(8)) * 2, "the committed put")
        # A put whose writer died: `obj gc` removes it and its chunk.
        dead = obj("begin", at(url, "dead"), "--dtype", "uint8", "--shape", "16", "--chunks", "8").stdout.strip()
        obj("write", at(url, "dead"), dead, eight, "--chunk", "1")
        said = obj("gc", url).stdout
        check("removed 0 abandoned puts" in said, f"a live put was collected: {said}")
        said = obj("gc", url, "--older-than", "0").stdout
        check("removed 1 abandoned puts" in said, said)
        r = obj("commit", at(url, "dead"), dead, check=False)
        check(r.returncode == 1 and "no such put in progress" in r.stderr, r.stderr)
    return go


def main():
    a = suite_options().parse_args()
    suite = Suite("objects", keep=a.keep)
    if not VENV_PY.exists():
        print(f"objects: {VENV_PY} is missing: run scripts/setup.sh --test", file=sys.stderr)
        return 1
    for built in (BIN, BIN.with_name("paralog-h5view")):
        if not built.exists():
            fail(f"{built} is missing: make build")
    cases = []
    for kind in KINDS:
        for label, fn in (("dtypes", case_dtypes), ("grids", case_grids), ("seed", case_seed), ("parts", case_parts),
                          ("versions", case_versions),
                          ("writers", case_writers), ("polling", case_polling),
                          ("killed", case_killed), ("damage", case_damage), ("refusals", case_refusals)):
            cases.append((f"{label} [{kind}]", fn(kind)))
    return suite.run(cases, only=a.only)


if __name__ == "__main__":
    sys.exit(main())
