"""Walks of a fresh prefix by the usual tools (docs/aggregate.md, "Restart
reads"; crates/capture/src/remotefd.rs), run by tests/aggregate/run.py.
A program writes checkpoint sets (rule `ckpt/{set}/rank-*.dat`) and plain
files in directories outside every rule to a remote other than the prefix;
the prefix and the node-local log are deleted; a new job on the fresh,
empty prefix runs TOOLS below, and so does a plain run of the same script
on the direct run's tree. The outputs must be equal, name for name and
byte for byte:

  fresh prefix tools posix|objstore
                  find, du -ab, ls -R, tar c (its archive extracted and
                  compared with the direct tree), Python os.walk, os.fwalk
                  (descriptors), os.scandir and getdents64 (64-byte reads)
                  of a descriptor, `cd` into a
                  set then relative reads by the shell and by the programs
                  it starts (cat, /bin/pwd, python's getcwd/listdir);
                  then `rm -r` of a set directory, `shutil.rmtree` of a tree
                  of plain files, `chmod -R` of another, `mkdir` and new
                  files in it after `cd` (relative names): a later job's
                  find (with modes) and du equal the direct tree's after
                  the same, and the remote holds neither removed tree
                  (POSIX: no such directory; objstore: `paralog sets` does
                  not list the set)
"""

from tests.aggregate.fresh import fresh_prefix
from tests.lib.check import check
from tests.lib.compare import tree, tree_difference
from tests.lib.paralog import paralog_run
from tests.lib.paths import BIN, PY
from tests.lib.proc import run

RULE = "ckpt/{set}/rank-*.dat"

WRITER = r'''
import os, sys
root = sys.argv[1]
for s in range(2):
    d = os.path.join(root, "ckpt", f"step-{s}")
    os.makedirs(d, exist_ok=True)
    for r in range(3):
        with open(os.path.join(d, f"rank-{r}.dat"), "wb") as f:
            f.write(bytes((s * 7 + r + i) % 251 for i in range(20_000 + 100 * r)))
for sub in ("plain/a", "plain/b/c"):
    os.makedirs(os.path.join(root, sub), exist_ok=True)
    with open(os.path.join(root, sub, "x.txt"), "w") as f:
        f.write(sub * 10)
'''

WALKS = r'''
import ctypes, os, struct
# glibc's getdents64 as the program's own (the preloaded one first).
getdents64 = ctypes.CDLL(None, use_errno=True).getdents64
getdents64.restype = ctypes.c_ssize_t


def dents(fd):
    """The names getdents64 gives, "." and ".." aside, in small reads."""
    names, buf = [], ctypes.create_string_buffer(64)
    while (n := getdents64(fd, buf, len(buf))) > 0:
        at = 0
        while at < n:
            reclen = struct.unpack_from("H", buf.raw, at + 16)[0]
            names.append(buf.raw[at + 19:at + reclen].split(b"\0")[0].decode())
            at += reclen
    assert n == 0, f"getdents64: {n} errno {ctypes.get_errno()}"
    return sorted(set(names) - {".", ".."})


out = []  # in sorted order: a directory's order is the file system's
for d, dirs, files in os.walk("."):
    out.append(f"walk {d} {sorted(dirs)} {sorted((f, os.stat(os.path.join(d, f)).st_size) for f in files)}")
for d, dirs, files, fd in os.fwalk("."):
    sizes = sorted((f, os.stat(f, dir_fd=fd).st_size) for f in files)
    with os.scandir(fd) as it:
        kinds = sorted((e.name, e.is_dir()) for e in it)
    same = os.path.samestat(os.fstat(fd), os.stat(d))
    # getdents64 of the directories only the remote has (the prefix
    # itself is a real directory: the kernel's, docs/aggregate.md "Not yet").
    own = os.open(".", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    out.append(f"fwalk {d} {sorted(dirs)} {sizes} {kinds} {same} {dents(own) if d != '.' else ''}")
    os.close(own)
print("\n".join(sorted(out)))
'''

# Run in ROOT (the prefix, or the direct run's tree) with `sh -e`; what
# the tools say on stderr goes to a file of its own.
TOOLS = r'''
exec 2>"$5"
cd "$1"
echo "== find"; find . | sort
echo "== du"; du -ab . | sort -k2
echo "== ls -R"; ls -R .
echo "== tar"; tar cf - ckpt plain | tar xf - -C "$2"; echo "tar exit $?"
echo "== walks"; "$3" -c "$4"
echo "== cd"
cd ckpt/step-1
basename "$(/bin/pwd)"
cat rank-* | md5sum
for f in rank-*; do wc -c < "$f"; done
"$3" -c 'import os; print(os.path.basename(os.getcwd()), sorted(os.listdir(".")), os.path.getsize("rank-2.dat"))'
cd ../../plain/b && cat c/x.txt && echo && ls -R
'''

# Then, in ROOT: rm -r of a set, an fd-based walk that deletes (Python's
# shutil.rmtree), chmod -R, and new files and a directory made in a
# directory only the remote has, after `cd` (relative names).
REMOVE = ('cd "$1"; rm -r ckpt/step-0; "$2" -c "$3"; chmod -R go-rx plain; '
          'cd plain/a; mkdir new; echo made > new/f.txt; echo more > g.txt')


def case_tools(objstore):
    def case(work):
        prefix, url = fresh_prefix(work, objstore, lambda p: [PY, "-c", WRITER, p], ("--aggregate", RULE))
        remote = work / ("store" if objstore else "remote")
        direct = work / "direct"
        direct.mkdir()
        run([PY, "-c", WRITER, direct])
        outs = {}
        for name, root, under in (("direct", direct, False), ("fresh", prefix, True)):
            untarred = work / f"untarred-{name}"
            untarred.mkdir()
            said = work / f"stderr-{name}"
            cmd = ["sh", "-e", "-c", TOOLS, "tools", root, untarred, PY, WALKS, said]
            if under:
                r = paralog_run(work / "local2", prefix, cmd, remote=url, job="tools", check=False)
            else:
                r = run(cmd, check=False)
            check(r.returncode == 0, f"the tools on the {name} tree exited {r.returncode}: "
                                     f"{r.stdout[-600:]} {said.read_text()[-800:]}")
            lines = [l for l in r.stdout.splitlines() if not l.startswith(("paralog:", "  "))]
            outs[name] = "\n".join(lines)
            check(said.read_text() == "", f"the tools on the {name} tree complained: {said.read_text()[:800]}")
        want, got = outs["direct"].splitlines(), outs["fresh"].splitlines()
        diff = [f"line {i}: direct {a!r}, fresh {b!r}" for i, (a, b) in enumerate(zip(want, got)) if a != b]
        check(len(want) == len(got) and not diff,
              f"the tools see the fresh prefix differently ({len(want)} vs {len(got)} lines): {diff[:4]}")
        diff = tree_difference(tree(work / "untarred-direct"), tree(work / "untarred-fresh"),
                               names=("in the direct run's archive", "in the fresh prefix's"))
        check(not diff, f"tar c of the fresh prefix differs: {diff}")
        check(not any(prefix.iterdir()), f"the walks left {sorted(prefix.iterdir())} in the prefix")
        # rm -r of directories only the remote has: gone from the view at
        # once and from the remote after the drain.
        def remove(root):
            return ["sh", "-e", "-c", REMOVE, "rm", root, PY, 'import shutil; shutil.rmtree("plain/b")']
        run(remove(direct))
        r = paralog_run(work / "local3", prefix, remove(prefix), remote=url, job="rm", check=False)
        check(r.returncode == 0, f"rm -r on the fresh prefix exited {r.returncode}: {r.stderr[-800:]}")
        # Object layouts keep no modes: only the POSIX remote's are compared.
        modes = "%p" if objstore else "%M %p"
        listing = ["sh", "-e", "-c", f'cd "$1"; find . -printf "{modes}\\n" | sort; du -ab . | sort -k2', "ls"]
        want = run([*listing, direct]).stdout
        got = paralog_run(work / "local4", prefix, [*listing, prefix], remote=url, job="after").stdout
        got = "\n".join(l for l in got.splitlines() if not l.startswith(("paralog:", "  "))) + "\n"
        check(got == want, f"after rm -r a new job sees {got!r}, the direct tree is {want!r}")
        if objstore:
            sets = run([BIN, "sets", url]).stdout
            check("step-0" not in sets and "step-1" in sets, f"paralog sets after rm -r: {sets}")
        else:
            left = [p for p in ("ckpt/step-0", "plain/b") if (remote / p).exists()]
            check(not left, f"rm -r left {left} on the remote")
        # mkdir made plain/a/new's chain in the prefix; files go through the log.
        files = [p for p in prefix.rglob("*") if not p.is_dir()]
        check(not files, f"the changes left files {files} in the prefix")
        kind = "object layout" if objstore else "POSIX remote"
        return f"{kind}: find, du, ls -R, tar, walks, cd and rm -r equal to the direct tree's"
    return case


def cases():
    return [
        ("fresh prefix tools posix", case_tools(False)),
        ("fresh prefix tools objstore", case_tools(True)),
    ]
