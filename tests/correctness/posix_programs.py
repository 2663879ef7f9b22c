#!/usr/bin/python3
"""Programs as they really write files (issue 13), each run twice: directly
into a directory, and under `paralog run --mpi none` with that directory as
the prefix and a separate directory as the remote. After the drain the
remote must hold exactly the direct run's tree (every file's bytes, every
directory), the program must succeed both times with the same output, and
nothing may be left in the prefix that the drain did not put there.

  stdio        C fopen/fwrite/fprintf/fseek/fread/"a"/"w+"/fdopen (progs/stdio_ckpt.c)
  fstream      C++ ofstream/fstream/ifstream, std::ios::app (progs/fstream_ckpt.cpp)
  exit-open    write() and exit without close (progs/exit_open.c)
  identity     one path opened twice has one st_dev/st_ino (progs/identity.c)
  mmap         a shared writable mapping is refused at mmap, no SIGBUS (progs/mmap_write.c)
  io_uring     a write through io_uring's raw system calls (the entry point
               check-symbols calls not handled): the close fails with EIO,
               the run says REFUSED naming the file and exits 3, nothing of
               the epoch reaches the remote (progs/uring_write.c)
  xattr        setxattr/removexattr of a file only capture's view holds:
               ENOTSUP (a missing one ENOENT); cp -a of a file with a user
               attribute into the prefix succeeds
  modes        files created 0600, 0755, 0640, under umask 077, a 0600
               temporary renamed into place: the remote's modes are the
               direct run's, and so are those other processes' stat gives
               before the drain and after a chmod; no extended
               attributes, `ls -l` quiet (progs/modes.py)
  entry points pwritev2/preadv2, sendfile, copy_file_range, splice, lio_listio,
               syncfs, sync_file_range, faccessat, mkstemps, mkostemp,
               euidaccess, dprintf/vdprintf/__dprintf_chk (ints, doubles,
               stack arguments, a long text), scandir/scandirat of files
               in capture's view only, tmpfile with TMPDIR in the prefix
               (progs/entry_points.c)
  walk         ftw, nftw, nftw64 with FTW_PHYS, FTW_DEPTH, FTW_CHDIR,
               FTW_ACTIONRETVAL, links and a dangling link, over files in
               capture's view only (progs/walk.c)
  exec         a program built by gcc into the prefix and a script written
               there, run by bash (path, PATH), subprocess, posix_spawn,
               posix_spawnp, execv, fexecve (progs/run_prefix.py); a file
               without an execute bit refused as directly; execl, execlp,
               execle with ten arguments and an environment, a script run by
               execl (progs/execl_forms.c)
  freopen      freopen onto stdout, stdin, stderr and an fopen'ed stream, "w",
               "a", "r", "r+", "w+", mode changes (path NULL), a child of
               system() sharing the reopened stdout, no fclose before exit,
               freopen outside the prefix; "w+" onto stdout refused;
               out-of-sequence writes to a reopened stdout REFUSED
               (progs/freopen_io.c)
  missed       a static binary, and a child with LD_PRELOAD removed, write a
               file under the prefix: the run names it (MISSED) and exits 3;
               `paralog status` names it while the run goes on (and not the
               captured file beside it), and says it cannot check a server
               that no run started
  crash        the atomic save killed (SIGKILL) before its fsync, between fsync
               and rename, after the rename; then `paralog recover` with no
               server (progs/atomic_crash.py); rotated checkpoints (a step
               file per save, ckpt/latest replaced, the oldest unlinked)
               killed at each of those points and after the replace and the
               unlink, with no server or under `paralog run`, then recover:
               equal to the program stopped there without paralog
               (progs/rotate_crash.py)
  numpy        save/load, tofile/fromfile, savez, pickle (progs/pyprogs.py)
  atomic       tmp + fsync + os.replace, replacing, rotation with unlink
  sqlite       Python's sqlite3: DELETE and TRUNCATE journal modes,
               transactions, VACUUM, reopened (WAL mode maps its -shm file
               shared and writable: refused, docs/capture.md)
  terminated   writers that never close, ended by SIGTERM (multiprocessing.Pool's
               exit, a kill) or SIGHUP: their writes reach the remote, as the
               kernel keeps them without paralog
  dup2         dup2 of a file onto fds 1 and 2, then restored
  subprocess   subprocess.run(stdout=f), the parent writing before and after
  dirs         makedirs, files, remove + rmdir
  h5py         serial h5py (HDF5's sec2 driver)
  locks        HDF5's file locking, flock and lockf between two processes
  shell        bash with >, >>, 2>, a pipeline into a file, cat of a captured file
  appenders    3 shell loops of `echo >> log`, a python appender holding
               its own 'a' open, a loop of /bin/echo >> log, all at once:
               every line once (sorted, then compared), as O_APPEND gives
  concurrent   4 background loops of /bin/echo, python's sys.stdout.write,
               builtin echo and os.write into one redirected stdout at
               once (make -j style): every line once, in any order, as in
               the direct run, with > and with >> onto a file that holds
               lines (tests/correctness/shared_stress.py; many runs:
               make test-shared-stress)
  shared       a shell's builtins and commands writing through one
               redirection in turn ({ ...; } >, exec >, a loop's >>), and a
               reopened stdout shared with posix_spawn and fork+exec
               children reaped by waitpid, wait and waitid
               (progs/spawn_share.c)
  tools        tar -x of an archive (with symbolic links, one GNU tar delays),
               cp, dd, sort -o, sed -i, ln -s, realpath, readlink -f in the prefix
  tempfiles    mkstemp + fsync + rename, mkostemps, mkdtemp (progs/tempfiles.c)
  git          init, commits, gc, cp -a of the repository; a file
               created in a directory that does not exist fails (ENOENT) as
               without paralog; ln -s then rm
  times        touch -d/-m/-r, cp -p, rsync -a, tar -x, unzip, os.utime(ns=):
               every file's modification time on the remote is the direct
               run's, to the nanosecond, and stat answers it under capture
  moved in     mv of a file and of a directory from outside the prefix into it,
               shutil.move (pip --target does this): EXDEV, so they copy in
               through capture instead of past it
  coreutils    shuf -o, uniq IN OUT, ptx, tsort (freopen), sort -o in place,
               sed -i, cp of a file the run wrote, awk's > and >>

With `--remote prefix` the prefix itself is the remote (the default of
`paralog run`), and the prefix after the drain must equal the direct tree.

Usage: python3 -m tests.correctness.posix_programs [--keep] [--only NAME] [--remote separate|prefix]
Ends with "posix programs (... remote): N passed, N failed".
"""
import os
import re
import subprocess
import sys
import tarfile
import time

from tests.lib.check import Suite, check, fail, suite_options
from tests.lib.compare import tree, tree_difference
from tests.lib.mpi import compile_program, mpi_env
from tests.lib.paralog import capture_env, paralog_run, status
from tests.lib.paths import BIN, PY, ROOT, TARGET
from tests.lib import shared_writers
from tests.lib.proc import kill_tree, run
from tests.lib.server import Server

PROGS = ROOT / "tests/correctness/progs"
BUILD = TARGET / "posix-programs"
ENV = mpi_env()


def build():
    for src, cc, extra in (("stdio_ckpt.c", "cc", []), ("exit_open.c", "cc", []), ("identity.c", "cc", []),
                           ("mmap_write.c", "cc", []), ("fstream_ckpt.cpp", "c++", []),
                           ("static_write.c", "cc", ["-static"]), ("entry_points.c", "cc", []),
                           ("tempfiles.c", "cc", []), ("freopen_io.c", "cc", []), ("spawn_share.c", "cc", []),
                           ("walk.c", "cc", []), ("execl_forms.c", "cc", []), ("uring_write.c", "cc", [])):
        compile_program(cc, PROGS / src, BUILD / src.rsplit(".", 1)[0], "-O2", "-Wall", "-Werror", *extra, always=True)


SEPARATE = True  # set by main(): a remote of its own, or the prefix itself


def compare(work, cmd, expect_rc=0):
    """Run cmd(dir) directly and under paralog run; compare trees and output."""
    direct, prefix = work / "direct", work / "prefix"
    remote = work / "remote" if SEPARATE else prefix
    for d in {direct, prefix, remote}:
        d.mkdir()
    r = run(cmd(direct), env=ENV, check=False, timeout=120, text=False)
    check(r.returncode == expect_rc, f"direct run exited {r.returncode}: {r.stderr[-400:]!r}")
    want_out = r.stdout.replace(str(direct).encode(), b"DIR")
    p = paralog_run(work / "local", prefix, cmd(prefix), remote=remote if SEPARATE else None, env=ENV, check=False,
                    timeout=300, text=False)
    out = (p.stdout + p.stderr).decode(errors="replace")
    check(expect_rc != 0 or p.returncode == 0, f"paralog run exited {p.returncode}: {out[-800:]}")
    got_out = p.stdout.replace(str(prefix).encode(), b"DIR")
    check(got_out.startswith(want_out), f"the program printed {got_out[:300]!r}, directly {want_out[:300]!r}")
    why = tree_difference(tree(direct), tree(remote))
    check(not why, f"remote differs from the direct run: {why}")
    stray = [k for k, v in tree(prefix).items() if isinstance(v, bytes)]
    check(not (SEPARATE and stray), f"files written to the prefix past capture (never drained): {stray[:5]}")


SHELL = ("echo hello > {d}/r.txt; echo more >> {d}/r.txt; ls /nonexistent-paralog 2> {d}/err.txt; "
         "seq 1 3000 | sort -r | head -100 > {d}/pipe.txt; cat {d}/r.txt > {d}/copy.txt; "
         "cat {d}/r.txt {d}/pipe.txt | wc -c; true")


# A shell's builtins (glibc's stdio, past the wrappers) and commands (their
# own capture) writing through one redirection, in turn: the commands'
# bytes must not come back as zeros.
SHARED = ("{{ echo a; /bin/echo child; echo c; basename {d}/block.txt; echo d; }} > {d}/block.txt; "
          "(exec > {d}/exec.txt; echo one; /bin/echo two; echo three; seq 1 5; echo four); "
          "for i in 1 2 3; do echo \"loop $i\"; /bin/echo \"cmd $i\"; done >> {d}/block.txt; true")


# Coreutils that freopen their output or input (shuf -o, uniq IN OUT, ptx
# -G IN OUT, tsort), sort -o in place (its inputs checked with euidaccess),
# sed -i, cp of a file the run wrote (stat and fstat must agree once it is
# drained), awk's redirections.
# Processes appending to one file through descriptions of their own at once
# (`echo >> log` in parallel loops, a long-lived line-buffered appender, an
# external command's `>>`): every line once, as the kernel's O_APPEND gives.
# The log's order differs from run to run, so it is sorted, and read while
# the appenders are gone.
APPENDERS = ("set -e; echo first > {d}/log; "
             "for k in 1 2 3; do ( for i in $(seq 1 60); do echo \"sh $k $i\" >> {d}/log; done ) & done; "
             "{py} -c \"import sys; f = open(sys.argv[1], 'a', buffering=1); "
             "[f.write('py %d\\n' % i) for i in range(300)]\" {d}/log & "
             "( for i in $(seq 1 40); do /bin/echo \"bin $i\" >> {d}/log; done ) & wait; "
             "sort {d}/log > {d}/sorted; wc -l < {d}/log; rm {d}/log")


COREUTILS = ("set -e; cd {d}; seq 1 3000 | awk '{{print int($1/3) \" line \" $1 % 7}}' > in.txt; "
             "head -c 100000 /bin/sh > seed.bin; shuf --random-source=seed.bin -o shuf.txt in.txt; "
             "uniq in.txt uniq.txt; uniq -c shuf.txt uniqc.txt; ptx -G uniq.txt ptx.txt; "
             "printf 'a b\\nb c\\nc d\\na d\\n' > pairs.txt; tsort pairs.txt > tsort.txt; "
             "sort -o sorted.txt -k3,3 -k1,1n shuf.txt; sort -o shuf.txt shuf.txt; sleep 0.3; "
             "cp in.txt sed.txt; sed -i 's/line/LINE/; 3d' sed.txt; "
             "awk '{{ print $3 > (\"by-\" $3 \".txt\") }} END {{ print NR >> \"count.txt\" }}' in.txt; "
             "md5sum *.txt; true")


# git as a user runs it in the prefix: init (it probes for symbolic links
# with a temporary file's name), commits (reflogs whose directories it makes
# only when the open fails with ENOENT), gc (loose objects packed, their
# directories removed) and a copy with cp -a. Fixed dates make the objects
# equal; the index (it records inode numbers) is removed at the end. No hook
# templates. (git creates packs 0444: they reach the remote so, and another
# process's `stat` answers it, see modes.)
GIT = ("set -e; export GIT_AUTHOR_DATE='2026-01-01T00:00:00Z' GIT_COMMITTER_DATE='2026-01-01T00:00:00Z' "
       "GIT_CONFIG_NOSYSTEM=1 HOME={d}; cd {d}; git init -q -b main --template= repo; cd repo; "
       "git config user.email a@b; git config user.name a; echo hi > f; mkdir -p sub; seq 1 500 > sub/g; "
       "git add -A; git commit -qm one; echo more >> f; git commit -qam two; git gc -q; "
       "git fsck --no-progress; git log --oneline; cd ..; cp -a repo copy; "
       "git -C copy log --oneline; rm -f repo/.git/index copy/.git/index; "
       "ls nodir/x 2>/dev/null || echo no nodir; (echo x > nodir/x) 2>/dev/null || echo create refused; "
       "ln -s f link; rm link; ls link 2>/dev/null || echo link removed")


# Programs run from the prefix: one built there by gcc, a script written
# there then made executable, run by bash (by path, and found on PATH) and
# by Python (progs/run_prefix.py: subprocess, posix_spawn[p], execv,
# fexecve); a file without an execute bit refused.
EXEC = ("set -e; cd {d}; gcc -O2 -o hello {src}; ./hello a; {d}/hello b; "
        "printf '#!/bin/sh -e\\necho script $0 \"$@\"\\n' > s.sh; chmod +x s.sh; ./s.sh x y; "
        "PATH={d}:$PATH; hello on path; s.sh on path; {py} {runner} {d}")
EXEC_TAIL = "echo data > plain; ./plain 2>/dev/null || echo refused $?"


def make_archive(work):
    src = work / "src"
    (src / "sub/deeper").mkdir(parents=True)
    for i in range(5):
        (src / f"f{i}.dat").write_bytes(bytes((i * 3 + k) % 256 for k in range(20000 * (i + 1))))
    (src / "sub/deeper/leaf.txt").write_text("leaf\n" * 100)
    # A link inside the tree, and one out of it: GNU tar makes the second a
    # placeholder file first and replaces it at the end, if its identity
    # (st_dev, st_ino) is unchanged.
    (src / "sub/link.dat").symlink_to("../f0.dat")
    (src / "sub/out").symlink_to("../../elsewhere/x")
    with tarfile.open(work / "a.tar", "w") as t:
        t.add(src, arcname="tree")
    return work / "a.tar"


def tools_cmd(work):
    archive = make_archive(work)
    blob = work / "blob.bin"
    blob.write_bytes(os.urandom(1 << 20))
    return lambda d: ["/bin/bash", "-c",
                      f"tar -xf {archive} -C {d} && cp {blob} {d}/cp.bin && "
                      f"dd if={blob} of={d}/dd.bin bs=64k status=none && cmp {blob} {d}/dd.bin && "
                      f"sort -r -o {d}/sorted.txt {d}/tree/sub/deeper/leaf.txt /etc/services && "
                      f"sed -i 's/tcp/TCP/g' {d}/sorted.txt && ln -s sorted.txt {d}/latest && "
                      f"realpath -e {d}/sorted.txt && readlink -f {d}/latest && echo tools ok"]


def cases():
    exe = lambda name: BUILD / name
    py = lambda kind: (lambda d: [PY, PROGS / "pyprogs.py", kind, d])
    return [
        ("stdio: C stdio checkpoint (fwrite, fseek, fprintf, append, w+, fdopen)",
         lambda w: compare(w, lambda d: [exe("stdio_ckpt"), d])),
        ("fstream: C++ ofstream/fstream/ifstream", lambda w: compare(w, lambda d: [exe("fstream_ckpt"), d])),
        ("exit-open: write() then exit without close", lambda w: compare(w, lambda d: [exe("exit_open"), d / "e.txt"])),
        ("identity: one st_dev/st_ino per path", lambda w: compare(w, lambda d: [exe("identity"), d])),
        ("numpy: save/load, tofile/fromfile, savez, pickle", lambda w: compare(w, py("numpy"))),
        ("atomic: tmp + fsync + replace, rotation", lambda w: compare(w, py("atomic"))),
        ("sqlite: Python's sqlite3, DELETE and TRUNCATE journals, transactions, VACUUM",
         lambda w: compare(w, py("sqlite"))),
        ("terminated: Pool workers and blocked writers ended by SIGTERM/SIGHUP keep their writes",
         lambda w: compare(w, py("terminated"))),
        ("dup2: a file dup2'ed onto stdout and stderr", lambda w: compare(w, py("dup2"))),
        ("subprocess: subprocess.run(stdout=f)", lambda w: compare(w, py("subprocess"))),
        ("dirs: makedirs, files, remove and rmdir", lambda w: compare(w, py("dirs"))),
        ("h5py: serial HDF5 file", lambda w: compare(w, py("h5py"))),
        ("locks: HDF5's file lock, flock and lockf between processes", lambda w: compare(w, py("locks"))),
        ("shell: >, >>, 2>, pipeline, cat", lambda w: compare(w, lambda d: ["/bin/bash", "-c", SHELL.format(d=d)])),
        ("shared redirection: builtins and commands in turn (block, exec >, loop >>)",
         lambda w: compare(w, lambda d: ["/bin/bash", "-c", SHARED.format(d=d)])),
        ("appenders: processes appending to one file through their own opens at once (>>, 'a')",
         lambda w: compare(w, lambda d: ["/bin/bash", "-c", APPENDERS.format(d=d, py=PY)])),
        ("concurrent >>: 4 loops x 3 writers appending through one redirection at once",
         lambda w: shared_writers.one_run(w, loops=4, lines=40, separate=SEPARATE, direct=True, append=True)),
        ("concurrent: 4 loops x 3 writers through one redirected stdout at once",
         lambda w: shared_writers.one_run(w, loops=4, lines=40, separate=SEPARATE, direct=True)),
        ("spawn share: reopened stdout, posix_spawn/fork+exec children, waitpid/wait/waitid",
         lambda w: compare(w, lambda d: [exe("spawn_share"), d])),
        ("tools: tar -x (with links), cp, dd, sort -o, sed -i, ln -s, realpath", lambda w: compare(w, tools_cmd(w))),
        ("tempfiles: mkstemp + rename, mkostemps, mkdtemp", lambda w: compare(w, lambda d: [exe("tempfiles"), d])),
        ("coreutils: shuf -o, uniq, ptx, tsort, sort -o in place, sed -i, cp, awk >",
         lambda w: compare(w, lambda d: ["/bin/bash", "-c", COREUTILS.format(d=d)])),
        ("git: init, commit, gc, cp -a; a create in a missing directory fails; ln -s then rm",
         lambda w: compare(w, lambda d: ["/bin/bash", "-c", GIT.format(d=d)])),
        ("walk: ftw, nftw, nftw64 (PHYS, DEPTH, CHDIR, ACTIONRETVAL) see capture's view",
         lambda w: compare(w, lambda d: [exe("walk"), d])),
        ("exec: a program built by gcc and a script written into the prefix, run from there", case_exec),
        ("execl forms: execl, execlp, execle (stack arguments, environment), a script run by execl",
         lambda w: compare(w, lambda d: [exe("execl_forms"), d])),
        ("exec refused: a file without an execute bit", lambda w: compare(w, lambda d: ["/bin/bash", "-c",
                                                                                       f"cd {d}; {EXEC_TAIL}"])),
        ("mmap: writable shared mapping refused, no SIGBUS", case_mmap),
        ("xattr: set/remove on a file of capture's view only: ENOTSUP; cp -a keeps going", case_xattr),
        ("io_uring: a write through it is refused at the close (EIO, REFUSED, exit 3), nothing drained", case_uring),
        ("modes: creation modes (0600, 0755, umask 077, a 0600 temporary renamed) kept on the remote", case_modes),
        ("times: touch, cp -p, rsync -a, tar -x, unzip, os.utime keep their times on the remote; gzip, tar -c store them", case_times),
        ("moved in: mv and shutil.move from outside the prefix copy in through capture",
         lambda w: compare(w, lambda d: ["/bin/bash", "-c", MOVED_IN.format(d=d)])),
        ("entry points: pwritev2, preadv2, sendfile, copy_file_range, splice, lio_listio, syncfs, mkstemps, ...",
         lambda w: compare(w, lambda d: [exe("entry_points"), d, os.path.realpath(PY)])),
        *[(f"freopen {how}: {what}", lambda w, h=how: compare(w, lambda d: [exe("freopen_io"), h, d]))
          for how, what in (("stdout", "stdout reopened, printf/puts, fclose, read back, stdin \"r\", stderr"),
                            ("exit", "stdout reopened, printf, no fclose: exit flushes it"),
                            ("stream", "an fopen'ed stream reopened onto other files, modes r/r+/w+/a, path NULL"),
                            ("append", "\"a\" onto stdout, stderr and an fopen'ed stream"),
                            ("child", "reopened stdout shared with a child of system(), then path NULL"))],
        ("freopen outside: outside the prefix as before; a captured stream moved outside", case_freopen_outside),
        ("freopen refused: \"w+\" onto stdout refused with a line, stdout kept", case_freopen_refused),
        ("freopen seek: out-of-sequence writes to a reopened stdout are REFUSED, not lost", case_freopen_seek),
        ("missed static: a static binary's file is named, run exits non-zero", lambda w: case_missed(w, "static")),
        ("missed no-preload: a child without LD_PRELOAD is named", lambda w: case_missed(w, "no-preload")),
        ("missed status: paralog status names the file while the run goes on", case_missed_status),
        *[(f"crash {point}: atomic save killed, then recover", lambda w, p=point: case_crash(w, p))
          for point in ("written", "synced", "renamed")],
        *[(f"crash rotate {point} {mode}: rotated checkpoints killed at save 3, then recover",
           lambda w, p=point, m=mode: case_crash_rotate(w, p, m))
          for point in ("written", "synced", "renamed", "replaced", "rotated") for mode in ("recover", "server")],
    ]


# Programs that set file times (rsync's temporaries, tar, cp -p): the source
# tree is made outside the prefix with fixed times, once per run. gzip and
# tar then store the times they read (gzip with fstat of its input) in the
# bytes they write.
TIMES = ("set -e; src=$(mktemp -d); trap 'rm -rf $src $src.tar $src.zip' EXIT; mkdir $src/sub; "
         "echo one > $src/a; echo two > $src/sub/b; touch -d '2001-02-03 04:05:06.789012345' $src/a $src/sub/b; "
         "tar -C $src -cf $src.tar a sub; (cd $src && zip -q -X -r $src.zip a sub); "
         "touch -d '2010-01-01 00:00:00' {d}/t1; echo x > {d}/t2; touch -m -d '2011-05-06 07:08:09.5' {d}/t2; "
         "echo y > {d}/t3; touch -r {d}/t2 {d}/t3; echo w > {d}/t4; touch -d '2012-01-01' {d}/t4; echo more >> {d}/t4; "
         "cp -p $src/a {d}/cp_a; rsync -a $src/ {d}/rs/; mkdir {d}/tx {d}/uz; tar -C {d}/tx -xf $src.tar; "
         "unzip -q $src.zip -d {d}/uz; gzip -k {d}/uz/a {d}/t2; tar -C {d} -cf {d}/re.tar tx/a tx/sub/b uz/a; "
         "/usr/bin/python3 -c \"import os; p='{d}/py'; open(p,'w').write('z'); os.utime(p, ns=(1000000123, 2000000456))\"; "
         "echo v > {d}/t5; a=$(stat -c %y {d}/t5); sleep 1.2; b=$(stat -c %y {d}/t5); "
         "[ \"$a\" = \"$b\" ] && echo t5 kept its time across the drain; "
         "cd {d}; stat -c '%n %Y' t1 t2 t3 cp_a rs/a rs/sub/b tx/sub/b uz/a py")


# Renames from outside the prefix into it (pip --target moves its files in).
MOVED_IN = ("set -e; src=$(mktemp -d); trap 'rm -rf $src' EXIT; mkdir -p $src/d/e; echo a > $src/f; "
            "echo b > $src/d/e/g; mv $src/f {d}/f; mv $src/d {d}/d; "
            "/usr/bin/python3 -c \"import shutil, tempfile; t = tempfile.mkdtemp(); open(t + '/h', 'w').write('hh'); "
            "shutil.move(t + '/h', '{d}/h')\"; cat {d}/f {d}/d/e/g {d}/h")


def case_times(work):
    """Files whose times the program set have the direct run's
    modification times on the remote, to the nanosecond (t4 was written
    after its touch: the kernel and the drain both make it new)."""
    compare(work, lambda d: ["/bin/bash", "-c", TIMES.format(d=d)])
    remote = work / "remote" if SEPARATE else work / "prefix"
    direct = work / "direct"
    names = ["t1", "t2", "t3", "cp_a", "rs/a", "rs/sub/b", "tx/a", "tx/sub/b", "uz/a", "uz/sub/b", "py"]
    got = {n: (remote / n).stat().st_mtime_ns for n in names}
    want = {n: (direct / n).stat().st_mtime_ns for n in names}
    check(got == want, f"modification times on the remote {got}, in the direct run {want}")
    check(want["py"] == 2000000456 and want["t1"] != want["t2"], f"the direct run's times are not the ones set: {want}")
    t4 = (remote / "t4").stat().st_mtime
    check(t4 > 1500000000, f"t4 was written after its touch, yet keeps the time touch gave it ({t4})")
    # The drained file has the time stat answered before the drain.
    t5 = (remote / "t5").stat().st_mtime
    check(abs(t5 - (remote / "t4").stat().st_mtime) < 60, f"t5's time on the remote is {t5}")


def case_modes(work):
    """The remote file gets the mode the program created it with, or set
    before its first drain, as the direct run's (never the 0644 the drain
    used to give a 0600 file, nor the 0600 of a file fchmod'ed or given an
    ACL through its descriptor before its close)."""
    compare(work, lambda d: [PY, PROGS / "modes.py", d])
    remote = work / "remote" if SEPARATE else work / "prefix"
    names = sorted(p.name for p in (work / "direct").iterdir())
    check(len(names) == 10, f"the program made {names}")
    got = {n: oct((remote / n).stat().st_mode & 0o7777) for n in names}
    want = {n: oct((work / "direct" / n).stat().st_mode & 0o7777) for n in names}
    check(got == want, f"modes on the remote {got}, in the direct run {want}")


def case_exec(work):
    """Programs and scripts of capture's view run as directly; the private
    copies a separate remote needs are gone once they ran."""
    compare(work, lambda d: ["/bin/bash", "-c", EXEC.format(d=d, src=PROGS / "hello.c", py=PY,
                                                           runner=PROGS / "run_prefix.py")])
    left = [str(p) for p in (work / "local").glob(".paralog-exec-*/*")]
    check(not left, f"private copies left behind: {left}")


def case_mmap(work):
    prefix = work / "prefix"
    prefix.mkdir()
    (work / "remote").mkdir()
    p = paralog_run(work / "local", prefix, [BUILD / "mmap_write", prefix / "m.bin"], remote=work / "remote", env=ENV,
                    check=False, timeout=120)
    out = p.stdout + p.stderr
    check("mmap refused" in out, f"the mapping was not refused at mmap (exit {p.returncode}): {out[-500:]}")
    check("m.bin" in out, f"no line naming the file: {out[-500:]}")


# Extended attributes of a file only capture's view holds (a separate
# remote: the prefix has no such file): set and remove fail as on a file
# system without them, a missing file is ENOENT, and `cp -a` of a file
# that has one copies it in without them.
XATTR = """import errno, os, shutil, sys, tempfile
d = sys.argv[1]
open(d + '/v', 'w').write('view only')
for name, call in (('setxattr', lambda p: os.setxattr(p, 'user.k', b'1')),
                   ('removexattr', lambda p: os.removexattr(p, 'user.k'))):
    for f in ('v', 'missing'):
        try:
            call(d + '/' + f)
            print(name, f, 'succeeded')
        except OSError as e:
            print(name, f, errno.errorcode[e.errno])
src = tempfile.mkdtemp() + '/x'
open(src, 'w').write('with an attribute')
os.setxattr(src, 'user.k', b'1')
print('cp -a exit', os.system('cp -a %s %s/x' % (src, d)) >> 8)
print('listxattr', os.listxattr(d + '/x'))
shutil.rmtree(os.path.dirname(src))
"""


def case_uring(work):
    """io_uring, the one entry point `paralog check-symbols` calls not
    handled: a write through it passes every wrapper, so the file's close
    fails with EIO, the run says REFUSED naming the file and exits 3, and
    nothing of the epoch reaches the remote."""
    prefix = work / "prefix"
    prefix.mkdir()
    (work / "remote").mkdir()
    p = paralog_run(work / "local", prefix, [BUILD / "uring_write", prefix / "u.txt"], remote=work / "remote",
                    env=ENV, check=False, timeout=120)
    out = p.stdout + p.stderr
    check("io_uring unavailable" not in out, f"this kernel refuses io_uring: {out[-300:]}")
    check("io_uring write: 17" in p.stdout and "close: Input/output error" in p.stdout,
          f"the write or the close did not go as expected: {p.stdout[-400:]}")
    check(p.returncode == 3 and re.search(r"REFUSED: \d+ bytes reached \S*u\.txt without passing through capture", out),
          f"exit {p.returncode}, no REFUSED line naming u.txt: {out[-600:]}")
    check(not (work / "remote" / "u.txt").exists(), "the refused epoch reached the remote")


def case_xattr(work):
    prefix = work / "prefix"
    prefix.mkdir()
    (work / "remote").mkdir()
    p = paralog_run(work / "local", prefix, [PY, "-c", XATTR, prefix], remote=work / "remote", env=ENV,
                    check=False, timeout=120)
    check(p.returncode == 0, f"exit {p.returncode}: {(p.stdout + p.stderr)[-600:]}")
    want = ["setxattr v ENOTSUP", "setxattr missing ENOENT", "removexattr v ENOTSUP",
            "removexattr missing ENOENT", "cp -a exit 0", "listxattr []"]
    got = [l for l in p.stdout.splitlines() if l.split(" ")[0] in ("setxattr", "removexattr", "cp", "listxattr")]
    check(got == want, f"got {got}, want {want}")
    check((work / "remote" / "x").read_text() == "with an attribute", "cp -a's file did not reach the remote")


def dirs(work):
    """A run's prefix, and its remote: a directory of its own, or None when
    the prefix is the remote (--remote prefix)."""
    prefix = work / "prefix"
    prefix.mkdir()
    if not SEPARATE:
        return prefix, None
    remote = work / "remote"
    remote.mkdir()
    return prefix, remote


def case_freopen_outside(work):
    """freopen onto files outside the prefix: the program checks them; both
    runs leave the same files there."""
    compare(work, lambda d: [BUILD / "freopen_io", "outside", d, f"{d}-outside"])
    why = tree_difference(tree(work / "direct-outside"), tree(work / "prefix-outside"))
    check(not why, f"the files outside the prefix differ: {why}")


def case_freopen_refused(work):
    """A read-write freopen of a path under the prefix onto stdout (glibc
    would read the placeholder past capture) fails with ENOTSUP and a line
    naming the file; the stream stays as it was."""
    prefix, remote = dirs(work)
    p = paralog_run(work / "local", prefix, [BUILD / "freopen_io", "refused", prefix], remote=remote, env=ENV,
                    check=False, timeout=120)
    check(p.returncode == 0, f"paralog run exited {p.returncode}: {p.stderr[-500:]}")
    check(f"freopen of {prefix}/rw.txt with mode \"w+\"" in p.stderr, f"no line naming the file: {p.stderr[-500:]}")
    check("freopen w+ of stdout: Operation not supported" in p.stderr, f"not refused: {p.stderr[-500:]}")
    check(p.stdout.startswith("written to stdout\n"), f"stdout was not kept: {p.stdout[:200]!r}")


def case_freopen_seek(work):
    """glibc writes a reopened stdout past capture into the placeholder;
    writes out of sequence there (an fseek back, an ftell of an appending
    stream) cannot be placed: each file is REFUSED by name and the run
    exits non-zero, its bytes never dropped silently."""
    prefix, remote = dirs(work)
    p = paralog_run(work / "local", prefix, [BUILD / "freopen_io", "seek", prefix], remote=remote, env=ENV,
                    check=False, timeout=120)
    check(p.returncode == 3, f"paralog run exited {p.returncode}: {p.stderr[-500:]}")
    for name in ("w.txt", "a.txt"):
        check(re.search(rf"REFUSED: \d+ bytes reached {re.escape(str(prefix))}/{name} ", p.stderr),
              f"{name} not refused by name: {p.stderr[-800:]}")


def case_missed(work, how):
    """A file written where capture cannot see it is named at the end of
    the run, which exits non-zero although the program exited 0."""
    prefix, remote = dirs(work)
    cmd = {"static": [BUILD / "static_write", prefix / "s.txt"],
           "no-preload": ["/usr/bin/env", "-u", "LD_PRELOAD", "/bin/sh", "-c", f"echo x > {prefix}/s.txt"]}[how]
    p = paralog_run(work / "local", prefix, cmd, remote=remote, env=ENV, check=False, timeout=120)
    check(p.returncode != 0, f"paralog run exited 0: {p.stderr[-400:]}")
    check(f"MISSED: {prefix}/s.txt" in p.stderr, f"no MISSED line naming the file: {p.stderr[-600:]}")


def case_missed_status(work):
    """While the program of a run waits (on a fifo), a file it wrote past
    capture is named by `paralog status` (--json and the table), with the
    MISSED lines of run, and the file it wrote through capture is not (with
    the prefix as the remote, also once drained into the prefix). The run
    then names it too and exits 3, and removes what it kept for status.
    A server no run started: status says it did not check."""
    local, fifo = work / "local", work / "go"
    prefix, remote = dirs(work)
    os.mkfifo(fifo)
    script = (f"echo captured > {prefix}/c.txt; /usr/bin/env -u LD_PRELOAD /bin/sh -c 'echo x > {prefix}/s.txt'; "
              f"cat {fifo} > /dev/null")
    args = [BIN, "run", "--prefix", prefix, "--local", local, "--job", "t", "--mpi", "none"]
    args += ["--remote", remote] if remote else []
    proc = subprocess.Popen([*map(str, args), "--", "/bin/sh", "-c", script], env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline, st = time.time() + 60, None
        while time.time() < deadline:
            st = status(local, "t", env=ENV)
            drained = SEPARATE or (prefix / "c.txt").exists()
            if st and st["missed"].get("files") and drained:
                break
            time.sleep(0.1)
        else:
            fail(f"status never named the missed file: {st and st.get('missed')}")
        missed = st["missed"]
        check(missed["checked"] and missed["files"] == [f"{prefix}/s.txt"],
              f"status --json named {missed.get('files')}, expected only s.txt")
        check(missed["lines"][0].startswith(f"MISSED: {prefix}/s.txt was created or changed past capture"),
              f"not run's MISSED line: {missed['lines']}")
        table = run([BIN, "status", "--local", local, "--job", "t", "--once"], env=ENV, timeout=60).stdout
        check(f"MISSED: {prefix}/s.txt" in table and f"MISSED: {prefix}/c.txt" not in table,
              f"the table does not name s.txt alone: {table[-600:]}")
        with open(fifo, "w") as f:
            f.write("go\n")
        out, err = proc.communicate(timeout=120)
    finally:
        kill_tree(proc)
    check(proc.returncode == 3, f"paralog run exited {proc.returncode}: {err[-500:]}")
    check(f"MISSED: {prefix}/s.txt" in err and f"MISSED: {prefix}/c.txt" not in err, f"run's MISSED lines: {err[-600:]}")
    left = [p.name for p in local.iterdir() if p.name.startswith(".paralog-snapshot")]
    check(not left, f"run left {left} in {local}")
    server = Server(work / "local2", remote or prefix, ENV, job="u")
    try:
        st = status(work / "local2", "u", env=ENV)
        check(st and st["missed"]["checked"] is False and "no `paralog run` of job u" in st["missed"]["why"],
              f"status of a server no run started: {st and st.get('missed')}")
    finally:
        server.kill()


def case_crash(work, point):
    """The atomic save killed at `point` under capture with no server, then
    `paralog recover`: the final name holds one whole save (the last one
    renamed), never a mix, and the temporary is there only if it was made
    durable and not yet renamed (as in a direct run; unsynced bytes of a
    killed process are not a consistency point and are gone, as after a
    node crash)."""
    prefix, remote, local = work / "prefix", work / "remote", work / "local"
    prefix.mkdir()
    if SEPARATE:
        remote.mkdir()
    else:
        remote = prefix
    env = capture_env(prefix, local, job=None, remote=remote, base=ENV)
    p = run([PY, PROGS / "atomic_crash.py", prefix, point], env=env, check=False, timeout=60)
    check(p.returncode == -9, f"the program was not killed (exit {p.returncode}): {p.stderr[-300:]}")
    r = run([BIN, "recover", "--local", local, "--remote", remote], env=ENV, check=False, timeout=120)
    check(r.returncode == 0, f"recover exited {r.returncode}: {r.stderr[-500:]}")
    data = lambda step: bytes((step * 37 + i) % 253 for i in range(200000 + step))
    want = {"ckpt": data(2 if point == "renamed" else 1)}
    if point == "synced":
        want["ckpt.tmp"] = data(2)
    got = {k: v for k, v in tree(remote).items() if v is not None}
    check(set(got) == set(want), f"the remote holds {sorted(got)}, expected {sorted(want)}")
    for name, content in want.items():
        if got[name] != content:
            saves = [s for s in range(3) if got[name] == data(s)]
            fail(f"{name} is {'save ' + str(saves[0]) if saves else 'no whole save (a mix)'}, expected another")


def case_crash_rotate(work, point, mode):
    """Rotated atomic checkpoints (replacing ckpt/latest, unlinking the
    oldest step) killed with SIGKILL at `point` of save 3, with no server
    then `paralog recover` (`recover`), or under `paralog run`, whose
    server drains while the program runs, then `recover` (`server`). The
    remote must equal the same program stopped at the same point without
    paralog, byte for byte: every final name holds a whole save, old or
    new, never a mix; no temporary of paralog's (`.*.paralog-replace`) is
    left. The one difference: bytes written and not yet fsync'ed when the
    program is killed (`written`) were never a consistency point, so the
    temporary holding them is not on the remote (a crash of the node would
    lose them too)."""
    direct, prefix, remote, local = work / "direct", work / "prefix", work / "remote", work / "local"
    for d in (direct, prefix, remote):
        d.mkdir()
    prog = PROGS / "rotate_crash.py"
    r = run([PY, prog, direct, point, "3", "stop"], env=ENV, check=False, timeout=60)
    check(r.returncode == 0, f"direct run exited {r.returncode}: {r.stderr[-300:]}")
    if mode == "recover":
        env = capture_env(prefix, local, job=None, remote=remote, base=ENV)
        p = run([PY, prog, prefix, point, "3", "kill"], env=env, check=False, timeout=60)
        check(p.returncode == -9, f"the program was not killed (exit {p.returncode}): {p.stderr[-300:]}")
    else:
        p = paralog_run(local, prefix, [PY, prog, prefix, point, "3", "kill"], remote=remote, env=ENV,
                        check=False, timeout=120, text=False)
        check(p.returncode != 0, "paralog run exited 0 although its program was killed")
    r = run([BIN, "recover", "--local", local, "--remote", remote], env=ENV, check=False, timeout=120)
    check(r.returncode == 0, f"recover exited {r.returncode}: {r.stderr[-500:]}")
    want = {k: v for k, v in tree(direct).items() if v is not None}
    if point == "written":
        want.pop("ckpt/.step.tmp", None)
    got = {k: v for k, v in tree(remote).items() if v is not None}
    check(not [k for k in got if k.endswith(".paralog-replace")], f"a temporary of paralog's is left: {sorted(got)}")
    check(set(got) == set(want), f"the remote holds {sorted(got)}, the direct run {sorted(want)}")
    for name, content in want.items():
        check(got[name] == content, f"{name} differs from the direct run ({len(got[name])} vs {len(content)} bytes)")
    # Nothing is left to drain, and a second recover changes nothing.
    again = run([BIN, "recover", "--local", local, "--remote", remote], env=ENV, check=False, timeout=120)
    check(again.returncode == 0, f"second recover exited {again.returncode}: {again.stderr[-300:]}")
    check({k: v for k, v in tree(remote).items() if v is not None} == got, "a second recover changed the remote")


def main():
    ap = suite_options()
    ap.add_argument("--remote", choices=["separate", "prefix"], default="separate",
                    help="drain to a directory of its own (default), or to the prefix itself")
    opts = ap.parse_args()
    global SEPARATE
    SEPARATE = opts.remote == "separate"
    build()
    chosen = [c for c in cases() if not opts.only or c[0].startswith(opts.only)]
    return Suite(f"posix programs ({opts.remote} remote)", keep=opts.keep).run(chosen)


if __name__ == "__main__":
    sys.exit(main())
