#!/usr/bin/python3
"""The C API's chunked PUT by real MPI programs (docs/objects.md "C"):
tests/objects/mpi_put.c, compiled by MPICH's and Open MPI's own mpicc and
linked with libparalog_obj_mpi_<flavour>.so, puts the seed's int32 chunks
(16x4096, 32x4096, 64x4096 per rank) on 1, 2 and 4 ranks, on objstore://
and a plain directory; rank 0 reads the array back through the C API, and
zarr-python, tensorstore (the Zarr view), h5py, h5dump and a C program (the
HDF5 view) read each version equal to the array, and `obj verify` passes.
Refusals: a rank joining with another shape or type, a chunk outside the
grid: every rank fails with the same message naming the rank, the object
and the put or chunk, and nothing is published or left staged. Python
(`paralog.objects`): every dtype through numpy, its refusals, a logged put, and an mpi4py
program on 1, 2 and 4 Open MPI ranks (Debian's mpi4py is Open MPI's).
Parts (paralog_obj_write_part): chunks of 24 rows that two ranks write in
parts, on 1, 2 and 4 ranks of each MPI, direct on both layouts and logged,
read back equal through both views; parts overlapping by one row refused
on every rank; from Python, column bands with a hole (refused, then
filled) and the mpi4py program writing parts on 4 ranks.
Fortran (tests/objects/f_put.f90 over paralog_objects.f90) on 2 and 4
ranks of each MPI. Mixed waits: half the ranks told their node is
outnumbered (they sleep between tests), on 2 and 4 ranks of each MPI.
Logged: the C program on a logged store (2 and 4 ranks), published by
`paralog obj publish`, once.

Usage: python3 -m tests.objects.mpi [--only SUBSTRING] [--keep]
Ends with "objects-mpi: N passed, N failed"."""
import random
import sys

from tests.lib.check import Suite, check, fail, suite_options
from tests.lib.mpi import compile_program, launcher, mpi_env, rank_reports
from tests.lib.paths import RELEASE, ROOT, TARGET
from tests.lib.proc import run
from tests.objects.run import KINDS, VENV_PY, at, hdf5_read, info, obj, slab, store, view_check, zarr_read

SRC = ROOT / "tests/objects/mpi_put.c"
INCLUDE = ROOT / "crates/objects-c/include"
FLAVOURS = ("mpich", "openmpi")


def program(flavour):
    return compile_program(f"mpicc.{flavour}", SRC, TARGET / "objects-mpi" / flavour / "mpi_put",
                           "-O2", "-Wall", "-Werror", f"-I{INCLUDE}",
                           libs=[f"-L{RELEASE}", f"-lparalog_obj_mpi_{flavour}", "-lparalog_obj",
                                 f"-Wl,-rpath,{RELEASE}"])


def mpi_put(flavour, np, url, name, rows, salt, mode="ok", check_rc=True, local=None, env=None):
    r = run([*launcher(flavour, np), program(flavour), url, name, str(rows), str(salt), mode,
             *([local] if local else [])],
            env=mpi_env(env), check=False, timeout=300)
    if check_rc:
        check(r.returncode == 0, f"{flavour} x{np} {name}: exit {r.returncode}: {r.stdout}{r.stderr}")
    return r


def case_seed(flavour, kind):
    def go(work):
        import numpy as np
        url = store(work, kind)
        rng = random.Random(18)
        checks = []
        for rows in (16, 32, 64):
            for ranks in (1, 2, 4):
                name, salt = f"seed/{rows}/{ranks}", rng.randrange(1 << 20)
                out = mpi_put(flavour, ranks, url, name, rows, salt).stdout
                check("version 1" in out and "read back equal" in out, out)
                obj("verify", at(url, name))
                shape = [rows * ranks, 4096]
                want = work / f"{rows}-{ranks}.bin"
                (np.arange(shape[0] * 4096, dtype="<i4") + salt).tofile(want)
                views = info(at(url, name))
                checks.append(view_check(views, want, "int32", shape, [rows, 4096],
                                         [slab(rng, shape) for _ in range(4)], attrs={"writer": "mpi_put"}))
        zarr_read(work, checks)
        hdf5_read(work, checks)
    return go


def rank_errors(out):
    """Each rank's "rank R: error CODE: MESSAGE" report as {R: "CODE: MESSAGE"}."""
    return rank_reports(out, r": error (?=\d+: )")


def case_refusals(flavour, kind):
    def go(work):
        url = store(work, kind)
        cases = (("mismatch", 2, "rank 1: bad: put ", "is not the put's (int32 [32, 4096]"),
                 ("dtype", 2, "rank 1: bad: put ", "float32 [32, 4096]"),
                 ("outside", 4, "rank 3: write error 1: bad: chunk [4, 0] is outside the chunk grid [4, 1]",
                  "1 of 4 chunks were not written (first: [[3, 0]]); nothing was published"),
                 # A rank failing at the commit's start: every rank learns it
                 # from the allgather, and rank 0 aborts the put.
                 ("nowriter", 4, "error 1: rank 1: the writer or id is NULL", ""))
        for mode, ranks, said, also in cases:
            r = mpi_put(flavour, ranks, url, "bad", 16, 0, mode, check_rc=False)
            check(r.returncode != 0, f"{mode}: the program succeeded: {r.stdout}")
            check(said in r.stdout and also in r.stdout, f"{mode}: {r.stdout}")
            errors = rank_errors(r.stdout)
            check(sorted(errors) == list(range(ranks)) and len(set(errors.values())) == 1,
                  f"{mode}: not the same error on every rank: {errors}")
        check(obj("ls", url).stdout == "", "a refused put published something")
        staging = work / "store" / "staging"
        left = list(staging.iterdir()) if staging.exists() else []
        check(left == [], f"refused puts left staged: {left}")
    return go


def case_logged(flavour):
    """The MPI form on a logged store (paralog_obj_open_logged): the ranks
    write to the node-local directory, nothing is visible until `paralog
    obj publish`, then each put is one version equal to the array."""
    def go(work):
        import numpy as np
        url, local = store(work, "objstore"), work / "local"
        checks = []
        for ranks in (2, 4):
            out = mpi_put(flavour, ranks, url, f"logged/{ranks}", 16, ranks, local=str(local)).stdout
            check("logged" in out, out)
            r = obj("info", at(url, f"logged/{ranks}"), check=False)
            check(r.returncode == 1, f"visible before it was published: {r.stdout}")
        said = obj("publish", local).stdout
        check(said.count("version 1 id") == 2, said)
        for ranks in (2, 4):
            want = work / f"logged{ranks}.bin"
            (np.arange(16 * ranks * 4096, dtype="<i4") + ranks).tofile(want)
            obj("verify", at(url, f"logged/{ranks}"))
            views = info(at(url, f"logged/{ranks}"))
            checks.append(view_check(views, want, "int32", [16 * ranks, 4096], [16, 4096], [[[3, 7], [20, 100]]],
                                     attrs={"writer": "mpi_put"}))
        zarr_read(work, checks)
        hdf5_read(work, checks)
        check(obj("publish", local).stdout == "", "published twice")
    return go


def case_mixed_waits(flavour):
    """Ranks that choose different waits in one put (docs/objects.md
    "Waiting without spinning"): the first half told by the launcher's
    variable that their node is outnumbered (they sleep between MPI_Test
    calls), the others not (MPI_Wait). Every rank starts the same
    nonblocking collectives whatever it chose, so the puts complete and
    read back; a rank that used the blocking form beside another's
    nonblocking one would not match (MPI 4.0, 6.12)."""
    def go(work):
        url = store(work, "objstore")
        outnumbered = 'MPI_LOCALNRANKS=9999 OMPI_COMM_WORLD_LOCAL_SIZE=9999 exec "$0" "$@"'
        for ranks in (2, 4):
            name, half = f"mixed/{ranks}", ranks // 2
            args = [str(program(flavour)), url, name, "16", str(ranks), "ok"]
            mpmd = launcher(flavour, half)
            cmd = [*mpmd, "sh", "-c", outnumbered, *args, ":", "-n", str(ranks - half), *args]
            r = run(cmd, env=mpi_env(), check=False, timeout=120)
            check(r.returncode == 0, f"{flavour} x{ranks} with mixed waits: exit {r.returncode}: {r.stdout}{r.stderr}")
            obj("verify", at(url, name))
        return "2 and 4 ranks, half of them sleeping between tests: published and verified"
    return go


def case_parts(flavour):
    """Chunks written in parts by two ranks (paralog_obj_write_part, mode
    "parts": chunks of 24 rows, each rank's 16 rows): on objstore:// and a
    plain directory on 1, 2 and 4 ranks, and logged on 4 (published by
    `obj publish`), every version read back equal by rank 0 and through
    both views; parts that overlap by one row: refused on every rank
    naming the chunk, nothing published or left staged."""
    def go(work):
        import numpy as np
        checks = []
        for kind in KINDS:
            (work / kind).mkdir()
            url = store(work / kind, kind)
            for ranks in (1, 2, 4):
                name = f"parts/{ranks}"
                out = mpi_put(flavour, ranks, url, name, 16, ranks, mode="parts").stdout
                check("version 1" in out and "read back equal" in out, f"{kind} x{ranks}: {out}")
                obj("verify", at(url, name))
                shape = [16 * ranks, 4096]
                want = work / f"parts-{kind}-{ranks}.bin"
                (np.arange(shape[0] * 4096, dtype="<i4") + ranks).tofile(want)
                views = info(at(url, name))
                checks.append(view_check(views, want, "int32", shape, [24, 4096],
                                         [[[10, 5], [6, 300]]] + [[[20, 0], [10, 4096]]] * (ranks > 1),
                                         attrs={"writer": "mpi_put"}))
            r = mpi_put(flavour, 4, url, "bad", 16, 0, "partsoverlap", check_rc=False)
            errors = rank_errors(r.stdout)
            check(r.returncode != 0 and sorted(errors) == [0, 1, 2, 3] and len(set(errors.values())) == 1
                  and all(e.startswith("5: rank 0: bad: put ") and "chunk [1, 0]: parts written by writers " in e
                          for e in errors.values()), f"{kind}: overlapping parts: {r.stdout}")
            check(obj("info", at(url, "bad"), check=False).returncode == 1, f"{kind}: a refused put was published")
            staging = work / kind / "store" / "staging"
            left = list(staging.iterdir()) if staging.exists() else []
            check(left == [], f"{kind}: the refused put left staged: {left}")
        url, local = f"objstore://{work / 'objstore' / 'store'}?dirs=4&keep=100", work / "local"
        out = mpi_put(flavour, 4, url, "parts/logged", 16, 4, mode="parts", local=str(local)).stdout
        check("logged" in out, out)
        check("parts/logged version 1 id" in obj("publish", local).stdout, "the logged put of parts")
        views = info(at(url, "parts/logged"))
        checks.append(view_check(views, work / "parts-objstore-4.bin", "int32", [64, 4096], [24, 4096],
                                 [[[20, 0], [10, 4096]]], attrs={"writer": "mpi_put"}))
        zarr_read(work, checks)
        hdf5_read(work, checks)
    return go


F_SRC = ROOT / "tests/objects/f_put.f90"
F_MODULE = INCLUDE / "paralog_objects.f90"


def case_fortran(flavour):
    """The same from Fortran (iso_c_binding, paralog_objects.f90) on 2 and
    4 ranks (rank 0 waits for the views, paralog_obj_wait_views, and finds
    the HDF5 view's file before closing its store), chunks of 24 rows
    written in parts (paralog_obj_write_part) on 4 ranks, a logged store
    (paralog_obj_open_logged, published by `obj publish`), and a bad name
    refused on every rank."""
    def go(work):
        import numpy as np
        exe = TARGET / "objects-mpi" / flavour / "f_put"
        run([f"mpif90.{flavour}", "-O2", "-Wall", "-J", work, "-o", exe, F_MODULE, F_SRC, f"-L{RELEASE}",
             f"-lparalog_obj_mpi_{flavour}", "-lparalog_obj", f"-Wl,-rpath,{RELEASE}"], timeout=600)
        url = store(work, "objstore")
        checks = []
        for ranks in (2, 4):
            view = work / "store" / "hdf5" / "f" / str(ranks) / "v0000000001.h5"
            r = run([*launcher(flavour, ranks), exe, url, f"f/{ranks}", "16", "11", view], env=mpi_env(),
                    check=False, timeout=300)
            check(r.returncode == 0 and "read back equal" in r.stdout, f"x{ranks}: {r.stdout}{r.stderr}")
            check("views made" in r.stdout, f"x{ranks}: no HDF5 view after paralog_obj_wait_views: {r.stdout}")
            want = work / f"f{ranks}.bin"
            (np.arange(16 * ranks * 4096, dtype="<i4") + 11).tofile(want)
            views = info(at(url, f"f/{ranks}"))
            checks.append(view_check(views, want, "int32", [16 * ranks, 4096], [16, 4096], [[[5, 100], [20, 300]]]))
        # Chunks of 24 rows written in parts by two ranks each.
        r = run([*launcher(flavour, 4), exe, url, "f/parts", "16", "12", "--parts"], env=mpi_env(),
                check=False, timeout=300)
        check(r.returncode == 0 and "read back equal" in r.stdout, f"parts: {r.stdout}{r.stderr}")
        want = work / "fparts.bin"
        (np.arange(64 * 4096, dtype="<i4") + 12).tofile(want)
        views = info(at(url, "f/parts"))
        checks.append(view_check(views, want, "int32", [64, 4096], [24, 4096], [[[20, 100], [10, 300]]]))
        zarr_read(work, checks)
        hdf5_read(work, checks)
        # Logged (paralog_obj_open_logged): version 0 at the commit, then
        # published by `paralog obj publish` as version 1, its bytes.
        local = work / "flocal"
        local.mkdir(mode=0o700)
        r = run([*launcher(flavour, 2), exe, url, "f/logged", "16", "13", "--local", local], env=mpi_env(),
                check=False, timeout=300)
        check(r.returncode == 0 and "logged, version 0" in r.stdout, f"logged: {r.stdout}{r.stderr}")
        check(obj("publish", local).stdout.count("f/logged") == 1, "the Fortran logged put was not published once")
        got = work / "flogged.bin"
        obj("get", at(url, "f/logged"), got)
        check(got.read_bytes() == (np.arange(16 * 2 * 4096, dtype="<i4") + 13).tobytes(),
              "the published Fortran logged put is not its bytes")
        r = run([*launcher(flavour, 2), exe, url, "../x", "16", "0"], env=mpi_env(), check=False, timeout=300)
        errors = rank_errors(r.stdout)
        check(r.returncode != 0 and sorted(errors) == [0, 1]
              and all(e.startswith('2: rank 0: object name "../x"') for e in errors.values()),
              f"a bad name: {r.stdout}")
    return go


PY_WRITER = ROOT / "tests/objects/py_writer.py"
PY_ENV = {"PYTHONPATH": str(ROOT / "python")}


def case_python(work):
    """paralog.objects: every dtype put and got back (whole, a slab) with
    numpy, bad input refused naming object, version and chunk; the mpi4py
    program on 1, 2 and 4 ranks, its arrays read by zarr and h5py."""
    import numpy as np
    sys.path.insert(0, PY_ENV["PYTHONPATH"])
    import paralog.objects as po
    url = store(work, "objstore")
    s = po.Store(url)
    rng = np.random.default_rng(18)
    for dt in po.DTYPES:
        a = (rng.standard_normal((37, 19)) * 1000).astype(dt)
        v = s.put(f"py/{dt}", a.astype(np.dtype(dt).newbyteorder(">")), chunks=(8, 5), attrs={"t": dt})
        check(v == 1 and s.get(f"py/{dt}").tobytes() == a.astype(np.dtype(dt).newbyteorder("<")).tobytes(),
              f"{dt}: not the array put")
        got = s.get(f"py/{dt}", version=1, start=(30, 3), count=(7, 9))
        check(got.tobytes() == a[30:37, 3:12].astype(np.dtype(dt).newbyteorder("<")).tobytes(), f"{dt} slab")
        check(s.info(f"py/{dt}")["chunks"] == (8, 5), f"{dt}: info")
        s.wait_views()  # made by a thread after the put returned
        obj("verify", at(url, f"py/{dt}"))
    refusals = [(lambda: s.get("py/int8", start=(30, 0), count=(8, 1)), 1, "py/int8: version 1: hyperslab"),
                (lambda: s.put("../x", np.zeros(4), chunks=(2,)), 2, "object name"),
                (lambda: s.get("py/none"), 3, "py/none")]
    pid = s.begin("py/w", "int16", (16,), (8,))
    w = s.join("py/w", pid, "int16", (16,), (8,))
    refusals += [(lambda: w.write_chunk((2,), np.zeros(8, "i2")), 1, "py/w: chunk [2] is outside the chunk grid"),
                 (lambda: w.write_chunk((0,), np.zeros(7, "i2")), 1, "py/w: chunk [0]: 14 bytes given"),
                 (lambda: s.join("py/w", pid, "int32", (16,), (8,)), 6, "is not the put's")]
    for call, code, said in refusals:
        try:
            call()
            check(False, f"not refused: {said}")
        except po.ObjectError as e:
            check(e.code == code and said in str(e), f"{said}: {e.code} {e}")
    w.discard()
    s.abort("py/w", pid)
    # Parts: writers' column bands of one 12x10 chunk; a hole refused (6),
    # then filled by a third writer; overlapping parts refused (5).
    a = np.arange(12 * 10, dtype="i4").reshape(12, 10)

    def bands(name, pid, cols):
        for lo, hi in cols:
            w = s.join(name, pid, "int32", (12, 10), (12, 10))
            w.write_part((0, lo), a[:, lo:hi])
            w.finish()

    def refused(name, pid, code, said):
        try:
            s.commit(name, pid)
            check(False, f"{name}: committed: {said}")
        except po.ObjectError as e:
            check(e.code == code and said in str(e), f"{name}: {e.code} {e}")

    pid = s.begin("py/parts", "int32", (12, 10), (12, 10))
    bands("py/parts", pid, ((0, 4), (6, 10)))
    refused("py/parts", pid, 6, "chunk [0, 0] is not covered by its parts (384 of its 480 bytes")
    bands("py/parts", pid, ((4, 6),))
    check(s.commit("py/parts", pid) == 1 and (s.get("py/parts") == a).all(), "the put of parts")
    pid = s.begin("py/over", "int32", (12, 10), (12, 10))
    bands("py/over", pid, ((0, 6), (5, 10)))
    refused("py/over", pid, 5, "parts written by writers")
    s.abort("py/over", pid)
    # Logged: nothing visible until published, then one version.
    lg = po.Store(url, local=work / "local")
    a = np.arange(100, dtype="u2").reshape(10, 10)
    check(lg.put("py/logged", a, chunks=(4, 4)) == 0, "a logged put is numbered when published")
    check(obj("info", at(url, "py/logged"), check=False).returncode == 1, "visible before published")
    check("py/logged version 1" in obj("publish", work / "local").stdout, "not published")
    check(s.get("py/logged").tobytes() == a.astype("<u2").tobytes(), "the logged put")
    lg.close()
    checks = []
    for ranks in (1, 2, 4):
        r = run([*launcher("openmpi", ranks), sys.executable, PY_WRITER, url, f"mpi4py/{ranks}", "16", "7"],
                env=mpi_env(PY_ENV), check=False, timeout=300)
        check(r.returncode == 0 and "read back equal" in r.stdout, f"mpi4py x{ranks}: {r.stdout}{r.stderr}")
        want = work / f"py{ranks}.bin"
        (np.arange(16 * ranks * 64, dtype="<f8") + 7).tofile(want)
        views = info(at(url, f"mpi4py/{ranks}"))
        checks.append(view_check(views, want, "float64", [16 * ranks, 64], [16, 64],
                                 [[[0, 2], [16, 3]], [[3, 60], [13, 4]]], attrs={"writer": "py_writer"}))
    r = run([*launcher("openmpi", 4), sys.executable, PY_WRITER, url, "mpi4py/parts", "16", "7", "parts"],
            env=mpi_env(PY_ENV), check=False, timeout=300)
    check(r.returncode == 0 and "read back equal" in r.stdout, f"mpi4py parts: {r.stdout}{r.stderr}")
    views = info(at(url, "mpi4py/parts"))
    checks.append(view_check(views, work / "py4.bin", "float64", [64, 64], [24, 64], [[[20, 0], [10, 64]]],
                             attrs={"writer": "py_writer"}))
    zarr_read(work, checks)
    hdf5_read(work, checks)
    r = run([*launcher("openmpi", 2), sys.executable, PY_WRITER, url, "mpi4py/bad", "16", "7", "mismatch"],
            env=mpi_env(PY_ENV), check=False, timeout=300)
    errors = rank_errors(r.stdout)
    check(r.returncode != 0 and sorted(errors) == [0, 1]
          and all(e.startswith("6: rank 1: mpi4py/bad: put ") for e in errors.values()),
          f"mpi4py mismatch: {r.stdout}")
    s.close()


def main():
    a = suite_options().parse_args()
    suite = Suite("objects-mpi", keep=a.keep)
    if not VENV_PY.exists():
        fail(f"{VENV_PY} is missing: run scripts/setup.sh --test")
    for built in ("paralog", "paralog-h5view", "libparalog_obj.so", "libparalog_obj_mpi_mpich.so",
                  "libparalog_obj_mpi_openmpi.so"):
        if not (RELEASE / built).exists():
            fail(f"{RELEASE / built} is missing: make build")
    cases = []
    for flavour in FLAVOURS:
        for kind in ("objstore", "plain"):
            cases.append((f"seed [{flavour}, {kind}]", case_seed(flavour, kind)))
        cases.append((f"refusals [{flavour}]", case_refusals(flavour, "objstore")))
        cases.append((f"fortran [{flavour}]", case_fortran(flavour)))
        cases.append((f"logged [{flavour}]", case_logged(flavour)))
        cases.append((f"parts [{flavour}]", case_parts(flavour)))
        cases.append((f"mixed waits [{flavour}]", case_mixed_waits(flavour)))
    cases.append(("python [openmpi, mpi4py]", case_python))
    return suite.run(cases, only=a.only)


if __name__ == "__main__":
    sys.exit(main())
