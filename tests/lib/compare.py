"""Comparisons that name the first difference: bytes, files, trees."""

import os
from pathlib import Path

from .check import Failed
from .proc import run

CHUNK = 1 << 16


def _bytes(x):
    return x if isinstance(x, (bytes, bytearray)) else Path(x).read_bytes()


def first_difference(want, got, names=("want", "got")):
    """None if the bytes (or the files' bytes) are equal, else where they
    first differ and the sizes."""
    want, got = _bytes(want), _bytes(got)
    if want == got:
        return None
    for i in range(0, min(len(want), len(got)), CHUNK):
        a, b = want[i:i + CHUNK], got[i:i + CHUNK]
        if a != b:
            k = next((j for j, (p, q) in enumerate(zip(a, b)) if p != q), None)
            if k is not None:
                return (f"first difference at byte {i + k} ({names[0]} {a[k]:#04x}, {names[1]} {b[k]:#04x}); "
                        f"sizes {len(want)} vs {len(got)}")
    return f"sizes differ: {names[0]} {len(want)}, {names[1]} {len(got)}"


def same_bytes(want, got, what, names=("want", "got")):
    """Failed naming `what` and the first difference unless want == got
    (bytes or paths)."""
    why = first_difference(want, got, names)
    if why:
        raise Failed(f"{what}: {why}")


def files(root, snapshots=True):
    """The files under root, relative, sorted (snapshots=False: without the
    epoch snapshots `NAME.epochK` of a --snapshot run)."""
    root = Path(root)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and (snapshots or ".epoch" not in p.name))


def tree(root):
    """{relative path: bytes, None for a directory, or ("symlink", target)}
    under root (links are not followed)."""
    out = {}
    for dirpath, dirs, names in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for name in dirs + names:
            path = os.path.join(dirpath, name)
            key = os.path.normpath(os.path.join(rel, name))
            if os.path.islink(path):
                out[key] = ("symlink", os.readlink(path))
            elif name in dirs:
                out[key] = None
            else:
                with open(path, "rb") as f:
                    out[key] = f.read()
    return out


def tree_difference(want, got, names=("in the direct run", "on the remote")):
    """None if two tree() maps are equal, else the first difference."""
    for path in sorted(set(want) | set(got)):
        a, b = want.get(path, "missing"), got.get(path, "missing")
        if a == b:
            continue
        if isinstance(a, bytes) and isinstance(b, bytes):
            at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            return f"{path}: differs at byte {at} ({len(a)} bytes {names[0]}, {len(b)} {names[1]})"
        def kind(v):
            if v == "missing":
                return "missing"
            if v is None:
                return "a directory"
            if isinstance(v, tuple):
                return f"a symbolic link to {v[1]}"
            return f"{len(v)} bytes"
        return f"{path}: {kind(a)} {names[0]}, {kind(b)} {names[1]}"
    return None


def h5same(a, b):
    """h5diff finds no difference between two HDF5 files."""
    return run(["h5diff", a, b], check=False, timeout=300).returncode == 0


def same_files(want_dir, got_dir, hdf5=False):
    """The same files under both directories, each with the same bytes (hdf5:
    the same HDF5 content, by h5diff -r); how many."""
    want, got = files(want_dir), files(got_dir)
    if want != got:
        raise Failed(f"files differ: direct {want}, drained {got}")
    for rel in want:
        if hdf5:
            r = run(["h5diff", "-r", Path(want_dir) / rel, Path(got_dir) / rel], check=False)
            if r.returncode != 0:
                raise Failed(f"{rel}: h5diff: {r.stdout[-500:]}")
        else:
            same_bytes(Path(want_dir) / rel, Path(got_dir) / rel, rel)
    return len(want)
