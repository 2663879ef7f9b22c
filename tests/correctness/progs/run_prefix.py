#!/usr/bin/python3
"""Runs the program and the script a test built in DIR the ways Python
does: subprocess (fork and exec), os.posix_spawn and os.posix_spawnp (DIR
on PATH), os.execv in a forked child, and last os.execve of a descriptor
(glibc's fexecve). Usage: run_prefix.py DIR"""
import os, subprocess, sys
d = sys.argv[1]
subprocess.run(["./hello", "sub"], cwd=d, check=True)
subprocess.run(["./s.sh", "q"], cwd=d, check=True)
env = {**os.environ, "PATH": f"{d}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
for spawn, prog in ((os.posix_spawn, f"{d}/hello"), (os.posix_spawnp, "hello"), (os.posix_spawnp, "s.sh")):
    pid = spawn(prog, [prog, spawn.__name__], env)
    _, status = os.waitpid(pid, 0)
    assert status == 0, (prog, status)
pid = os.fork()
if pid == 0:
    os.execv(f"{d}/hello", ["named", "execv"])
_, status = os.waitpid(pid, 0)
assert status == 0, status
sys.stdout.flush()
os.execve(os.open(f"{d}/hello", os.O_RDONLY), ["fd", "fexecve"], os.environ)
