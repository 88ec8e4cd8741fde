"""Each partition's size in a snapshot (the median of its current replicas' sizes) and each replica's partition as a
row of the compact history's keys, found on the names' packed codes (codes.py): partition_sizes numbers them as
they first appear, sizes_on_keys on the history's keys (the new partitions after them), partition_rows looks up
copies' rows. Each gives what pandas' groupby and a MultiIndex would (tests/audit/test_forecast_members.py checks
both ways), in a fraction of the time and memory at 20M replicas (docs/forecast-performance.md)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from mover.audit import columns as audit_columns
from mover.audit import threads
from mover.audit.forecast.codes import PACK_CHUNK, decoded, pack
from mover.audit.forecast.history import PARTITION_KEYS


def partition_sizes(frame: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame, np.ndarray] | None:
    """(sizes, names, group): each partition's size in a snapshot's current replicas `frame` (the median of its
    replicas' sizes), its names (cluster and topic as `frame`'s categoricals) and each replica's partition, numbered
    as they first appear: what groupby(PARTITION_KEYS, sort=False, observed=True) gives with median() and ngroup(),
    found on the names' packed codes (pack) and group_medians. At 20M replicas the groupby took 2.5-3.1 s of CPU
    and 1 GB of fresh memory, this 0.7 s and 0.7 GB. None where pack or group_medians does not apply (the caller
    groups with pandas)."""
    if not all(isinstance(frame[n].dtype, pd.CategoricalDtype) for n in PARTITION_KEYS[:2]):
        return None
    found = pack(frame, PARTITION_KEYS)
    if found is None:
        return None
    packed, parts, _ = found
    group, uniques = pd.factorize(packed)  # numbered as they first appear, as the groupby's ngroup()
    del packed
    sizes = group_medians(group, frame["size_bytes"].to_numpy(), len(uniques))
    if sizes is None:
        return None
    return sizes, decoded(uniques, PARTITION_KEYS, parts, frame), group


def group_medians(group: np.ndarray, values: np.ndarray, count: int) -> np.ndarray | None:
    """The median of integer `values` in each of `count` groups (`group`: each value's, 0 .. count-1; nan for a
    group with none), as pandas' groupby median gives it: of three values their sum less the least and the most,
    of two half their sum, of one itself (a partition's replicas: nearly always three or fewer); the groups of more
    sorted by value. Exact while every value is below 2^50 in size (their sums in float64); None past that, or for
    values that are not integers (the caller asks pandas)."""
    if not _exact(values):
        return None
    count_of = audit_columns.group_sums(group, count)
    out = audit_columns.group_sums(group, count, values)
    # Of three values their sum less the least and the most, of one or two their mean: worked out in the sums' own
    # array, the least and the most one after the other in the same memory (each array of every group is 54 MB at
    # 6.7M partitions, touched afresh: five of them made and let go here before, docs/audit.md). Not on two threads:
    # scatters at random places took longer two at a time than one after the other (docs/forecast-performance.md,
    # "The lock let go").
    three = count_of == 3
    for extreme, start in ((np.minimum, np.iinfo(np.int64).max), (np.maximum, np.iinfo(np.int64).min)):
        found = np.full(count, start)
        audit_columns.scatter(extreme, found, group, values)  # the interpreter's lock let go meanwhile
        np.subtract(out, found, out=out, where=three)
        del found
    np.divide(out, count_of, out=out, where=~three & (count_of > 0))
    out[count_of == 0] = np.nan
    # Nearly always no group of more than three (a replication factor of 3 at most): then no gather of every
    # value's group count (160 MB at 20M replicas).
    many = np.flatnonzero(count_of[group] > 3) if len(count_of) and count_of.max() > 3 else ()
    if len(many):  # sorted by group, then value: each group's middle one (odd) or the mean of the middle two
        order = many[np.lexsort((values[many], group[many]))]
        g, v = group[order], values[order].astype(np.float64)
        start = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
        n = count_of[g[start]]
        low, high = v[start + (n - 1) // 2], v[start + n // 2]
        out[g[start]] = (low + high) / 2
    return out


def _exact(values: np.ndarray) -> bool:
    """Whether group_medians' sums of `values` are exact: integers, each below 2^50 in size."""
    return values.dtype.kind in "iu" and not (len(values) and max(abs(int(values.min())), abs(int(values.max())))
                                              >= 1 << 50)


BY_ROW_STEP = 1 << 20  # rows whose medians medians_by_row finds at once


def copies_by_row(rows: np.ndarray, count: int) -> np.ndarray | None:
    """The places in `rows` (each copy's row, 0 .. count-1) of each row's copies, as a (3, count) int32 array for
    medians_by_row: a row's three copies in their order; of two, the first again third; of one, it three times; of
    none, len(rows) (no place). None when a row has more than three copies (medians_by_row does not apply: the
    caller scatters, group_medians) or the places do not fit int32."""
    n = len(rows)
    if n >= np.iinfo(np.int32).max:
        return None
    per_row = audit_columns.group_sums(rows, count)
    if count and int(per_row.max()) > 3:
        return None
    # The copies row by row, each row's in their own order (a stable sort of int32: numpy's radix sort, 0.11 s for
    # 20M copies).
    order = np.argsort(rows, kind="stable").astype(np.int32)
    out = np.empty((3, count), dtype=np.int32)
    if not n:
        out[...] = n
        return out
    least, most = int(per_row.min()), int(per_row.max())
    if least == most:  # every row of as many copies (nearly always: one replication factor): their places strided
        for j in range(3):  # a first copy stands in the places a row has none for
            np.copyto(out[j], order[j if j < most else 0::most])
        return out
    start = np.zeros(count, dtype=np.int64)  # each row's first copy in `order`
    np.cumsum(per_row[:-1], out=start[1:])
    # Each row's first, second and third copy where it has them (start is ascending: read in order), its first
    # copy standing in the places it has none for; no place where it has none.
    np.copyto(out[0], np.take(order, start, mode="clip"))
    out[0, per_row == 0] = n
    for j in (1, 2):
        np.copyto(out[j], np.take(order, start + j, mode="clip"))
        np.copyto(out[j], out[0], where=per_row <= j)
    return out


def medians_by_row(by_row: np.ndarray, values: np.ndarray) -> np.ndarray | None:
    """group_medians(rows, `values`, count) from the places copies_by_row found on those rows: each row's three
    values gathered, not every value scattered four times into every row (20M replicas of 6.7M partitions: 0.30 s
    against 0.65 s, a probe; docs/forecast-performance.md, "Medians gathered"). The same answers bit for bit: the
    middle of three as an integer (group_medians' float sum less the least and the most is exact below 2^50), of two
    their sum halved, of one itself, of none nan. None where group_medians is (values not exact)."""
    if not _exact(values):
        return None
    count, n = by_row.shape[1], len(values)
    out = np.full(count, np.nan)
    if not n:
        return out

    def step(lo: int) -> None:  # a step at a time: its temporaries reused, not 54 MB each afresh
        at = by_row[:, lo:lo + BY_ROW_STEP]
        x, y, z = (np.take(values, at[j], mode="clip") for j in range(3))  # no place (n): clipped, then nan
        least = np.minimum(x, y)
        np.maximum(x, y, out=x)
        np.minimum(x, z, out=x)
        np.maximum(least, x, out=least)  # the middle of three
        part = out[lo:lo + BY_ROW_STEP]
        part[...] = least
        two = np.flatnonzero((at[2] == at[0]) & (at[1] != at[0]))
        part[two] = (np.take(values, at[0, two]) + np.take(values, at[1, two])) / 2
        part[at[0] == n] = np.nan

    # Each step writes its own rows: on both threads, which the whole read's other work or the main thread's read
    # of the kept history leaves room for (the update phase 1.24 -> 1.08 s, medians of five rounds in turn at 20M).
    threads.each(range(0, count, BY_ROW_STEP), step)
    return out


@dataclass
class OnKeys:
    """A snapshot's partitions found as rows of the history's keys (sizes_on_keys)."""
    column: np.ndarray  # each row's size then (the median of its replicas'; nan: none), the new rows' last
    new: pd.DataFrame  # the partitions new to the history (cluster, topic, partition), as they first appear
    rows: np.ndarray  # each replica's row (int32 where the rows fit)
    by_row: np.ndarray | None = None  # copies_by_row of `rows`, where found


SPARSE = 4  # slots of the partitions' numbers per key (sizes_on_keys), past which the lookup is not made


def sizes_on_keys(frame: pd.DataFrame, keys: pd.DataFrame) -> OnKeys | None:
    """Each partition's size in a snapshot's current replicas `frame` as a row of the history's `keys` (what
    partition_sizes then partition_rows give: the new partitions rows after the keys', as they first appear), found
    without numbering 20M replicas' partitions by a hash (pd.factorize: 1.5-2 s of a 20M append, most of it memory
    touched afresh): each topic (its cluster's and its names' codes) gets a run of slots, one per partition number
    up to the keys' most, and a table of the slots gives each key's row; a replica's row is a look-up of its slot.
    None where that does not apply (names that are not categoricals, a null, sizes past group_medians' range,
    partitions' numbers too sparse for their slots: more than SPARSE per key); the caller then takes that way."""
    n = len(keys)
    names = ("cluster", "topic")
    if not n or not len(frame) or not all(isinstance(frame[c].dtype, pd.CategoricalDtype) for c in names):
        return None
    if frame["partition"].dtype.kind not in "iu" or keys["cluster"].isna().any() or keys["topic"].isna().any():
        return None
    cats = {c: frame[c].cat.categories for c in names}
    topics = len(cats["topic"])
    if len(cats["cluster"]) * topics >= 1 << 31:
        return None
    kc, kt = key_codes(keys, cats["cluster"], cats["topic"])
    found_slots = slots(kc, kt, keys["partition"].to_numpy(np.int64), len(cats["cluster"]), topics)
    if found_slots is None:
        return None
    lookup, base, width = found_slots
    rows = np.empty(len(frame), dtype=lookup.dtype)
    mc, mt = frame["cluster"].cat.codes.to_numpy(), frame["topic"].cat.codes.to_numpy()
    mp = frame["partition"].to_numpy()
    if (mc < 0).any() or (mt < 0).any():
        return None
    for lo in range(0, len(frame), PACK_CHUNK):  # a chunk at a time: no int64 temporary of every replica
        t = mc[lo:lo + PACK_CHUNK].astype(np.int64) * topics + mt[lo:lo + PACK_CHUNK]
        p = mp[lo:lo + PACK_CHUNK].astype(np.int64)
        inside = (p >= 0) & (p < width[t])
        rows[lo:lo + PACK_CHUNK] = np.where(inside, lookup[np.where(inside, base[t] + p, 0)], -1)
    fresh = np.flatnonzero(rows < 0)
    new = pd.DataFrame({"cluster": pd.Categorical([], categories=cats["cluster"]),
                        "topic": pd.Categorical([], categories=cats["topic"]), "partition": np.zeros(0, np.int64)})
    count = n
    if len(fresh):  # partitions new to the history: rows after the keys', numbered as they first appear
        found = pack(frame.iloc[fresh], PARTITION_KEYS)
        if found is None:
            return None
        packed, parts, _ = found
        group, uniques = pd.factorize(packed)
        rows[fresh] = n + group
        new = decoded(uniques, PARTITION_KEYS, parts, frame)
        count += len(uniques)
    # The medians gathered from the copies' places by row, which the replica map then keeps (forecast_held._one):
    # about the scatters' time (0.4 + 0.27 s against 0.65 s at 20M replicas), so that the next snapshot of these
    # copies has them at no more than a write.
    sizes = frame["size_bytes"].to_numpy()
    by_row = copies_by_row(rows, count)
    column = medians_by_row(by_row, sizes) if by_row is not None else group_medians(rows, sizes, count)
    if column is None:
        return None
    return OnKeys(column, new, rows, by_row)


def slots(kc: np.ndarray, kt: np.ndarray, kp: np.ndarray, clusters: int, topics: int,
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(lookup, base, width): each topic (cluster code kc, topic code kt of `clusters` x `topics`) a run of `width`
    slots from `base`, one per partition number up to its keys' most, and the key's row in its slot of `lookup` (-1:
    none); None where the slots would be more than SPARSE per key (sizes_on_keys)."""
    n = len(kc)
    known = (kc >= 0) & (kt >= 0) & (kp >= 0)  # a key whose names the snapshot lacks has no slot
    tid = kc * topics + kt
    width = np.zeros(clusters * topics, dtype=np.int64)
    np.maximum.at(width, tid[known], kp[known] + 1)
    base = np.cumsum(width) - width
    room = int(width.sum())
    if room > SPARSE * n + 1024:
        return None
    lookup = np.full(room, -1, dtype=np.int32 if n < 1 << 31 else np.int64)
    lookup[base[tid[known]] + kp[known]] = np.flatnonzero(known)
    return lookup, base, width


def key_codes(keys: pd.DataFrame, clusters: pd.Index, topics: pd.Index) -> tuple[np.ndarray, np.ndarray]:
    """The history's keys' cluster and topic as codes of a snapshot's categories (int64; -1: a name it lacks)."""
    return (pd.Categorical(keys["cluster"], categories=clusters).codes.astype(np.int64),
            pd.Categorical(keys["topic"], categories=topics).codes.astype(np.int64))


def partition_rows(keys: pd.DataFrame, members: pd.DataFrame) -> np.ndarray:
    """Each copy's row of the history's `keys` (-1: none). With the copies' names as categoricals and no null key:
    each (cluster, topic, partition) packed into one integer from the categories' codes (the history's names
    coded by the same categories), looked up in a hash of the history's: no string per copy. Else a MultiIndex of
    the names."""
    if not len(keys):
        return np.full(len(members), -1, dtype=np.intp)
    cluster, topic = members["cluster"], members["topic"]
    part_m, part_k = members["partition"], keys["partition"]
    if (isinstance(cluster.dtype, pd.CategoricalDtype) and isinstance(topic.dtype, pd.CategoricalDtype)
            and part_m.dtype.kind == "i" and part_k.dtype.kind in "iu" and len(members) and len(keys)):
        mc, mt = cluster.cat.codes.to_numpy(np.int64), topic.cat.codes.to_numpy(np.int64)
        kc, kt = key_codes(keys, cluster.cat.categories, topic.cat.categories)
        pm, pk = part_m.to_numpy(np.int64), part_k.to_numpy(np.int64)
        span = int(max(pm.max(), pk.max())) + 1
        topics = len(topic.cat.categories)
        nulls = keys["cluster"].isna().any() or keys["topic"].isna().any() or (mc < 0).any() or (mt < 0).any()
        if (not nulls and min(pm.min(), pk.min()) >= 0
                and len(cluster.cat.categories) * topics * span < 1 << 62):
            packed = (kc * topics + kt) * span + pk
            # A history key whose names no copy has: a value no copy packs to.
            packed = np.where((kc < 0) | (kt < 0), -1 - np.arange(len(keys)), packed)
            query = (mc * topics + mt) * span + pm
            if len(query) == len(packed) and np.array_equal(query, packed):
                # The history's partitions in the history's order (a snapshot's partitions as the one before had
                # them): no hash of 6.7M keys (0.4 s at 20M replicas).
                return np.arange(len(keys))
            found = slots(kc, kt, pk, len(cluster.cat.categories), topics)
            if found is not None:
                # Each copy's slot looked up: no hash of the 6.7M keys (1.2 s at 20M replicas, a whole snapshot's
                # partitions against the history's with some added).
                lookup, base, width = found
                at = mc * topics + mt
                inside = (pm >= 0) & (pm < width[at])
                return np.where(inside, lookup[np.where(inside, base[at] + pm, 0)], -1).astype(np.intp)
            return pd.Index(packed).get_indexer(query)
    return pd.MultiIndex.from_frame(keys).get_indexer(pd.MultiIndex.from_frame(
        members[PARTITION_KEYS].astype({"partition": keys["partition"].dtype})))
