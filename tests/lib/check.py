"""Failed, check, fail, and the case runner every suite uses.

A case is a function of one argument, its work directory (fresh, empty).
It passes by returning (None, or a note printed after its name), is
skipped by returning "SKIP: why", and fails by raising: Failed (from
check/fail) prints its message, any other exception its type and message.
A failed case's directory is kept and named; the others are removed
(unless keep).

suite_options() is the command line every runner starts from: --only and
--keep, to which a suite adds its own options."""

import argparse
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path


class Failed(Exception):
    """A check did not hold: the message says what."""


def check(cond, msg):
    if not cond:
        raise Failed(msg)


def fail(msg):
    raise Failed(msg)


def describe(e):
    return str(e) if isinstance(e, Failed) else f"{type(e).__name__}: {e}"


def slug(label, n=16):
    """A short directory name for a case label: no shell metacharacters,
    and short, as servers' sockets live below it (a socket's path has at
    most 107 bytes)."""
    return re.sub(r"[^A-Za-z0-9.=+-]+", "_", label).strip("_")[:n] or "case"


def suite_options():
    """A parser with the options every suite's runner takes: --only (run
    the cases whose name contains it) and --keep (keep the work
    directories, passed to Suite). A suite adds its own, then parses."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", help="run the cases whose name contains this")
    ap.add_argument("--keep", action="store_true", help="keep the work directories")
    return ap


class Suite:
    """Runs cases in directories under one base directory; counts them;
    `finish()` runs the cleanups, prints "NAME: N passed, N failed" and
    returns the exit status."""

    def __init__(self, name, keep=False):
        self.name = name
        self.keep = keep
        self.passed = self.failed = self.skipped = 0
        self.base = Path(tempfile.mkdtemp(prefix=f"paralog-{slug(name, 12)}-"))
        self.cleanup = []  # callables run at the end, last first
        self.n = 0
        # A signal ends the run through the finally blocks (servers, MinIO,
        # namespaces, process groups).
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, lambda *_: sys.exit(130))

    def workdir(self, label):
        self.n += 1
        work = self.base / f"{self.n:02d}-{slug(label)}"
        work.mkdir(parents=True, exist_ok=True)
        return work

    def case(self, label, fn, work=None):
        """Run one case; True if it passed, False if it failed, None if
        skipped."""
        work = Path(work) if work is not None else self.workdir(label)
        work.mkdir(parents=True, exist_ok=True)
        t = time.time()
        try:
            note = fn(work)
        except Exception as e:  # any error fails the case, not the run
            self.fail_case(label, describe(e), work, time.time() - t)
            return False
        if isinstance(note, str) and note.startswith("SKIP"):
            self.skip(label, note.removeprefix("SKIP").lstrip(": "))
            shutil.rmtree(work, ignore_errors=True)
            return None
        self.pass_case(label, note, work, time.time() - t)
        return True

    def pass_case(self, label, note=None, work=None, seconds=None):
        self.passed += 1
        took = f" ({seconds:.1f} s)" if seconds is not None else ""
        print(f"PASS {label}{': ' + str(note) if note else ''}{took}", flush=True)
        if work is not None and not self.keep:
            shutil.rmtree(work, ignore_errors=True)

    def fail_case(self, label, why, work=None, seconds=None):
        self.failed += 1
        kept = f"  [kept in {work}]" if work is not None else ""
        took = f" ({seconds:.1f} s)" if seconds is not None else ""
        print(f"FAIL {label}: {why}{kept}{took}", flush=True)

    def skip(self, label, why):
        self.skipped += 1
        print(f"SKIP {label}: {why}", flush=True)

    def run(self, cases, only=None):
        """Every (label, fn) whose label contains `only`; then finish()."""
        try:
            for label, fn in cases:
                if not only or only in label:
                    self.case(label, fn)
        finally:
            self.run_cleanup()
        return self.finish()

    def run_cleanup(self):
        while self.cleanup:
            fn = self.cleanup.pop()
            try:
                fn()
            except Exception as e:  # cleanup must go on
                print(f"{self.name}: cleanup: {e}", file=sys.stderr)

    def finish(self):
        self.run_cleanup()
        if self.failed:
            print(f"{self.name}: work directories kept in {self.base}", flush=True)
        elif not self.keep:
            shutil.rmtree(self.base, ignore_errors=True)
        skipped = f", {self.skipped} skipped" if self.skipped else ""
        print(f"{self.name}: {self.passed} passed, {self.failed} failed{skipped}", flush=True)
        return 1 if self.failed else 0
