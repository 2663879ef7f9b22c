"""What the correctness suites share: the Open MPI environment for root on
2 cores, the case runner (a fresh work directory per case, one PASS/FAIL
line each, the closing "title: N passed, N failed" line, the exit status)
and the byte comparison."""
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "target/release/paralog"
PY = "/usr/bin/python3"
ENV = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
       "OMPI_MCA_rmaps_base_oversubscribe": "1"}


def first_difference(a: bytes, b: bytes):
    """None if equal, else where and how two files' bytes differ."""
    if a == b:
        return None
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"differs from the direct run at byte {at} (sizes {len(a)} vs {len(b)})"


def run_cases(title, cases, keep=False):
    """Run (name, fn(work) -> None or why) cases; print; exit."""
    passed = failed = 0
    for name, fn in cases:
        work = Path(tempfile.mkdtemp(prefix="paralog-correctness-"))
        try:
            why = fn(work)
        except (subprocess.TimeoutExpired, subprocess.CalledProcessError, OSError) as e:
            why = f"{type(e).__name__}: {e}"
        if why:
            failed += 1
            print(f"FAIL {name}: {why}", flush=True)
        else:
            passed += 1
            print(f"PASS {name}", flush=True)
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{title}: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
