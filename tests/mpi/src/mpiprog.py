"""What the Python MPI test programs share (h5py_writer.py,
mpi4py_writer.py): the grid's geometry and values, the command line
(OUTDIR [--snapshot]), one error line then MPI_Abort for any failure, the
row split, and the --snapshot copies (README.md, "Common conventions").

Installed beside the programs (tests/mpi/Makefile), where Python finds it:
a script's own directory is first on its module path.
"""
import sys
import traceback

import numpy as np
from mpi4py import MPI

ROWS, COLS = 64, 48
SUB_R0, SUB_NR, SUB_C0, SUB_NC = 16, 32, 8, 32
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
name = "?"
snapshot = False


def fail(msg):
    sys.stderr.write(f"{name}: rank {rank}: {msg}\n")
    sys.stderr.flush()
    comm.Abort(1)


def excepthook(kind, value, tb):
    traceback.print_exception(kind, value, tb)
    fail(f"uncaught {kind.__name__}: {value}")


def start(program, output):
    """The program `program` starts: any uncaught exception (an MPI error
    raises MPI.Exception) aborts the job; its arguments are read. Returns
    the path of its output file, `output` in OUTDIR."""
    global name, snapshot
    name = program
    sys.excepthook = excepthook
    args = sys.argv[1:]
    snapshot = "--snapshot" in args
    pos = [a for a in args if not a.startswith("--")]
    if len(pos) != 1 or any(a.startswith("--") and a != "--snapshot" for a in args):
        fail(f"usage: {program}.py OUTDIR [--snapshot]")
    return f"{pos[0]}/{output}"


def check_ranks():
    if size > SUB_NR:
        fail(f"supports at most {SUB_NR} ranks")


def split(n, parts, idx):
    base, rem = divmod(n, parts)
    return idx * base + min(idx, rem), base + (1 if idx < rem else 0)


def values(epoch, r0, nr, c0, nc):
    """The int32 values of the [nr x nc] block at (r0, c0) in `epoch`."""
    i = np.arange(r0, r0 + nr, dtype=np.int32)[:, None]
    j = np.arange(c0, c0 + nc, dtype=np.int32)[None, :]
    return (epoch * 1000000 + i * 1000 + j).astype(np.int32)


def epoch_done(path, n):
    """With --snapshot: barrier, rank 0 copies the file to <path>.epoch<n>, barrier."""
    if not snapshot:
        return
    comm.Barrier()
    if rank == 0:
        with open(path, "rb") as src, open(f"{path}.epoch{n}", "wb") as dst:
            while True:
                chunk = src.read(1 << 16)
                if not chunk:
                    break
                dst.write(chunk)
    comm.Barrier()
