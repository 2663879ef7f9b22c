#!/usr/bin/python3
"""Deterministic POSIX writers for the remote tests (no MPI: each fsync or
close is a consistency point of a one-rank program).

  writer.py write PLAN DIR [ARG...]   run the plan, files under DIR
  writer.py expected PLAN OUT [ARG...] write the expected final files under OUT
  writer.py junk FILE SIZE            write SIZE bytes of "J" (one open)
  writer.py reopen FILE               reopen FILE like HDF5's H5Fcreate(TRUNC):
                                      truncate it only if its size is not 0,
                                      write 100 "N" at 1000, print the size seen

A plan is a list of opens; an open is (file name, [epoch, ...]); an epoch is
a list of operations: ("w", offset, bytes), ("t", size) (ftruncate), or
("s", seconds) (a pause, no effect on the bytes). Each epoch but the last of
an open ends with fsync, the last with close. `expected(plan)` gives the
bytes of every file after the plan, `expected_epochs(plan, name)` the bytes
of one file after each of its epochs. The plans:

  sizes                 empty (0 B), one (1 B), five (5 MiB), five1
                        (5 MiB + 1), big (30 MiB): one open, one epoch each
  extents [SEED]        one 40 MiB file with holes: 3 opens x 2 epochs,
                        5,000 scattered extents of 512 B to 16 KiB in all;
                        the first epoch anywhere, each later one inside an
                        8 MiB window (so most parts stay unchanged)
  big SIZE              one file of SIZE bytes, one epoch
  mixed                 four files (100 B, 300 KiB, 12 MiB, 16 MiB), each
                        written whole in two epochs, then reopened and
                        changed in two epochs of scattered writes
  versions N PAUSE_MS   one file, N epochs in one open; epoch e rewrites the
                        whole file (size 256 KiB + (e*37 % 32) * 4 KiB, cut
                        first when it shrinks) with every 16-byte word
                        (e, offset), in shuffled 16 KiB writes; a pause
                        between epochs
"""

import os
import random
import sys
import time
from array import array

MIB = 1 << 20


def data(rng, n):
    return rng.randbytes(n)


def plan_sizes():
    rng = random.Random(7)
    out = []
    for name, size in [("empty.bin", 0), ("one.bin", 1), ("five.bin", 5 * MIB),
                       ("five1.bin", 5 * MIB + 1), ("big.bin", 30 * MIB)]:
        ops = [("w", off, data(rng, min(MIB, size - off))) for off in range(0, size, MIB)]
        out.append((name, [ops]))
    return out


EXTENT_SIZES = (512, 1024, 2048, 4096, 8192, 16384)


def plan_extents(seed=11):
    rng = random.Random(seed)
    span = 40 * MIB
    counts = [1500] + [700] * 5  # 5,000 extents in 6 epochs
    epochs = []
    for i, n in enumerate(counts):
        if i == 0:
            lo, hi = 0, span
            ops = [("t", span)]
        else:
            lo = rng.randrange(0, (span - 8 * MIB) // MIB + 1) * MIB
            hi = lo + 8 * MIB
            ops = []
        for _ in range(n):
            size = rng.choice(EXTENT_SIZES)
            off = rng.randrange(lo, hi - size)
            ops.append(("w", off, data(rng, size)))
        epochs.append(ops)
    return [("scattered.bin", epochs[k:k + 2]) for k in range(0, 6, 2)]


def plan_big(size):
    rng = random.Random(size)
    ops = [("w", off, data(rng, min(MIB, size - off))) for off in range(0, size, MIB)]
    return [("big.bin", [ops])]


def plan_mixed():
    rng = random.Random(5)
    out = []
    for name, size in [("a.bin", 100), ("b.bin", 300 << 10), ("c.bin", 12 * MIB), ("d.bin", 16 * MIB)]:
        half = size // 2
        first = [[("w", 0, data(rng, half))], [("w", half, data(rng, size - half))]]
        out.append((name, first))
    for name, size in [("a.bin", 100), ("b.bin", 300 << 10), ("c.bin", 12 * MIB), ("d.bin", 16 * MIB)]:
        second = []
        for _ in range(2):
            lo = rng.randrange(0, max(1, size - 3 * MIB)) if size > 3 * MIB else 0
            hi = min(size, lo + 3 * MIB)
            ops = []
            for _ in range(20):
                n = min(rng.choice((1, 100, 4096, 65536)), hi - lo)
                off = rng.randrange(lo, hi - n + 1)
                ops.append(("w", off, data(rng, n)))
            second.append(ops)
        out.append((name, second))
    return out


def version_size(e):
    return 256 * 1024 + (e * 37 % 32) * 4096


def version_bytes(e):
    size = version_size(e)
    n = size // 16
    a = array("Q", bytes(16 * n))
    a[0::2] = array("Q", [e]) * n
    a[1::2] = array("Q", range(0, size, 16))
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


def plan_versions(n, pause_ms):
    rng = random.Random(3)
    epochs = []
    prev = 0
    for e in range(1, n + 1):
        body = version_bytes(e)
        ops = [("s", pause_ms / 1000.0)] if e > 1 else []
        if len(body) < prev:
            ops.append(("t", len(body)))
        pieces = list(range(0, len(body), 16384))
        rng.shuffle(pieces)
        ops += [("w", off, body[off:off + 16384]) for off in pieces]
        epochs.append(ops)
        prev = len(body)
    return [("versions.bin", epochs)]


PLANS = {
    "sizes": plan_sizes,
    "extents": plan_extents,
    "big": plan_big,
    "mixed": plan_mixed,
    "versions": plan_versions,
}


def plan(name, *args):
    return PLANS[name](*[int(a) for a in args])


def apply(buf, op):
    if op[0] == "w":
        _, off, d = op
        if len(buf) < off + len(d):
            buf.extend(bytes(off + len(d) - len(buf)))
        buf[off:off + len(d)] = d
    elif op[0] == "t":
        n = op[1]
        del buf[n:]
        buf.extend(bytes(n - len(buf)))


def expected(p):
    files = {}
    for name, epochs in p:
        buf = files.setdefault(name, bytearray())
        for ops in epochs:
            for op in ops:
                apply(buf, op)
    return {k: bytes(v) for k, v in files.items()}


def expected_epochs(p, name):
    """The bytes of `name` after each of its epochs, in order."""
    buf, out = bytearray(), []
    for n, epochs in p:
        if n != name:
            continue
        for ops in epochs:
            for op in ops:
                apply(buf, op)
            out.append(bytes(buf))
    return out


def count_extents(p):
    return sum(1 for _, epochs in p for ops in epochs for op in ops if op[0] == "w")


def write(p, d):
    for name, epochs in p:
        path = os.path.join(d, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        for i, ops in enumerate(epochs):
            for op in ops:
                if op[0] == "w":
                    os.pwrite(fd, op[2], op[1])
                elif op[0] == "t":
                    os.ftruncate(fd, op[1])
                else:
                    time.sleep(op[1])
            if i + 1 < len(epochs):
                os.fsync(fd)
            else:
                os.close(fd)
        print(f"closed {name} after {len(epochs)} epoch(s)", flush=True)


def reopen(path):
    """Reopen an existing file the way HDF5's H5Fcreate(H5F_ACC_TRUNC) does:
    look at its size, truncate it only if it is not empty; then write 100
    bytes at 1000. Direct POSIX result: 1000 zeros and 100 "N"."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    size = os.fstat(fd).st_size
    end = os.lseek(fd, 0, os.SEEK_END)
    if size > 0:
        os.ftruncate(fd, 0)
    os.pwrite(fd, b"N" * 100, 1000)
    os.close(fd)
    print(f"size seen {size} end {end}", flush=True)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "junk":
        with open(sys.argv[2], "wb") as f:
            f.write(b"J" * int(sys.argv[3]))
        return
    if len(sys.argv) == 3 and sys.argv[1] == "reopen":
        reopen(sys.argv[2])
        return
    if len(sys.argv) < 4 or sys.argv[1] not in ("write", "expected"):
        sys.exit(__doc__)
    p = plan(sys.argv[2], *sys.argv[4:])
    if sys.argv[1] == "write":
        write(p, sys.argv[3])
    else:
        for name, body in expected(p).items():
            path = os.path.join(sys.argv[3], name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(body)


if __name__ == "__main__":
    main()
