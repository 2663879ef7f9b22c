#!/usr/bin/python3
"""mpi4py_writer: the header + 2-D subarray pattern through mpi4py's MPI.File.

Rank 0 writes a 64-byte header with Write_at; every rank sets a subarray view
(displacement 64) of a 64x48 int32 array over an MPI Dims_create process grid
and writes its block with Write_at_all; Sync; then a second Write_at_all
through a new view overwrites the sub-block rows 16..47, cols 8..39 (split
by rows, so ranks overwrite other ranks' bytes); Close.  Geometry and values
are those of header_subarray.c: bytes 64.. of the output equal
header_subarray.dat's.

Usage: mpi4py_writer.py OUTDIR [--snapshot]   (run with /usr/bin/python3;
mpi4py is built against Open MPI only on Debian 12)

Hazard: an interpreter as the application: libmpi is loaded only when Python
dlopens mpi4py's extension module (the capture shim must still wrap its
MPI_File_* calls), and Python's own file activity (imports, .pyc files)
happens next to the captured writes.
"""
import numpy as np
from mpi4py import MPI

from mpiprog import (COLS, ROWS, SUB_C0, SUB_NC, SUB_NR, SUB_R0, comm, check_ranks, epoch_done, rank, size,
                     split, start, values)

HDR = 64


def write_block(fh, epoch, r0, nr, c0, nc):
    ftype = MPI.INT.Create_subarray([ROWS, COLS], [nr, nc], [r0, c0], order=MPI.ORDER_C)
    ftype.Commit()
    fh.Set_view(HDR, MPI.INT, ftype, "native")
    ftype.Free()
    buf = np.ascontiguousarray(values(epoch, r0, nr, c0, nc))
    fh.Write_at_all(0, [buf, MPI.INT])


path = start("mpi4py_writer", "mpi4py_writer.dat")
check_ranks()

fh = MPI.File.Open(comm, path, MPI.MODE_CREATE | MPI.MODE_RDWR)
fh.Set_errhandler(MPI.ERRORS_RETURN)

# epoch 1: header by rank 0, then every rank's grid block
if rank == 0:
    text = f"PLTEST mpi4py_writer {ROWS}x{COLS} int32 nprocs={size}\n".encode()
    header = bytearray(HDR)
    header[: len(text)] = text
    fh.Write_at(0, [header, MPI.BYTE])
dims = MPI.Compute_dims(size, 2)
r0, nr = split(ROWS, dims[0], rank // dims[1])
c0, nc = split(COLS, dims[1], rank % dims[1])
write_block(fh, 1, r0, nr, c0, nc)
fh.Sync()
comm.Barrier()
epoch_done(path, 1)

# epoch 2: a sub-block across the process grid, split by rows
r0, nr = split(SUB_NR, size, rank)
write_block(fh, 2, SUB_R0 + r0, nr, SUB_C0, SUB_NC)
fh.Close()
epoch_done(path, 2)
