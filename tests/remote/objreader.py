"""A small independent reader of the versioned object layout (docs/objstore.md,
format version 1), for the tests: version records decoded and checked
(magic, lengths, order, CRC-32C), blocks read whole and checked against
their CRC-32C. Standard library only (a table-driven CRC-32C)."""

import os
import re
import struct
from pathlib import Path

MAGIC = b"PLGOBJVR"
HEADER_LEN = 64
PIECE_LEN = 64


def _table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_T = _table()


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    t = _T
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


class Damaged(Exception):
    pass


class Starved(Exception):
    """Retention removed every version this reader tried before it could
    read it (a reader slower than the publishes with a small keep)."""


class Version:
    def __init__(self, number, size, epoch, deleted, name, pieces):
        self.number, self.size, self.epoch, self.deleted, self.name, self.pieces = \
            number, size, epoch, deleted, name, pieces


def decode(b, path="record"):
    if len(b) < HEADER_LEN + 4:
        raise Damaged(f"{path}: record of {len(b)} bytes is too short")
    end = len(b) - 4
    if crc32c(b[:end]) != struct.unpack_from("<I", b, end)[0]:
        raise Damaged(f"{path}: checksum mismatch")
    if b[:8] != MAGIC:
        raise Damaged(f"{path}: bad magic")
    fmt, kind, hlen, number, size, gen, epoch, n, flags, name_len = struct.unpack_from("<HHIQQQQIIH", b, 8)
    # Version 2 adds the 16-byte origin of the log after the 64 bytes of 1.
    if (fmt, kind, hlen) not in ((1, 1, HEADER_LEN), (2, 1, HEADER_LEN + 16)) or len(b) < hlen + 4:
        raise Damaged(f"{path}: format {fmt} kind {kind} header {hlen}")
    if flags & ~1:
        raise Damaged(f"{path}: unknown flags {flags:#x}")
    if hlen + name_len + n * PIECE_LEN != end:
        raise Damaged(f"{path}: lengths do not add up")
    name = b[hlen:hlen + name_len]
    pieces = []
    prev_end = 0
    for i in range(n):
        o = hlen + name_len + i * PIECE_LEN
        file_off, length = struct.unpack_from("<QQ", b, o)
        chunk = b[o + 16:o + 32]
        block_off, block_len, block_crc, d, skip = struct.unpack_from("<QQIIQ", b, o + 32)
        if length == 0 or file_off < prev_end or skip + length > block_len:
            raise Damaged(f"{path}: piece {i} out of order or out of its block")
        prev_end = file_off + length
        pieces.append((file_off, length, chunk, d, block_off, block_len, block_crc, skip))
    if prev_end > size:
        raise Damaged(f"{path}: pieces reach past the size")
    return Version(number, size, (gen, epoch), bool(flags & 1), name, pieces)


def chunk_path(root, d, chunk):
    return Path(root) / "data" / str(d) / chunk.hex()


def versions(root, name):
    try:
        names = os.listdir(Path(root) / "meta" / name)
    except FileNotFoundError:
        return []
    return sorted(int(n[1:]) for n in names if re.fullmatch(r"v\d{10}", n))


def version(root, name, n):
    p = Path(root) / "meta" / name / f"v{n:010d}"
    v = decode(p.read_bytes(), str(p))
    if v.number != n or v.name != name.encode():
        raise Damaged(f"{p}: record is version {v.number} of {v.name!r}")
    return v


def read_version(root, v):
    """The bytes of a version, every block checked (FileNotFoundError when a
    chunk is gone: retention removed the version meanwhile)."""
    out = bytearray()
    cache = {}
    for file_off, length, chunk, d, block_off, block_len, block_crc, skip in v.pieces:
        out.extend(bytes(file_off - len(out)))
        key = (chunk, block_off)
        if key not in cache:
            p = chunk_path(root, d, chunk)
            with open(p, "rb") as f:
                f.seek(block_off)
                block = f.read(block_len)
            if len(block) != block_len:
                raise Damaged(f"{p}: block at {block_off} is short ({len(block)} of {block_len} bytes)")
            if crc32c(block) != block_crc:
                raise Damaged(f"{p}: block at {block_off} of {block_len} bytes fails its checksum")
            cache = {key: block}
        out.extend(cache[key][skip:skip + length])
    out.extend(bytes(v.size - len(out)))
    return bytes(out)


def read_latest(root, name, tries=20):
    """(version, bytes, restarts) of the newest version, or None if there is
    none yet. A record or chunk removed by retention under the reader makes
    it start again from the newest version, as docs/objstore.md says."""
    restarts = 0
    for _ in range(tries):
        vs = versions(root, name)
        if not vs:
            return None
        try:
            v = version(root, name, vs[-1])
            return v, read_version(root, v), restarts
        except FileNotFoundError:
            restarts += 1
    raise Starved(f"{name}: no version could be read in {tries} tries")


def chunks_on_disk(root):
    d = Path(root) / "data"
    return sorted((int(k.name), bytes.fromhex(c.name)) for k in d.iterdir() if k.is_dir()
                  for c in k.iterdir()) if d.exists() else []
