"""A 2-d .npy file written a row at a time by write(2): what np.load (mapped or not) reads as np.save's.

Why not a mapping (np.lib.format.open_memmap, "w+") nor np.stack then np.save: a new file mapped and written
faults every page in. The file is sparse until then, so each fault reads a hole (the kernel zeroes the page), then
the copy writes it again: at 20M replicas the rows' counts (140 MB an append) cost up to 0.34 s of faults on this
VM (perf: filemap_fault under the copy, docs/audit.md). np.stack makes a fresh copy of every row first (anonymous
pages faulted in). Here each row is converted (when its type differs) and handed to the page cache as it is.

Crash safety is the caller's (forecast_columns' invariants): this writes a fresh file and does not fsync it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROWS_AT_ONCE = 1 << 22  # elements converted at once, where a row's type is not the file's (4-32 MB)


def save_rows(path: Path, rows: Sequence[Any], dtype: Any, length: int | None = None) -> None:
    """`rows` (each 1-d, of `length` elements: the first's when None) as one (len(rows), length) C-order array of
    `dtype` in the .npy file `path`."""
    kind = np.dtype(dtype)
    count = len(rows[0]) if length is None and len(rows) else (length or 0)
    header = {"descr": np.lib.format.dtype_to_descr(kind), "fortran_order": False, "shape": (len(rows), count)}
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)  # a (rows, N) shape's header is far within 1.0's
        for row in rows:
            values = np.asarray(row)
            if values.shape != (count,):
                raise ValueError(f"{path.name}: a row of shape {values.shape}, not ({count},)")
            if values.dtype == kind and values.flags.c_contiguous:
                f.write(memoryview(values).cast("B"))
                continue
            for start in range(0, count, ROWS_AT_ONCE):  # a bounded piece converted at a time
                f.write(memoryview(np.ascontiguousarray(values[start:start + ROWS_AT_ONCE], dtype=kind)).cast("B"))


def indices_within(values: np.ndarray, bound: int) -> bool:
    """Every one of integer `values` (an index array read from a file) in 0 .. bound-1: int32 ones in one pass, read
    as unsigned (a negative one is then past any bound), not two (min, then max: 20M copies mapped at 20M replicas,
    each pass faulting their pages in)."""
    if values.dtype == np.int32:
        return not len(values) or int(values.view(np.uint32).max()) < bound
    return not len(values) or 0 <= int(values.min()) and int(values.max()) < bound
