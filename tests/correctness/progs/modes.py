#!/usr/bin/python3
"""Files created with modes other than 0644: os.open with 0600, 0755 and
0640, Python's open (0666 less the umask), C fopen, 0666 under umask 077,
and a 0600 temporary renamed into place (a rename keeps the mode). Then
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
# the atomic pattern: a temporary created 0600 renamed into place keeps 0600
w("key.tmp", 0o600); os.replace(f"{d}/key.tmp", f"{d}/key")
# another process's stat: the creation modes the log recorded, then a
# chmod's once drained
import subprocess
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
