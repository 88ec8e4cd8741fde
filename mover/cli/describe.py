"""--describe: kafka-log-dirs.sh's output, byte for byte, or a table of dir usage (--output table).

Byte for byte includes Kafka 3.x's order: the tool builds its JSON from Java HashMaps, so keys, brokers, log dirs
and partitions come in Java's hash order (mover/cli/java_order.py, docs/kafka-compat.md).
Kafka 4.3's kafka-log-dirs.sh prints no cordon field, so the JSON stays as it is; the table has a Cordoned column
(docs/cordons.md)."""

from __future__ import annotations

import json
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table

from mover.admin.client import Client, join_ids
from mover.admin.common import exception_class_name, format_bytes, some
from mover.admin.log_dir_state import DirInfo, PartitionInfo, describe_broker
from mover.cli import java_order
from mover.cli.common import CliError


def select_brokers(client: Client, broker_list: list[int] | None) -> list[int]:
    if broker_list is None:
        return sorted(client.brokers)
    missing = [b for b in broker_list if b not in client.brokers]
    if missing:
        # Kafka's LogDirsCommand wording.
        raise CliError(f"The given brokers do not exist from --broker-list: {some(sorted(set(missing)), ',')}. "
                       f"Current existent brokers: {join_ids(client.brokers)}")
    return list(dict.fromkeys(broker_list))


def describe(client: Client, broker_list: list[int] | None, topics: list[str] | None, output: str,
             out: TextIO) -> int:
    select_brokers(client, broker_list)  # an unknown id is refused before anything is printed
    if output == "json":
        # Printed before the brokers answer, as Kafka does: a hang shows where it hangs.
        print("Querying brokers for log directories information", file=out, flush=True)
    asked, answered = kafka_broker_order(list(client.brokers), broker_list)
    infos = {b: describe_broker(client, b) for b in answered}
    wanted = set(topics) if topics is not None else None
    if output == "json":
        print(f"Received log directory information from brokers {','.join(map(str, asked))}", file=out)
        print(json.dumps(as_json(infos, wanted), separators=(",", ":")), file=out)
    else:
        if wanted is not None:
            infos = {b: [_only(d, wanted) for d in dirs] for b, dirs in infos.items()}
        print_table(infos, out)
    return 0


def kafka_broker_order(cluster: list[int], broker_list: list[int] | None) -> tuple[list[int], list[int]]:
    """(the order of the "Received ... from brokers" line, the order of the JSON's brokers), as kafka-log-dirs.sh
    3.x gets them: a HashSet of the cluster's ids (or of --broker-list) copied into a new HashSet, then two HashMaps
    sized to it (the admin client's futures, then its answers)."""
    first = java_order.order(dict.fromkeys(cluster if broker_list is None else broker_list), java_order.int_hash)
    asked = java_order.order(first, java_order.int_hash, java_order.hash_set_capacity(len(first)))
    asked = [b for b in asked if b in cluster]
    futures = java_order.order(asked, java_order.int_hash, len(asked))
    return asked, java_order.order(futures, java_order.int_hash, len(futures))


def _only(d: DirInfo, topics: set[str]) -> DirInfo:
    return DirInfo(d.path, d.error_code, d.total_bytes, d.usable_bytes,
                   tuple(p for p in d.partitions if p.topic in topics), d.is_cordoned)


def _partition_hash(p: PartitionInfo) -> int:
    return java_order.topic_partition_hash(p.topic, p.partition)


def as_json(infos: dict[int, list[DirInfo]], topics: set[str] | None = None) -> dict[str, Any]:
    """The JSON kafka-log-dirs.sh prints (`topics`: --topic-list), keys and lists in the order Kafka 3.x's tool
    iterates its HashMaps: the dirs in a map sized to the broker's answer, each dir's partitions first in the
    client's map (every partition, in the answer's order), then in the tool's own map (those of `topics`, in the
    first map's order)."""
    brokers = []
    for broker, dirs in infos.items():
        by_path = {d.path: d for d in dirs}
        log_dirs = []
        for path in java_order.order(by_path, java_order.string_hash, len(by_path)):
            d = by_path[path]
            received = java_order.order(d.partitions, _partition_hash)
            partitions = java_order.order([p for p in received if topics is None or p.topic in topics],
                                          _partition_hash)
            log_dirs.append({
                "partitions": [{"partition": p.name, "size": p.size, "offsetLag": p.offset_lag,
                                "isFuture": p.is_future} for p in partitions],
                "error": exception_class_name(d.error_code) if d.error_code else None,
                "logDir": d.path})
        brokers.append({"broker": broker, "logDirs": log_dirs})
    return {"brokers": brokers, "version": 1}


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
            table.add_row(str(broker), d.path, status, cordoned, format_bytes(d.total_bytes),
                          format_bytes(d.usable_bytes), used,
                          str(sum(not p.is_future for p in d.partitions)),
                          str(sum(p.is_future for p in d.partitions)),
                          format_bytes(sum(p.size for p in d.partitions)))
    console.print(table)
