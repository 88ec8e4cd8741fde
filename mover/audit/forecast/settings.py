"""Each partition's retention settings (retention.bytes, retention.ms) as of the newest snapshot, by history row, kept
beside the history with a fingerprint of the partitions dataset they were read from. Reading them means reading
every partition's names and finding each one's row among the history's keys: 1.5 s of CPU at 6.7M partitions warm,
4.9 s cold, on the other thread of every append (docs/forecast-performance.md, "Less held at the peak, and the
retention settings kept"). The settings of a fleet change rarely, so a newest snapshot whose partitions dataset has the
kept fingerprint (the same encoded bytes of the names and settings: forecast_replica_map.fingerprint) has the kept
settings, as long as the history's keys are the ones they were found for (the same keys files, no partition added).

Files (forecast_columns' invariants: fresh names, fsynced before the manifest names them, named again while the
same): `retention-<token>.npy`, (2, N) float64: bytes and ms by row (nan: not given). The manifest's
"retention": {"fingerprint", "rows", "keys", "file"}.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mover.audit import snapshot
from mover.audit.forecast import history as forecast_history
from mover.audit.forecast import npy as forecast_npy
from mover.audit.forecast import partition_sizes as forecast_partition_sizes
from mover.audit.forecast import replica_map as forecast_replica_map


@dataclass
class Retention:
    """The settings by history row, and what says whether the next run may take them as they are."""
    bytes: np.ndarray  # (N,) retention.bytes, nan: not given
    ms: np.ndarray  # (N,) retention.ms, nan: not given
    fingerprint: str | None  # of the partitions dataset read (None: not kept)
    file: str | None = None  # the kept file they were read from (named again while the same)

    def entry(self, file: str, keys: list[str], rows: int) -> dict[str, Any]:
        return {"fingerprint": self.fingerprint, "rows": rows, "keys": list(keys), "file": file}


def fingerprint(latest: Path) -> str | None:
    """The fingerprint of snapshot `latest`'s partitions: their names and the settings it has."""
    return forecast_replica_map.fingerprint(latest, "partitions", tuple(forecast_history.PARTITION_KEYS),
                                            tuple(snapshot.PARTITIONS_RETENTION))


@dataclass
class Slotted:
    """A partitions table's settings laid out by topic: each (cluster, topic) a slot (cluster code * topics + topic
    code, in the table's own categories) with a place for each partition number up to its most, in `values` (nan: a
    number not listed). A history key's setting is then at its slot's start plus its partition number: the table's
    partitions are not looked up among the history's 6.7M keys (partition_rows: a hash or slots of the keys, 0.7-0.8 s
    at 20M replicas, then the keys' new rows again)."""
    clusters: pd.Index
    topics: pd.Index
    width: np.ndarray  # (slots,) each slot's places: its most partition number + 1 (0: none listed)
    base: np.ndarray  # (slots,) where its places start in `values`
    values: list[np.ndarray]  # per snapshot.PARTITIONS_RETENTION column, each place's (nan: not listed, not given)

    def of(self, keys: pd.DataFrame) -> list[np.ndarray]:
        """Each column's value for each of `keys` (nan: a partition the table lacks, or a value not given)."""
        out = [np.full(len(keys), np.nan) for _ in self.values]
        if not len(keys) or not self.width.any():
            return out
        kc, kt = forecast_partition_sizes.key_codes(keys, self.clusters, self.topics)
        kp = keys["partition"].to_numpy(np.int64)
        # A step of keys at a time: a dozen temporaries of 6.7M keys were memory touched afresh (0.35-0.45 s).
        for lo in range(0, len(keys), STEP):
            c, t, p = kc[lo:lo + STEP], kt[lo:lo + STEP], kp[lo:lo + STEP]
            known = (c >= 0) & (t >= 0) & (p >= 0)
            slot = np.where(known, c * len(self.topics) + t, 0)
            known &= p < self.width.take(slot)
            at = np.where(known, self.base.take(slot) + p, 0)
            for values, into in zip(self.values, out, strict=True):
                into[lo:lo + STEP] = np.where(known, values.take(at), np.nan)
        return out


STEP = 1 << 18  # keys looked up at once (Slotted.of)


def slotted(table: pd.DataFrame) -> Slotted | None:
    """`table` (read_partitions') as Slotted, where its names are categoricals with no null, no partition is listed
    twice, and the places are at most forecast_partition_sizes.SPARSE per partition (Kafka numbers a topic's 0 ..
    n-1); else None (looked up by partition_rows)."""
    cluster, topic, part = table["cluster"], table["topic"], table["partition"]
    if not (isinstance(cluster.dtype, pd.CategoricalDtype) and isinstance(topic.dtype, pd.CategoricalDtype)
            and part.dtype.kind in "iu"):
        return None
    c, t = cluster.cat.codes.to_numpy(np.int64), topic.cat.codes.to_numpy(np.int64)
    p = part.to_numpy(np.int64)
    slots = len(cluster.cat.categories) * len(topic.cat.categories)
    if len(p) and (int(c.min()) < 0 or int(t.min()) < 0 or int(p.min()) < 0):
        return None
    if slots > forecast_partition_sizes.SPARSE * len(p) + 1024:  # names no partition has, by the many
        return None
    slot = c * len(topic.cat.categories) + t
    del c, t
    width = np.zeros(slots, dtype=np.int64)
    np.maximum.at(width, slot, p + 1)
    room = int(width.sum())
    if room > forecast_partition_sizes.SPARSE * len(p) + 1024:  # numbers far apart
        return None
    base = np.cumsum(width) - width
    place = base.take(slot) + p
    seen = np.zeros(room, dtype=bool)
    seen[place] = True
    if int(np.count_nonzero(seen)) != len(p):  # two on one place: a partition listed twice
        return None
    values = []
    for column in snapshot.PARTITIONS_RETENTION:
        laid = np.full(room, np.nan)
        if column in table:
            laid[place] = table[column].to_numpy(float)
        values.append(laid)
    return Slotted(cluster.cat.categories, topic.cat.categories, width, base, values)


@dataclass
class HeadStart:
    """Snapshot `latest`'s partitions as read_partitions reads them, and the settings of the first `rows` of the
    history's keys (`found`, by Slotted) or, where they do not lay out by topic, each partition's row among those
    keys (`at`, -1: none): found ahead, before the keys' new rows were added (head_start). `table` None: the
    partitions have no settings (every value nan)."""
    table: pd.DataFrame | None
    at: np.ndarray | None
    rows: int
    by_slot: Slotted | None = None
    found: list[np.ndarray] | None = None
    fingerprint: str | None = None  # of `latest`'s partitions (fingerprint): found once, for find too


def settings_given(latest: Path) -> bool:
    """Whether snapshot `latest`'s partitions have a settings column (snapshot.PARTITIONS_RETENTION: optional); a
    dataset that does not read says yes (read_partitions then raises what it raises)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        names = pq.ParquetDataset(latest / "partitions").schema.names
    except (OSError, pa.ArrowException):
        return True
    return any(column in names for column in snapshot.PARTITIONS_RETENTION)


def head_start(latest: Path, keys: pd.DataFrame, entry: Any = None) -> HeadStart | None:
    """read_partitions of `latest`, the settings of `keys` found (Slotted) or each partition's row among them
    (partition_rows): on a thread of its own while the append finds the copies of a snapshot whose partitions
    changed, where the settings are then read again (0.7-0.8 s of a 20M append's main thread waited for them
    after). None where `latest`'s partitions have the fingerprint of the kept settings (the manifest's `entry`):
    those are taken (find), none read."""
    print_of = fingerprint(latest)
    if isinstance(entry, dict) and print_of is not None and entry.get("fingerprint") == print_of:
        return None
    if not settings_given(latest):
        return HeadStart(None, None, len(keys), fingerprint=print_of)
    table = read_partitions(latest)
    by_slot = slotted(table)
    if by_slot is not None:
        return HeadStart(table, None, len(keys), by_slot, by_slot.of(keys), print_of)
    return HeadStart(table, forecast_partition_sizes.partition_rows(keys, table), len(keys), fingerprint=print_of)


def find(latest: Path, keys: pd.DataFrame, where: Path, entry: Any, key_files: list[str] | None,
         partitions: Future[HeadStart | None] | None = None) -> Retention:
    """The settings of `keys` (the history's, held in `key_files`; None: not all in files yet) in snapshot
    `latest`: the kept ones (the manifest's `entry`, under `where`) when they still hold, else read (from
    `partitions`, head_start of `latest` on the first rows of these keys, where given)."""
    started = partitions.result() if partitions is not None else None
    print_of = started.fingerprint if started is not None else fingerprint(latest)
    if print_of is not None and key_files is not None:
        kept = load(where, entry, print_of, len(keys), key_files)
        if kept is not None:
            return kept
    retention_bytes, retention_ms = read(latest, keys, started)
    return Retention(retention_bytes, retention_ms, print_of)


def _rows(keys: pd.DataFrame, started: HeadStart) -> np.ndarray:
    """Each of `started`'s partitions' rows among `keys` (whose first started.rows rows it was found on): those it
    found none for looked up among the rows added since."""
    assert started.table is not None and started.at is not None
    at = np.array(started.at)
    missing = np.flatnonzero(at < 0)
    if len(keys) > started.rows and len(missing):
        more = forecast_partition_sizes.partition_rows(keys.iloc[started.rows:].reset_index(drop=True),
                                                       started.table.iloc[missing].reset_index(drop=True))
        at[missing] = np.where(more >= 0, more + started.rows, -1)
    return at


def load(where: Path, entry: Any, print_of: str, rows: int, key_files: list[str]) -> Retention | None:
    """The kept settings `entry` names, if they are of this fingerprint, these keys and whole; else None."""
    if (not isinstance(entry, dict) or entry.get("fingerprint") != print_of or entry.get("rows") != rows
            or entry.get("keys") != key_files or not isinstance(entry.get("file"), str)):
        return None
    try:
        both = np.load(where / entry["file"], mmap_mode="r")
    except (OSError, ValueError):
        return None
    if both.shape != (2, rows) or both.dtype != np.float64:
        return None
    return Retention(both[0], both[1], print_of, entry["file"])


def save(path: Path, found: Retention) -> None:
    forecast_npy.save_rows(path, [found.bytes, found.ms], np.float64)  # no stacked copy (forecast_npy)


def read_partitions(latest: Path) -> pd.DataFrame:
    """Snapshot `latest`'s partitions' names and the settings it has, the names as dictionaries (pandas
    categoricals)."""
    import pyarrow.parquet as pq

    # Only the keys and the settings: the replica lists, made into an array per partition, were most of its time.
    # The names as dictionaries: each partition's history row found on their codes (a MultiIndex of 6.7M names
    # each side took 5 s at 20M replicas).
    dataset = pq.ParquetDataset(latest / "partitions", read_dictionary=["cluster", "topic"])
    wanted = [*forecast_history.PARTITION_KEYS,
              *(c for c in snapshot.PARTITIONS_RETENTION if c in dataset.schema.names)]
    return dataset.read(columns=wanted).to_pandas(self_destruct=True, split_blocks=True)


def read(latest: Path, keys: pd.DataFrame, started: HeadStart | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(retention_bytes, retention_ms) of each partition of `keys` in the latest snapshot (nan: not given), from
    `started` (head_start, on the first rows of `keys`) where given."""
    if started is not None and started.rows <= len(keys):
        if started.table is None:
            return np.full(len(keys), np.nan), np.full(len(keys), np.nan)
        if started.by_slot is not None and started.found is not None:
            more = started.by_slot.of(keys.iloc[started.rows:])
            both = [np.concatenate([first, rest]) for first, rest in zip(started.found, more, strict=True)]
            return both[0], both[1]
        table, rows = started.table, _rows(keys, started)
    else:
        # No settings given: none to find, so no partition looked up (a snapshot of an older collect, or of a
        # writer that has none).
        if not settings_given(latest):
            return np.full(len(keys), np.nan), np.full(len(keys), np.nan)
        table = read_partitions(latest)
        by_slot = slotted(table)
        if by_slot is not None:
            found = by_slot.of(keys)
            return found[0], found[1]
        rows = forecast_partition_sizes.partition_rows(keys, table)
    found = rows >= 0
    out = []
    for column in snapshot.PARTITIONS_RETENTION:
        values = np.full(len(keys), np.nan)
        if column in table:
            values[rows[found]] = table[column].to_numpy(float)[found]
        out.append(values)
    return out[0], out[1]
