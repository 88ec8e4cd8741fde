"""The kept history's large files that the next run reads once and whole, written past the page cache (O_DIRECT):
`write_rows` writes a .npy of stacked rows from the arrays themselves, no stacked copy.

Why (docs/audit.md, "Files written past the page cache"): writing 250 MB through the page cache (the state's rows
at 20M replicas) took 2.2 s here, most of it the kernel's, in page-cache pages allocated for the first time; the same
bytes written direct took 0.2 s. Those pages would only hold bytes the next append reads hours later, when the cache
has long moved on; a read of them then is a sequential read, as cheap cold as warm (0.15 s for 250 MB, cold).

Crash safety: this module only writes a file. Its caller's invariants stand unchanged (forecast_columns: a fresh
name, fsynced before a manifest names it). O_DIRECT takes the data past the cache, not the file's size and extents,
so the caller's fsync is still what makes the file durable.

A file system that refuses O_DIRECT (tmpfs; some network ones) gets the same bytes written the usual way.
"""

from __future__ import annotations

import errno
import mmap
import os
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ALIGN = 4096  # O_DIRECT's offsets, lengths and buffers: a multiple of the logical block size, at most a page
STAGE = 8 << 20  # bytes copied into the aligned buffer per write
MAGIC = b"\x93NUMPY\x01\x00"


def header(dtype: np.dtype, shape: tuple[int, ...], fortran: bool = False) -> bytes:
    """A version 1.0 .npy header padded to ALIGN bytes, so the data starts on an aligned offset (np.load and its
    mmap_mode read any header length up to 64 KiB: the padding is spaces before the newline, as numpy pads)."""
    text = ("{" + f"'descr': {np.lib.format.dtype_to_descr(dtype)!r}, 'fortran_order': {fortran!r}, "
            f"'shape': {shape!r}, " + "}")
    body = text.encode("latin1")
    pad = ALIGN - len(MAGIC) - 2 - len(body) - 1
    if pad < 0:  # never for the shapes written here; numpy's own writer then
        raise ValueError("header too long")
    return MAGIC + struct.pack("<H", ALIGN - len(MAGIC) - 2) + body + b" " * pad + b"\n"


def write_rows(path: Path, rows: Sequence[np.ndarray], dtype: type | np.dtype, columns: bool = False) -> None:
    """Writes `rows` (equal lengths n) as one .npy array of `dtype`, each converted as it is written: of shape
    (len(rows), n), or with `columns` of shape (n, len(rows)) in Fortran order (the same bytes: each is a column).
    Direct where the file system allows it, else through the page cache."""
    dtype = np.dtype(dtype)
    n = len(rows[0]) if len(rows) else 0
    if any(len(r) != n for r in rows):
        raise ValueError("rows of different lengths")
    head = header(dtype, (n, len(rows)) if columns else (len(rows), n), fortran=columns)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
        _buffered(path, head, rows, dtype)
        return
    try:
        _direct(fd, head, rows, dtype)
    except OSError as e:
        if e.errno != errno.EINVAL:  # refused at the first write, not the open (some file systems)
            raise
        os.close(fd)
        fd = -1
        _buffered(path, head, rows, dtype)
    finally:
        if fd >= 0:
            os.close(fd)


def _chunks(rows: Sequence[np.ndarray], dtype: np.dtype) -> list[memoryview]:
    """Each row's bytes in dtype, a chunk at a time (a row converted whole would be another copy of it)."""
    step = STAGE // dtype.itemsize
    out = []
    for row in rows:
        for lo in range(0, len(row), step):
            out.append(memoryview(np.ascontiguousarray(row[lo:lo + step], dtype=dtype)).cast("B"))
    return out


def _direct(fd: int, head: bytes, rows: Sequence[np.ndarray], dtype: np.dtype) -> None:
    # Page-aligned, as O_DIRECT wants its buffers; let go with its views (a close with a view alive would raise).
    view = memoryview(mmap.mmap(-1, STAGE))
    view[:len(head)] = head
    fill, length = len(head), len(head)
    for chunk in _chunks(rows, dtype):
        at = 0
        while at < len(chunk):
            take = min(len(chunk) - at, STAGE - fill)
            view[fill:fill + take] = chunk[at:at + take]
            fill, at, length = fill + take, at + take, length + take
            if fill == STAGE:
                _write_all(fd, view[:fill])
                fill = 0
    if fill:
        # The last block padded to ALIGN, then the file cut back to its length.
        end = -(-fill // ALIGN) * ALIGN
        view[fill:end] = bytes(end - fill)
        _write_all(fd, view[:end])
    os.ftruncate(fd, length)


def _write_all(fd: int, data: memoryview) -> None:
    done = 0
    while done < len(data):
        done += os.write(fd, data[done:])


def _buffered(path: Path, head: bytes, rows: Sequence[np.ndarray], dtype: np.dtype) -> None:
    with open(path, "wb") as f:
        f.write(head)
        for chunk in _chunks(rows, dtype):
            f.write(chunk)
