#!/usr/bin/python3
"""Tables and plots of the end-to-end benchmark (bench/e2e/run.py), from its
JSON results. Standalone: bench/e2e/report.py RESULTS.json [--plots DIR]
[--timeline-freqs 1,4].

Definitions (docs/benchmarks.md, section 6):
  T            wall time of a method (median over rounds);
  T_local      the program's wall time writing to the local disk (the first
               half of local-aws): compute + local write;
  t_first      from spawn to the start of the first output phase (local run);
  T_ideal      max(T_local, t_first + total output bytes / link rate), link
               rate = the tbf rate (200 Mbit/s = 25 MB/s);
  drain share  while the program computes: the bytes the compute end of the
               veth sent in 50 ms samples that lie inside a compute phase of
               rank 0 and in the middle of a transfer (the sample and both
               neighbours above 20% of the link rate), divided by their
               duration and by the link rate. The counters count IP packets
               of up to 64 KiB (GSO) with one set of headers each, so they
               are within 0.5% of the payload; tbf counts every wire
               packet's headers, so one TCP stream reaches about 96%.
"""
import argparse
import json
import statistics
import sys
from pathlib import Path

PARALOG = ["paralog-sshfs", "paralog-s3", "paralog-sshfs-shm", "paralog-s3-shm"]
LABEL = {"local-aws": "local disk + aws s3 cp", "direct-sshfs": "direct MPI-IO to sshfs",
         "paralog-sshfs": "paralog to sshfs", "paralog-s3": "paralog to S3",
         "paralog-sshfs-shm": "paralog to sshfs, log on tmpfs", "paralog-s3-shm": "paralog to S3, log on tmpfs"}
ALL = ["local-aws", "direct-sshfs", "paralog-sshfs", "paralog-s3", "paralog-sshfs-shm", "paralog-s3-shm"]
BASELINE = {"paralog-sshfs": "direct-sshfs", "paralog-sshfs-shm": "direct-sshfs", "paralog-s3": "local-aws",
            "paralog-s3-shm": "local-aws"}
BUSY = 0.2


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def groups(res):
    g = {}
    for r in res["runs"]:
        g.setdefault((r["api"], r["k"]), {}).setdefault(r["method"], []).append(r)
    return g


def rates(rec):
    s = rec["samples"]
    out = []
    for i in range(1, len(s)):
        dt = s[i][0] - s[i - 1][0]
        if dt > 0:
            out.append((s[i - 1][0], s[i][0], s[i][1] - s[i - 1][1]))
    return out


def drain_stats(rec, link, B):
    """Drain share of the link while computing, busy rate overall, and the
    time the link stood idle although committed output was waiting."""
    iv = rates(rec)
    comp = sorted((p[2], p[3]) for p in rec["timeline"] if p[0] == "c")
    outs_end = sorted(p[3] for p in rec["timeline"] if p[0] == "o")
    busy = [b / (t1 - t0) > BUSY * link for t0, t1, b in iv]

    def in_compute(t0, t1):
        for c0, c1 in comp:
            if c0 <= t0 and t1 <= c1:
                return True
            if c0 > t0:
                return False
        return False

    cb = cd = ab = ad = 0.0
    idle_backlog = 0.0
    total = rec["summary"]["outputs"] * B
    scale = total / rec["wire_bytes"] if rec["wire_bytes"] else 1.0
    sent = 0.0
    for i, (t0, t1, b) in enumerate(iv):
        mid = busy[i] and (i == 0 or busy[i - 1]) and (i + 1 == len(iv) or busy[i + 1])
        if mid:
            ab += b
            ad += t1 - t0
            if in_compute(t0, t1):
                cb += b
                cd += t1 - t0
        committed = B * sum(1 for e in outs_end if e <= t0)
        if not busy[i] and committed - sent > 2e6 and t1 <= rec["T"]:
            idle_backlog += t1 - t0
        sent += b * scale
    return {"while_compute": cb / cd / link if cd else float("nan"), "compute_s_measured": cd,
            "busy": ab / ad / link if ad else float("nan"), "idle_backlog_s": idle_backlog}


def summarize(res):
    link = res["link_Bps"]
    B = res["bytes_per_output"]
    rows = []
    for (api, k), ms in sorted(groups(res).items(), key=lambda x: (x[0][0] != "mpiio", x[0][1])):
        loc = ms.get("local-aws", [])
        row = {"api": api, "k": k, "outputs": loc[0]["summary"]["outputs"] if loc else 0}
        row["total_bytes"] = row["outputs"] * B
        for m, recs in ms.items():
            row[m] = {"T": med([r["T"] for r in recs]), "min": min(r["T"] for r in recs),
                      "max": max(r["T"] for r in recs), "n": len(recs),
                      "compute": med([r["summary"]["compute_s"] for r in recs]),
                      "output": med([r["summary"]["output_s"] for r in recs]),
                      "prog": med([r["prog_wall"] for r in recs]),
                      "load": med([r["load_after"] for r in recs]),
                      "testbed_cpu": med([sum(r.get("testbed_cpu", {}).values()) for r in recs])}
            st = [drain_stats(r, link, B) for r in recs]
            # The same bound from the run itself (its own compute and first
            # output, under the load it had): the drain's cost alone.
            row[m]["self_ideal_ratio"] = med([r["T"] / max(r["prog_end"], next(
                (p[2] for p in r["timeline"] if p[0] == "o"), 0) + r["summary"]["outputs"] * B / link)
                for r in recs])
            row[m]["drain"] = {key: med([s[key] for s in st if s[key] == s[key]]) for key in st[0]}
            if m == "local-aws":
                row[m]["upload"] = med([r["upload_s"] for r in recs])
        if loc:
            row["T_local"] = med([r["prog_wall"] for r in loc])
            firsts = [next(p[2] for p in r["timeline"] if p[0] == "o") for r in loc]
            row["t_first"] = med(firsts)
            row["T_ideal"] = max(row["T_local"], row["t_first"] + row["total_bytes"] / link)
        rows.append(row)
    return rows


def ratio(row, a, b):
    if a in row and b in row:
        return row[a]["T"] / row[b]["T"]
    return float("nan")


def tables(res):
    rows = summarize(res)
    link = res["link_Bps"]
    out = []
    for api in ("mpiio", "hdf5"):
        rs = [r for r in rows if r["api"] == api]
        if not rs:
            continue
        ms = [m for m in ALL if m in rs[0]]
        out.append(f"### {'collective MPI-IO' if api == 'mpiio' else 'parallel HDF5'}: end-to-end time, "
                   f"seconds, median (min-max) of {rs[0][ms[0]]['n']}")
        out.append("")
        out.append("| every k cycles | outputs | MB | " + " | ".join(LABEL[m] for m in ms)
                   + " | T_local | t_first | T_ideal |")
        out.append("|" + "---:|" * (3 + len(ms) + 3))
        for r in rs:
            cells = [f"{r[m]['T']:.1f} ({r[m]['min']:.1f}-{r[m]['max']:.1f})" for m in ms]
            out.append(f"| {r['k']} | {r['outputs']} | {r['total_bytes'] / 1e6:.0f} | " + " | ".join(cells)
                       + f" | {r['T_local']:.1f} | {r['t_first']:.1f} | {r['T_ideal']:.1f} |")
        out.append("")
        out.append("Ratios of medians (targets: paralog/T_ideal <= 1.10 everywhere; paralog/direct <= 0.6 at "
                   "every 1, <= 1.02 at every 20)")
        out.append("")
        out.append("| every k | sshfs: paralog/direct | S3: paralog/(local+aws) | paralog-sshfs/T_ideal | "
                   "paralog-s3/T_ideal | paralog-s3/direct-sshfs | paralog-sshfs/own bound | paralog-s3/own bound |")
        out.append("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rs:
            ideal = r["T_ideal"]
            ps = r.get("paralog-sshfs", {}).get("T", float("nan"))
            p3 = r.get("paralog-s3", {}).get("T", float("nan"))
            out.append(f"| {r['k']} | {ratio(r, 'paralog-sshfs', 'direct-sshfs'):.2f} | "
                       f"{ratio(r, 'paralog-s3', 'local-aws'):.2f} | {ps / ideal:.2f} | {p3 / ideal:.2f} | "
                       f"{ratio(r, 'paralog-s3', 'direct-sshfs'):.2f} | "
                       f"{r.get('paralog-sshfs', {}).get('self_ideal_ratio', float('nan')):.2f} | "
                       f"{r.get('paralog-s3', {}).get('self_ideal_ratio', float('nan')):.2f} |")
        out.append("")
        extra = [m for m in ("paralog-sshfs-shm", "paralog-s3-shm") if m in rs[0]]
        if extra:
            out.append("With the node-local log on tmpfs: ratio to the baseline (direct for sshfs, local+aws for "
                       "S3), to T_ideal, to the run's own bound")
            out.append("")
            out.append("| every k | method | T/baseline | T/T_ideal | T/own bound |")
            out.append("|---:|---|---:|---:|---:|")
            for r in rs:
                for m in extra:
                    if m in r:
                        out.append(f"| {r['k']} | {m} | {ratio(r, m, BASELINE[m]):.2f} | "
                                   f"{r[m]['T'] / r['T_ideal']:.2f} | {r[m]['self_ideal_ratio']:.2f} |")
            out.append("")
        out.append("Drain and compute (medians): the drain's share of the link rate while the program computes "
                   "(target >= 0.90), its share whenever the link is busy, seconds the link stood idle with "
                   "committed output waiting, and the program's compute seconds against the local run's")
        out.append("")
        out.append("| every k | method | share while computing | share when busy | idle with backlog, s | "
                   "compute s | local compute s | program s | output phases s | remote side CPU s |")
        out.append("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rs:
            for m in ms:
                d = r[m]["drain"]
                own = m in PARALOG
                wc = f"{d['while_compute']:.3f}" if own else "-"
                ib = f"{d['idle_backlog_s']:.1f}" if own else "-"
                out.append(f"| {r['k']} | {m} | {wc} | {d['busy']:.3f} | "
                           f"{ib} | {r[m]['compute']:.1f} | "
                           f"{r['local-aws']['compute']:.1f} | {r[m]['prog']:.1f} | {r[m]['output']:.2f} | "
                           f"{r[m]['testbed_cpu']:.1f} |")
        out.append("")
    loads = [r["load_after"] for r in res["runs"]]
    out.append(f"link {link * 8 / 1e6:.0f} Mbit/s = {link / 1e6:.1f} MB/s; one TCP stream "
               f"{res['tcp_goodput_Bps'] / 1e6:.2f} MB/s; load average after runs: median {med(loads):.1f}, "
               f"range {min(loads):.1f}-{max(loads):.1f}; commit {res['rev']}")
    return "\n".join(out)


def plots(res, outdir, timeline_freqs="1,4"):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outdir.mkdir(parents=True, exist_ok=True)
    rows = summarize(res)
    link = res["link_Bps"]
    made = []
    colors = {"local-aws": "tab:gray", "direct-sshfs": "tab:red", "paralog-sshfs": "tab:blue",
              "paralog-s3": "tab:green"}
    for api in ("mpiio", "hdf5"):
        rs = [r for r in rows if r["api"] == api]
        if len(rs) < 2:
            continue
        ks = [r["k"] for r in rs]
        x = list(range(len(ks)))
        fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.5))
        for m in ("local-aws", "direct-sshfs", "paralog-sshfs", "paralog-s3"):
            if m in rs[0]:
                ax.errorbar(x, [r[m]["T"] for r in rs],
                            yerr=[[r[m]["T"] - r[m]["min"] for r in rs], [r[m]["max"] - r[m]["T"] for r in rs]],
                            marker="o", capsize=3, color=colors[m], label=LABEL[m])
        ax.plot(x, [r["T_ideal"] for r in rs], "k--", label="T_ideal")
        ax.set_xticks(x, [str(k) for k in ks])
        ax.set_xlabel("output every k cycles")
        ax.set_ylabel("end-to-end time, s (median, min-max)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
        ax.set_title(f"{res['args']['cycles']} cycles, {res['bytes_per_output'] >> 20} MiB per output, "
                     f"{link * 8 / 1e6:.0f} Mbit/s")
        for m, style in (("paralog-sshfs", "o-"), ("paralog-s3", "s-")):
            if m in rs[0]:
                bx.plot(x, [r[m]["T"] / r["T_ideal"] for r in rs], style, color=colors[m],
                        label=f"{LABEL[m]} / T_ideal")
        bx.plot(x, [ratio(r, "paralog-sshfs", "direct-sshfs") for r in rs], "o:", color="tab:blue",
                label="paralog / direct (sshfs)")
        bx.plot(x, [ratio(r, "paralog-s3", "local-aws") for r in rs], "s:", color="tab:green",
                label="paralog / local+aws (S3)")
        bx.axhline(1.10, color="k", lw=0.8, ls="--")
        bx.text(x[-1], 1.11, "1.10", ha="right", va="bottom", fontsize=8)
        bx.plot([x[0]], [0.6], "kv")
        bx.plot([x[-1]], [1.02], "k^")
        bx.set_xticks(x, [str(k) for k in ks])
        bx.set_xlabel("output every k cycles")
        bx.set_ylabel("ratio of medians")
        bx.set_ylim(0, max(1.3, bx.get_ylim()[1]))
        bx.legend(fontsize=8)
        bx.set_title("targets: <=1.10 x T_ideal; vs direct <=0.6 (v) and <=1.02 (^)")
        fig.tight_layout()
        p = outdir / f"e2e_times_{api}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        made.append(p)

    g = groups(res)
    for k in [int(v) for v in str(timeline_freqs).split(",") if v]:
        ms = g.get(("mpiio", k))
        if not ms:
            continue
        order = [m for m in ("direct-sshfs", "paralog-sshfs", "local-aws", "paralog-s3") if m in ms]
        tmax = max(ms[m][-1]["T"] for m in order) * 1.02
        fig, axes = plt.subplots(2 * len(order), 1, figsize=(12, 2.3 * len(order)), sharex=True,
                                 gridspec_kw={"height_ratios": [1, 3] * len(order)})
        for i, m in enumerate(order):
            rec = ms[m][-1]  # the last round's run
            pa, ta = axes[2 * i], axes[2 * i + 1]
            for kind, _, t0, t1 in rec["timeline"]:
                pa.broken_barh([(t0, t1 - t0)], (0, 1), color="tab:blue" if kind == "c" else "tab:orange")
            pa.set_yticks([])
            pa.set_ylabel("program", rotation=0, ha="right", va="center", fontsize=8)
            pa.set_title(f"{LABEL[m]}: T = {rec['T']:.1f} s (compute blue, output orange; traffic below)",
                         fontsize=9, loc="left")
            iv = rates(rec)
            ts = [t1 for _, t1, _ in iv]
            ta.step(ts, [b / (t1 - t0) / 1e6 for t0, t1, b in iv], where="pre", color=colors[m], lw=0.8)
            ta.axhline(link / 1e6, color="k", ls="--", lw=0.7)
            ta.set_ylim(0, link / 1e6 * 1.15)
            ta.set_ylabel("MB/s to\nremote", fontsize=8)
            if m == "local-aws" and "upload_s" in rec:
                ta.axvline(rec["prog_wall"], color="k", lw=0.7)
                ta.text(rec["prog_wall"], link / 1e6 * 1.02, " program ends, aws s3 cp starts", fontsize=7)
        axes[-1].set_xlabel("seconds since start")
        axes[-1].set_xlim(0, tmax)
        fig.suptitle(f"one run each, output every {k} cycle(s): {res['args']['cycles']} cycles, "
                     f"{res['bytes_per_output'] >> 20} MiB per output, link {link * 8 / 1e6:.0f} Mbit/s (dashed)",
                     fontsize=10)
        fig.tight_layout()
        p = outdir / f"e2e_timeline_k{k}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        made.append(p)
    return made


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("--plots")
    ap.add_argument("--timeline-freqs", default="1,4")
    a = ap.parse_args()
    res = json.loads(Path(a.json).read_text())
    print(tables(res))
    if a.plots:
        for p in plots(res, Path(a.plots), a.timeline_freqs):
            print(f"plot: {p}")


if __name__ == "__main__":
    sys.exit(main())
