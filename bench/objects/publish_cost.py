#!/usr/bin/python3
"""What one logged put's publish costs on the bandwidth-limited sshfs remote
(docs/objects.md "What a version costs", the "logged publish on sshfs" row;
docs/benchmarks.md section 11). Root only: the remote is the end-to-end
harness's (bench/e2e/testbed.py: a 200 Mbit/s tbf veth, sshd in a storage
namespace, sshfs mounted from the compute namespace).

For each configuration (ROWS x 4096 int32 chunks, one per writer, WRITERS
writer processes: the skeleton's output phase), the script logs PUTS puts
in a node-local directory with `paralog obj begin|write|commit --local`,
then publishes them:

  1. untraced, `paralog obj publish L` once per put (wall time per version);
  2. the same again under `strace -f -T -y` (every syscall with its time
     and its descriptors' paths), and sorts each syscall that touches the
     mount by what it serves: the put's staging (claims, marks, intents),
     chunk files (data/), the publish (meta/), the Zarr view (zarr/), the
     HDF5 view (hdf5/, and everything the paralog-h5view child does);
     the HDF5 view program's wall time (exec to exit) separately.

Usage: bench/objects/publish_cost.py [--configs 16x1,64x4] [--puts 3]
         [--rate-mbit 200] [--bin target/release] [--tmp /var/tmp] [--json F]
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent / "e2e"))
from testbed import BASE_PREFIX, Testbed, run, teardown  # noqa: E402

COLS = 4096
UNFINISHED = "<unfinished ...>"


def kind_of(path_text, mnt):
    """What a syscall on the mount serves, by the path it names."""
    rest = path_text.split(str(mnt), 1)[1]
    for key, what in (("/staging/", "staging"), ("/data/", "chunks"), ("/meta/", "publish"),
                      ("/zarr/", "zarr view"), ("/hdf5/", "hdf5 view"), ("/views/", "views mark")):
        if key in rest:
            return what
    return "other"


def parse(trace, mnt):
    """Syscalls on the mount by (kind, syscall): count and seconds; the
    HDF5 view program's pids and its wall time; every syscall on the mount."""
    by = collections.defaultdict(lambda: [0, 0.0])
    h5pids = set()
    execs = {}
    ends = {}
    pending = {}
    for raw in Path(trace).read_text(errors="replace").splitlines():
        m = re.match(r"^(\d+)\s+(\d+:\d+:\d+\.\d+)\s+(.*)$", raw)
        if not m:
            continue
        pid, ts, body = m.group(1), m.group(2), m.group(3)
        h, mi, s = ts.split(":")
        t = int(h) * 3600 + int(mi) * 60 + float(s)
        if body.startswith("execve(") and "paralog-h5view" in body:
            h5pids.add(pid)
            execs[pid] = t
        if body.startswith("+++ exited"):
            ends[pid] = t
            continue
        # strace -f splits a call another thread interrupted in two
        # halves: joined here (the second carries the time).
        if body.endswith(UNFINISHED):
            pending[pid] = body[:-len(UNFINISHED)]
            continue
        rm = re.match(r"^<\.\.\. (\w+) resumed>(.*)$", body)
        if rm:
            body = pending.pop(pid, rm.group(1) + "(") + rm.group(2)
        cm = re.match(r"^(\w+)\((.*)<([\d.]+)>$", body)
        if not cm:
            continue
        name, args, secs = cm.group(1), cm.group(2), float(cm.group(3))
        if str(mnt) not in args:
            continue
        kind = "hdf5 view" if pid in h5pids else kind_of(args, mnt)
        by[(kind, name)][0] += 1
        by[(kind, name)][1] += secs
    h5_wall = sum(ends.get(p, t) - t for p, t in execs.items())
    return by, h5_wall, len(execs)


class Cost:
    def __init__(self, a, bed, base):
        self.a, self.bed, self.base = a, bed, base
        self.paralog = Path(a.bin) / "paralog"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("PARALOG_", "AWS_"))}

    def obj(self, *args):
        return run([self.paralog, "obj", *args], env=self.env).stdout

    def log_puts(self, url, local, rows, writers, puts):
        """`puts` logged puts of a [rows x writers, 4096] int32 array, one
        chunk per writer process."""
        shape, chunks = f"{rows * writers},{COLS}", f"{rows},{COLS}"
        block = self.base / f"block-{rows}.bin"
        block.write_bytes(os.urandom(rows * COLS * 4))
        for _ in range(puts):
            pid = self.obj("begin", url, "--dtype", "int32", "--shape", shape, "--chunks", chunks,
                           "--local", local).split()[-1]
            for w in range(writers):
                self.obj("write", url, pid, block, "--chunk", f"{w},0", "--local", local)
            self.obj("commit", url, pid, "--local", local)

    def config(self, rows, writers):
        a = self.a
        tag = f"r{rows}-w{writers}"
        store = self.bed.mnt / f"store-{tag}"
        store.mkdir()
        url = f"objstore://{store}/field?dirs=4&keep=100000"
        self.obj("init", f"objstore://{store}?dirs=4&keep=100000")
        out = {"rows": rows, "writers": writers, "mb": rows * writers * COLS * 4 / 1e6}
        # Untraced: one publish per put, timed.
        local = self.base / f"local-{tag}"
        local.mkdir(mode=0o700)
        walls = []
        for _ in range(a.puts):
            self.log_puts(url, local, rows, writers, 1)
            subprocess.run(["sync"])
            t0 = time.monotonic()
            self.obj("publish", local)
            walls.append(time.monotonic() - t0)
        out["wall_s"] = walls
        # Traced: the same, one more put each, under strace.
        traces = []
        for k in range(a.puts):
            self.log_puts(url, local, rows, writers, 1)
            subprocess.run(["sync"])
            trace = self.base / f"trace-{tag}-{k}.txt"
            t0 = time.monotonic()
            run(["strace", "-f", "-T", "-y", "-tt", "-o", trace, self.paralog, "obj", "publish", local],
                env=self.env)
            traces.append((trace, time.monotonic() - t0))
        total = collections.defaultdict(lambda: [0, 0.0])
        h5_wall = 0.0
        for trace, _ in traces:
            by, h5, _ = parse(trace, self.bed.mnt)
            h5_wall += h5
            for k, (n, s) in by.items():
                total[k][0] += n
                total[k][1] += s
        n = len(traces)
        out["traced_wall_s"] = [w for _, w in traces]
        out["h5view_wall_s"] = h5_wall / n
        out["ops"] = {f"{k[0]}: {k[1]}": [c / n, s / n] for k, (c, s) in sorted(total.items())}
        return out


def report(res):
    for c in res["configs"]:
        print(f"\n{c['rows']} rows x {c['writers']} writer(s), {c['mb']:.2f} MB per version: publish "
              f"{sum(c['wall_s']) / len(c['wall_s']):.3f} s untraced ({', '.join(f'{w:.3f}' for w in c['wall_s'])}), "
              f"{sum(c['traced_wall_s']) / len(c['traced_wall_s']):.3f} s traced; HDF5 view program "
              f"{c['h5view_wall_s']:.3f} s (traced)")
        kinds = collections.defaultdict(lambda: [0, 0.0])
        for key, (cnt, s) in c["ops"].items():
            kinds[key.split(":")[0]][0] += cnt
            kinds[key.split(":")[0]][1] += s
        for kind, (cnt, s) in sorted(kinds.items(), key=lambda x: -x[1][1]):
            detail = ", ".join(f"{k.split(': ')[1]} {v[0]:.0f}" for k, v in c["ops"].items()
                               if k.startswith(kind + ":"))
            print(f"  {kind:12s} {cnt:6.0f} calls {s:7.3f} s in calls: {detail}")
        allc = sum(v[0] for v in c["ops"].values())
        alls = sum(v[1] for v in c["ops"].values())
        print(f"  {'all':12s} {allc:6.0f} calls {alls:7.3f} s in calls on the mount")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", default="16x1,64x4", help="ROWSxWRITERS,...")
    ap.add_argument("--puts", type=int, default=3)
    ap.add_argument("--rate-mbit", type=int, default=200)
    ap.add_argument("--bin", default=str(ROOT / "target/release"))
    ap.add_argument("--tmp", default="/var/tmp")
    ap.add_argument("--json", default=str(ROOT / "target/bench/publish_cost.json"))
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/objects/publish_cost.py: needs root (network namespaces, tc, FUSE mounts)")
    base = Path(tempfile.mkdtemp(prefix=f"{BASE_PREFIX}{os.getpid()}-", dir=a.tmp))
    bed = Testbed(base, a.rate_mbit)
    res = {"bin": a.bin, "load": os.getloadavg()[0], "configs": []}
    errors = []
    try:
        bed.start(s3=False)
        cost = Cost(a, bed, base)
        for cfg in a.configs.split(","):
            rows, writers = (int(x) for x in cfg.split("x"))
            res["configs"].append(cost.config(rows, writers))
        res["load_end"] = os.getloadavg()[0]
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(res, indent=1))
        print(f"binaries {a.bin}; load {res['load']:.1f} -> {res['load_end']:.1f}")
        report(res)
    finally:
        errors = teardown(bed, None, None, base, a.keep)
    if errors:
        sys.exit(1)


if __name__ == "__main__":
    main()
