#!/usr/bin/python3
"""The atomic-save pattern killed with SIGKILL at one point of its third
save. Usage: atomic_crash.py DIR POINT, POINT one of:
  written   after writing ckpt.tmp, before its fsync
  synced    after the fsync of ckpt.tmp, before the rename
  renamed   right after os.replace(ckpt.tmp, ckpt)
The first two saves complete (ckpt holds save 1 when the third begins).
"""
import os
import signal
import sys


def data(step):
    return bytes((step * 37 + i) % 253 for i in range(200000 + step))


def main():
    d, point = sys.argv[1], sys.argv[2]
    for step in range(3):
        last = step == 2
        with open(f"{d}/ckpt.tmp", "wb") as f:
            f.write(data(step))
            f.flush()
            if last and point == "written":
                os.kill(os.getpid(), signal.SIGKILL)
            os.fsync(f.fileno())
            if last and point == "synced":
                os.kill(os.getpid(), signal.SIGKILL)
        os.replace(f"{d}/ckpt.tmp", f"{d}/ckpt")
        if last and point == "renamed":
            os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
