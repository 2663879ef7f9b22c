#!/usr/bin/python3
"""Micro benchmarks through paralog (docs/benchmarks.md, section 7): POSIX
write patterns of bench/micro.c, raw and under `paralog run`, on tmpfs
(/dev/shm) and on the disk (/var/tmp, ext4), per write size 1 KiB..16 MiB.

Cases (each timed by the program itself, opens and closes included):
  files        one new file per write: open(O_CREAT), write, close. Raw
               without fsync (the page cache only), and raw with an fsync
               before each close ("files+fsync"): under paralog every close
               is a consistency point, so the durable raw variant is the
               like-for-like one;
  append       one file, N appends of SIZE bytes, fsync, close;
  seek         one file, the same N writes, each after an lseek to its
               slot, slots in shuffled order, fsync, close.
Runs in a cpu cgroup with a high scheduler weight, as bench/e2e/run.py.
paralog: `paralog run --mpi none --prefix P --local L --remote R` on the same
file system (log in L, drained to R by the server while the program runs,
at its default nice 10); the program's own time is what counts, the final
drain wait is not. Every run's result (the remote after the drain) is
compared with the raw run's files byte for byte.

Throughput = bytes / program seconds; the ratio is paralog / raw (higher is
better, 1 = no cost). Medians of REPEAT rounds, raw and paralog alternated.

Usage: bench/micro.py [--quick] [--repeat 3] [--sizes 1K,4K,...] [--fs tmpfs,disk]
         [--json OUT] [--plots docs/img]
"""
import argparse
import filecmp
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench/e2e"))
from testbed import CpuGroup  # noqa: E402  (the same cpu cgroup as the end-to-end benchmark)

FS = {"tmpfs": "/dev/shm", "disk": "/var/tmp"}
SIZES = ["1K", "4K", "16K", "64K", "256K", "1M", "4M", "16M"]
CASES = ["files", "files+fsync", "append", "seek"]


def parse_size(s):
    return int(s[:-1]) << {"K": 10, "M": 20}[s[-1]] if s[-1] in "KM" else int(s)


def count(case, size):
    """Writes per run: 200 files at most (16 MiB in all, at least 8 files);
    32 MiB per file for append and seek (at least 4 writes)."""
    if case.startswith("files"):
        return min(200, max(8, (16 << 20) // size))
    return max(4, (32 << 20) // size)


def run(cmd, **kw):
    r = subprocess.run([str(c) for c in cmd], text=True, capture_output=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))[:300]} exited {r.returncode}: {r.stderr[-800:]}")
    return r


def same_tree(a, b):
    na, nb = sorted(os.listdir(a)), sorted(os.listdir(b))
    if na != nb:
        return f"names differ: {na[:3]} vs {nb[:3]}"
    for n in na:
        if not filecmp.cmp(Path(a) / n, Path(b) / n, shallow=False):
            return f"{n} differs"
    return None


def one(bin_dir, prog, fs_dir, case, size, paralog, env):
    mode = "files" if case.startswith("files") else case
    n = count(case, size)
    work = Path(tempfile.mkdtemp(prefix="m-", dir=fs_dir))
    try:
        if paralog:
            pfs, local, remote = work / "pfs", work / "log", work / "remote"
            pfs.mkdir()
            remote.mkdir()
            r = run([bin_dir / "paralog", "run", "--mpi", "none", "--prefix", pfs, "--local", local, "--remote",
                     remote, "--job", "m", "--", prog, mode, pfs / "x", size, n], env=env)
            out = remote
        else:
            out = work / "raw"
            out.mkdir()
            args = [prog, mode, out / "x", size, n] + (["fsync"] if case == "files+fsync" else [])
            r = run(args, env=env)
        res = json.loads(r.stdout.strip().splitlines()[-1])
        return res, work, out
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 round, sizes 4K, 1M, 16M")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sizes", default=",".join(SIZES))
    ap.add_argument("--fs", default="tmpfs,disk")
    ap.add_argument("--cpu-shares", type=int, default=32768,
                    help="scheduler weight of the benchmark's cpu cgroup, as bench/e2e/run.py (0: none)")
    ap.add_argument("--json", default=str(ROOT / "target/bench/micro.json"))
    ap.add_argument("--plots", default=str(ROOT / "docs/img"))
    a = ap.parse_args()
    if a.quick:
        a.repeat, a.sizes = 1, "4K,1M,16M"
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    base = Path(tempfile.mkdtemp(prefix="paralog-micro-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARALOG_")}
    results = {"runs": [], "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    cg = None
    try:
        cg = CpuGroup(a.cpu_shares)
        results["cgroup"] = cg.desc if cg.path else None
        bin_dir = base / "bin"
        bin_dir.mkdir()
        shutil.copy2(ROOT / "target/release/paralog", bin_dir / "paralog")
        for lib in (ROOT / "target/release").glob("libparalog_*.so"):
            shutil.copy2(lib, bin_dir / lib.name)
        prog = bin_dir / "micro"
        run(["cc", "-O2", "-Wall", "-Wextra", "-o", prog, ROOT / "bench/micro.c"])
        rev = run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]).stdout.strip()
        results["rev"] = rev
        print(f"paralog {rev}, load {os.getloadavg()[0]:.1f}", flush=True)
        for fsname in a.fs.split(","):
            fs_dir = Path(tempfile.mkdtemp(prefix="paralog-micro-", dir=FS[fsname]))
            try:
                for rep in range(a.repeat):
                    for size in sizes:
                        for case in CASES:
                            sides = [False, True] if case != "files+fsync" else [False]
                            if (rep + sizes.index(size)) % 2:
                                sides.reverse()
                            got = {}
                            for paralog in sides:
                                res, work, out = one(bin_dir, prog, fs_dir, case, size, paralog, env)
                                got[paralog] = (work, out)
                                results["runs"].append({"fs": fsname, "size": size, "case": case,
                                                        "side": "paralog" if paralog else "raw", "rep": rep,
                                                        "n": count(case, size), **res,
                                                        "load": os.getloadavg()[0]})
                            if True in got:
                                diff = same_tree(got[False][1], got[True][1])
                                if diff:
                                    raise RuntimeError(f"{fsname} {case} {size}: paralog's result: {diff}")
                            for work, _ in got.values():
                                shutil.rmtree(work, ignore_errors=True)
                    print(f"  {fsname}: round {rep + 1} done (load {os.getloadavg()[0]:.1f})", flush=True)
            finally:
                shutil.rmtree(fs_dir, ignore_errors=True)
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(results))
        print(tables(results))
        if a.plots:
            print(f"plot: {plot(results, Path(a.plots))}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
        for e in (cg.close() if cg else []):
            print(f"teardown: {e}", file=sys.stderr)


def medians(results):
    m = {}
    for r in results["runs"]:
        m.setdefault((r["fs"], r["case"], r["size"], r["side"]), []).append(r["bytes"] / r["seconds"] / 1e6)
    return {k: statistics.median(v) for k, v in m.items()}


def fmt_size(s):
    return f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB"


def tables(results):
    med = medians(results)
    fss = sorted({k[0] for k in med}, key=lambda f: list(FS).index(f))
    sizes = sorted({k[2] for k in med})
    out = ["MB/s (median) and paralog/raw", ""]
    for fs in fss:
        out.append(f"{fs} ({FS[fs]}):")
        out.append("")
        out.append("| write | files: raw | files: raw+fsync | files: paralog | paralog/raw | paralog/(raw+fsync) | "
                   "append: raw | append: paralog | paralog/raw | seek: raw | seek: paralog | paralog/raw |")
        out.append("|---:" * 12 + "|")
        for s in sizes:
            g = lambda c, side: med.get((fs, c, s, side), float("nan"))  # noqa: E731
            fr, ff, fp = g("files", "raw"), g("files+fsync", "raw"), g("files", "paralog")
            ar, ap_ = g("append", "raw"), g("append", "paralog")
            sr, sp = g("seek", "raw"), g("seek", "paralog")
            out.append(f"| {fmt_size(s)} | {fr:.0f} | {ff:.0f} | {fp:.0f} | {fp / fr:.2f} | {fp / ff:.2f} | "
                       f"{ar:.0f} | {ap_:.0f} | {ap_ / ar:.2f} | {sr:.0f} | {sp:.0f} | {sp / sr:.2f} |")
        out.append("")
    loads = [r["load"] for r in results["runs"]]
    out.append(f"load average during the runs: median {statistics.median(loads):.1f}, "
               f"range {min(loads):.1f}-{max(loads):.1f}; commit {results.get('rev', '?')}")
    return "\n".join(out)


def plot(results, outdir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    med = medians(results)
    fss = sorted({k[0] for k in med}, key=lambda f: list(FS).index(f))
    sizes = sorted({k[2] for k in med})
    fig, axes = plt.subplots(1, len(fss), figsize=(6 * len(fss), 4.2), sharey=True, squeeze=False)
    for ax, fs in zip(axes[0], fss):
        for case, raw, style, label in (("files", "files", "o-", "new file per write / raw"),
                                        ("files", "files+fsync", "o--", "new file per write / raw+fsync"),
                                        ("append", "append", "s-", "appends"),
                                        ("seek", "seek", "^-", "seek and write")):
            ys = [med.get((fs, case, s, "paralog"), float("nan")) / med.get((fs, raw, s, "raw"), float("nan"))
                  for s in sizes]
            ax.plot(range(len(sizes)), ys, style, label=label)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_yscale("log")
        ax.set_xticks(range(len(sizes)), [fmt_size(s).replace(" ", "") for s in sizes])
        ax.set_xlabel("write size")
        ax.set_title(f"{fs} ({FS[fs]})")
        ax.grid(True, which="both", axis="y", alpha=0.3)
    axes[0][0].set_ylabel("throughput paralog / raw (median)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle("POSIX writes through paralog run against raw", fontsize=10)
    fig.tight_layout()
    outdir.mkdir(parents=True, exist_ok=True)
    p = outdir / "micro_ratio.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


if __name__ == "__main__":
    sys.exit(main())
