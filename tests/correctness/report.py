#!/usr/bin/python3
"""`paralog report` and `paralog run --report` (issue 19) on real runs:

  mpich, ompio  tests/correctness/progs/report_phases.c on 4 ranks under
                `paralog run --report`: the report's drained bytes (its
                drain records, and the plotted traffic's bins) add up to
                the bytes captured, which is what the program wrote; each
                rank has exactly the program's number of consistency
                points; `paralog report --local L --job J` afterwards gives
                the same numbers; the PNG is a real picture
  posix         a plain POSIX process (fsync points, then a close after
                more writes) under `paralog run --mpi none --report`
  browser       the HTML page in headless Chromium (Debian's `chromium`):
                it loads without a console error, refers to nothing
                outside itself, its DOM holds the plot (an SVG with the
                lanes' and the consistency points' rectangles, the traffic
                paths), and a screenshot shows the plot's colours; and the
                same check refuses a page whose plot is missing
  damaged       a damaged timeline line: `paralog report` exits 1 naming
                the file and the line, no panic

Chromium missing or failing to start is a failure with the fix, never a skip.
Usage: python3 -m tests.correctness.report [--keep]
Ends with "report: N passed, N failed".
"""
import json
import re
import shutil
import struct
import subprocess
import sys
import zlib

from tests.lib.check import Suite, fail
from tests.lib.mpi import mpi_env
from tests.lib.paths import BIN, PY, ROOT

ENV = mpi_env()

SRC = ROOT / "tests/correctness/progs/report_phases.c"
BUILD = ROOT / "target/correctness"
RANKS, CYCLES, KIB, COMPUTE_MS = 4, 6, 512, 150
MODES = {  # mode: (flavour, launcher, extra environment)
    "mpich": ("mpich", "mpirun.mpich", {}),
    "ompio": ("openmpi", "mpirun.openmpi", {"OMPI_MCA_io": "ompio"}),
}
POSIX = r'''
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
for i in range(3):
    os.write(fd, bytes([65 + i]) * 100 * 1024)
    os.fsync(fd)                       # consistency points 1..3
os.write(fd, b"Z" * 50 * 1024)
os.close(fd)                           # consistency point 4 (new bytes since the last fsync)
'''
POSIX_CPS, POSIX_BYTES = 4, 350 * 1024


def build(flavour):
    BUILD.mkdir(parents=True, exist_ok=True)
    exe = BUILD / f"report_phases.{flavour}"
    if not exe.exists() or exe.stat().st_mtime < SRC.stat().st_mtime:
        subprocess.run([f"mpicc.{flavour}", "-O2", "-Wall", "-Werror", "-o", exe, SRC], check=True)
    return exe


def embedded(html_text):
    """The numbers the page embeds for programs."""
    m = re.search(r'<script type="application/json" id="paralog-report">(.*?)</script>', html_text, re.S)
    if not m:
        raise ValueError("no <script id=\"paralog-report\"> in the page")
    return json.loads(m.group(1))


def paralog_run(work, mpi, cmd, env=ENV):
    prefix, local = work / "p", work / "l"
    prefix.mkdir()
    html = work / "run.html"
    args = [BIN, "run", "--report", html, "--prefix", prefix, "--local", local, "--job", "t", "--mpi", mpi, "--",
            *cmd(prefix)]
    r = subprocess.run(list(map(str, args)), env=env, capture_output=True, text=True, timeout=300)
    return r, html, local


def png_pixels(path):
    """(width, height, rows of (r, g, b)) of an 8-bit RGB or RGBA PNG."""
    data = path.read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path} is not a PNG")
    pos, idat, hdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            hdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = hdr
    if depth != 8 or ctype not in (2, 6) or interlace:
        raise ValueError(f"{path}: unsupported PNG (depth {depth}, colour type {ctype}, interlace {interlace})")
    bpp = 3 if ctype == 2 else 4
    raw, stride = zlib.decompress(idat), w * bpp
    rows, prev, i = [], bytearray(stride), 0
    for _ in range(h):
        f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x:x + 3]) for x in range(0, stride, bpp)])
        prev = line
    return w, h, rows


def colours(path):
    """How many pixels of the plot's colours a picture has, and its colours."""
    _, _, rows = png_pixels(path)
    near = lambda p, q: all(abs(a - b) <= 12 for a, b in zip(p, q))
    count = {"orange": 0, "lane": 0, "traffic": 0}
    distinct = set()
    for row in rows:
        for p in row:
            distinct.add(p)
            if near(p, (255, 127, 14)):
                count["orange"] += 1
            elif near(p, (174, 199, 232)):
                count["lane"] += 1
            elif p[1] > p[0] + 20 and p[1] > p[2] + 20:
                count["traffic"] += 1
    return count, len(distinct)


def check_numbers(d, ranks, cps, total, path):
    """None if the embedded numbers are those of the program, else why."""
    s = d["summary"]
    if s["bytes_captured"] != total:
        return f"captured {s['bytes_captured']} bytes, the program wrote {total}"
    drained = sum(x["bytes"] for x in d["drains"])
    if drained != s["bytes_captured"] or s["bytes_drained"] != s["bytes_captured"]:
        return f"the timeline's drained bytes ({drained}, summary {s['bytes_drained']}) do not add up to the bytes captured ({s['bytes_captured']})"
    binned = sum(d["traffic"]["bytes"])
    if abs(binned - drained) > 1e-6 * drained + 1:
        return f"the plotted traffic adds up to {binned} bytes, drained {drained}"
    if len(d["ranks"]) != ranks:
        return f"{len(d['ranks'])} processes in the report, the program has {ranks}"
    counts = [k["consistency_points"] for k in d["ranks"]]
    if counts != [cps] * ranks or s["consistency_points"] != cps * ranks:
        return f"consistency points per process {counts} (total {s['consistency_points']}), the program does {cps} each"
    if ranks > 1 and sorted(k["rank"] for k in d["ranks"]) != list(range(ranks)):
        return f"ranks {[k['rank'] for k in d['ranks']]}"
    files = [f["path"] for f in d["files"]]
    if files != [path]:
        return f"files {files}, the program wrote {path}"
    f = d["files"][0]
    if f["bytes_drained"] != total or f["epochs_drained"] < 1:
        return f"file {path}: {f}"
    if d["program"]["source"] != "paralog run" or d["summary"]["exit_status"] != 0:
        return f"the program's run is not recorded: {d['program']}"
    return None


def same_numbers(a, b):
    keys = ("summary", "ranks", "files", "drains", "traffic", "program")
    diff = [k for k in keys if a[k] != b[k]]
    return f"`paralog report` afterwards differs in {diff}" if diff else None


def check_png(path, lanes):
    w, h, _ = png_pixels(path)
    if w != 1200 or h < 300:
        return f"{path}: {w}x{h}"
    count, distinct = colours(path)
    if count["orange"] < 20 * lanes or count["lane"] < 500 or count["traffic"] < 100 or distinct < 10:
        return f"{path}: the plot is not drawn: {count}, {distinct} colours"
    return None


def case_mpi(mode):
    def case(work):
        flavour, launcher, extra = MODES[mode]
        exe = build(flavour)
        r, html, local = paralog_run(
            work, flavour, lambda p: [launcher, "-n", RANKS, exe, p / "out.dat", CYCLES, KIB, COMPUTE_MS],
            {**ENV, **extra})
        if r.returncode != 0:
            return f"paralog run exited {r.returncode}: {r.stderr[-800:]}"
        if f"report of job t: {html}" not in r.stderr:
            return f"run did not say where the report is: {r.stderr[-500:]}"
        total = CYCLES * RANKS * KIB * 1024
        if (work / "p/out.dat").stat().st_size != total:
            return f"out.dat has {(work / 'p/out.dat').stat().st_size} bytes, want {total}"
        d = embedded(html.read_text())
        why = check_numbers(d, RANKS, CYCLES, total, "out.dat") or check_png(html.with_suffix(".png"), RANKS)
        if why:
            return why
        later = work / "later.html"
        r2 = subprocess.run([str(BIN), "report", "--local", str(local), "--job", "t", "--out", str(later), "--json"],
                            env=ENV, capture_output=True, text=True, timeout=120)
        if r2.returncode != 0:
            return f"paralog report exited {r2.returncode}: {r2.stderr[-500:]}"
        if json.loads(r2.stdout)["summary"] != d["summary"]:
            return "--json printed other numbers than the page embeds"
        return same_numbers(d, embedded(later.read_text())) or check_png(later.with_suffix(".png"), RANKS)
    return case


def case_posix(work):
    r, html, _ = paralog_run(work, "none", lambda p: [PY, "-c", POSIX, p / "f.bin"])
    if r.returncode != 0:
        return f"paralog run exited {r.returncode}: {r.stderr[-800:]}"
    return check_numbers(embedded(html.read_text()), 1, POSIX_CPS, POSIX_BYTES, "f.bin")


def chromium(work, *args):
    exe = shutil.which("chromium")
    if not exe:
        raise RuntimeError("chromium not found: `bash scripts/setup.sh --test` (or `apt-get install chromium`) installs Debian's")
    cmd = [exe, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--enable-logging=stderr", "--v=0",
           f"--user-data-dir={work / 'chromium-profile'}", *map(str, args)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"chromium failed to run ({r.returncode}): {r.stderr[-800:]}")
    return r


def browser_check(work, html):
    """None if the page loads cleanly in Chromium and shows its plot, else why."""
    text = html.read_text()
    outside = re.findall(r'\b(?:src|href)\s*=\s*"[^"]*"', text)
    if outside:
        return f"the page refers to other files: {outside[:3]}"
    r = chromium(work, "--dump-dom", html.as_uri())
    console = [l for l in r.stderr.splitlines() if "CONSOLE" in l and re.search(r"error|uncaught|failed", l, re.I)]
    if console:
        return f"console errors while loading: {console[:3]}"
    dom = r.stdout
    fig = re.search(r'<figure id="timeline">(.*?)</figure>', dom, re.S)
    if not fig or "<svg" not in fig.group(1):
        return "no SVG plot in the loaded page's DOM"
    rects, paths = fig.group(1).count("<rect"), len(re.findall(r"<(?:path|polyline|polygon)\b", fig.group(1)))
    if rects < RANKS * (CYCLES + 1) or paths < 5:
        return f"the plot in the DOM has {rects} rectangles and {paths} paths"
    if 'id="paralog-report"' not in dom or 'id="summary"' not in dom:
        return "the DOM lacks the summary or the embedded numbers"
    shot = work / "shot.png"
    chromium(work, "--window-size=1300,1500", "--hide-scrollbars", f"--screenshot={shot}", html.as_uri())
    if not shot.exists():
        return "chromium wrote no screenshot"
    count, distinct = colours(shot)
    if count["orange"] < 20 * RANKS or count["lane"] < 500 or count["traffic"] < 100 or distinct < 10:
        return f"the screenshot does not show the plot: {count}, {distinct} colours"
    return None


def case_browser(work):
    exe = build("mpich")
    r, html, _ = paralog_run(work, "mpich",
                             lambda p: ["mpirun.mpich", "-n", RANKS, exe, p / "out.dat", CYCLES, KIB, COMPUTE_MS])
    if r.returncode != 0:
        return f"paralog run exited {r.returncode}: {r.stderr[-800:]}"
    try:
        why = browser_check(work, html)
        if why:
            return why
        # The same check must see a page whose plot is missing.
        broken = work / "broken.html"
        broken.write_text(re.sub(r"<svg.*?</svg>", "", html.read_text(), flags=re.S))
        if browser_check(work, broken) is None:
            return "the browser check passed a page without its plot"
    except RuntimeError as e:
        return str(e)
    return None


def case_damaged(work):
    local = work / "l"
    tl = local / ".paralog-timeline-j"
    tl.mkdir(parents=True)
    good = "T1 start 10 1000\nT1 cp 10 2000 3000 0 1 1 1 100 f\n"
    (tl / "capture-10").write_text(good + "T1 cp 10 4000 x 0 1 1 2 100 f\n")
    r = subprocess.run([str(BIN), "report", "--local", str(local), "--job", "j", "--out", str(work / "r.html")],
                       env=ENV, capture_output=True, text=True, timeout=60)
    if r.returncode != 1 or "panicked" in r.stderr or "Traceback" in r.stderr:
        return f"exit {r.returncode}: {r.stderr[-500:]}"
    if f"{tl / 'capture-10'}: line 3:" not in r.stderr:
        return f"the message does not name the file and line: {r.stderr.strip()}"
    if (work / "r.html").exists():
        return "a report was written from a damaged timeline"
    (tl / "capture-10").write_text(good)
    r = subprocess.run([str(BIN), "report", "--local", str(local), "--out", str(work / "r.html")],
                       env=ENV, capture_output=True, text=True, timeout=60)
    if r.returncode != 0 or not (work / "r.html").exists():
        return f"the repaired timeline gives no report ({r.returncode}): {r.stderr[-500:]}"
    return None


def failing_with(fn):
    """The cases here return why they failed (None: passed)."""
    def case(work):
        why = fn(work)
        if why:
            fail(why)
    return case


def main():
    keep = "--keep" in sys.argv[1:]
    cases = [("mpich: drained == captured, consistency points, report afterwards", case_mpi("mpich")),
             ("ompio: drained == captured, consistency points, report afterwards", case_mpi("ompio")),
             ("posix: fsync and close points", case_posix),
             ("browser: headless chromium loads and draws it", case_browser),
             ("damaged timeline line named by file and line", case_damaged)]
    return Suite("report", keep=keep).run([(label, failing_with(fn)) for label, fn in cases])


if __name__ == "__main__":
    sys.exit(main())
