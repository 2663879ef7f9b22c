#!/usr/bin/python3
"""Drain throughput to a POSIX remote versus `cp` of the same bytes to the
same destination, and the server's memory peak during a large drain.
Results and their reading: docs/benchmarks.md.

Throughput, per file system (--fs) and case, REPEAT rounds. In each round
every method is timed once, in an order that rotates from round to round.
Each method's input is written by bench/drain_writer.c just before it is
timed; the writer fsyncs every epoch, so every input is a file just
written whose pages are clean in the page cache (nothing is dropped, for
either side). Every result is compared with a reference copy (cmp).
  - server: the writer runs under the real capture library (LD_PRELOAD,
    PARALOG_PREFIX/LOCAL/JOB, no server running) and leaves a node-local
    log of committed epochs; then `paralog server --local L --job J
    --remote R` with its default tuning (4 workers, 256M pool, 8M buffers,
    nice 10 and the lowest best-effort I/O priority) is timed from spawn
    until its answer to {"cmd":"drain"} on the status socket (start-up and
    the deletion of the drained local records included); then {"cmd":"stop"};
  - server-nice0: the same with --nice 0 (what the low priority costs);
  - recover: `paralog recover --local L --remote R --job J` on such a log
    (the same drain code, in the foreground, 64M pool);
  - cp: the writer runs directly and leaves a plain file with the same
    bytes (in the small case that is the logical file: epochs write
    disjoint extents, so it is sparse and cp copies only its data); then
    `cp SRC DST; sync DST DSTDIR` (fsync of the file and of its directory,
    as the drain does);
  - cp+rm: the same followed by `rm SRC`: a move, which is what a drain
    does (it deletes the local copy). Large case only unless --cp-rm-small:
    on ext4 mounted with -o discard, removing the 16,000-extent sparse file
    takes ~20 s (one discard per extent) and would measure only that.
Throughput = bytes the program wrote (= bytes drained) / wall time. The
table shows medians (min-max) in MB/s and each drain's ratio to cp.

Cases:
  large:  one file, LARGE_MIB written sequentially in 8 MiB pwrites,
          LARGE_EPOCHS epochs (an fsync ends each);
  small:  SMALL_EXTENTS noncontiguous 4..64 KiB pwrites per epoch at
          scattered offsets (each a separate extent with holes around it),
          SMALL_EPOCHS epochs.

Memory (--memory-test, on the first --fs directory): a MEM_GIB drain of one
file, and of 4 files of MEM_GIB/4 (4 workers at once), by a server with
each --memory of --mem-pools; VmRSS sampled every 10 ms from
/proc/PID/status, VmHWM read when the drain answers. Also the VmHWM of a
server with nothing to drain.

Usage: bench/drain_vs_cp.py [--fs /tmp,/dev/shm] [--repeat N]
         [--methods server,server-nice0,recover,cp,cp+rm] [--cases large,small]
         [--large-mib N] [--large-epochs N] [--small-extents N]
         [--small-epochs N] [--settle S] [--memory-test] [--mem-gib N]
         [--mem-pools 256M,64M,16M] [--no-throughput] [--json OUT] [--keep]

The binaries are copied to a private directory first, so a rebuild of
target/release during the run does not change what is measured. Space:
about 3 x LARGE_MIB per file system, 2 x MEM_GIB for the memory test.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from benchlib import JOB, Tools, request, sh  # noqa: E402


def writer_args(case, a, path):
    if case == "large":
        return ["large", path, a.large_mib, 8192, a.large_epochs]
    return ["small", path, a.small_extents, a.small_epochs, 7]


def proc_status(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmHWM", "VmRSS", "RssAnon", "Threads"):
                    out[k] = int(v.split()[0]) * (1024 if k != "Threads" else 1)
    except OSError:
        pass
    return out


def run_server(tools, local, remote, extra=(), sample=False):
    """Start a server on an existing log, ask it to drain, stop it.
    Returns (wall seconds from spawn to the drain answer, status, memory)."""
    sock = local / f".paralog-server-{JOB}.sock"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARALOG_")}
    env["PARALOG_LOG"] = "warn"
    t0 = time.perf_counter()
    p = subprocess.Popen([str(tools.paralog), "server", "--local", str(local), "--job", JOB,
                          "--remote", str(remote), *extra], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    samples, stop = [], threading.Event()

    def sampler():
        while not stop.is_set():
            st = proc_status(p.pid)
            if st:
                samples.append((time.perf_counter() - t0, st.get("VmRSS", 0)))
            time.sleep(0.01)

    th = threading.Thread(target=sampler, daemon=True)
    if sample:
        th.start()
    try:
        while True:
            if p.poll() is not None:
                raise RuntimeError(f"server exited early: {p.stderr.read()}")
            try:
                st = request(sock, {"cmd": "drain"})
                break
            except (FileNotFoundError, ConnectionRefusedError):
                time.sleep(0.002)
        wall = time.perf_counter() - t0
        mem = proc_status(p.pid)
        if "error" in st or st.get("damaged") or st.get("epochs_pending"):
            raise RuntimeError(f"drain failed: {st}")
        try:
            request(sock, {"cmd": "stop"})
        except (ValueError, OSError):
            pass  # servers before 01c620f could exit before their answer was out
        p.wait(timeout=120)
    finally:
        stop.set()
        if p.poll() is None:
            p.kill()
            p.wait()
    if sample:
        th.join()
        mem["VmRSS_max_sampled"] = max((s[1] for s in samples), default=0)
        mem["samples"] = len(samples)
    return wall, st, mem


def run_recover(tools, local, remote):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARALOG_")}
    t0 = time.perf_counter()
    r = sh(tools.paralog, "recover", "--local", local, "--remote", remote, "--job", JOB, "--json",
           env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    out = json.loads(r.stdout)
    if out["failed"]:
        raise RuntimeError(f"recover failed: {out}")
    return wall


def run_cp(src, dst, remove=False):
    t0 = time.perf_counter()
    sh("cp", src, dst)
    sh("sync", dst, dst.parent)
    if remove:
        sh("rm", src)
    return time.perf_counter() - t0


def same(a, b):
    return subprocess.run(["cmp", "-s", str(a), str(b)]).returncode == 0


def throughput(tools, a, fsdir, case, base, results):
    methods = a.methods
    if case == "small" and not a.cp_rm_small:
        # rm of the sparse 16,000-extent file takes ~20 s on an ext4 mounted
        # with -o discard (one discard per extent): it would measure only that.
        methods = [m for m in methods if m != "cp+rm"]
    rates = {m: [] for m in methods}
    extra = {}
    nbytes = None
    for i in range(a.repeat):
        work = Path(tempfile.mkdtemp(prefix=f"{case}-{i}-", dir=base))
        try:
            # The reference for checking every result.
            (work / "ref").mkdir()
            ref = work / "ref/f"
            nbytes = tools.write(writer_args(case, a, ref))["bytes"]
            order = methods[i % len(methods):] + methods[:i % len(methods)]
            for m in order:
                # Each method's input is written just before it is timed.
                inp = work / f"in-{m}"
                dst = work / f"dst-{m}"
                inp.mkdir()
                dst.mkdir()
                if m.startswith("cp"):
                    tools.write(writer_args(case, a, inp / "f"))
                else:
                    pfs, local = inp / "pfs", inp / "local"
                    pfs.mkdir()
                    tools.write(writer_args(case, a, pfs / "f"), capture=(pfs, local))
                    if (pfs / "f").exists():
                        raise RuntimeError("capture did not take the file: it reached the prefix")
                time.sleep(a.settle)
                if m in ("cp", "cp+rm"):
                    t = run_cp(inp / "f", dst / "f", remove=m == "cp+rm")
                elif m == "recover":
                    t = run_recover(tools, local, dst)
                else:
                    ex = ["--nice", "0"] if m == "server-nice0" else []
                    t, st, mem = run_server(tools, local, dst, ex)
                    if st["bytes_drained"] != nbytes:
                        raise RuntimeError(f"drained {st['bytes_drained']} bytes, wrote {nbytes}")
                    extra.setdefault(m, []).append(
                        {"wall": t, "active_s": st["drain_active_s"], "hwm": mem.get("VmHWM")})
                if not a.no_verify and not same(ref, dst / "f"):
                    raise RuntimeError(f"{m}: {dst / 'f'} differs from {ref}")
                rates[m].append(nbytes / t / 1e6)
                shutil.rmtree(dst)
                shutil.rmtree(inp)
                time.sleep(a.settle)
            print(f"  round {i + 1}: " + "  ".join(f"{m} {rates[m][-1]:.0f}" for m in methods),
                  flush=True)
        finally:
            if not a.keep:
                shutil.rmtree(work, ignore_errors=True)
    row = {"fs": fsdir, "case": case, "bytes": nbytes, "runs": a.repeat, "MBps": rates,
           "server_detail": extra}
    results.append(row)
    return row


def print_table(rows, methods):
    drains = [m for m in methods if not m.startswith("cp")]
    bases = [m for m in methods if m.startswith("cp")]
    ratios = [(d, b) for b in bases for d in drains]
    hdr = f"{'fs':10} {'case':6} {'MiB':>5} " + " ".join(f"{m + ' MB/s':>19}" for m in methods)
    hdr += "".join(f" {d + '/' + b:>13}" for d, b in ratios)
    print(hdr)
    for r in rows:
        v = r["MBps"]
        med = {m: statistics.median(x) for m, x in v.items()}
        line = f"{r['fs']:10} {r['case']:6} {r['bytes'] / 2**20:5.0f} "
        line += " ".join(f"{med[m]:6.0f} ({min(v[m]):4.0f}-{max(v[m]):4.0f})" if m in v
                         else f"{'-':>19}" for m in methods)
        line += "".join(f" {med[d] / med[b]:12.2f}x" if d in v and b in v else f" {'-':>13}"
                        for d, b in ratios)
        print(line)


def memory_test(tools, a, base, results):
    gib = a.mem_gib
    print(f"\nmemory: {gib} GiB drain, server VmRSS sampled every 10 ms, VmHWM at the end")
    print(f"{'pool':>6} {'files':>5} {'drain MB/s':>11} {'VmHWM MiB':>10} "
          f"{'max sampled RSS MiB':>20} {'pool MiB':>9} {'HWM/pool':>9}")
    # A server with nothing to drain: its baseline footprint.
    idle = Path(tempfile.mkdtemp(prefix="mem-idle-", dir=base))
    try:
        (idle / "local").mkdir()
        (idle / "remote").mkdir()
        _, _, mem = run_server(tools, idle / "local", idle / "remote")
        print(f"  (idle server, nothing to drain: VmHWM {mem.get('VmHWM', 0) / 2**20:.1f} MiB)")
        results.append({"memory": "idle", "VmHWM": mem.get("VmHWM")})
    finally:
        shutil.rmtree(idle, ignore_errors=True)
    for pool in a.mem_pools:
        for nfiles in (1, 4):
            work = Path(tempfile.mkdtemp(prefix=f"mem-{pool}-{nfiles}-", dir=base))
            try:
                pfs, local, dst = work / "pfs", work / "local", work / "remote"
                pfs.mkdir()
                dst.mkdir()
                total = 0
                for k in range(nfiles):
                    w = tools.write(["large", pfs / f"f{k}", gib * 1024 // nfiles, 8192, 4],
                                    capture=(pfs, local))
                    total += w["bytes"]
                time.sleep(0.5)
                t, st, mem = run_server(tools, local, dst, ["--memory", pool], sample=True)
                if st["bytes_drained"] != total:
                    raise RuntimeError(f"drained {st['bytes_drained']} of {total}")
                pool_b = parse_size(pool)
                hwm = mem.get("VmHWM", 0)
                print(f"{pool:>6} {nfiles:5} {total / t / 1e6:11.0f} {hwm / 2**20:10.1f} "
                      f"{mem['VmRSS_max_sampled'] / 2**20:20.1f} {pool_b / 2**20:9.0f} "
                      f"{hwm / pool_b:8.2f}x", flush=True)
                results.append({"memory": pool, "files": nfiles, "bytes": total, "wall": t,
                                "VmHWM": hwm, "VmRSS_max_sampled": mem["VmRSS_max_sampled"],
                                "samples": mem["samples"], "pool": pool_b})
            finally:
                if not a.keep:
                    shutil.rmtree(work, ignore_errors=True)


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * mult[s[-1].upper()]) if s[-1].upper() in mult else int(s)


def free_bytes(d):
    st = os.statvfs(d)
    return st.f_bavail * st.f_frsize


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fs", default="/tmp,/dev/shm", help="comma-separated directories")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--methods", default="server,server-nice0,recover,cp,cp+rm")
    ap.add_argument("--settle", type=float, default=1.0,
                    help="seconds of quiet before each timed step and after each cleanup")
    ap.add_argument("--cases", default="large,small")
    ap.add_argument("--large-mib", type=int, default=1024)
    ap.add_argument("--large-epochs", type=int, default=1)
    ap.add_argument("--small-extents", type=int, default=1000)
    ap.add_argument("--small-epochs", type=int, default=16)
    ap.add_argument("--cp-rm-small", action="store_true",
                    help="also time cp+rm in the small case (slow on ext4 -o discard)")
    ap.add_argument("--memory-test", action="store_true")
    ap.add_argument("--mem-gib", type=int, default=4)
    ap.add_argument("--mem-pools", default="256M,64M,16M")
    ap.add_argument("--no-throughput", action="store_true")
    ap.add_argument("--no-verify", action="store_true", help="skip cmp of each result")
    ap.add_argument("--json", help="write the raw results here")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    a.methods = a.methods.split(",")
    a.mem_pools = a.mem_pools.split(",")
    fss = a.fs.split(",")
    # Space: per round, the source plus one log per drain method plus one
    # destination at a time; the memory test: 4 GiB log + 4 GiB remote.
    per_round = a.large_mib * 3 * 2**20
    need = max(per_round, 2 * a.mem_gib * 2**30 if a.memory_test else 0) + 2**30
    for d in fss:
        if free_bytes(d) < need:
            sys.exit(f"{d}: {free_bytes(d) / 2**30:.1f} GiB free, need {need / 2**30:.1f} GiB")
    results = []
    scratch = Path(tempfile.mkdtemp(prefix="paralog-drainbench-", dir=fss[0]))
    try:
        tools = Tools(scratch)
        built = time.strftime("%Y-%m-%d %H:%M", time.localtime(tools.paralog.stat().st_mtime))
        print(f"paralog {tools.rev} (binaries built {built}); {os.cpu_count()} CPUs; load {os.getloadavg()[0]:.2f}; "
              f"{a.repeat} rounds, methods rotated; medians (min-max) in MB/s")
        rows = []
        if not a.no_throughput:
            for d in fss:
                base = Path(tempfile.mkdtemp(prefix="paralog-drainbench-", dir=d))
                try:
                    for case in a.cases.split(","):
                        print(f"{d} {case}:", flush=True)
                        rows.append(throughput(tools, a, d, case, base, results))
                finally:
                    shutil.rmtree(base, ignore_errors=True)
            print()
            print_table(rows, a.methods)
        if a.memory_test:
            memory_test(tools, a, scratch, results)
        print(f"load at the end {os.getloadavg()[0]:.2f}")
    finally:
        if not a.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
