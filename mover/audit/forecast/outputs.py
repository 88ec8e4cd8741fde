"""The forecast's outputs: its files in the out dir (layout.DISKS_FILE, layout.HISTORY_FILE, layout.SUMMARY_FILE),
the summary they and `audit` share, and the table an operator reads first (the disks soonest to 90%)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mover.audit import threads
from mover.audit.errors import make_dir
from mover.audit.forecast import layout as layout
from mover.audit.forecast.disks import LEVEL, WEEK_H
from mover.audit.plan_layout import arrow_schema

if TYPE_CHECKING:
    from mover.audit.forecast import ForecastResult

SHOWN = 20


def summary(result: ForecastResult, limit: int = 1000) -> dict[str, Any]:
    """The forecast's summary (layout.SUMMARY_FILE; `audit` puts it in its own): counts of the disks by how soon
    they fill, and up to `limit` of the disks full within four weeks, soonest first."""
    from mover.audit.audit import records
    from mover.audit.forecast import taken_at

    d = result.disks
    ok = d[d["status"] != layout.STATUS_OFFLINE]
    first, last = taken_at(result.snapshots[0]), taken_at(result.snapshots[-1])
    return {
        "latest": str(result.snapshots[-1]),
        "snapshots": len(result.snapshots),
        "since_hours": result.since_hours,
        "window_hours": (last - first).total_seconds() / 3600,
        "level": LEVEL,
        "disks": len(d),
        "disks_to_90_within_7d": int((ok["hours_to_90"] <= WEEK_H).sum()),
        "disks_full_within_72h": int((ok["hours_to_full"] <= 72).sum()),
        "disks_full_within_7d": int((ok["hours_to_full"] <= WEEK_H).sum()),
        "disks_offline": int((d["status"] == layout.STATUS_OFFLINE).sum()),
        "disks_stale": int((d["status"] == layout.STATUS_STALE).sum()),
        "disks_size_unknown": int((d["status"] == layout.STATUS_UNKNOWN_SIZE).sum()),
        "soonest": records(ok[ok["hours_to_full"] <= WEEK_H * 4].drop(
            columns=[c for c in layout.DISKS if c.startswith("projection_")]), limit),
    }


def write(result: ForecastResult, out: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    make_dir(out)
    # On this thread alone (threads.FROM_PANDAS): 0.45-0.77 s of a 20M append on pyarrow's threads, 0.25 s here.
    table = pa.Table.from_pandas(result.disks, schema=arrow_schema(layout.DISKS), preserve_index=False,
                                 nthreads=threads.FROM_PANDAS)
    tmp = out / (layout.DISKS_FILE + ".tmp")
    # Dictionaries for the names only: the projections' 4M doubles (30 MB at 40,000 disks) tried as one first cost
    # half the write (0.135 -> 0.076 s warm), and the file is no larger (29.9 MB against 30.8).
    pq.write_table(table, tmp, use_dictionary=[f.name for f in table.schema if not _of_doubles(f.type)])
    tmp.replace(out / layout.DISKS_FILE)
    history = pa.Table.from_pandas(result.history.astype({"broker": "int32", "used_bytes": "int64"}),
                                   schema=arrow_schema(layout.HISTORY), preserve_index=False)
    pq.write_table(history, out / layout.HISTORY_FILE)
    text = json.dumps(summary(result), indent=1, allow_nan=False, default=_json_default) + "\n"
    tmp = out / (layout.SUMMARY_FILE + ".tmp")
    tmp.write_text(text)
    tmp.replace(out / layout.SUMMARY_FILE)


def _of_doubles(kind: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_floating(kind) or (pa.types.is_list(kind) and pa.types.is_floating(kind.value_type))


def _json_default(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(type(value).__name__)


def print_summary(result: ForecastResult, out: Path | None) -> None:
    from rich.console import Console
    from rich.table import Table

    from mover.admin.common import format_bytes

    console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)
    s = summary(result, limit=0)
    d = result.disks
    console.print(f"[bold]Forecast as of {result.snapshots[-1].name}[/bold]: {_n(s['disks_full_within_72h'])} "
                  f"full within 72 h, {s['disks_to_90_within_7d']} at 90% within 7 d, of {s['disks']} disks "
                  f"({s['snapshots']} snapshots over {s['window_hours'] / 24:.1f} days"
                  + (f", offline {s['disks_offline']}" if s["disks_offline"] else "")
                  + (f", stale {s['disks_stale']}" if s["disks_stale"] else "") + ")")
    table = Table(title="Disks by time to 90%", title_justify="left")
    for column in ("cluster", "broker", "log dir", "used", "rate/h (95%)", "90% in", "full in", "driven by"):
        table.add_column(column, justify="left" if column in ("cluster", "log dir", "driven by") else "right")
    shown = d[(d["status"] != layout.STATUS_OFFLINE) & d["hours_to_90"].notna()].head(SHOWN)
    for row in shown.itertuples():
        rate = (f"{format_bytes(max(0, row.rate_bytes_per_hour))} ({format_bytes(max(0, row.rate_low))}-"
                f"{format_bytes(max(0, row.rate_high))})")
        ninety = f"{layout.say_hours(row.hours_to_90)} ({layout.say_hours(row.hours_to_90_early)}-" \
                 f"{layout.say_hours(row.hours_to_90_late)})"
        top = ", ".join(f"{n} {format_bytes(r)}/h" for n, r in zip(row.top_partitions, row.top_rates, strict=True))
        stale = f" (as of {row.as_of_hours:.1f} h ago)" if row.status == layout.STATUS_STALE else ""
        table.add_row(str(row.cluster), str(row.broker), str(row.log_dir) + stale, f"{row.percent:.1f}%", rate,
                      ninety, layout.say_hours(row.hours_to_full), top)
    console.print(table)
    if out is not None:
        console.print(f"Forecast written to {out}")


def _n(count: int) -> str:
    return f"{count} disk" + ("" if count == 1 else "s")

