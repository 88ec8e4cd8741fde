"""The plan directory: the contract between `plan` (its writer) and `execute`, `report` and the drain's cordons (its
readers), declared once as mover/audit/snapshot.py declares the input. See docs/audit.md, "plan".

    PLANDIR/moves/            Parquet: one row per replica to move (MOVES, and MOVES_OPTIONAL where present)
    PLANDIR/disks.parquet     every disk before and as predicted after (DISKS)
    PLANDIR/brokers.parquet   every broker's outcome (BROKERS)
    PLANDIR/summary.json      written last: a plan directory with a summary is complete
    PLANDIR/<cluster>.reassignment.json   Kafka's reassignment JSON, for mover-log-dirs and kafka-reassign-partitions

Column types are Spark SQL's names, as in snapshot.py; `arrow_schema` turns them into the schema the writer uses, so
what a reader checks is what the writer wrote. Readers need only the declared columns and ignore extra ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mover.admin.assignment import ANY_LOG_DIR
from mover.audit.errors import AuditError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

MOVES_DIR = "moves"
DISKS_FILE = "disks.parquet"
BROKERS_FILE = "brokers.parquet"
SUMMARY_FILE = "summary.json"

MOVES: dict[str, str] = {
    "cluster": "string",
    "broker": "int",
    "topic": "string",
    "partition": "int",
    "from_dir": "string",
    "to_dir": "string",
    "size_bytes": "bigint",
    "step": "int",  # a broker's moves of step s start once its moves of earlier steps ended
}
# Columns a plan may have, read as null when it does not (plans written before them, plans written by hand).
MOVES_OPTIONAL: dict[str, str] = {
    # The replica moves to this broker (its to_dir there), in KIP-435 steps (mover/admin/reassign/step_engine.py).
    "to_broker": "int",
}
DISKS: dict[str, str] = {
    "cluster": "string",
    "broker": "bigint",
    "log_dir": "string",
    "error": "string",  # null when online
    "online": "boolean",
    "total_bytes": "double",  # null when unknown
    "usable_bytes": "double",
    "used_before": "bigint",
    "basis": "string",  # balance.BASIS_CAPACITY or BASIS_BYTES
    "avg": "double",
    "percent": "double",
    "load": "double",
    "band_low": "double",
    "band_high": "double",
    "out_of_band": "boolean",
    "over_capacity": "boolean",
    "used_after": "bigint",
    "drained": "boolean",  # emptied by the plan (--drain): execute cordons it first (mover/audit/drain.py)
    "cordoned": "boolean",
    "percent_after": "double",
    "load_after": "double",
    "band_low_after": "double",
    "band_high_after": "double",
    "out_of_band_after": "boolean",
    "over_capacity_after": "boolean",
}
BROKERS: dict[str, str] = {
    "cluster": "string",
    "broker": "bigint",
    "lower_bound": "bigint",  # bytes any plan ending in band must move (planner.py)
    "moved_bytes": "bigint",
    "status": "string",  # planned, balanced, unchanged, capacity unknown, cordoned, refused
    "reason": "string",
}


def reassignment_file(cluster: str) -> str:
    return f"{cluster}.reassignment.json"


def move_key_columns() -> list[str]:
    """The moves' columns without cluster and broker: what the per-broker planner (planner.py) produces."""
    return [c for c in MOVES if c not in ("cluster", "broker")]


_ARROW = {"string": "string", "int": "int32", "bigint": "int64", "double": "float64", "boolean": "bool_"}


def arrow_schema(columns: dict[str, str]) -> pa.Schema:
    """The Arrow schema of columns declared with Spark SQL's type names (`array<T>` included), for every audit
    layout (the plan's, the forecast's)."""
    import pyarrow as pa

    def arrow(kind: str) -> pa.DataType:
        if kind.startswith("array<") and kind.endswith(">"):
            return pa.list_(arrow(kind[len("array<"):-1]))
        return getattr(pa, _ARROW[kind])()

    return pa.schema([(name, arrow(kind)) for name, kind in columns.items()])


def write_frame(frame: pd.DataFrame, columns: dict[str, str], path: Path) -> None:
    """`frame`'s declared columns, in the declared order and types, as one Parquet file (extra columns dropped)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame[list(columns)], schema=arrow_schema(columns), preserve_index=False)
    pq.write_table(table, path)


def read_table(plan: Path, name: str, columns: dict[str, str], optional: dict[str, str] | None = None) -> pa.Table:
    """One file or dataset of the plan, with `columns` (an AuditError names those missing) and whichever of
    `optional` it has."""
    import pyarrow.dataset as ds

    where = plan / name
    if not where.exists():
        raise AuditError(f"plan {plan}: no {name.removesuffix('.parquet')} dataset ({where} is missing)")
    try:
        table = ds.dataset(str(where), format="parquet").to_table()
    except Exception as e:  # pyarrow raises several types for unreadable files; all mean the same to the user
        raise AuditError(f"plan {plan}: cannot read {where}: {str(e).splitlines()[0] if str(e) else e!r}") from None
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise AuditError(f"plan {plan}: {name} lacks column{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    present = [c for c in (optional or {}) if c in table.column_names]
    return table.select([*columns, *present])


def read_moves(plan: Path) -> list[dict[str, Any]]:
    """The plan's moves as rows (dicts), the optional columns None where the plan lacks them. Every value is checked
    (an AuditError names the plan, the row and the column): a plan written by hand, or by another tool, may hold a
    null or a value no broker takes, which would otherwise fail half way through a run."""
    table = read_table(plan, MOVES_DIR, MOVES, MOVES_OPTIONAL)
    bad = _first_bad_row(table)
    if bad is not None:
        row = {c: None for c in MOVES_OPTIONAL} | table.slice(bad, 1).to_pylist()[0]
        problem = next(f"{column} {why}" for column, check in _MOVE_CHECKS.items()
                       if (why := check.problem(row[column])) is not None)
        raise AuditError(f"plan {plan}: {MOVES_DIR} row {bad}{_row_name(row)}: {problem}")
    rows = table.to_pylist()
    for row in rows:
        for column in MOVES_OPTIONAL:
            row.setdefault(column, None)
    return rows


@dataclass(frozen=True)
class _Check:
    """What a column of MOVES must hold: an integer in low..high, or a non-empty string (an absolute path, or "any":
    a row with a `to_broker` lets the new broker choose its dir, as KIP-113's reassignment JSON says it; a log-dir
    row naming "any" is refused with the other dirs its broker lacks, executor/clusters.py `refusals`)."""

    low: int | None = None  # None: a string
    high: int = 0
    nullable: bool = False
    absolute: bool = False

    def problem(self, value: Any) -> str | None:
        if value is None:
            return None if self.nullable else "is null"
        if self.low is None:
            if not isinstance(value, str) or not value:
                return f"is {value!r}, not a non-empty string"
            if self.absolute and not value.startswith("/") and value != ANY_LOG_DIR:
                return f"is {value!r}, not an absolute path or {ANY_LOG_DIR!r}"
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            return f"is {value!r}, not an integer"
        if not self.low <= value <= self.high:
            return f"is {value}, not in {self.low}..{self.high}"
        return None

    def bad(self, column: pa.ChunkedArray) -> pa.ChunkedArray | None:
        """Whether each row fails, computed by Arrow (a plan has millions of rows); None for a column of another
        type than the one declared, which the caller checks row by row."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if self.low is None and (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            wrong = (pc.invert(pc.or_(pc.starts_with(column, "/"), pc.equal(column, ANY_LOG_DIR))) if self.absolute
                     else pc.equal(pc.utf8_length(column), 0))
        elif self.low is not None and pa.types.is_integer(column.type):
            wrong = pc.or_(pc.less(column, self.low), pc.greater(column, self.high))
        else:
            return None
        return pc.fill_null(wrong, not self.nullable)


# Kafka's broker ids and partitions are int32s, its sizes int64s.
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
_MOVE_CHECKS = {
    "cluster": _Check(),
    "broker": _Check(0, _INT32_MAX),
    "topic": _Check(),
    "partition": _Check(0, _INT32_MAX),
    "from_dir": _Check(absolute=True),
    "to_dir": _Check(absolute=True),
    "size_bytes": _Check(0, _INT64_MAX),
    "step": _Check(0, _INT32_MAX),
    "to_broker": _Check(0, _INT32_MAX, nullable=True),
}


def _first_bad_row(table: pa.Table) -> int | None:
    import pyarrow.compute as pc

    first: int | None = None
    for name, check in _MOVE_CHECKS.items():
        if name not in table.column_names:
            continue
        column = table.column(name)
        bad = check.bad(column)
        if bad is None:
            at = next((i for i, v in enumerate(column.to_pylist()) if check.problem(v) is not None), -1)
        else:
            at = pc.index(bad, True).as_py() if pc.any(bad).as_py() else -1
        if at >= 0 and (first is None or at < first):
            first = at
    return first


def _row_name(row: dict[str, Any]) -> str:
    """` (t-0 on broker 1 of east)`, from whichever of those the row has right, for the operator to find it."""
    name = ""
    if _MOVE_CHECKS["topic"].problem(row["topic"]) is None:
        name = row["topic"] + (f"-{row['partition']}" if _MOVE_CHECKS["partition"].problem(row["partition"]) is None
                               else "")
    if _MOVE_CHECKS["broker"].problem(row["broker"]) is None:
        name += f" on broker {row['broker']}"
    if _MOVE_CHECKS["cluster"].problem(row["cluster"]) is None:
        name += f" of {row['cluster']}"
    return f" ({name.strip()})" if name else ""


def read_disks(plan: Path, columns: Iterable[str] | None = None) -> pd.DataFrame:
    """disks.parquet (only `columns` of it, when given) as pandas."""
    wanted = DISKS if columns is None else {c: DISKS[c] for c in columns}
    return read_table(plan, DISKS_FILE, wanted).to_pandas()
