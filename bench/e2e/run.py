#!/usr/bin/python3
"""End-to-end benchmark against a bandwidth-limited remote (issue 7; results
and their reading: docs/benchmarks.md, section 6).

The harness builds its own remote (bench/e2e/testbed.py): two network
namespaces joined by a veth pair limited by tc tbf (default 200 Mbit/s), with
MinIO (S3) and sshd in the storage namespace and an sshfs mount of the
storage directory made from the compute namespace. The workload
(bench/e2e/workload.c, built here with mpicc.<mpi>) and paralog run in the
compute namespace. Everything is torn down at the end, also on Ctrl-C.

Methods, each run REPEAT times per output frequency (order rotated):
  local-aws      the usual way to S3: the program writes its files to the
                 local disk (--tmp, ext4) with direct MPI-IO, then
                 `aws s3 cp --recursive` uploads them (awscli's defaults);
                 T = program + upload. The program's own time is also the
                 "compute + local write" term of T_ideal.
  direct-sshfs   direct MPI-IO to the sshfs mount (the remote file system).
  paralog-sshfs  `paralog run --prefix <sshfs dir>`: the program writes to
                 its usual remote path, paralog drains there (the prefix is
                 the remote).
  paralog-s3     `paralog run --prefix <dir> --remote s3://bench/<run>`.
  paralog-sshfs-shm, paralog-s3-shm (only with --methods): the same with
                 the node-local log on /dev/shm instead of --tmp.
T is the wall time from spawning the command to its exit (for paralog run:
including the wait for the last drain). Every run's output is compared with
the local run's of the same round (byte for byte; ETags for S3; h5diff and
sizes for HDF5).

Reported per output frequency: median T of each method, T_ideal =
max(T_local, t_first_output + total_bytes / link_rate) (link_rate: the tbf
rate, 200 Mbit/s = 25 MB/s), the ratios, the drain's share of the link rate
while the program computes, and timeline plots (bench/e2e/report.py).

Usage: bench/e2e/run.py [--quick] [--repeat 3] [--freqs 1,2,4,8,20]
         [--hdf5-freqs 1] [--cycles 40] [--mib 8] [--ranks 2] [--mpi mpich]
         [--rate-mbit 200] [--compute-ratio 1.15] [--methods ...]
         [--tmp /var/tmp] [--json OUT] [--plots docs/img] [--keep]
"""
import argparse
import filecmp
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import report  # noqa: E402
from testbed import BASE_PREFIX, CpuGroup, Testbed, run, stop_group, teardown  # noqa: E402

METHODS = ["local-aws", "direct-sshfs", "paralog-sshfs", "paralog-s3"]
# Not run by default: paralog with its node-local log on tmpfs (/dev/shm)
# instead of the disk, to show what the local commit costs.
EXTRA = ["paralog-sshfs-shm", "paralog-s3-shm"]
CURRENT = {}  # the process of the run in progress (ended on interrupt)


def on_signal(signum, _frame):
    raise SystemExit(128 + signum)


class Tools:
    """Private copies of the binaries (a rebuild during the run changes
    nothing) and the workload, built with the MPI's own mpicc."""

    def __init__(self, base, mpi):
        d = base / "bin"
        d.mkdir()
        shutil.copy2(ROOT / "target/release/paralog", d / "paralog")
        for lib in (ROOT / "target/release").glob("libparalog_*.so"):  # capture, shims (next to paralog)
            shutil.copy2(lib, d / lib.name)
        self.paralog = d / "paralog"
        self.workload = d / "workload"
        self.workload_h5 = d / "workload-hdf5"
        src = HERE / "workload.c"
        run([f"mpicc.{mpi}", "-O2", "-Wall", "-Wextra", "-o", self.workload, src])
        run([f"mpicc.{mpi}", "-O2", "-Wall", "-Wextra", "-DWITH_HDF5", f"-I/usr/include/hdf5/{mpi}", "-o",
             self.workload_h5, src, f"-L/usr/lib/x86_64-linux-gnu/hdf5/{mpi}", "-lhdf5"])
        self.rev = run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], check=False).stdout.strip()
        dirty = run(["git", "-C", ROOT, "status", "--porcelain", "--", "crates"], check=False).stdout.strip()
        self.rev += "+uncommitted changes in crates/" if dirty else ""
        built = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime((ROOT / "target/release/paralog").stat().st_mtime))
        digest = hashlib.sha256(self.paralog.read_bytes()).hexdigest()[:12]
        self.binary = f"target/release/paralog built {built}, sha256 {digest}"


class Bench:
    def __init__(self, a, base, bed, tools):
        self.a, self.base, self.bed, self.tools = a, base, bed, tools
        self.B = a.mib << 20
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("PARALOG_", "AWS_"))}
        self.env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        self.s3env = dict(bed.aws_env(), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        self.work = base / "work"
        self.work.mkdir()
        self.shm = Path(tempfile.mkdtemp(prefix=f"{BASE_PREFIX}{os.getpid()}-", dir="/dev/shm"))

    def mpirun(self):
        if self.a.mpi == "mpich":
            return ["mpirun.mpich", "-n", str(self.a.ranks)]
        return ["mpirun.openmpi", "-n", str(self.a.ranks), "--oversubscribe"]

    def workload(self, api, outdir, every, sweeps, timeline, cycles=None):
        prog = self.tools.workload_h5 if api == "hdf5" else self.tools.workload
        return [prog, "--dir", outdir, "--bytes", self.B, "--every", every, "--cycles", cycles or self.a.cycles,
                "--sweeps", sweeps, "--api", api, "--end", "close", "--timeline", timeline]

    def spawn(self, cmd, env, log, timeout=3600):
        """Run cmd in the compute namespace; (t_spawn, t_exit, stdout)."""
        with open(log, "ab") as lf:
            t0 = time.monotonic()
            p = subprocess.Popen(self.bed.in_c(cmd), env=env, stdout=subprocess.PIPE, stderr=lf,
                                 start_new_session=True)
            CURRENT["p"] = p
            try:
                out, _ = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                stop_group(p)
                raise RuntimeError(f"timed out: {' '.join(map(str, cmd))[:200]}")
            finally:
                CURRENT.pop("p", None)
            t1 = time.monotonic()
        if p.returncode != 0:
            raise RuntimeError(f"exit {p.returncode}: {' '.join(map(str, cmd))[:300]}\n"
                               f"{Path(log).read_text(errors='replace')[-1500:]}")
        return t0, t1, out.decode(errors="replace")

    def calibrate(self, target_s):
        """Seconds per sweep with all ranks computing (no output): a short
        estimate, then 3 runs of 4 cycles at about the target cycle time."""
        def per_sweep(sweeps, cycles, i):
            tl = self.work / f"calib-{i}.json"
            _, _, out = self.spawn(self.workload("mpiio", self.work, 0, sweeps, tl, cycles=cycles), self.env,
                                   self.work / "calib.log")
            return json.loads(out.strip().splitlines()[-1])["compute_s"] / (sweeps * cycles)
        first = per_sweep(100, 10, 0)
        sweeps = max(1, round(target_s / first))
        return statistics.median(per_sweep(sweeps, 4, i + 1) for i in range(3))

    # --- one run ------------------------------------------------------------

    def one(self, method, api, k, rep, sweeps):
        rid = f"{api}-k{k}-r{rep}-{method}"
        tl = self.work / f"{rid}.timeline.json"
        log = self.work / f"{rid}.log"
        rec = {"method": method, "api": api, "k": k, "rep": rep, "id": rid, "load_before": os.getloadavg()[0]}
        if method == "local-aws":
            out = self.work / "local" / rid
            out.mkdir(parents=True)
            rec["out"] = str(out)
        elif "sshfs" in method:
            out = self.bed.mnt / rid
            out.mkdir()  # through the mount (one small request), so sshfs knows it
            rec["remote_dir"] = str(self.bed.storage / rid)
        else:
            out = self.work / "prefix" / rid
            out.mkdir(parents=True)
            rec["s3_prefix"] = rid
        prog = self.workload(api, out, k, sweeps, tl)
        env = self.env
        if method.startswith("paralog"):
            local = (self.shm if method.endswith("-shm") else self.work) / "log" / rid
            local.parent.mkdir(exist_ok=True)
            cmd = [self.tools.paralog, "run", "--prefix", out, "--local", local, "--job", "e2e", "--mpi",
                   self.a.mpi]
            if method.startswith("paralog-s3"):
                cmd += ["--remote", f"s3://bench/{rid}"]
                env = self.s3env
            cmd += ["--", *self.mpirun(), *prog]
        else:
            cmd = [*self.mpirun(), *prog]
        cpu0 = self.bed.cpu_seconds()
        tx0 = self.bed.counters()[0]
        with self.bed.sampler() as smp:
            t0, t1, stdout = self.spawn(cmd, env, log)
            rec["prog_wall"] = t1 - t0
            if method == "local-aws":
                u0 = time.monotonic()
                self.bed.aws("s3", "cp", "--recursive", "--no-progress", "--only-show-errors", out,
                             f"s3://bench/{rid}/", timeout=3600)
                rec["upload_s"] = time.monotonic() - u0
                rec["s3_prefix"] = rid
                t1 = time.monotonic()
        rec["T"] = t1 - t0
        rec["summary"] = json.loads(stdout.strip().splitlines()[-1])
        t = json.loads(tl.read_text())
        rec["timeline"] = [[p[0], p[1], p[2] - t0, p[3] - t0] for p in t["phases"]]
        rec["prog_start"], rec["prog_end"] = t["start"] - t0, t["end"] - t0
        rec["samples"] = [[round(s - t0, 4), tx - tx0] for s, tx, _ in smp.samples]
        rec["wire_bytes"] = self.bed.counters()[0] - tx0
        cpu1 = self.bed.cpu_seconds()
        rec["testbed_cpu"] = {k: cpu1[k] - cpu0[k] for k in cpu0}
        if method.startswith("paralog"):
            text = log.read_text(errors="replace")
            rec["paralog_summary"] = [ln.strip() for ln in text.splitlines() if ln.startswith("  ")][-8:]
            if (local / "e2e").exists():
                raise RuntimeError(f"{rid}: the job's local records are still there after paralog run")
            shutil.rmtree(local, ignore_errors=True)
        rec["load_after"] = os.getloadavg()[0]
        return rec

    # --- checks -------------------------------------------------------------

    def s3_objects(self, prefix):
        r = self.bed.aws("s3api", "list-objects-v2", "--bucket", "bench", "--prefix", prefix + "/", "--output",
                         "json")
        js = json.loads(r.stdout) if r.stdout.strip() else {}
        return {o["Key"].split("/", 1)[1]: (o["Size"], o["ETag"].strip('"')) for o in js.get("Contents", [])}

    def verify(self, group):
        """Compare every run of a round with its local run's files."""
        ref = next(r for r in group if r["method"] == "local-aws")
        refdir = Path(ref["out"])
        names = sorted(p.name for p in refdir.iterdir())
        want_n = self.a.cycles // group[0]["k"]
        if len(names) != want_n:
            raise RuntimeError(f"{ref['id']}: {len(names)} files, expected {want_n}")
        hdf5 = group[0]["api"] == "hdf5"
        for r in group:
            if "s3_prefix" in r:
                objs = self.s3_objects(r["s3_prefix"])
                if sorted(objs) != names:
                    raise RuntimeError(f"{r['id']}: objects {sorted(objs)[:5]}..., files {names[:5]}...")
                for n in names:
                    size = (refdir / n).stat().st_size
                    if objs[n][0] != size:
                        raise RuntimeError(f"{r['id']}: {n}: object of {objs[n][0]} bytes, file of {size}")
                    if not hdf5 and objs[n][1] not in etags(refdir / n):
                        raise RuntimeError(f"{r['id']}: {n}: ETag {objs[n][1]}, expected one of "
                                           f"{etags(refdir / n)}")
                r["verified"] = "sizes" if hdf5 else "ETags"
            if "remote_dir" in r:
                rd = Path(r["remote_dir"])
                got = sorted(p.name for p in rd.iterdir())
                if got != names:
                    raise RuntimeError(f"{r['id']}: remote files {got[:5]}..., expected {names[:5]}...")
                for n in names:
                    if hdf5:
                        ok = subprocess.run(["h5diff", "-q", refdir / n, rd / n]).returncode == 0
                    else:
                        ok = filecmp.cmp(refdir / n, rd / n, shallow=False)
                    if not ok:
                        raise RuntimeError(f"{r['id']}: {rd / n} differs from {refdir / n}")
                r["verified"] = "h5diff" if hdf5 else "bytes"
        for r in group:
            if "s3_prefix" in r:
                self.bed.aws("s3", "rm", "--recursive", "--only-show-errors", f"s3://bench/{r['s3_prefix']}/")
            if "remote_dir" in r:
                shutil.rmtree(r["remote_dir"])
        shutil.rmtree(refdir)


def etags(path, part=8 << 20):
    """S3's ETags of a file's bytes: one PUT (the MD5), or a multipart
    upload in PART-byte parts (both paralog and awscli use 8 MiB; a file of
    exactly one part is one PUT for paralog, a 1-part upload for awscli)."""
    digests = []
    with open(path, "rb") as f:
        whole = hashlib.md5()
        while chunk := f.read(part):
            whole.update(chunk)
            digests.append(hashlib.md5(chunk).digest())
    out = {whole.hexdigest(), f"{hashlib.md5(b''.join(digests)).hexdigest()}-{len(digests)}"}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 round, frequencies 1 and 20, no HDF5 (a few minutes)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--freqs", default="1,2,4,8,20", help="output every K cycles, for each K")
    ap.add_argument("--hdf5-freqs", default="1", help="frequencies for the HDF5 variant ('' for none)")
    ap.add_argument("--cycles", type=int, default=40)
    ap.add_argument("--mib", type=int, default=8, help="bytes per output phase (all ranks), MiB")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--mpi", default="mpich", choices=["mpich", "openmpi"])
    ap.add_argument("--rate-mbit", type=int, default=200)
    ap.add_argument("--compute-ratio", type=float, default=1.15,
                    help="compute per cycle / (output bytes per phase / link rate)")
    ap.add_argument("--sweeps", type=int, help="stencil sweeps per cycle (default: calibrated)")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--timeline-freqs", default="1,4", help="frequencies with a timeline plot")
    ap.add_argument("--cpu-shares", type=int, default=32768,
                    help="scheduler weight of the benchmark's cpu cgroup (1024 = one ordinary task; 0: no cgroup)")
    ap.add_argument("--tmp", default="/var/tmp")
    ap.add_argument("--json", default=str(ROOT / "target/bench/e2e.json"))
    ap.add_argument("--plots", default=str(ROOT / "docs/img"))
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.repeat, a.freqs, a.hdf5_freqs = 1, "1,20", ""
    a.freqs = [int(x) for x in a.freqs.split(",") if x]
    a.hdf5_freqs = [int(x) for x in a.hdf5_freqs.split(",") if x]
    a.methods = a.methods.split(",")
    for m in a.methods:
        if m not in METHODS + EXTRA:
            ap.error(f"unknown method {m}")
    if "local-aws" not in a.methods:
        ap.error("local-aws is needed: its files are the reference and its time is T_local")
    if os.geteuid() != 0:
        sys.exit("bench/e2e/run.py: needs root (network namespaces, tc, FUSE mounts)")
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)

    base = Path(tempfile.mkdtemp(prefix=f"{BASE_PREFIX}{os.getpid()}-", dir=a.tmp))
    bed = Testbed(base, a.rate_mbit)
    cg = None
    b = None
    results = {"args": {k: v for k, v in vars(a).items()}, "runs": []}
    t_begin = time.time()
    errors = []
    try:
        tools = Tools(base, a.mpi)
        cg = CpuGroup(a.cpu_shares)
        results["cgroup"] = cg.desc if cg.path else None
        bed.start()
        b = Bench(a, base, bed, tools)
        goodput = bed.tcp_goodput()
        results.update(rev=tools.rev, binary=tools.binary, link_Bps=bed.link_Bps, tcp_goodput_Bps=goodput, tc=bed.tc_show(),
                       cpus=os.cpu_count(), started=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
        u = b.B / bed.link_Bps
        sweep_s = b.calibrate(a.compute_ratio * u)
        sweeps = a.sweeps or max(1, round(a.compute_ratio * u / sweep_s))
        results.update(sweep_s=sweep_s, sweeps=sweeps, bytes_per_output=b.B)
        print(f"paralog {tools.rev} ({tools.binary}); {a.ranks} ranks ({a.mpi}), {a.cycles} cycles, {a.mib} MiB per output; "
              f"link {a.rate_mbit} Mbit/s (tbf), one TCP stream {goodput / 1e6:.1f} MB/s; "
              f"sshfs: {bed.mnt} -> sshd {bed.storage}; S3: MinIO at {bed.s3_url}", flush=True)
        print(f"cpu cgroup: {results['cgroup']}", flush=True)
        print(f"compute: {sweep_s * 1e3:.3f} ms per sweep, {sweeps} sweeps per cycle = "
              f"{sweeps * sweep_s:.2f} s per cycle; one output at link rate: {u:.2f} s; "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
        plan = [("mpiio", k) for k in a.freqs] + [("hdf5", k) for k in a.hdf5_freqs]
        for rep in range(a.repeat):
            for gi, (api, k) in enumerate(plan):
                shift = (rep + gi) % len(a.methods)
                order = a.methods[shift:] + a.methods[:shift]
                group = []
                for m in order:
                    subprocess.run(["sync"])
                    time.sleep(0.5)
                    rec = b.one(m, api, k, rep, sweeps)
                    group.append(rec)
                    print(f"  round {rep + 1} {api} every {k:2d}: {m:14s} T {rec['T']:7.2f} s "
                          f"(program {rec['prog_wall']:6.2f} s, compute {rec['summary']['compute_s']:6.2f} s, "
                          f"output {rec['summary']['output_s']:6.2f} s; remote side CPU "
                          f"{sum(rec['testbed_cpu'].values()):5.1f} s)  load {rec['load_after']:.1f}",
                          flush=True)
                b.verify(group)
                results["runs"] += group
                Path(a.json).parent.mkdir(parents=True, exist_ok=True)
                Path(a.json).write_text(json.dumps(results))
        results["minutes"] = (time.time() - t_begin) / 60
        Path(a.json).write_text(json.dumps(results))
        print(f"\nall outputs verified; {results['minutes']:.1f} min; results in {a.json}\n", flush=True)
        print(report.tables(results))
        if a.plots:
            for p in report.plots(results, Path(a.plots), a.timeline_freqs):
                print(f"plot: {p}")
    finally:
        p = CURRENT.get("p")
        if p:
            stop_group(p)
        errors = teardown(bed, cg, b.shm if b is not None else None, base, a.keep)
    if errors:
        sys.exit(1)


if __name__ == "__main__":
    main()
