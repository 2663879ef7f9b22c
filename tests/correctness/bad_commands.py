#!/usr/bin/python3
"""Every command given a missing directory, a remote that cannot work or a
contradictory setting (issue 19): one line on stderr naming it, a non-zero
exit, never a stack trace, and never a server left running.

Usage: python3 -m tests.correctness.bad_commands
Ends with "bad commands: N passed, N failed".
"""
import sys

from tests.lib.check import Suite, check, fail
from tests.lib.mpi import mpi_env
from tests.lib.paths import BIN
from tests.lib.proc import Timeout, run

ENV = mpi_env()


def one_line(args, *named):
    def case(work):
        cmd = [str(BIN), *[a.format(w=work) for a in args]]
        try:
            r = run(cmd, env=ENV, check=False, timeout=30)
        except Timeout:
            fail("still running after 30 s (it should have refused at once)")
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        check(r.returncode != 0, f"exit 0: {r.stderr[-300:]}")
        check(not any(w in r.stderr for w in ("panicked", "backtrace", "Traceback")), f"a stack trace: {r.stderr[-400:]}")
        check(len(lines) == 1, f"{len(lines)} lines on stderr, expected one: {r.stderr[-400:]}")
        missing = [n.format(w=work) for n in named if n.format(w=work) not in lines[0]]
        check(not missing, f"the line does not name {missing}: {lines[0]}")
    return case


CASES = [
    ("inspect: a missing local directory", ["inspect", "--local", "{w}/absent"], "{w}/absent"),
    ("materialize: a missing local directory", ["materialize", "--local", "{w}/absent", "f", "{w}/o"], "{w}/absent"),
    ("recover: a missing local directory", ["recover", "--local", "{w}/absent"], "{w}/absent"),
    ("status: no server for a local directory", ["status", "--local", "{w}/absent"], "{w}/absent"),
    ("wait: no server for a local directory", ["wait", "--local", "{w}/absent", "--timeout", "1"], "{w}/absent"),
    ("report: a missing local directory", ["report", "--local", "{w}/absent", "--job", "j"], "{w}/absent"),
    ("report: a job without a timeline", ["report", "--local", "{w}", "--job", "nojob"], "nojob", "{w}"),
    ("run: --report into a missing directory",
     ["run", "--prefix", "{w}", "--local", "{w}/l", "--report", "{w}/absent/r.html", "--", "true"], "{w}/absent"),
    ("get: an object store that does not exist", ["get", "objstore://{w}/absent/f", "{w}/o"], "{w}/absent"),
    ("env: a missing prefix", ["env", "--mpi", "none", "--prefix", "{w}/absent", "--local", "{w}/l"], "{w}/absent"),
    ("run: a missing prefix", ["run", "--mpi", "none", "--prefix", "{w}/absent", "--", "true"], "{w}/absent"),
    ("run: the local directory inside the prefix",
     ["run", "--mpi", "none", "--prefix", "{w}", "--local", "{w}/l", "--", "true"], "PARALOG_LOCAL", "{w}/l"),
    ("run: a remote of no known kind", ["run", "--mpi", "none", "--prefix", "{w}", "--local", "/tmp/paralog-bad-l",
                                         "--remote", "bogus://x", "--", "true"], "bogus://x"),
    ("run: an object root that does not exist", ["run", "--mpi", "none", "--prefix", "{w}", "--local",
                                                  "/tmp/paralog-bad-l", "--remote", "objstore://{w}/absent", "--", "true"],
     "{w}/absent"),
    ("server: an object root that does not exist", ["server", "--local", "{w}/l", "--remote", "objstore://{w}/absent"],
     "{w}/absent"),
    ("recover: an object root that does not exist", ["recover", "--local", "{w}", "--remote", "objstore://{w}/absent"],
     "{w}/absent"),
    ("check-symbols: a missing program", ["check-symbols", "{w}/absent"], "{w}/absent"),
    ("run: --s3-upload with a remote that is not S3", ["run", "--mpi", "none", "--prefix", "{w}", "--local",
                                                        "/tmp/paralog-bad-l", "--remote", "{w}", "--s3-upload", "epoch",
                                                        "--", "true"], "--s3-upload"),
]

if __name__ == "__main__":
    sys.exit(Suite("bad commands").run([(name, one_line(args, *named)) for name, args, *named in CASES]))
