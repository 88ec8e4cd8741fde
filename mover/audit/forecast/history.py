"""The forecast's compact history: what the forecast needs of a fleet's snapshots, kept under the fleet root so that a
new snapshot costs one snapshot's read, not the whole window's. docs/audit.md, "forecast", says what it is.

    ROOT/_forecast_history/manifest.json   {"version": 1, "snapshots": [names, oldest first]}: the grid
    ROOT/_forecast_history/series/         one row per partition: cluster, topic, partition, sizes (array<double>,
                                           one per snapshot of the grid, null where the partition had no current
                                           replica answering: a gap); when an older driver wrote it, also each
                                           partition's kept fit (forecast_kept.KEPT: extra columns these steps
                                           neither read nor write, so a history they write has none)
    ROOT/_forecast_history/dirs/           one row per log dir per snapshot: cluster, broker, log_dir, snapshot,
                                           error, total_bytes, used_bytes (its replicas' sizes, future copies too)

This is version 1, Spark's. The driver writes version 2, a file per snapshot (columns.py); these steps
have it written as version 1 first (forecast_columns.as_version_1, a batch of rows at a time on the driver) and take
that up, and the driver takes version 1 up: switching between the two costs a rewrite, not a cold forecast.

`update` brings it to a window of snapshots: unchanged when it already is that window; the snapshots newer than its
grid read and appended (the ones older than the window dropped from the front); rebuilt from every snapshot of the
window when missing, unreadable, of another version, or not a prefix of the window (a snapshot added in the middle,
one it holds removed). It is written beside itself and swapped in by renames, so a reader never sees half of one;
a fleet root that cannot be written is forecast from the snapshots without keeping anything.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mover.audit.errors import AuditError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

HISTORY_DIR = "_forecast_history"
MANIFEST = "manifest.json"
VERSION = 1
SERIES: dict[str, str] = {"cluster": "string", "topic": "string", "partition": "int", "sizes": "array<double>"}
DIRS: dict[str, str] = {"cluster": "string", "broker": "int", "log_dir": "string", "snapshot": "string",
                        "error": "string", "total_bytes": "bigint", "used_bytes": "bigint"}

PARTITION_KEYS = ["cluster", "topic", "partition"]
DISK_KEYS = ["cluster", "broker", "log_dir"]


@dataclass
class History:
    snapshots: list[str]  # the grid, oldest first
    series: DataFrame  # SERIES
    dirs: DataFrame  # DIRS
    how: str  # "kept" (already the window), "appended N", "rebuilt" or "in memory" (not kept)


def where(root: Path) -> Path:
    return root / HISTORY_DIR


def read_manifest(root: Path) -> list[str] | None:
    try:
        data = json.loads((where(root) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("snapshots"), list):
        return None
    if not (where(root) / "series").is_dir() or not (where(root) / "dirs").is_dir():
        return None
    return [str(s) for s in data["snapshots"]]


def _per_snapshot(session: SparkSession, paths: list[Path], offset: int) -> tuple[DataFrame, DataFrame]:
    """(sizes, dirs) of `paths`: each partition's size per snapshot (`idx`: its place in the grid, from `offset`),
    and each dir's row per snapshot, from one read of each dataset."""
    from pyspark.sql import functions as F

    from mover.audit import forecast

    replicas, log_dirs = forecast.read_history(session, paths)
    latest = forecast.taken_at(paths[-1])
    hours = {(forecast.taken_at(p) - latest).total_seconds() / 3600: (offset + i, p.name)
             for i, p in enumerate(paths)}
    idx_of = F.create_map(*[x for h, (i, _) in hours.items() for x in (F.lit(h), F.lit(i))])
    name_of = F.create_map(*[x for h, (_, n) in hours.items() for x in (F.lit(h), F.lit(n))])
    sizes = (forecast.partition_series(replicas)
             .select(*PARTITION_KEYS, F.element_at(idx_of, F.col("hours")).alias("idx"), "size"))
    used = replicas.groupBy(*DISK_KEYS, "hours").agg(F.sum("size_bytes").alias("used_bytes"))
    dirs = (log_dirs.join(used, [*DISK_KEYS, "hours"], "left")
            .select(*DISK_KEYS, F.element_at(name_of, F.col("hours")).alias("snapshot"), "error", "total_bytes",
                    F.coalesce(F.col("used_bytes"), F.lit(0)).cast("bigint").alias("used_bytes")))
    return sizes, dirs


def _aligned(sizes: DataFrame, start: int, count: int) -> DataFrame:
    """Per partition, its sizes at grid places start .. start + count - 1 as an array (null: no point)."""
    from pyspark.sql import functions as F

    points = sizes.groupBy(*PARTITION_KEYS).agg(F.map_from_entries(F.collect_list(F.struct("idx", "size")))
                                                .alias("m"))
    grid = F.sequence(F.lit(start), F.lit(start + count - 1))
    return points.select(*PARTITION_KEYS, F.transform(grid, lambda i: F.element_at(F.col("m"), i)).alias("sizes"))


def build(session: SparkSession, paths: list[Path]) -> tuple[DataFrame, DataFrame]:
    """The history of `paths` from their snapshots (one read of each dataset across them)."""
    sizes, dirs = _per_snapshot(session, paths, 0)
    return _aligned(sizes, 0, len(paths)), dirs


def append(session: SparkSession, root: Path, kept: list[str], drop: int, new: list[Path]) -> tuple[DataFrame,
                                                                                                      DataFrame]:
    """The stored history less its first `drop` snapshots, with the snapshots `new` read and appended."""
    from pyspark.sql import functions as F

    old_series = session.read.parquet(str(where(root) / "series"))
    old_dirs = session.read.parquet(str(where(root) / "dirs"))
    keep = len(kept) - drop
    series = old_series.select(*PARTITION_KEYS, F.slice("sizes", drop + 1, max(keep, 1)).alias("sizes"))
    if keep == 0:
        series = series.limit(0)
    dirs = old_dirs.where(F.col("snapshot").isin(kept[drop:])) if drop else old_dirs
    if not new:  # the window only lost its oldest snapshots
        return series.where(F.exists("sizes", lambda x: x.isNotNull())), dirs
    sizes, new_dirs = _per_snapshot(session, new, keep)
    fresh = _aligned(sizes, keep, len(new))
    blank = F.array_repeat(F.lit(None).cast("double"), keep)
    none = F.array_repeat(F.lit(None).cast("double"), len(new))
    joined = (series.withColumnRenamed("sizes", "old").join(fresh.withColumnRenamed("sizes", "new"), PARTITION_KEYS,
                                                             "full_outer")
              .select(*PARTITION_KEYS, F.concat(F.coalesce("old", blank), F.coalesce("new", none)).alias("sizes")))
    # A partition with no point left in the window (deleted before it) is not kept.
    joined = joined.where(F.exists("sizes", lambda x: x.isNotNull()))
    return joined, dirs.unionByName(new_dirs)


def _write(series: DataFrame, dirs: DataFrame, root: Path, snapshots: list[str]) -> None:
    def spark_writes(tmp: Path) -> None:
        series.write.parquet(str(tmp / "series"))
        dirs.write.parquet(str(tmp / "dirs"))

    swap_in(root, snapshots, spark_writes)


def swap_in(root: Path, snapshots: list[str], writes: Callable[[Path], None]) -> None:
    """`writes` fills a directory beside the kept history (its series/ and dirs/), which is then swapped in: the
    old one stays whole until the new one is."""
    final = where(root)
    tmp = root / f".{HISTORY_DIR}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    writes(tmp)
    (tmp / MANIFEST).write_text(json.dumps({"version": VERSION, "snapshots": snapshots}) + "\n")
    old = root / f".{HISTORY_DIR}.{os.getpid()}.old"
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)


@dataclass
class Step:
    """How the kept history becomes the window's (plan): `how` as History.how; for "appended N", the stored grid,
    how many of its first snapshots leave the window (`drop`) and the window's snapshots to read (`new`)."""
    how: str
    stored: list[str]
    drop: int = 0
    new: list[Path] = field(default_factory=list)


def plan(paths: list[Path], keep: bool = True,
         stored_of: Callable[[Path], list[str] | None] = read_manifest) -> Step:
    """What update does for the window `paths` (one fleet root, oldest first), nothing done yet; `stored_of` reads
    the kept history's grid (version 1's by default; the driver's reader takes its own version too)."""
    root = paths[0].parent
    if any(p.parent != root for p in paths):
        raise AuditError("the forecast's window must come from one fleet root")
    names = [p.name for p in paths]
    from mover.audit import snapshot

    latest = snapshot.list_snapshots(root)
    if not keep or not latest or latest[-1].name != names[-1]:
        return Step("in memory", [])
    stored = stored_of(root)
    if stored is not None and stored == names:
        return Step("kept", stored)
    if stored and stored[-1] in names and stored[-1] >= names[0]:
        cut = names.index(stored[-1]) + 1
        drop = sum(1 for s in stored if s < names[0])
        if stored[drop:] == names[:cut]:
            return Step(f"appended {len(names) - cut}", stored, drop, paths[cut:])
    return Step("rebuilt", stored or [])


def update(session: SparkSession, paths: list[Path], keep: bool = True) -> History:
    """The history of the window `paths` (one fleet root, oldest first), kept under the root (when `keep` and
    `paths` ends at the root's latest snapshot) and read back from there."""
    root, names = paths[0].parent, [p.name for p in paths]
    step = plan(paths, keep)
    if step.how == "rebuilt" and read_manifest(root) is None:
        # The driver's history (version 2), when it would be taken up, is written as this version and then taken
        # up: not every snapshot of the window read again.
        from mover.audit.forecast import columns as forecast_columns

        try:
            if plan(paths, keep, forecast_columns.snapshots).how != "rebuilt" and forecast_columns.as_version_1(root):
                step = plan(paths, keep)
        except OSError:
            pass  # a root this process cannot write: rebuilt below, and kept in memory
    if step.how == "in memory":
        series, dirs = build(session, paths)
        return History(names, series, dirs, step.how)
    try:
        if step.how == "rebuilt":
            _write(*build(session, paths), root, names)
        elif step.how != "kept":
            _write(*append(session, root, step.stored, step.drop, step.new), root, names)
    except OSError:
        series, dirs = build(session, paths)  # a root this process cannot write: nothing kept
        return History(names, series, dirs, "in memory")
    return History(names, session.read.parquet(str(where(root) / "series")),
                   session.read.parquet(str(where(root) / "dirs")), step.how)
