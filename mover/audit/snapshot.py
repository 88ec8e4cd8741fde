"""The snapshot layout: the contract between `collect` (or anyone else who writes one) and `audit` / `plan`.

A snapshot is a directory `<root>/<UTC yyyymmddTHHMMSSZ>/` holding three Parquet datasets. Writers may add columns;
readers need only these. See docs/audit.md.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mover.audit.errors import AuditError

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

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
# Columns added to the contract later: read as null from a snapshot written without them (older writers, synth).
LOG_DIRS_OPTIONAL: dict[str, str] = {
    # KIP-1066: DescribeLogDirs v5 (Kafka 4.3+, moverd); null when the broker does not report it (docs/cordons.md).
    "is_cordoned": "boolean",
}
OPTIONAL: dict[str, dict[str, str]] = {"log_dirs": LOG_DIRS_OPTIONAL}
# Optional columns of `partitions` that only the forecast reads (mover/audit/forecast): the topic's settings, null
# or absent when the writer does not know them (-1: no limit, as Kafka says). Not in OPTIONAL, so the partitions
# every other step reads keep their four columns.
PARTITIONS_RETENTION: dict[str, str] = {
    "retention_bytes": "bigint",
    "retention_ms": "bigint",
}

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


# --- Reading and writing (Spark is imported only here, when a snapshot is really read or written) ---

# A writer may use a narrower integer type than declared (an int `partition` counted as bigint is fine the other
# way round): these are widened on read instead of rejected.
_WIDENS_TO = {"bigint": {"int", "smallint", "tinyint"}, "int": {"smallint", "tinyint"}}


class Snapshot:
    """The three datasets of one snapshot, columns as declared above (in that order, extra columns dropped).

    A dataset whose Parquet footers already vouch for its layout (footer_schema: flat, every declared column of a
    declared or widened type) becomes a Spark DataFrame only when a step asks for it: on a small snapshot most steps
    read on the driver instead (read_small, mover/audit/partitions.py), and each DataFrame made on a fresh JVM is
    py4j calls and analysis, half a second per snapshot (docs/audit.md#performance). Any other dataset is read at
    once, so what is wrong with it is said before anything runs."""

    def __init__(self, path: Path, frames: dict[str, DataFrame], spark: SparkSession | None = None) -> None:
        self.path = path
        self._frames = dict(frames)
        self._spark = spark
        # What the driver read of it itself, kept for the next step that needs it (mover/audit/partitions.py).
        self.local: dict[str, Any] = {}

    def frame(self, name: str) -> DataFrame:
        if name not in self._frames:
            assert self._spark is not None
            self._frames[name] = read_dataset(self._spark, self.path, name)
        return self._frames[name]

    @property
    def log_dirs(self) -> DataFrame:
        return self.frame("log_dirs")

    @property
    def replicas(self) -> DataFrame:
        return self.frame("replicas")

    @property
    def partitions(self) -> DataFrame:
        return self.frame("partitions")

    def deferred(self) -> list[str]:
        """The datasets not made into Spark DataFrames (yet)."""
        return [name for name in DATASETS if name not in self._frames]


def resolve(snapshot: str | None, snapshots: str | None) -> tuple[Path, list[Path]]:
    """(the snapshot to read, earlier snapshots oldest first) from `--snapshot DIR` or `--snapshots ROOT`."""
    if snapshot is not None:
        path = Path(snapshot)
        if not path.is_dir():
            raise AuditError(f"snapshot {snapshot}: no such directory")
        return path, []
    assert snapshots is not None
    found = list_snapshots(Path(snapshots))
    if not found:
        raise AuditError(f"{snapshots}: no snapshot directories (named like {snapshot_name()}) in it")
    return found[-1], found[:-1]


def read(spark: SparkSession, path: Path) -> Snapshot:
    """Reads and checks a snapshot: a missing dataset, an unreadable file or a missing column is one AuditError line.
    Datasets whose footers vouch for them are read by Spark only when a step needs them (Snapshot)."""
    frames = {}
    for name in DATASETS:
        where = path / name
        if not where.exists():
            raise AuditError(f"snapshot {path}: no {name} dataset ({where} is missing)")
        if not _vouched(where, name):
            frames[name] = read_dataset(spark, path, name)
    return Snapshot(path, frames, spark)


def driver_readable(path: Path, replica_rows: int, partition_rows: int) -> bool:
    """Whether the driver reads every dataset of the snapshot at `path` itself (pyarrow): the footers vouch for each
    one's layout, and the replicas and partitions have at most so many rows (by the footers). A command on a local
    master then runs no Spark job for it, and starts no JVM unless a step asks for one (spark.Deferred)."""
    for name in DATASETS:
        where = path / name
        if not where.is_dir() or not _vouched(where, name):
            return False
    for name, most in (("replicas", replica_rows), ("partitions", partition_rows)):
        rows = dataset_rows(path / name)
        if rows is None or rows > most:
            return False
    return True


def _vouched(where: Path, name: str) -> bool:
    """The footers say Spark will read the dataset with the declared schema and conform will take it as it is."""
    known = footer_schema(where, DATASETS[name], OPTIONAL.get(name))
    if known is None:
        return False
    declared = {**DATASETS[name], **OPTIONAL.get(name, {})}
    for f in known.fields:
        actual, kind = f.dataType.simpleString(), declared[f.name]
        if actual != kind and actual not in _WIDENS_TO.get(kind, set()) and not (
                kind == "timestamp" and actual == "timestamp_ntz"):
            return False
    return True


def read_dataset(spark: SparkSession, path: Path, name: str) -> DataFrame:
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    where = path / name
    if not where.exists():
        raise AuditError(f"snapshot {path}: no {name} dataset ({where} is missing)")
    try:
        known = footer_schema(where, DATASETS[name], OPTIONAL.get(name))
        reader = spark.read if known is None else spark.read.schema(known)
        frame = reader.parquet(str(where))
    except (PySparkException, Py4JJavaError) as e:
        raise AuditError(f"snapshot {path}: cannot read {name}: {spark_error_line(e)}") from None
    return conform(frame, DATASETS[name], f"snapshot {path}: {name}", OPTIONAL.get(name))


# What Spark reads a Parquet column written by another writer (pandas, pyarrow) as, for the types a snapshot uses
# (Spark's JSON names of them).
_ARROW_TO_SPARK = {"string": "string", "large_string": "string", "int8": "byte", "int16": "short", "int32": "integer",
                   "int64": "long", "bool": "boolean", "timestamp[us, tz=UTC]": "timestamp",
                   "timestamp[ms, tz=UTC]": "timestamp",
                   "list<element: int32>": {"type": "array", "elementType": "integer", "containsNull": True},
                   "list<item: int32>": {"type": "array", "elementType": "integer", "containsNull": True}}
_SPARK_ROW_METADATA = b"org.apache.spark.sql.parquet.row.metadata"


def footer_schema(where: Path, columns: dict[str, str], optional: dict[str, str] | None = None) -> Any:
    """The schema Spark would infer for the declared columns of a flat dataset, from the footer of its first file,
    read here: Spark infers it with a job of its own (a task that reads that footer), a cost every command paid once
    per dataset, before any work (docs/audit.md#performance). None, and Spark infers it as before (with the same
    errors), for anything this does not know for sure: subdirectories (partition columns), a column missing or of
    another type, a footer that cannot be read."""
    import json

    import pyarrow.parquet as pq
    from pyspark.sql.types import StructField, StructType, _parse_datatype_json_value

    try:
        files = sorted(p for p in where.iterdir() if not p.name.startswith(("_", ".")))
        if not files or any(not p.is_file() for p in files):
            return None
        footer = pq.ParquetFile(files[0])
        arrow = footer.schema_arrow
        spark_json = (arrow.metadata or {}).get(_SPARK_ROW_METADATA)
        if spark_json is not None:  # written by Spark: the schema it reads back is in the footer, as it wrote it
            fields = {f["name"]: _parse_datatype_json_value(f["type"]) for f in json.loads(spark_json)["fields"]}
        else:
            # (a nanosecond timestamp is not there: Spark cannot read it, and says so itself)
            types = {f.name: _ARROW_TO_SPARK.get(str(f.type)) for f in arrow}
            fields = {n: _parse_datatype_json_value(t) for n, t in types.items() if t is not None}
    except Exception:  # anything unexpected: Spark's own inference decides, and says what is wrong
        return None
    if any(c not in fields for c in columns):
        return None
    present = [*columns, *(c for c in optional or {} if c in fields)]  # an optional one absent: conform adds it
    return StructType([StructField(c, fields[c], True) for c in present])


def read_small(snap: Snapshot, name: str, columns: list[str], max_rows: int) -> pd.DataFrame | None:
    """Declared `columns` of a dataset of at most `max_rows` rows, read by the driver with pyarrow (kept on `snap`
    for the next step), as Spark's toPandas gives them: ints as declared, timestamps in UTC without a zone. None
    when Spark must read it: more rows, a layout the footers do not vouch for (footer_schema), a file pyarrow does
    not read. A small snapshot's steps then run no Spark job of their own (docs/audit.md#performance)."""
    key = f"{name}:{','.join(columns)}"
    if key in snap.local:
        return snap.local[key]
    where = snap.path / name
    found = None
    rows = dataset_rows(where)
    if rows is not None and rows <= max_rows and footer_schema(where, DATASETS[name]) is not None:
        import pyarrow.parquet as pq

        try:
            found = pq.read_table(where, columns=columns).to_pandas()
        except Exception:  # Spark's read says what is wrong
            found = None
    if found is not None:
        import pandas as pd

        ints = {"int": "int32", "bigint": "int64"}
        declared = {**DATASETS[name], **OPTIONAL.get(name, {})}
        for column in columns:
            kind = declared[column]
            if kind in ints and not found[column].isna().any():
                found[column] = found[column].astype(ints[kind])
            elif kind == "timestamp":
                found[column] = pd.to_datetime(found[column], utc=True).dt.tz_localize(None)
    snap.local[key] = found
    return found


def dataset_rows(where: Path) -> int | None:
    """The rows of a flat dataset, from its files' Parquet footers (no Spark job); None when not known that way."""
    import pyarrow.parquet as pq

    try:
        files = [p for p in where.iterdir() if not p.name.startswith(("_", "."))]
        if any(not p.is_file() for p in files):
            return None
        return sum(pq.read_metadata(p).num_rows for p in files)
    except Exception:  # not Parquet, unreadable: Spark's reading says what is wrong
        return None


def conform(frame: DataFrame, columns: dict[str, str], where: str,
            optional: dict[str, str] | None = None) -> DataFrame:
    """The declared columns of `frame`, in order and type, then the `optional` ones (null where `frame` lacks
    them); a missing or mistyped column is an AuditError."""
    from pyspark.sql import functions as F

    have = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
    if optional:
        missing_optional = [c for c in optional if c not in have]
        if missing_optional:
            frame = frame.select("*", *[F.lit(None).cast(optional[c]).alias(c) for c in missing_optional])
            have.update({c: optional[c] for c in missing_optional})
        columns = {**columns, **optional}
    missing = [c for c in columns if c not in have]
    if missing:
        raise AuditError(f"{where}: missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                       f"(has {', '.join(have) or 'no columns'})")
    selected = []
    for column, kind in columns.items():
        actual = have[column]
        if actual == kind:
            selected.append(F.col(column))
        elif actual in _WIDENS_TO.get(kind, set()) or (kind == "timestamp" and actual == "timestamp_ntz"):
            selected.append(F.col(column).cast(kind).alias(column))
        else:
            raise AuditError(f"{where}: column {column} is {actual}, expected {kind}")
    return frame.select(*selected)


def write(path: Path, frames: dict[str, DataFrame]) -> None:
    """Writes the three datasets of a snapshot at `path` (which must not exist: a snapshot is never rewritten).
    Parquet files appear under a dataset only once Spark commits the job, so a reader sees all of a dataset or none."""
    if path.exists():
        raise AuditError(f"{path} exists already: a snapshot is written once")
    for name, columns in DATASETS.items():
        conform(frames[name], columns, f"writing {name}", OPTIONAL.get(name)).write.parquet(str(path / name))


def spark_error_line(e: BaseException) -> str:
    """The first line of a Spark error, without the JVM stack trace Spark appends. An exception pyspark does not
    convert (Py4JJavaError) says only which call failed; the Java exception's own message is the useful line, and
    its root cause (a file's footer that cannot be read) the most useful."""
    java = getattr(e, "java_exception", None)
    if java is not None:
        try:
            cause = java
            while cause.getCause() is not None:
                cause = cause.getCause()
            text = str(cause.getMessage() or cause.toString()).strip()
        except Exception:  # the JVM is gone: fall back to Python's text
            text = str(e).strip()
    else:
        text = str(e).strip()
    line = text.splitlines()[0] if text else type(e).__name__
    return line[:400]
