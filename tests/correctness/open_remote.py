#!/usr/bin/python3
"""Opens under the prefix and the remote (issue 15: "opens make no round
trip to the remote file system when the answer is already known").

Each case runs a Python program under `paralog run --remote R` (R a
directory other than the prefix) inside `strace -f -e trace=file`, and
looks at the system calls made between two marker calls around the open:

  truncating   open(P/f, "w") of a file whose older version was drained to
               R: no system call names R (the open cuts the file, nothing
               drained can show through); R's file afterwards holds the new
               bytes only
  reopen       a second open (O_RDWR, no O_TRUNC) of a file this process
               has open: no system call names R; both descriptors' writes
               reach R
  stat-new     stat and lstat of a new file (created without O_TRUNC, as
               ROMIO does, and `lstat`ed at MPI_File_open) while it is open
               and unwritten: no system call names R (the view built at
               the open found no file there); R's file afterwards holds
               the bytes written
  statfs-new   statvfs and fstatvfs of a new open file, statvfs of P
               while it is open, and statvfs of the file once closed
               (drained to R, never in P): each answers P's file system, as
               direct I/O would (not ENOENT, not the placeholder's tmpfs);
               between the markers at most one call names P (its answer,
               then kept) and none names P's file (ROMIO statfs every file,
               OMPIO its directory, at MPI_File_open: a round trip each on
               sshfs); a missing name still fails with ENOENT
  append       control: open(P/f, "a") of a drained file must ask R (the
               view answers reads of the drained bytes), so the check above
               can fail; R's file afterwards holds the old and new bytes

Usage: python3 -m tests.correctness.open_remote
Ends with "open remote: N passed, N failed".
"""
import shutil
import sys

from tests.lib.check import Suite, check
from tests.lib.paralog import paralog_run
from tests.lib.paths import PY

# The markers are stats of names that cannot exist: strace shows them, and
# capture passes them through (they are outside the prefix).
PROGRAM = r'''
import os, sys
prefix, case = sys.argv[1], sys.argv[2]
path = os.path.join(prefix, "f.dat")
def mark(name):
    try:
        os.stat("/nonexistent-paralog-mark-" + name)
    except FileNotFoundError:
        pass
if case == "truncating":
    mark("begin")
    f = open(path, "wb")
    mark("end")
    f.write(b"new bytes\n")
    f.close()
elif case == "stat-new":
    new = os.path.join(prefix, "g.dat")
    fd = os.open(new, os.O_CREAT | os.O_WRONLY, 0o644)
    mark("begin")
    os.lstat(new)
    os.stat(new)
    os.lstat(new)
    mark("end")
    os.write(fd, b"a new file\n")
    os.close(fd)
elif case == "reopen":
    f = open(path, "wb")
    f.write(b"first descriptor\n")
    f.flush()
    mark("begin")
    fd = os.open(path, os.O_RDWR)
    mark("end")
    os.pwrite(fd, b"SECOND", 0)
    os.close(fd)
    f.close()
elif case == "statfs-new":
    new = os.path.join(prefix, "g.dat")
    fields = lambda s: (s.f_bsize, s.f_blocks, s.f_files, s.f_fsid, s.f_namemax)
    want = fields(os.statvfs(prefix))
    fd = os.open(new, os.O_CREAT | os.O_WRONLY, 0o644)
    mark("begin")
    got = [fields(os.statvfs(new)), fields(os.fstatvfs(fd)), fields(os.statvfs(new)), fields(os.statvfs(prefix))]
    mark("end")
    os.write(fd, b"a new file\n")
    os.close(fd)
    got.append(fields(os.statvfs(new)))
    try:
        os.statvfs(os.path.join(prefix, "missing.dat"))
        print("missing: no error")
    except FileNotFoundError:
        print("missing: ENOENT")
    print("same as the prefix:", [g == want for g in got])
else:
    mark("begin")
    f = open(path, "ab")
    mark("end")
    f.write(b"appended\n")
    f.close()
'''

OLD = b"old bytes, drained before this job, longer than the new ones\n"


def traced_run(work, case):
    """Run the case; return (the trace lines between the markers, R)."""
    prefix, remote = work / "p", work / "r"
    prefix.mkdir()
    remote.mkdir()
    (remote / "f.dat").write_bytes(OLD)
    trace = work / "trace"
    strace = shutil.which("strace")
    check(strace, "strace is not installed (scripts/setup.sh installs it)")
    r = paralog_run(work / "l", prefix, [strace, "-f", "-e", "trace=file", "-o", trace, PY, "-c", PROGRAM,
                                         prefix, case], remote=remote)
    lines = trace.read_text().splitlines()
    begin = [i for i, l in enumerate(lines) if "nonexistent-paralog-mark-begin" in l]
    end = [i for i, l in enumerate(lines) if "nonexistent-paralog-mark-end" in l]
    check(begin and end, f"markers not in the trace {trace}")
    return lines[begin[0] + 1:end[0]], remote, r.stdout


def remote_calls(between, remote):
    return [l for l in between if str(remote) in l]


def quiet_open(work, case, expected):
    """The open between the markers names no remote path; R's file ends
    as `expected`."""
    between, remote, _ = traced_run(work, case)
    calls = remote_calls(between, remote)
    check(not calls, f"the {case} open asked the remote: {calls[:3]}")
    got = (remote / "f.dat").read_bytes()
    check(got == expected, f"remote file holds {got!r}, not {expected!r}")
    return f"{len(between)} file calls in the open, none on the remote"


def case_truncating(work):
    return quiet_open(work, "truncating", b"new bytes\n")


def case_reopen(work):
    return quiet_open(work, "reopen", b"SECONDdescriptor\n")


def case_stat_new(work):
    between, remote, _ = traced_run(work, "stat-new")
    calls = remote_calls(between, remote)
    check(not calls, f"stat of a new file asked the remote: {calls[:3]}")
    got = (remote / "g.dat").read_bytes()
    check(got == b"a new file\n", f"remote file holds {got!r}")
    return f"{len(between)} file calls in 3 stats, none on the remote"


def case_statfs_new(work):
    between, remote, out = traced_run(work, "statfs-new")
    check("same as the prefix: [True, True, True, True, True]" in out,
          f"statvfs of a captured file did not answer the prefix's file system: {out!r}")
    check("missing: ENOENT" in out, f"statvfs of a missing name: {out!r}")
    prefix = str(work / "p")
    on_file = [l for l in between if prefix + "/g.dat" in l]
    check(not on_file, f"statvfs of a captured file asked the real file: {on_file[:3]}")
    on_prefix = [l for l in between if f'"{prefix}"' in l]
    check(len(on_prefix) <= 1, f"the prefix's file system was asked {len(on_prefix)} times: {on_prefix[:3]}")
    got = (remote / "g.dat").read_bytes()
    check(got == b"a new file\n", f"remote file holds {got!r}")
    return f"{len(on_prefix)} call(s) on the prefix in 4 statvfs, none on the file"


def case_append(work):
    between, remote, _ = traced_run(work, "append")
    calls = remote_calls(between, remote)
    check(calls, "the appending open did not ask the remote: the trace would not show a round trip")
    got = (remote / "f.dat").read_bytes()
    check(got == OLD + b"appended\n", f"remote file holds {got!r}")
    return f"{len(calls)} call(s) on the remote, as expected"


def main():
    suite = Suite("open remote")
    sys.exit(suite.run([
        ("truncating open", case_truncating),
        ("reopen of an open file", case_reopen),
        ("stat of a new file", case_stat_new),
        ("statvfs of a new file", case_statfs_new),
        ("append (control)", case_append),
    ], only=sys.argv[1] if len(sys.argv) > 1 else None))


if __name__ == "__main__":
    main()
