#!/usr/bin/python3
"""One of several processes writing one shared file through plain POSIX
(tests/correctness/posix_processes.py). Usage: posix_writer.py FILE ID N TOKENS

Each process writes its own 64 KiB block (disjoint), in pieces, with an
fsync in the middle and its close at a moment of its own; then the
overlapping phase: process ID waits for TOKENS/ID-1, overwrites bytes that
process ID-1 also wrote, fsyncs, and passes the token on. So the program
orders every overlapping write by a handoff after a completed fsync: the
rule paralog keeps (an epoch per fsync/close, in the order they became
durable on the node) and direct POSIX agree on the result."""
import os
import sys
import time

path, me, n, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
# Launched by mpirun, the launcher's rank is the id.
for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK"):
    if var in os.environ and me < 0:
        me = int(os.environ[var])
BLOCK = 64 * 1024
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
block = bytes((me * 37 + i) % 251 for i in range(BLOCK))
os.pwrite(fd, block[: BLOCK // 2], me * BLOCK)
time.sleep(0.03 * ((me * 7) % n))
os.fsync(fd)
os.pwrite(fd, block[BLOCK // 2 :], me * BLOCK + BLOCK // 2)
# The overlapping phase, in id order: each overwrites the tail of the
# previous process's overlap region and the head of a shared header.
if me > 0:
    prev = os.path.join(tokens, str(me - 1))
    deadline = time.time() + 60
    while not os.path.exists(prev):
        if time.time() > deadline:
            sys.exit(f"process {me}: no token from {me - 1}")
        time.sleep(0.005)
os.pwrite(fd, bytes([0x41 + me]) * (BLOCK // 4), n * BLOCK + me * (BLOCK // 8))
os.pwrite(fd, f"header by {me}".encode(), 0)
os.fsync(fd)
# Reading back what this process and the earlier ones committed.
got = os.pread(fd, 16, n * BLOCK + me * (BLOCK // 8))
if got != bytes([0x41 + me]) * 16:
    sys.exit(f"process {me}: read back {got!r}")
open(os.path.join(tokens, str(me)), "w").close()
time.sleep(0.02 * ((n - me) % 3))
os.close(fd)
