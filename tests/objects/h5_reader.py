"""The HDF5 side of tests/objects: h5py (Debian's, HDF5 1.10.8) reads each
version's HDF5 view (a virtual dataset over the chunk files) as any user
would, and compares with what was put, byte for byte.

Reads a JSON list of checks on standard input:

  {"file": H5, "expect": RAW_FILE, "dtype": "int32", "shape": [...],
   "attrs": {...}, "slabs": [[start, count], ...]}

Prints one line per check; exits 1 at the first that does not hold."""
import json
import sys

import h5py
import numpy as np


def main():
    for c in json.load(sys.stdin):
        want = np.frombuffer(open(c["expect"], "rb").read(), dtype=np.dtype(c["dtype"]).newbyteorder("<"))
        want = want.reshape(c["shape"])
        with h5py.File(c["file"], "r") as f:
            d = f["data"]
            attrs = json.loads(d.attrs["attributes"])
            facts = [(d.dtype.name, np.dtype(c["dtype"]).name, "dtype"),
                     (list(d.shape), c["shape"], "shape"),
                     (d.is_virtual, True, "virtual"),
                     (attrs, c.get("attrs", {}), "attributes")]
            for got, exp, what in facts:
                if got != exp:
                    print(f"FAIL {c['file']}: {what} {got} != {exp}")
                    return 1
            if d[...].tobytes() != want.tobytes():
                print(f"FAIL {c['file']}: h5py: the whole array differs from what was put")
                return 1
            for start, count in c.get("slabs", []):
                s = tuple(slice(a, a + n) for a, n in zip(start, count))
                if d[s].tobytes() != want[s].tobytes():
                    print(f"FAIL {c['file']}: h5py: slab {start} {count} differs")
                    return 1
        print(f"ok {c['file']}: {want.dtype} {want.shape}, {len(c.get('slabs', []))} slabs, h5py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
