"""Whole columns of a snapshot read by the driver (pyarrow), worked a step of STEP_ROWS rows at a time.

Why steps: at 20M replica rows, a numpy expression over a whole column allocates a fresh array of the column's
length for each of its terms (160 MB for int64), and on this kind of VM the kernel's first touch of memory the
process never had costs more than the arithmetic (docs/audit.md#performance, first touch). A step's arrays are
freed at its end and their memory taken again by the next step, so the process touches a few of them, not one per
term. Outputs that must be whole (a key per row) are allocated once and filled step by step.

The names (cluster, topic, log dir) are read as dictionaries, one per row group. `Names` gives one dictionary for all
of a column's chunks and each step's rows as indices into it, instead of pyarrow's Table.unify_dictionaries, which
writes new index arrays for the whole column.
"""

from __future__ import annotations

from typing import Any

import numpy as np

STEP_ROWS = 1 << 20


def steps(table: Any) -> Any:
    """(first row, batch) for the table's rows, STEP_ROWS at most a batch: each batch lies within one chunk of each
    column (pyarrow's batches never span a chunk's end)."""
    at = 0
    for batch in table.to_batches(max_chunksize=STEP_ROWS):
        yield at, batch
        at += batch.num_rows


class Names:
    """A chunked dictionary column (a dictionary per chunk, or one shared): `dictionary` holds every value of every
    chunk once, and `rows` gives a step's rows as indices into it, a null as len(dictionary)."""

    def __init__(self, column: Any) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        chunks = column.chunks
        self._ends = np.cumsum([len(c) for c in chunks], dtype=np.int64)
        # Per chunk, where each entry of its own dictionary is in `dictionary`, then len(dictionary) for a null row.
        self._where: list[np.ndarray] | None = None
        if not chunks:
            self.dictionary = pa.array([], column.type.value_type)
        elif all(c.dictionary.equals(chunks[0].dictionary) for c in chunks[1:]):
            self.dictionary = chunks[0].dictionary
        else:
            # One dictionary encoding of every chunk's dictionary end to end: its dictionary is the union, and its
            # indices say where each chunk's entries went (one hash table for all, not one per chunk).
            joined = pc.dictionary_encode(pa.concat_arrays([c.dictionary for c in chunks]))
            self.dictionary = joined.dictionary
            ends = np.cumsum([len(c.dictionary) for c in chunks])
            # A null entry in a chunk's own dictionary is a null name.
            at = pc.fill_null(joined.indices, len(self.dictionary)).to_numpy(zero_copy_only=False).astype(np.int64)
            self._where = [np.append(at[end - len(c.dictionary):end], len(self.dictionary))
                           for c, end in zip(chunks, ends.tolist(), strict=True)]

    def rows(self, array: Any, at: int) -> np.ndarray:
        """The indices (int64) of `array`, a slice of the column from its row `at` within one chunk."""
        import pyarrow.compute as pc

        if not len(array):
            return np.zeros(0, dtype=np.int64)
        if self._where is None:
            return pc.fill_null(array.indices, len(self.dictionary)).to_numpy(zero_copy_only=False).astype(np.int64)
        where = self._where[int(np.searchsorted(self._ends, at, side="right"))]
        return where[pc.fill_null(array.indices, len(where) - 1).to_numpy(zero_copy_only=False)]
