"""The snapshot layout: the contract between `collect` (or anyone else who writes one) and `audit` / `plan`.

A snapshot is a directory `<root>/<UTC yyyymmddTHHMMSSZ>/` holding three Parquet datasets. Writers may add columns;
readers need only these. See docs/audit.md.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

# Column name -> Spark SQL type, in the order a writer should use. One declaration serves the Spark schema, the
# pyarrow schema and the validation of a snapshot someone else wrote.
LOG_DIRS: dict[str, str] = {
    "cluster": "string",
    "broker": "int",
    "log_dir": "string",
    "error": "string",  # null when the dir is online
    "total_bytes": "bigint",  # null when unknown (never guessed)
    "usable_bytes": "bigint",
    "collected_at": "timestamp",
}
REPLICAS: dict[str, str] = {
    "cluster": "string",
    "broker": "int",
    "log_dir": "string",
    "topic": "string",
    "partition": "int",
    "size_bytes": "bigint",
    "offset_lag": "bigint",
    "is_future": "boolean",
    "collected_at": "timestamp",
}
PARTITIONS: dict[str, str] = {
    "cluster": "string",
    "topic": "string",
    "partition": "int",
    "replicas": "array<int>",  # in Metadata's order
}
DATASETS: dict[str, dict[str, str]] = {"log_dirs": LOG_DIRS, "replicas": REPLICAS, "partitions": PARTITIONS}

SNAPSHOT_NAME = re.compile(r"^\d{8}T\d{6}Z$")


def snapshot_name(at: datetime | None = None) -> str:
    """The directory name of a snapshot taken at `at` (now), in UTC."""
    return (at or datetime.now(UTC)).astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def spark_ddl(columns: dict[str, str]) -> str:
    """The columns as a Spark DDL schema string ("cluster string, broker int, ...")."""
    return ", ".join(f"`{name}` {kind}" for name, kind in columns.items())


def list_snapshots(root: Path) -> list[Path]:
    """Every snapshot directory under `root`, oldest first (the names sort by time)."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and SNAPSHOT_NAME.match(p.name))
