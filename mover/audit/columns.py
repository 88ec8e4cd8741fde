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


def sort_order(table: Any, keys: list[str]) -> np.ndarray:
    """The row order of `table` sorted by `keys` ascending, as pyarrow's Table.sort_by gives it (stable; nulls last;
    names by UTF-8 bytes, which is code point order), computed on integers (a sort of millions of rows by strings
    cost seconds at 20M replicas, docs/audit.md#performance): a dictionary column by its entries' rank in its
    dictionary, sorted once; a boolean as 0/1; an integer as its offset from the column's least (spans of up to 2**62
    only); a null one past every value. Neighbouring keys are packed into one int64 while their bits fit, so that
    numpy sorts one key or a few."""
    packed: list[np.ndarray] = []
    width = 64  # bits used by the last packed key: none yet
    for name in keys:
        rank, bits = _ranks(table, name)
        if width + bits <= 63:
            last = packed[-1]
            for at in range(0, len(last), STEP_ROWS):  # in steps: no whole-column temporaries
                part = last[at:at + STEP_ROWS]
                part <<= bits
                part |= rank[at:at + STEP_ROWS]
            width += bits
        else:
            packed.append(rank)
            width = bits
    if not packed:
        return np.arange(table.num_rows, dtype=np.int64)
    if len(packed) == 1:
        return np.argsort(packed[0], kind="stable")
    return np.lexsort(packed[::-1])


def _ranks(table: Any, name: str) -> tuple[np.ndarray, int]:
    """sort_order's integer for each row of column `name` (non-negative, nulls last), and how many bits it takes."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = table.column(name)
    rank = np.empty(table.num_rows, dtype=np.int64)
    if pa.types.is_dictionary(column.type):
        names = Names(column)
        order = pc.array_sort_indices(names.dictionary, null_placement="at_end")
        ordered = names.dictionary.take(order)
        valid = len(ordered) - ordered.null_count
        # Dense ranks: a dictionary may hold a name twice (nothing in Parquet forbids it), and both must rank equal
        # for the sort to stay stable across them. A null entry, like a null row, ranks one past every name.
        new = np.ones(valid, dtype=np.int64)
        if valid > 1:
            new[1:] = np.asarray(pc.not_equal(ordered.slice(1, valid - 1), ordered.slice(0, valid - 1)), dtype=bool)
        dense = np.cumsum(new) - 1
        top = int(dense[-1]) + 1 if valid else 0
        of = np.full(len(names.dictionary) + 1, top, dtype=np.int64)
        of[order.to_numpy()[:valid]] = dense
        for at, batch in steps(table.select([name])):
            rank[at:at + batch.num_rows] = of[names.rows(batch.column(0), at)]
        return rank, max(top.bit_length(), 1)
    if pa.types.is_boolean(column.type) or pa.types.is_integer(column.type):
        # As the value's offset from the column's least (a null one past its greatest): broker ids and partitions
        # span a few thousand, so their bits are few and more keys share one int64.
        lo, hi = 0, 1
        if not pa.types.is_boolean(column.type):
            least_most = pc.min_max(column)
            lo, hi = least_most["min"].as_py(), least_most["max"].as_py()
            if lo is None:  # every row null
                lo = hi = 0
        span = hi - lo + 1
        if lo < -(1 << 62) or hi >= 1 << 62 or span.bit_length() > 62:
            raise TypeError(f"cannot order by {name}: values from {lo} to {hi}")
        for at, batch in steps(table.select([name])):
            values = batch.column(0)
            part = rank[at:at + batch.num_rows]
            fill = False if pa.types.is_boolean(column.type) else lo
            part[:] = pc.fill_null(values, fill).to_numpy(zero_copy_only=False)
            part -= lo
            if values.null_count:
                part[np.asarray(values.is_null(), dtype=bool)] = span
        return rank, span.bit_length()
    raise TypeError(f"cannot order by {name}: {column.type}")


def marked(group: np.ndarray, count: int) -> np.ndarray:
    """Which of `count` groups (0 .. count-1) have a member in `group`, as a byte each: what group_sums(group,
    count) > 0 says, where only that is wanted. Written at random places in 1 byte a group, not counted in 8
    (20M rows into 6.7M groups: 0.35 -> 0.17 s, a probe; docs/forecast-performance.md, "Medians gathered")."""
    out = np.zeros(count, dtype=bool)
    if len(group):
        if group.min() < 0:  # an index from the end would mark another group
            raise ValueError("group numbers must be non-negative")
        out[group] = True
    return out


def group_sums(group: np.ndarray, count: int, weights: np.ndarray | None = None) -> np.ndarray:
    """np.bincount(group, weights, minlength=count) for `group` in 0 .. count-1: float sums of `weights`, or int64
    counts without them. A step of STEP_ROWS at a time by np.add.at (scatter), each step's group numbers and weights
    cast on their own: bincount first makes an int64 copy of every group number and a
    float copy of integer weights (160 MB each at 20M rows, memory touched afresh), and took 1.0 s warm against
    0.19 s this way (20M rows into 6.7M groups, a probe). The adds come in the same order: the same sums."""
    out = np.zeros(count, dtype=np.int64 if weights is None else np.float64)
    scatter(np.add, out, group, weights, np.float64)
    return out


def scatter(ufunc: np.ufunc, out: np.ndarray, group: np.ndarray, values: np.ndarray | None = None,
            dtype: Any = None) -> None:
    """ufunc.at(out, group, values) (1 for each without `values`), a step of STEP_ROWS at a time: each step's values
    made `dtype` (when given) and its group numbers numpy's index type, one step's at a time (not 160 MB for 20M
    rows). Given int32 indices ufunc.at holds the interpreter's lock throughout (0.2-0.3 s at 20M rows, every other
    thread stopped: py-spy --gil); given its own, it lets it go, at the same speed (docs/forecast-performance.md,
    "The lock let go"). ValueError for a negative group number (ufunc.at would count from the end)."""
    at = np.empty(min(STEP_ROWS, len(group)), dtype=np.intp)
    for lo in range(0, len(group), STEP_ROWS):
        part = group[lo:lo + STEP_ROWS]
        if part.min() < 0:
            raise ValueError("group numbers must be non-negative")
        index = at[:len(part)]
        index[...] = part
        ufunc.at(out, index, 1 if values is None else np.asarray(values[lo:lo + STEP_ROWS], dtype=dtype))
