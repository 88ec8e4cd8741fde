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
class HeadStart:
    """Snapshot `latest`'s partitions as read_partitions reads them, and each one's row among the first `rows` of
    the history's keys (-1: none): found ahead, before the keys' new rows were added (head_start)."""
    table: pd.DataFrame
    at: np.ndarray
    rows: int


def head_start(latest: Path, keys: pd.DataFrame) -> HeadStart:
    """read_partitions of `latest`, each partition's row among `keys` found (partition_rows) too: on the other
    thread while the append finds the copies of a snapshot whose partitions changed, where the settings are then
    read again (0.7-0.8 s of a 20M append's main thread waited for them after)."""
    table = read_partitions(latest)
    return HeadStart(table, forecast_partition_sizes.partition_rows(keys, table), len(keys))


def find(latest: Path, keys: pd.DataFrame, where: Path, entry: Any, key_files: list[str] | None,
         partitions: Future[HeadStart] | None = None) -> Retention:
    """The settings of `keys` (the history's, held in `key_files`; None: not all in files yet) in snapshot
    `latest`: the kept ones (the manifest's `entry`, under `where`) when they still hold, else read (from
    `partitions`, head_start of `latest` on the first rows of these keys, where given)."""
    print_of = fingerprint(latest)
    if print_of is not None and key_files is not None:
        kept = load(where, entry, print_of, len(keys), key_files)
        if kept is not None:
            return kept
    retention_bytes, retention_ms = read(latest, keys, partitions.result() if partitions is not None else None)
    return Retention(retention_bytes, retention_ms, print_of)


def _rows(keys: pd.DataFrame, started: HeadStart) -> np.ndarray:
    """Each of `started`'s partitions' rows among `keys` (whose first started.rows rows it was found on): those it
    found none for looked up among the rows added since."""
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
        table, rows = started.table, _rows(keys, started)
    else:
        table = read_partitions(latest)
        rows = forecast_partition_sizes.partition_rows(keys, table)
    found = rows >= 0
    out = []
    for column in snapshot.PARTITIONS_RETENTION:
        values = np.full(len(keys), np.nan)
        if column in table:
            values[rows[found]] = table[column].to_numpy(float)[found]
        out.append(values)
    return out[0], out[1]
