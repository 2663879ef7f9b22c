"""Read outputs of the objects' benchmark back, whole, as an unmodified
reader would, and time them (bench/objects/run.py): REPEAT rounds, the
paths read one after the other in each round (alternated, so that a
baseline and a view see the same moments of a noisy machine), the best
of each path's reads, and the SHA-256 of the int32 values read (checked by
the harness against the skeleton's formula).

  zarr REPEAT PATH...   zarr-python 3 (the objects' virtual environment's
                        Python): a store zarr-python wrote, or a version's
                        Zarr view
  hdf5 REPEAT PATH...   h5py (Debian's, /usr/bin/python3): /data of an HDF5
                        file parallel HDF5 wrote, or a version's HDF5 view

Prints one JSON line per path, in order: {"best_s": ..., "sha256": ...,
"bytes": ...}."""
import hashlib
import json
import sys
import time


def main():
    kind, repeat, paths = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    if kind == "zarr":
        import zarr

        def read(path):
            return zarr.open_array(path, mode="r")[...]
    else:
        import h5py

        def read(path):
            with h5py.File(path, "r") as f:
                return f["data"][...]
    best, data = [None] * len(paths), [None] * len(paths)
    for _ in range(repeat):
        for i, path in enumerate(paths):
            t0 = time.monotonic()
            data[i] = read(path)
            dt = time.monotonic() - t0
            best[i] = dt if best[i] is None else min(best[i], dt)
    for b, d in zip(best, data):
        v = d.astype("<i4").tobytes()
        print(json.dumps({"best_s": b, "sha256": hashlib.sha256(v).hexdigest(), "bytes": len(v)}))


if __name__ == "__main__":
    main()
