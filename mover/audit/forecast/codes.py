"""Names packed into integers: each row's names (categoricals' codes, integers less their least) as one integer, so
that grouping and lookups of millions of copies work on codes, not on strings (a groupby of 20M copies' three names
took 5 s of a forecast: docs/forecast-performance.md, "Carried fits, dictionary codes"). Used to group the disks
(members.py) and the partitions (partition_sizes.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

# Packed values counted in an array of them (_packed) up to this many (8 MB of counts), or twice the rows.
DIRECT_ROOM = 1 << 20
PACK_CHUNK = 1 << 20  # rows packed at once (_packed)


def distinct(frame: pd.DataFrame, names: list[str]) -> tuple[np.ndarray, pd.DataFrame]:
    """Each row's group of `names` (numbered in the packed codes' order or as they first appear: _packed) and the
    groups' names as plain values."""
    packed = _packed(frame, names)
    if packed is not None:
        return packed
    group = frame.groupby(names, sort=False, observed=True).ngroup().to_numpy()
    first = np.unique(group, return_index=True)[1]  # each group's first row, in the groups' order
    return group, frame[names].iloc[first].reset_index(drop=True).astype(
        {n: object for n in names if isinstance(frame[n].dtype, pd.CategoricalDtype)})


def _packed(frame: pd.DataFrame, names: list[str]) -> tuple[np.ndarray, pd.DataFrame] | None:
    """members_of's distinct on integer codes: each row's columns `names` (categoricals: their codes; integers:
    less their least) packed into one integer, the groups numbered in the packed values' order when there are at
    most DIRECT_ROOM of them (or twice the rows), else as they first appear (pd.factorize, as
    groupby(sort=False).ngroup() numbers them), and their names decoded from the packed values. None when a column
    is neither, has a null, or the codes do not fit 62 bits. At 20M copies a groupby of the disks' three names and
    the sort that found each group's first row took 5 s of a forecast (docs/audit.md). The disks' numbers are only
    names: the forecast's rows are sorted by their keys (forecast.finish), and a disk's copies keep their order."""
    found = pack(frame, names)
    if found is None:
        return None
    packed, parts, room = found
    if room <= max(DIRECT_ROOM, 2 * len(frame)):
        # Few enough packed values to count each in an array of them: the groups numbered in the values' order,
        # no hash of every row (pd.factorize of 20M copies: 0.6 s warm, 2 s in memory touched afresh).
        present = np.flatnonzero(np.bincount(packed, minlength=room))
        lookup = np.zeros(room, dtype=np.int32 if len(present) < 1 << 31 else np.int64)
        lookup[present] = np.arange(len(present))
        group, uniques = lookup[packed], present
    else:
        group, uniques = pd.factorize(packed)
    return group, decoded(uniques, names, parts)


def decoded(uniques: np.ndarray, names: list[str], parts: list[tuple[np.ndarray, int, int, Any]],
             like: pd.DataFrame | None = None) -> pd.DataFrame:
    """The names of packed values `uniques` (pack's `parts`): a categorical's as plain values, or as `like`'s
    categoricals when given."""
    decoded: dict[str, Any] = {}
    for name, (_, _, span, how) in zip(reversed(names), reversed(parts), strict=True):
        code, uniques = uniques % span, uniques // span
        if not isinstance(how, np.ndarray):
            decoded[name] = (code + how[0]).astype(how[1])
        else:
            decoded[name] = how[code] if like is None else pd.Categorical.from_codes(code, dtype=like[name].dtype)
    return pd.DataFrame({name: decoded[name] for name in names})


def pack(frame: pd.DataFrame, names: list[str]) -> tuple[np.ndarray, list[tuple[np.ndarray, int, int, Any]],
                                                           int] | None:
    """(packed, parts, room): each row's columns `names` packed into one integer below `room`, and per column its
    values as stored, least, span and how to decode (a categorical's names, or an integer's least and dtype); None
    as _packed says."""
    if not len(frame):
        return None
    # Per column its values as stored (a categorical's codes, int8 for a few names), the least, the span and how
    # to decode; packed a chunk at a time: an int64 copy of every column and of every partial packing were 160 MB
    # each at 20M copies.
    parts: list[tuple[np.ndarray, int, int, Any]] = []
    room = 1
    for name in names:
        column = frame[name]
        if isinstance(column.dtype, pd.CategoricalDtype):
            codes = column.cat.codes.to_numpy()
            if (codes < 0).any():
                return None
            parts.append((codes, 0, len(column.cat.categories), column.cat.categories.to_numpy(dtype=object)))
        elif column.dtype.kind in "iu":
            values = column.to_numpy()
            least = int(values.min())
            parts.append((values, least, int(values.max()) - least + 1, (least, column.dtype)))
        else:
            return None
        room *= parts[-1][2]
    if room >= 1 << 62:
        return None
    packed = np.empty(len(frame), dtype=np.int64)
    for lo in range(0, len(frame), PACK_CHUNK):
        out = packed[lo:lo + PACK_CHUNK]
        first, least, _, _ = parts[0]
        out[:] = first[lo:lo + PACK_CHUNK].astype(np.int64)
        out -= least
        for values, least, span, _ in parts[1:]:
            out *= span
            out += values[lo:lo + PACK_CHUNK].astype(np.int64) - least
    return packed, parts, room
