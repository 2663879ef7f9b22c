#!/usr/bin/python3
"""h5py_writer: parallel h5py (driver='mpio') over an existing file,
collective dataset writes, flush, an attribute rewritten.

The pattern of hdf5_writer.c through h5py: rank 0 writes 1 MiB of junk at the
path with POSIX; all ranks open it with h5py.File(path, 'w', driver='mpio')
(H5F_ACC_TRUNC), create a 64x48 int32 dataset "grid" (track_times=False, and
no timestamps on the root group either, so runs are byte-identical) with an
attribute "epoch" = 1, write their row block inside `dset.collective`, and
flush (H5Fflush -> MPI_File_sync).  Epoch 2: the attribute is modified in
place to 2 and the sub-block rows 16..47, cols 8..39 is rewritten
collectively, split by rows; close.

Usage: h5py_writer.py OUTDIR [--snapshot]; run with /usr/bin/python3 under
mpirun.openmpi: Debian's h5py loads its MPI build only when
OMPI_COMM_WORLD_SIZE (an MPI launcher) or H5PY_ALWAYS_USE_MPI is set; the
program aborts if h5py has no MPI support.

Hazards: as hdf5_writer.c (HDF5 size checks, metadata rewritten in place by
rank 0, truncation over existing content), from an interpreter that loads
HDF5 and MPI with dlopen.  Snapshots are taken after flush and after close
(one MPI_File_sync, from the flush).  The output is byte-identical to
hdf5_writer.c's.
"""
import h5py
from mpi4py import MPI

from mpiprog import (COLS, ROWS, SUB_C0, SUB_NC, SUB_NR, SUB_R0, comm, check_ranks, epoch_done, fail, rank,
                     size, split, start, values)

path = start("h5py_writer", "h5py_writer.h5")
if not h5py.get_config().mpi:
    fail("this h5py has no MPI support (run it under mpirun, or set H5PY_ALWAYS_USE_MPI=1)")
check_ranks()

if rank == 0:
    with open(path, "wb") as junk:
        junk.write(bytes((0xA0 ^ (i * 131 % 251)) for i in range(4096)) * 256)
comm.Barrier()

# h5py.File has no fcpl argument: build the file id with the low-level API so
# the root group gets no timestamps either.
fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
fapl.set_fapl_mpio(comm, MPI.INFO_NULL)
fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
fcpl.set_obj_track_times(False)
f = h5py.File(h5py.h5f.create(path.encode(), h5py.h5f.ACC_TRUNC, fapl=fapl, fcpl=fcpl))

# epoch 1
dset = f.create_dataset("grid", (ROWS, COLS), dtype="<i4", track_times=False)
dset.attrs.create("epoch", 1, dtype="<i4")
r0, nr = split(ROWS, size, rank)
with dset.collective:
    dset[r0:r0 + nr, :] = values(1, r0, nr, 0, COLS)
f.flush()
comm.Barrier()
epoch_done(path, 1)

# epoch 2
dset.attrs.modify("epoch", 2)
r0, nr = split(SUB_NR, size, rank)
r0 += SUB_R0
with dset.collective:
    dset[r0:r0 + nr, SUB_C0:SUB_C0 + SUB_NC] = values(2, r0, nr, SUB_C0, SUB_NC)
f.close()
epoch_done(path, 2)
