"""Read one output of the objects' benchmark back, whole, as an unmodified
reader would, and time it (bench/objects/run.py): best of --repeat reads,
and the SHA-256 of the int32 values read (checked by the harness against
the skeleton's formula).

  zarr PATH     zarr-python 3 (the objects' virtual environment's Python):
                a store zarr-python wrote, or a version's Zarr view
  hdf5 PATH     h5py (Debian's, /usr/bin/python3): /data of an HDF5 file
                parallel HDF5 wrote, or a version's HDF5 view

Prints one JSON line: {"best_s": ..., "sha256": ..., "bytes": ...}."""
import hashlib
import json
import sys
import time


def main():
    kind, path = sys.argv[1], sys.argv[2]
    repeat = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    if kind == "zarr":
        import zarr

        def read():
            return zarr.open_array(path, mode="r")[...]
    else:
        import h5py

        def read():
            with h5py.File(path, "r") as f:
                return f["data"][...]
    best, data = None, None
    for _ in range(repeat):
        t0 = time.monotonic()
        data = read()
        dt = time.monotonic() - t0
        best = dt if best is None else min(best, dt)
    b = data.astype("<i4").tobytes()
    print(json.dumps({"best_s": best, "sha256": hashlib.sha256(b).hexdigest(), "bytes": len(b)}))


if __name__ == "__main__":
    main()
