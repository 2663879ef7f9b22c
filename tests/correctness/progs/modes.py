#!/usr/bin/python3
"""Files created with modes other than 0644: os.open with 0600, 0755 and
0640, Python's open (0666 less the umask), C fopen, 0666 under umask 077,
and a 0600 temporary renamed into place (a rename keeps the mode).
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
