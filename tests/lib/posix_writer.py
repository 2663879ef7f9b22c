#!/usr/bin/python3
"""A plain POSIX program (no MPI) for the server and objstore tests
(tests/server/e2e.py, tests/remote/objstore.py): EPOCHS epochs of
scattered writes to one file, each ended by fsync (a consistency point of a
one-rank communicator), the last by close. Deterministic: `expected` builds
the same bytes in memory, so a test knows the file at every epoch.

  posix_writer.py write FILE EPOCHS BYTES_PER_EPOCH [--readback]
      --readback: after each epoch, close, reopen read-only at once and
      check the whole file against the expected bytes (exit 1 on a
      difference): a program that verifies its own output while the server
      drains it.
  posix_writer.py expected OUT EPOCHS BYTES_PER_EPOCH [UPTO]
      write the expected file after epoch UPTO (default: the last)
"""

import os
import random
import sys


def ops(epochs, per_epoch):
    """Per epoch: a list of (offset, bytes) writes and an optional truncate."""
    rng = random.Random(1234)
    span = max(per_epoch * 2, 4096)
    out = []
    for e in range(1, epochs + 1):
        writes = []
        left = per_epoch
        while left > 0:
            n = min(left, rng.choice([512, 4096, 65536, 1 << 20]))
            off = rng.randrange(0, span)
            writes.append((off, bytes([(e * 37 + off // 512) % 251 + 1]) * n))
            left -= n
        trunc = rng.randrange(span // 2, span) if e % 3 == 0 else None
        out.append((writes, trunc))
    return out


def expected(epochs, per_epoch, upto=None):
    buf = bytearray()
    for i, (writes, trunc) in enumerate(ops(epochs, per_epoch), start=1):
        if upto is not None and i > upto:
            break
        for off, data in writes:
            if len(buf) < off + len(data):
                buf.extend(b"\0" * (off + len(data) - len(buf)))
            buf[off:off + len(data)] = data
        if trunc is not None:
            del buf[trunc:]
            if len(buf) < trunc:
                buf.extend(b"\0" * (trunc - len(buf)))
    return bytes(buf)


def write(path, epochs, per_epoch, readback):
    plan = ops(epochs, per_epoch)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for i, (writes, trunc) in enumerate(plan, start=1):
        for off, data in writes:
            os.pwrite(fd, data, off)
        if trunc is not None:
            os.ftruncate(fd, trunc)
        if i < len(plan):
            os.fsync(fd)
        else:
            os.close(fd)
        print(f"committed {i}", flush=True)
        if readback:
            if i < len(plan):
                os.close(fd)
            with open(path, "rb") as f:
                got = f.read()
            want = expected(epochs, per_epoch, i)
            if got != want:
                diff = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                print(f"readback after epoch {i}: differs at byte {diff} (sizes {len(got)} vs {len(want)})", file=sys.stderr)
                sys.exit(1)
            if i < len(plan):
                fd = os.open(path, os.O_WRONLY)


def main():
    cmd = sys.argv[1]
    if cmd == "write":
        write(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), "--readback" in sys.argv)
    elif cmd == "expected":
        upto = int(sys.argv[5]) if len(sys.argv) > 5 else None
        with open(sys.argv[2], "wb") as f:
            f.write(expected(int(sys.argv[3]), int(sys.argv[4]), upto))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
