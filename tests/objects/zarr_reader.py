"""The Zarr side of tests/objects: run by the virtual environment's Python
(zarr-python 3 and tensorstore from PyPI, target/objects-venv), not by the
suite's own.

Reads a JSON list of checks on standard input; for each, opens a Zarr view
with zarr-python and with tensorstore as any user would (zarr.open_array,
tensorstore's zarr3 driver on the directory) and compares with what was
put, byte for byte (NaN bit patterns included). A view `s3://BUCKET/KEY`
is opened on S3 (the endpoint and credentials from the standard AWS_*
environment): zarr-python through s3fs (fsspec), tensorstore with its own
`s3` kvstore driver.

  {"view": DIR, "expect": RAW_FILE, "dtype": "int32", "shape": [...],
   "chunks": [...], "attrs": {...}, "slabs": [[start, count], ...],
   "files": [[start, count, RAW_FILE], ...]}   # paralog obj get --slice output
  {"view": DIR, "refuse": true}                # reading must fail, in both
  {"view": DIR, "absent": true}                # no array there, for both
  {"view": DIR, "poll_until": FLAG_FILE, "expect": ..., "dtype": ..., "shape": [...]}
      # until FLAG_FILE exists, open and read the view again and again
      # (zarr-python and tensorstore in turn): each open finds no array or
      # reads it whole equal to what was put (never fill values for a
      # chunk that was written); after the flag, one read must succeed

Prints one line per check; exits 1 at the first that does not hold."""
import json
import os
import sys

import numpy as np
import tensorstore as ts
import zarr


def slab(start, count):
    return tuple(slice(a, a + n) for a, n in zip(start, count))


def zarr_open(view):
    if view.startswith("s3://"):
        return zarr.open_array(view, mode="r", storage_options={"endpoint_url": os.environ["AWS_ENDPOINT_URL"]})
    return zarr.open_array(view, mode="r")


def ts_open(view):
    kv = {"driver": "file", "path": view.rstrip("/") + "/"}
    if view.startswith("s3://"):
        bucket, _, key = view[len("s3://"):].partition("/")
        kv = {"driver": "s3", "bucket": bucket, "path": key.rstrip("/") + "/",
              "endpoint": os.environ["AWS_ENDPOINT_URL"], "aws_region": os.environ["AWS_REGION"]}
    return ts.open({"driver": "zarr3", "kvstore": kv}, open=True, read=True).result()


def expected(c):
    want = np.frombuffer(open(c["expect"], "rb").read(), dtype=np.dtype(c["dtype"]).newbyteorder("<"))
    return want.reshape(c["shape"])


def poll(c):
    """The view while it is being made: absent, or whole and equal."""
    want = expected(c).tobytes()
    absent = whole = 0
    readers = (lambda: zarr_open(c["view"])[...], lambda: ts_open(c["view"]).read().result())
    while True:
        last = os.path.exists(c["poll_until"])
        try:
            got = readers[(absent + whole) % 2]().tobytes()
        except Exception:  # no zarr.json yet: no array to open
            if last:
                print(f"FAIL {c['view']}: no view after the commit returned")
                return 1
            absent += 1
            continue
        if got != want:
            print(f"FAIL {c['view']}: a view read while being made differs from the array put")
            return 1
        whole += 1
        if last:
            print(f"poll {c['view']}: {absent} opens found no array, {whole} read it whole and equal")
            return 0


def main():
    checks = json.load(sys.stdin)
    for c in checks:
        if c.get("poll_until"):
            if poll(c):
                return 1
            continue
        if c.get("absent"):
            for reader, opener in (("zarr-python", zarr_open), ("tensorstore", ts_open)):
                try:
                    opener(c["view"])
                except Exception as e:  # no zarr.json: nothing to open
                    print(f"absent for {reader}: {type(e).__name__}: {str(e)[:120]}")
                    continue
                print(f"FAIL {c['view']}: {reader} opened a view that must not be there")
                return 1
            continue
        arr = zarr_open(c["view"])
        if c.get("refuse"):
            readers = (("zarr-python", lambda: arr[...]),
                       ("tensorstore", lambda: ts_open(c["view"]).read().result()))
            for reader, read in readers:
                try:
                    read()
                except Exception as e:  # each raises its codec's error
                    print(f"refused by {reader}: {type(e).__name__}: {str(e)[:160]}")
                    continue
                print(f"FAIL {c['view']}: {reader} read a damaged chunk without an error")
                return 1
            continue
        want = expected(c)
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
        t = ts_open(c["view"])
        if (str(t.dtype.numpy_dtype), list(t.shape), list(t.chunk_layout.read_chunk.shape)) != (
                np.dtype(c["dtype"]).name, c["shape"], c["chunks"]):
            print(f"FAIL {c['view']}: tensorstore sees {t.dtype} {t.shape} {t.chunk_layout.read_chunk.shape}")
            return 1
        if t.read().result().tobytes() != want.tobytes():
            print(f"FAIL {c['view']}: tensorstore: the whole array differs from what was put")
            return 1
        for start, count in c.get("slabs", []):
            if t[slab(start, count)].read().result().tobytes() != want[slab(start, count)].tobytes():
                print(f"FAIL {c['view']}: tensorstore: slab {start} {count} differs")
                return 1
        for start, count, path in c.get("files", []):
            if open(path, "rb").read() != want[slab(start, count)].tobytes():
                print(f"FAIL {path}: paralog obj get --slice {start} {count} differs from the array put")
                return 1
        print(f"ok {c['view']}: {arr.dtype} {arr.shape}, {len(c.get('slabs', []))} slabs, zarr-python and tensorstore")
    return 0


if __name__ == "__main__":
    sys.exit(main())
