#!/usr/bin/python3
"""The array objects' benchmark (issue 18; results and their reading:
docs/benchmarks.md section 11). Root only: the bandwidth-limited remote is
the end-to-end harness's (bench/e2e/testbed.py: two network namespaces, a
veth pair under tc tbf, sshd and an sshfs mount of its directory).

The seed's skeleton (bench/objects/skeleton.c; zarr_skeleton.py for
zarr-python): CYCLES cycles of computation, an output phase every EVERY
cycles in which each rank writes its ROWS x 4096 int32 block; compute per
cycle = COMPUTE_RATIO x (one phase's bytes at the link rate) / EVERY, so
that on the limited remote compute is about 3/4 of a direct run. For each
target (the local disk, --tmp; the sshfs mount over the limited link),
ROWS (16, 32, 64) and ranks (1, 2, 4, MPICH), side by side:

  hdf5-direct   parallel HDF5, one shared file per phase (the baseline)
  hdf5-sync     the same with H5Fflush (MPI_File_sync: fsync) before each
                close: the durability obj-direct promises
  hdf5-paralog  the same program under `paralog run --prefix DIR`
  zarr          zarr-python 3 writing the same arrays (one array per phase)
  obj-direct    the objects' C API, a version of one object per phase, on
                objstore://DIR?dirs=4
  obj-nosync    the same on objstore://DIR?dirs=4&sync=0: no fsync, the
                durability hdf5-direct and zarr give (the page cache)
  obj-logged    the same on a logged store (node-local log on --tmp), the
                versions published by a `paralog server` meanwhile
  obj-parts     (only when named in --methods) obj-direct with one chunk
                of ROWS x ranks rows per phase, each rank writing its rows
                as a part (paralog_obj_write_part): a chunk written by
                every rank in disjoint parts
  obj-*@before  with --before DIR: obj-direct, obj-nosync and obj-logged
                again with the binaries in DIR (paralog, its libraries,
                paralog-h5view: an older build), in the same run, each
                right after the current build's run of the method

Measured: the time in output phases (rank 0, barrier to barrier), the
program's wall time, the end-to-end time (paralog run until drained;
obj-logged until every version is published), files on the target per
phase. Every run's last output is read back and compared with the
skeleton's formula. On the local disk, the last outputs are also read
whole (best of 10, each baseline and its view alternated in one process)
through zarr-python (a store it wrote, the Zarr view of an object
version) and h5py (the contiguous HDF5 file, the HDF5 view).

Usage: bench/objects/run.py [--quick] [--rows 16,32,64] [--ranks 1,2,4]
         [--cycles 40] [--every 5] [--compute-ratio 3] [--rate-mbit 200]
         [--targets local,remote] [--methods ...] [--tmp /var/tmp]
         [--json target/bench/objects.json] [--before DIR] [--keep]
"""
import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent / "e2e"))
from testbed import BASE_PREFIX, CpuGroup, Testbed, run, stop_group, teardown  # noqa: E402

import numpy as np  # noqa: E402

READS = 10
METHODS = ["hdf5-direct", "hdf5-sync", "hdf5-paralog", "zarr", "obj-direct", "obj-nosync", "obj-logged"]
# Run only when --methods names them.
EXTRA = ["obj-parts"]
VENV_PY = ROOT / "target/objects-venv/bin/python"
COLS = 4096


def on_signal(signum, _frame):
    raise SystemExit(128 + signum)


def expected(rows, ranks, phase):
    """The skeleton's values of one output (bench/objects/skeleton.c)."""
    g = np.arange(rows * ranks * COLS, dtype=np.uint64)
    v = (g * np.uint64(2654435761) + np.uint64(phase * 40503)) & np.uint64(0xFFFFFFFF)
    return v.astype(np.uint32).view("<i4").tobytes()


def count_files(d):
    return sum(len(files) for _, _, files in os.walk(d))


class Tools:
    """Private copies of the binaries (a rebuild during the run changes
    nothing): paralog, its libraries and paralog-h5view side by side, and
    the skeleton built against them with MPICH's mpicc."""

    def __init__(self, base, rel=ROOT / "target/release", sub="bin"):
        d = base / sub
        d.mkdir()
        for f in [rel / "paralog", rel / "paralog-h5view", *rel.glob("libparalog_*.so")]:
            shutil.copy2(f, d / f.name)
        self.paralog = d / "paralog"
        self.skeleton = d / "skeleton"
        run(["mpicc.mpich", "-O2", "-Wall", "-Wextra", "-I/usr/include/hdf5/mpich",
             f"-I{ROOT / 'crates/objects-c/include'}", "-o", self.skeleton, HERE / "skeleton.c",
             "-L/usr/lib/x86_64-linux-gnu/hdf5/mpich", "-lhdf5", f"-L{d}", "-lparalog_obj_mpi_mpich",
             "-lparalog_obj", f"-Wl,-rpath,{d}"])
        self.rev = run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], check=False).stdout.strip()


class Bench:
    def __init__(self, a, base, bed, tools, before=None):
        self.a, self.base, self.bed, self.tools, self.before = a, base, bed, tools, before
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("PARALOG_", "AWS_"))}
        self.work = base / "work"
        self.work.mkdir()
        self.shm = Path(tempfile.mkdtemp(prefix=f"{BASE_PREFIX}{os.getpid()}-", dir="/dev/shm"))

    def spawn(self, cmd, log, env=None):
        with open(log, "ab") as lf:
            t0 = time.monotonic()
            p = subprocess.run([str(c) for c in cmd], env=env or self.env, stdout=subprocess.PIPE, stderr=lf,
                               timeout=3600)
            t1 = time.monotonic()
        if p.returncode != 0:
            raise RuntimeError(f"exit {p.returncode}: {' '.join(map(str, cmd))[:300]}\n"
                               f"{Path(log).read_text(errors='replace')[-1500:]}")
        return t0, t1, p.stdout.decode(errors="replace")

    def one(self, target, label, rows, ranks, compute_s):
        a = self.a
        # "obj-direct@before": the method with the --before binaries.
        method, _, which = label.partition("@")
        tools = self.before if which == "before" else self.tools
        rid = f"{target}-r{rows}-n{ranks}-{method}{'-before' if which else ''}"
        top = self.bed.mnt if target == "remote" else self.work / "local"
        out = top / rid
        out.mkdir(parents=True)
        log = self.work / f"{rid}.log"
        local = self.work / "log" / rid
        local.mkdir(parents=True, mode=0o700)
        common = ["--rows", rows, "--cycles", a.cycles, "--every", a.every, "--compute-s", f"{compute_s:.6f}"]
        mpirun = ["mpirun.mpich", "-n", ranks]
        url = f"objstore://{out}?dirs=4&keep=100000" + ("&sync=0" if method == "obj-nosync" else "")
        server = None
        if method.startswith("obj"):
            run([tools.paralog, "obj", "init", url])
        before = count_files(out)
        if method.startswith("hdf5"):
            cmd = [*mpirun, self.tools.skeleton, "--api", "hdf5", "--out", out, *common]
            if method == "hdf5-sync":
                cmd.append("--flush")
            if method == "hdf5-paralog":
                cmd = [self.tools.paralog, "run", "--prefix", out, "--local", local, "--job", "ob", "--mpi",
                       "mpich", "--", *cmd]
        elif method == "zarr":
            sync = self.shm / rid
            sync.mkdir()
            cmd = [*mpirun, VENV_PY, HERE / "zarr_skeleton.py", "--out", out, "--sync", sync, *common]
        else:
            cmd = [*mpirun, tools.skeleton, "--api", "obj", "--out", url, *common]
            if method == "obj-parts":
                cmd += ["--chunk-rows", rows * ranks]
            if method == "obj-logged":
                cmd += ["--local", local]
                with open(self.work / f"{rid}.server.log", "ab") as lf:
                    server = subprocess.Popen(
                        [str(tools.paralog), "server", "--local", str(local), "--job", "ob", "--remote",
                         str(self.work / "unused-remote")], stdout=subprocess.DEVNULL, stderr=lf, env=self.env,
                        start_new_session=True)
                time.sleep(0.5)
        try:
            t0, t1, stdout = self.spawn(cmd, log)
            t_end = t1
            if server:
                staging = local / ".paralog-objects" / "staging"
                deadline = time.monotonic() + 3600
                while any(staging.iterdir()) and time.monotonic() < deadline:
                    if server.poll() is not None:
                        raise RuntimeError(f"{rid}: the server exited {server.returncode}")
                    time.sleep(0.01)
                t_end = time.monotonic()
        finally:
            stop_group(server)
        s = json.loads(stdout.strip().splitlines()[-1])
        rec = {"target": target, "method": label, "rows": rows, "ranks": ranks, "id": rid,
               "compute_s": s["compute_s"], "output_s": s["output_s"], "outputs": s["outputs"],
               "prog_wall": t1 - t0, "T": t_end - t0, "first_output": s["phases"][0][0] - t0,
               "bytes": rows * ranks * COLS * 4 * s["outputs"], "load": os.getloadavg()[0]}
        rec["files_per_phase"] = (count_files(out) - before) / s["outputs"]
        rec["verified"] = self.verify(method, out, url, rows, ranks, s["outputs"])
        rec["out"], rec["url"] = str(out), url
        shutil.rmtree(local, ignore_errors=True)
        return rec

    def verify(self, method, out, url, rows, ranks, outputs):
        """The last output read back equal to the skeleton's values."""
        want = expected(rows, ranks, outputs - 1)
        last = f"out_{outputs - 1:05d}"
        if method.startswith("hdf5"):
            got = json.loads(run(["/usr/bin/python3", HERE / "readback.py", "hdf5", 1, out / f"{last}.h5"]).stdout)
        elif method == "zarr":
            got = json.loads(run([VENV_PY, HERE / "readback.py", "zarr", 1, out / f"{last}.zarr"]).stdout)
        else:
            base, _, query = url.partition("?")
            f = self.work / "got.bin"
            run([self.tools.paralog, "obj", "get", f"{base}/field?{query}", f, "--version", outputs])
            got = {"sha256": hashlib.sha256(f.read_bytes()).hexdigest()}
            f.unlink()
        if got["sha256"] != hashlib.sha256(want).hexdigest():
            raise RuntimeError(f"{method} {out}: the last output differs from the skeleton's values")
        return True

    def reads(self, recs):
        """On the local disk: the last output of each configuration read
        whole, best of READS, by zarr-python and h5py."""
        by = {r["method"]: r for r in recs}
        outputs = by["hdf5-direct"]["outputs"]
        last = f"out_{outputs - 1:05d}"
        base, _, query = by["obj-direct"]["url"].partition("?")
        info = json.loads(run([self.tools.paralog, "obj", "info", f"{base}/field?{query}", "--version", outputs,
                               "--json"]).stdout)
        want = hashlib.sha256(expected(by["zarr"]["rows"], by["zarr"]["ranks"], outputs - 1)).hexdigest()
        res = {}
        # Each baseline and its view read alternately in one process.
        for py, kind, pairs in ((VENV_PY, "zarr", (("zarr", Path(by["zarr"]["out"]) / f"{last}.zarr"),
                                                   ("zarr-view", info["zarr"]))),
                                ("/usr/bin/python3", "hdf5",
                                 (("hdf5", Path(by["hdf5-direct"]["out"]) / f"{last}.h5"),
                                  ("hdf5-view", info["hdf5"])))):
            out = run([py, HERE / "readback.py", kind, READS, *[p for _, p in pairs]]).stdout
            for (key, path), line in zip(pairs, out.strip().splitlines()):
                got = json.loads(line)
                if got["sha256"] != want:
                    raise RuntimeError(f"read {key} {path}: not the skeleton's values")
                res[key] = got["best_s"]
        return res


def table(results):
    lines = []
    link = results["link_Bps"]
    for target in results["args"]["targets"]:
        lines.append(f"\n{target}: time in output phases, s (ratio to hdf5-direct); files per phase")
        lines.append("rows ranks MB/phase | " + " | ".join(f"{m:>20s}" for m in results["args"]["methods"])
                     + " | logged T/ideal")
        for cfg in results["configs"]:
            recs = {r["method"]: r for r in results["runs"] if r["target"] == target
                    and (r["rows"], r["ranks"]) == tuple(cfg)}
            if not recs:
                continue
            base = recs["hdf5-direct"]["output_s"]
            cells = []
            for m in results["args"]["methods"]:
                r = recs[m]
                cells.append(f"{r['output_s']:6.2f} ({r['output_s'] / base:4.2f}) {r['files_per_phase']:5.1f}f")
            ideal = []
            for lg in (recs.get("obj-logged"), recs.get("obj-logged@before")):
                if lg:
                    bound = max(lg["prog_wall"], lg["first_output"] + lg["bytes"] / link) \
                        if target == "remote" else lg["prog_wall"]
                    ideal.append(f"{lg['T'] / bound:5.2f}")
            ideal = " / ".join(ideal)
            mb = cfg[0] * cfg[1] * COLS * 4 / 1e6
            lines.append(f"{cfg[0]:4d} {cfg[1]:5d} {mb:8.2f} | " + " | ".join(f"{c:>20s}" for c in cells)
                         + f" | {ideal:>14s}")
    if results.get("reads"):
        lines.append(f"\nreads on the local disk, whole array, best of {READS} alternated, s (ratio: the baseline's time / the view's)")
        for cfg, r in results["reads"]:
            lines.append(f"rows {cfg[0]:3d} ranks {cfg[1]}: zarr {r['zarr']:.4f}, Zarr view {r['zarr-view']:.4f} "
                         f"({r['zarr'] / r['zarr-view']:.2f}); hdf5 {r['hdf5']:.4f}, HDF5 view "
                         f"{r['hdf5-view']:.4f} ({r['hdf5'] / r['hdf5-view']:.2f})")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="rows 16,64, ranks 1,4, 20 cycles (a few minutes); --rows, --ranks, --cycles given win")
    ap.add_argument("--rows")
    ap.add_argument("--ranks")
    ap.add_argument("--cycles", type=int)
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--compute-ratio", type=float, default=3.0,
                    help="compute per output interval / (one phase's bytes at the link rate)")
    ap.add_argument("--rate-mbit", type=int, default=200)
    ap.add_argument("--targets", default="local,remote")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--cpu-shares", type=int, default=32768)
    ap.add_argument("--tmp", default="/var/tmp")
    ap.add_argument("--json", default=str(ROOT / "target/bench/objects.json"))
    ap.add_argument("--before", help="a directory of older binaries: obj-direct, obj-nosync and obj-logged "
                    "run with them too, each right after its current run (methods obj-direct@before, ...)")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    quick, full = ("16,64", "1,4", 20), ("16,32,64", "1,2,4", 40)
    a.rows, a.ranks, a.cycles = (given if given is not None else default for given, default in
                                 zip((a.rows, a.ranks, a.cycles), quick if a.quick else full))
    a.rows = [int(x) for x in a.rows.split(",")]
    a.ranks = [int(x) for x in a.ranks.split(",")]
    a.targets = a.targets.split(",")
    a.methods = a.methods.split(",")
    if a.before:
        # Each right after its current build's run: before and after side by side.
        a.methods = [x for m in a.methods
                     for x in ([m, f"{m}@before"] if m in ("obj-direct", "obj-nosync", "obj-logged") else [m])]
    if "hdf5-direct" not in a.methods or any(m.partition("@")[0] not in METHODS + EXTRA for m in a.methods):
        ap.error(f"methods: some of {METHODS + EXTRA}, hdf5-direct included (the baseline)")
    if os.geteuid() != 0:
        sys.exit("bench/objects/run.py: needs root (network namespaces, tc, FUSE mounts)")
    if not VENV_PY.exists():
        sys.exit(f"{VENV_PY} is missing: scripts/setup.sh --test makes it")
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    base = Path(tempfile.mkdtemp(prefix=f"{BASE_PREFIX}{os.getpid()}-", dir=a.tmp))
    bed = Testbed(base, a.rate_mbit)
    cg = b = None
    results = {"args": vars(a), "runs": [], "reads": [],
               "configs": [[r, n] for r in a.rows for n in a.ranks]}
    t_begin = time.time()
    errors = []
    try:
        tools = Tools(base)
        before = Tools(base, Path(a.before).resolve(), "bin-before") if a.before else None
        cg = CpuGroup(a.cpu_shares)
        bed.start()
        b = Bench(a, base, bed, tools, before)
        results.update(rev=tools.rev, link_Bps=bed.link_Bps, cpus=os.cpu_count(),
                       started=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                       cgroup=cg.desc if cg.path else None)
        print(f"paralog {tools.rev}; link {a.rate_mbit} Mbit/s (tbf) to sshfs {bed.mnt}; {a.cycles} cycles, "
              f"output every {a.every}; load {os.getloadavg()[0]:.1f}", flush=True)
        for rows, ranks in results["configs"]:
            phase_bytes = rows * ranks * COLS * 4
            compute_s = a.compute_ratio * phase_bytes / bed.link_Bps / a.every
            for target in a.targets:
                group = []
                for m in a.methods:
                    subprocess.run(["sync"])
                    rec = b.one(target, m, rows, ranks, compute_s)
                    group.append(rec)
                    print(f"  {target:6s} rows {rows:3d} ranks {ranks}: {m:18s} output {rec['output_s']:6.2f} s, "
                          f"compute {rec['compute_s']:6.2f} s, program {rec['prog_wall']:6.2f} s, "
                          f"T {rec['T']:6.2f} s, {rec['files_per_phase']:.1f} files/phase; "
                          f"load {rec['load']:.1f}", flush=True)
                if target == "local" and {"zarr", "obj-direct"} <= set(a.methods):
                    results["reads"].append([[rows, ranks], b.reads(group)])
                for r in group:
                    if target == "remote":
                        shutil.rmtree(r["out"], ignore_errors=True)
                results["runs"] += group
                Path(a.json).parent.mkdir(parents=True, exist_ok=True)
                Path(a.json).write_text(json.dumps(results))
        results["minutes"] = (time.time() - t_begin) / 60
        Path(a.json).write_text(json.dumps(results))
        print(f"\nall last outputs verified; {results['minutes']:.1f} min; results in {a.json}")
        print(table(results))
    finally:
        errors = teardown(bed, cg, b.shm if b is not None else None, base, a.keep)
    if errors:
        sys.exit(1)


if __name__ == "__main__":
    main()
