"""An mpi4py program putting one array by paralog.objects' chunked PUT over
its communicator (tests/objects/mpi.py): each rank one chunk of ROWS x 64
float64 values (global index + SALT); rank 0 reads it back and prints
"version N" and "read back equal", or on an error "rank R: error CODE: MSG".
`local=DIR`: a logged store (this rank's node-local directory: ranks of
several simulated nodes each name their own); rank 0 prints "logged".
`parts`: chunks of 1.5 x ROWS rows, each rank's rows written by
`write_part` (most chunks in parts of two ranks).

Usage: mpirun -n N python3 py_writer.py STORE NAME ROWS SALT [mismatch|parts|local=DIR]"""
import sys

import numpy as np
from mpi4py import MPI

import paralog.objects as po


def main():
    comm = MPI.COMM_WORLD
    url, name, rows, salt = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    shape = [rows * comm.size + (1 if sys.argv[5:] == ["mismatch"] and comm.rank == 1 else 0), 64]
    local = next((a[len("local="):] for a in sys.argv[5:] if a.startswith("local=")), None)
    parts = "parts" in sys.argv[5:]
    s = po.Store(url, local=local)
    try:
        chunks = (rows + rows // 2 if parts else rows, 64)
        w = s.begin_mpi(comm, name, "float64", shape, chunks, attrs={"writer": "py_writer"})
        mine = np.arange(rows * 64, dtype="f8").reshape(rows, 64) + comm.rank * rows * 64 + salt
        if parts:
            w.write_part((comm.rank * rows, 0), mine)
        else:
            w.write_chunk((comm.rank, 0), mine)
        v = s.commit_mpi(comm, w)
    except po.ObjectError as e:
        print(f"rank {comm.rank}: error {e.code}: {e}", flush=True)
        return 3
    if comm.rank == 0 and local:
        print("logged", flush=True)
    elif comm.rank == 0:
        print(f"version {v}")
        got = s.get(name, version=v)
        want = np.arange(rows * comm.size * 64, dtype="f8").reshape(-1, 64) + salt
        print("read back equal" if got.tobytes() == want.tobytes() else "read back DIFFERS", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
