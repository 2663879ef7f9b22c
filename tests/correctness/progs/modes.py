#!/usr/bin/python3
"""Files created with modes other than 0644: os.open with 0600, 0755 and
0640, Python's open (0666 less the umask), C fopen, 0666 under umask 077,
a 0600 file fchmod'ed to 0644 before its close, cp -p and tar -x of a 0751
file under umask 077, and a 0600 temporary renamed into place (a rename
keeps the mode). Then
other processes (stat(1), a Python child) print the modes before and after
a chmod, and the files' extended attributes (none) and what `ls -l` says:
under paralog the files are still in the log, or drained.
Usage: modes.py DIR"""
import os, sys, ctypes
d = sys.argv[1]
def w(name, mode):
    fd = os.open(f"{d}/{name}", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, mode)
    os.write(fd, name.encode()); os.close(fd)
w("secret", 0o600)
w("script", 0o755)
w("group", 0o640)
with open(f"{d}/plain", "w") as f: f.write("x")
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
fp = libc.fopen(f"{d}/stdio".encode(), b"w"); libc.fputs(b"s", ctypes.c_void_p(fp)); libc.fclose(ctypes.c_void_p(fp))
old = os.umask(0o077)
w("umasked", 0o666)
os.umask(old)
# fchmod before the close: the remote gets the later mode
fd = os.open(f"{d}/fchmoded", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
os.write(fd, b"f"); os.fchmod(fd, 0o644); os.close(fd)
# cp -p and tar -x of a 0751 file under umask 077: they set the mode
# through the descriptor (cp as a POSIX ACL, falling back to fchmod)
import shutil, subprocess, tempfile
src = tempfile.mkdtemp()
with open(f"{src}/tool", "w") as f: f.write("t")
os.chmod(f"{src}/tool", 0o751)
subprocess.run(["tar", "-C", src, "-cf", f"{src}/a.tar", "tool"], check=True)
old = os.umask(0o077)
subprocess.run(["cp", "-p", f"{src}/tool", f"{d}/cp_p"], check=True)
subprocess.run(["tar", "-C", d, "-xf", f"{src}/a.tar"], check=True)
os.umask(old)
shutil.rmtree(src)
# the atomic pattern: a temporary created 0600 renamed into place keeps 0600
w("key.tmp", 0o600); os.replace(f"{d}/key.tmp", f"{d}/key")
# another process's stat: the creation modes the log recorded, then a
# chmod's once drained
names = sorted(os.listdir(d))
subprocess.run(["stat", "-c", "%n %a"] + names, cwd=d, check=True)
os.chmod(f"{d}/group", 0o604)
subprocess.run([sys.executable, "-c", "import os, sys; d = sys.argv[1]; "
                "print(*(f'{n} {os.stat(os.path.join(d, n)).st_mode & 0o7777:o}' for n in sorted(os.listdir(d))))", d],
               check=True)
# and their extended attributes (none; ls -l asks for every entry's and
# says nothing)
import errno
def xattr(n):
    try:
        os.getxattr(os.path.join(d, n), "user.paralog")
        return "has user.paralog"
    except OSError as e:
        return errno.errorcode[e.errno]
print(*(f"{n}: {os.listxattr(os.path.join(d, n))} {xattr(n)}" for n in names))
ls = subprocess.run(["ls", "-l", d], capture_output=True, text=True)
print("ls -l:", ls.returncode, ls.stderr.strip() or "nothing on stderr")
