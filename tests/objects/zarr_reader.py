"""The Zarr side of tests/objects: run by the virtual environment's Python
(zarr-python 3 from PyPI, target/objects-venv), not by the suite's own.

Reads a JSON list of checks on standard input; for each, opens a Zarr view
with zarr-python as any user would (zarr.open_array on the directory) and
compares with what was put, byte for byte (NaN bit patterns included):

  {"view": DIR, "expect": RAW_FILE, "dtype": "int32", "shape": [...],
   "chunks": [...], "attrs": {...}, "slabs": [[start, count], ...],
   "files": [[start, count, RAW_FILE], ...]}   # paralog obj get --slice output
  {"view": DIR, "refuse": true}                # reading must fail

Prints one line per check; exits 1 at the first that does not hold."""
import json
import sys

import numpy as np
import zarr


def slab(start, count):
    return tuple(slice(a, a + n) for a, n in zip(start, count))


def main():
    checks = json.load(sys.stdin)
    for c in checks:
        arr = zarr.open_array(c["view"], mode="r")
        if c.get("refuse"):
            try:
                arr[...]
            except Exception as e:  # zarr raises its codec's error
                print(f"refused {c['view']}: {type(e).__name__}: {e}")
                continue
            print(f"FAIL {c['view']}: a damaged chunk was read without an error")
            return 1
        want = np.frombuffer(open(c["expect"], "rb").read(), dtype=np.dtype(c["dtype"]).newbyteorder("<"))
        want = want.reshape(c["shape"])
        facts = [
            (str(arr.dtype), np.dtype(c["dtype"]).name, "dtype"),
            (list(arr.shape), c["shape"], "shape"),
            (list(arr.chunks), c["chunks"], "chunks"),
            (dict(arr.attrs), c.get("attrs", {}), "attributes"),
        ]
        for got, exp, what in facts:
            if got != exp:
                print(f"FAIL {c['view']}: {what} {got} != {exp}")
                return 1
        if arr[...].tobytes() != want.tobytes():
            print(f"FAIL {c['view']}: the whole array differs from what was put")
            return 1
        for start, count in c.get("slabs", []):
            if arr[slab(start, count)].tobytes() != want[slab(start, count)].tobytes():
                print(f"FAIL {c['view']}: slab {start} {count} differs")
                return 1
        for start, count, path in c.get("files", []):
            if open(path, "rb").read() != want[slab(start, count)].tobytes():
                print(f"FAIL {path}: paralog obj get --slice {start} {count} differs from the array put")
                return 1
        print(f"ok {c['view']}: {arr.dtype} {arr.shape}, {len(c.get('slabs', []))} slabs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
