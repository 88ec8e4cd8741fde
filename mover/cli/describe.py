"""--describe: kafka-log-dirs.sh's output, byte for byte, or a table of dir usage (--output table).

Kafka 4.3's kafka-log-dirs.sh prints no cordon field, so the JSON stays as it is; the table has a Cordoned column
(docs/cordons.md)."""

from __future__ import annotations

import json
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table

from mover.admin.client import Client, join_ids
from mover.admin.common import exception_class_name
from mover.admin.log_dir_state import DirInfo, describe_broker
from mover.cli.common import CliError


def select_brokers(client: Client, broker_list: list[int] | None) -> list[int]:
    if broker_list is None:
        return sorted(client.brokers)
    missing = [b for b in broker_list if b not in client.brokers]
    if missing:
        # Kafka's LogDirsCommand wording.
        raise CliError(f"The given brokers do not exist from --broker-list: {join_ids(missing)}. "
                       f"Current existent brokers: {join_ids(client.brokers)}")
    return list(dict.fromkeys(broker_list))


def describe(client: Client, brokers: list[int], topics: list[str] | None, output: str, out: TextIO) -> int:
    if output == "json":
        # Printed before the brokers answer, as Kafka does: a hang shows where it hangs.
        print("Querying brokers for log directories information", file=out, flush=True)
    infos = {b: describe_broker(client, b) for b in brokers}
    if topics is not None:
        wanted = set(topics)
        infos = {b: [_only(d, wanted) for d in dirs] for b, dirs in infos.items()}
    if output == "json":
        print(f"Received log directory information from brokers {','.join(map(str, brokers))}", file=out)
        print(json.dumps(as_json(infos), separators=(",", ":")), file=out)
    else:
        print_table(infos, out)
    return 0


def _only(d: DirInfo, topics: set[str]) -> DirInfo:
    return DirInfo(d.path, d.error_code, d.total_bytes, d.usable_bytes,
                   tuple(p for p in d.partitions if p.topic in topics), d.is_cordoned)


def as_json(infos: dict[int, list[DirInfo]]) -> dict[str, Any]:
    return {"version": 1, "brokers": [
        {"broker": broker, "logDirs": [
            {"logDir": d.path,
             "error": exception_class_name(d.error_code) if d.error_code else None,
             "partitions": [{"partition": p.name, "size": p.size, "offsetLag": p.offset_lag,
                             "isFuture": p.is_future} for p in d.partitions]}
            for d in dirs]}
        for broker, dirs in infos.items()]}


def human_bytes(n: int) -> str:
    if n < 0:
        return "unknown"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def print_table(infos: dict[int, list[DirInfo]], out: TextIO) -> None:
    console = Console(file=out, highlight=False, markup=False, width=max(100, Console(file=out).width))
    table = Table(title="Log directories", title_justify="left")
    for name, justify in (("Broker", "right"), ("Log dir", "left"), ("Status", "left"), ("Cordoned", "left"),
                          ("Total", "right"),
                          ("Usable", "right"), ("Used", "right"), ("Partitions", "right"), ("Moving in", "right"),
                          ("Data", "right")):
        # The path is what an operator acts on: wrap it, never cut it with an ellipsis.
        table.add_column(name, justify=justify, overflow="fold" if name == "Log dir" else "ellipsis",  # type: ignore[arg-type]
                         no_wrap=name != "Log dir")
    for broker, dirs in infos.items():
        for d in dirs:
            used = "?"
            if d.total_bytes > 0 and d.usable_bytes >= 0:
                used = f"{100 * (d.total_bytes - d.usable_bytes) / d.total_bytes:.1f}%"
            status = "online" if d.error_code == 0 else exception_class_name(d.error_code).rsplit(".", 1)[1]
            # "-": the broker does not report cordons (DescribeLogDirs before v5, docs/cordons.md).
            cordoned = "-" if d.is_cordoned is None else ("yes" if d.is_cordoned else "no")
            table.add_row(str(broker), d.path, status, cordoned, human_bytes(d.total_bytes),
                          human_bytes(d.usable_bytes), used,
                          str(sum(not p.is_future for p in d.partitions)),
                          str(sum(p.is_future for p in d.partitions)),
                          human_bytes(sum(p.size for p in d.partitions)))
    console.print(table)
