#!/usr/bin/python3
"""Checkpoints saved the atomic way into ckpt/, each save replacing
ckpt/latest too, with a rotation that keeps the two newest step files:

  save k: ckpt/.step.tmp written, fsync'ed, renamed to ckpt/step-00k;
          ckpt/latest.tmp written, fsync'ed, renamed onto ckpt/latest
          (replacing the previous one); then the oldest step file beyond
          two is unlinked.

Usage: rotate_crash.py DIR POINT SAVE HOW, HOW `kill` (SIGKILL) or `stop`
(exit 0, for the direct run to compare with), at POINT of save SAVE:
  written   after writing ckpt/.step.tmp, before its fsync
  synced    after its fsync, before the rename
  renamed   right after the rename to ckpt/step-00k
  replaced  right after ckpt/latest was replaced
  rotated   right after the oldest step was unlinked
"""
import os
import signal
import sys


def data(step, what):
    return bytes((step * 41 + i * (3 if what == "latest" else 1)) % 251 for i in range(150000 + 977 * step))


def main():
    d, point, save, how = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    ck = f"{d}/ckpt"
    os.makedirs(ck, exist_ok=True)

    def at(p, k):
        if k == save and p == point:
            sys.stdout.flush()
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            os._exit(0)

    for k in range(5):
        with open(f"{ck}/.step.tmp", "wb") as f:
            f.write(data(k, "step"))
            f.flush()
            at("written", k)
            os.fsync(f.fileno())
            at("synced", k)
        os.rename(f"{ck}/.step.tmp", f"{ck}/step-{k:03d}")
        at("renamed", k)
        with open(f"{ck}/latest.tmp", "wb") as f:
            f.write(data(k, "latest"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(f"{ck}/latest.tmp", f"{ck}/latest")
        at("replaced", k)
        steps = sorted(n for n in os.listdir(ck) if n.startswith("step-"))
        for old in steps[:-2]:
            os.unlink(f"{ck}/{old}")
        at("rotated", k)


if __name__ == "__main__":
    main()
