"""`mover-audit collect`: ask every broker of every cluster for its log dirs and write one snapshot.

    mover-audit collect (--fleet F.toml | --bootstrap-server H:P | --zookeeper H:P/chroot) --out ROOT [--local]
                        [--command-config client.properties]

Discovery (fleet.py) runs on the driver: one Metadata per cluster. The DescribeLogDirs queries, one per broker, run
inside Spark tasks (the broker list is parallelized, each task queries its brokers with at most `--parallelism`
connections at once), so the querying grows with the Spark cluster; `--local` queries from a thread pool in this
process and writes with pyarrow, for small fleets and machines without Spark. Either way a broker that is down, slow
or refuses is one row of the `brokers` dataset with its error, and the rest go on.

The snapshot (mover/audit/snapshot.py, docs/audit.md) is written under a hidden temporary name and renamed into
place when complete, so a reader listing snapshots never sees half of one.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mover.admin.client import DEFAULT_TIMEOUT_S, BrokerConnection, ClientError
from mover.admin.common import error_name
from mover.admin.log_dir_state import CORDON_VERSION
from mover.audit.errors import AuditError
from mover.audit.fleet import BrokerEndpoint, ClusterView, add_capacity_argument, discover, sources_from_args
from mover.audit.fleet import add_arguments as add_source_arguments
from mover.audit.snapshot import (
    DATASETS,
    LOG_DIRS,
    LOG_DIRS_OPTIONAL,
    PARTITIONS,
    PARTITIONS_RETENTION,
    REPLICAS,
    snapshot_name,
    spark_ddl,
)
from mover.cli.arguments import positive_int
from mover.cli.common import EXIT_OK
from mover.wire.errors import ErrorCode
from mover.wire.messages import DESCRIBE_CONFIGS, DESCRIBE_LOG_DIRS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_PARALLELISM = 16
# Extra columns this writer adds to the contract's datasets (allowed: readers need only the declared ones).
# total_source: "broker" (DescribeLogDirs v4) or "capacity"; is_cordoned: from DescribeLogDirs v5, else null.
LOG_DIRS_OUT: dict[str, str] = {**LOG_DIRS, **LOG_DIRS_OPTIONAL, "total_source": "string"}
# One row per broker asked (and per cluster whose discovery failed, broker null): how collection went.
BROKERS: dict[str, str] = {
    "cluster": "string",
    "broker": "int",
    "host": "string",
    "port": "int",
    "error": "string",  # null when the broker answered
    "describe_log_dirs_version": "int",
    "log_dirs": "int",
    "replicas": "bigint",
    "elapsed_ms": "bigint",
    "collected_at": "timestamp",
}
# `partitions` with the topics' retention settings, which the forecast reads (its plateaus; docs/audit.md).
PARTITIONS_OUT: dict[str, str] = {**PARTITIONS, **PARTITIONS_RETENTION}
OUTPUTS: dict[str, dict[str, str]] = {"log_dirs": LOG_DIRS_OUT, "replicas": REPLICAS, "partitions": PARTITIONS_OUT,
                                      "brokers": BROKERS}
TOPIC_RESOURCE = 2  # Kafka's ConfigResource.Type.TOPIC
RETENTION_KEYS = ("retention.bytes", "retention.ms")  # in PARTITIONS_RETENTION's order
# A broker that partitions name as a replica and no broker list does (a real Kafka's Metadata leaves out a broker
# that died or was fenced; its ZooKeeper registration is ephemeral).
MISSING_BROKER = "not among the cluster's live brokers (down or fenced): partitions name it as a replica"
# Each Spark task handles at least this many brokers before the list is split further: a task costs more to
# schedule than a DescribeLogDirs costs to ask.
BROKERS_PER_TASK = 32


@dataclass
class BrokerResult:
    log_dirs: list[tuple[Any, ...]]
    replicas: list[tuple[Any, ...]]
    broker: tuple[Any, ...]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_source_arguments(parser)
    add_capacity_argument(parser)
    parser.add_argument("--out", type=Path, required=True, metavar="ROOT",
                        help="snapshots root: writes ROOT/<UTC yyyymmddTHHMMSSZ>/")
    parser.add_argument("--parallelism", type=positive_int, default=DEFAULT_PARALLELISM, metavar="N",
                        help=f"brokers queried at once (per Spark task; default {DEFAULT_PARALLELISM})")
    parser.add_argument("--local", action="store_true",
                        help="query from this process and write with pyarrow, without Spark (small fleets)")
    from mover.audit import spark

    spark.add_arguments(parser)



def run(args: argparse.Namespace) -> int:
    sources = sources_from_args(args, args.capacity)
    started = time.monotonic()
    views = [discover(s, args.timeout) for s in sources]
    settings = topic_retention(views, args.parallelism, args.timeout)
    if args.local:
        path = collect_local(views, args.out, parallelism=args.parallelism, timeout=args.timeout,
                             retention=settings)
    else:
        from mover.audit import spark

        path = collect_spark(spark.from_args(args), views, args.out, parallelism=args.parallelism,
                             timeout=args.timeout, retention=settings)
    answered = print_summary(path, views, time.monotonic() - started)
    # The snapshot records the failures either way; a fleet where nobody answered is almost always a wrong address
    # or a network problem, which a cron job should hear about: exit 1, with the one error line on stderr.
    if not answered:
        raise AuditError(f"no broker of the fleet answered (snapshot {path} records why; each failure is above)")
    return EXIT_OK


# ------------------------------------------------------------------------------------------------ one broker


def query_broker(b: BrokerEndpoint, timeout: float, collected_at: datetime) -> BrokerResult:
    """DescribeLogDirs (all topics) on one broker, as rows. Never raises for what the broker does."""
    started = time.monotonic()
    version = None
    try:
        conn = BrokerConnection(b.host, b.port, timeout=timeout, name=f"{b.broker} ({b.host}:{b.port})",
                                security=b.security)
        try:
            version = conn.version_for(DESCRIBE_LOG_DIRS)
            reply = conn.call(DESCRIBE_LOG_DIRS, {"topics": None}, version)
        finally:
            conn.close()
        if reply["error_code"] != ErrorCode.NONE:
            raise ClientError(f"broker {b.broker} answered DescribeLogDirs with {error_name(reply['error_code'])}")
    except ClientError as e:
        elapsed = int((time.monotonic() - started) * 1000)
        return BrokerResult([], [], (b.cluster, b.broker, b.host, b.port, str(e), version, 0, 0, elapsed,
                                     collected_at))
    log_dirs, replicas = [], []
    for r in reply["results"]:
        path = r["log_dir"]
        used = 0
        for t in r["topics"]:
            for p in t["partitions"]:
                used += p["partition_size"]
                replicas.append((b.cluster, b.broker, path, t["name"], p["partition_index"], p["partition_size"],
                                 p["offset_lag"], p["is_future_key"], collected_at))
        error = None if r["error_code"] == ErrorCode.NONE else error_name(r["error_code"])
        total, usable, source = _totals(r, b.capacity.get(path), used, error)
        cordoned = r["is_cordoned"] if version >= CORDON_VERSION else None
        log_dirs.append((b.cluster, b.broker, path, error, total, usable, collected_at, cordoned, source))
    # Listed by partition, not dir by dir as the broker answers: a copy moved to another dir of the broker keeps
    # its place, so that the forecast's append takes the snapshot's other copies from the map it kept
    # (docs/audit.md, "The copies kept"), and the order does not follow the broker's hash maps.
    replicas.sort(key=lambda r: (r[3], r[4], r[7]))
    elapsed = int((time.monotonic() - started) * 1000)
    return BrokerResult(log_dirs, replicas, (b.cluster, b.broker, b.host, b.port, None, version, len(log_dirs),
                                             len(replicas), elapsed, collected_at))


def _totals(result: dict[str, Any], capacity: int | None, used: int,
            error: str | None) -> tuple[int | None, int | None, str | None]:
    """(total, usable, where from): DescribeLogDirs v4 first; else the capacity file, usable = capacity - the log
    sizes in that dir (Cruise Control's view of a disk); else unknown. An offline dir has no figures."""
    if error is not None:
        return None, None, None
    total = result.get("total_bytes", -1)
    if total is not None and total >= 0:
        usable = result.get("usable_bytes", -1)
        return total, (usable if usable is not None and usable >= 0 else None), "broker"
    if capacity is not None:
        return capacity, max(capacity - used, 0), "capacity"
    return None, None, None


def query_brokers(brokers: Iterable[BrokerEndpoint], parallelism: int, timeout: float,
                  collected_at: datetime) -> Iterator[BrokerResult]:
    """Every broker, at most `parallelism` at once. Results in the order the brokers were given."""
    brokers = list(brokers)
    if not brokers:
        return
    with ThreadPoolExecutor(max_workers=min(parallelism, len(brokers)), thread_name_prefix="collect") as pool:
        yield from pool.map(partial(query_broker, timeout=timeout, collected_at=collected_at), brokers)


def _task(brokers: Iterator[BrokerEndpoint], parallelism: int, timeout: float,
          collected_at: datetime) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """A Spark task: query its brokers and tag each row with the dataset it belongs to."""
    for result in query_brokers(brokers, parallelism, timeout, collected_at):
        for row in result.log_dirs:
            yield "log_dirs", row
        for row in result.replicas:
            yield "replicas", row
        yield "brokers", result.broker


# ------------------------------------------------------------------------------------------------ topic settings

Retention = dict[tuple[str, str], tuple[int | None, int | None]]  # (cluster, topic) -> (retention.bytes, .ms)


def ask_retention(b: BrokerEndpoint, topics: list[str], timeout: float) -> Retention:
    """retention.bytes and retention.ms of `topics` (effective values: a topic's own, else the broker's default) from
    one broker. Never raises: a broker that cannot say leaves its topics out (unknown, not unlimited)."""
    try:
        conn = BrokerConnection(b.host, b.port, timeout=timeout, name=f"{b.broker} ({b.host}:{b.port})",
                                security=b.security)
        try:
            if not conn.supports(DESCRIBE_CONFIGS):
                return {}
            reply = conn.call(DESCRIBE_CONFIGS, {"resources": [
                {"resource_type": TOPIC_RESOURCE, "resource_name": t, "configuration_keys": list(RETENTION_KEYS)}
                for t in topics]})
        finally:
            conn.close()
    except ClientError:
        return {}
    out: Retention = {}
    for r in reply["results"]:
        if r["error_code"] != ErrorCode.NONE:
            continue
        values = {e["name"]: _long(e["value"]) for e in r["configs"] if e["name"] in RETENTION_KEYS}
        out[(b.cluster, r["resource_name"])] = (values.get("retention.bytes"), values.get("retention.ms"))
    return out


def _long(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def topic_retention(views: list[ClusterView], parallelism: int = DEFAULT_PARALLELISM,
                    timeout: float = DEFAULT_TIMEOUT_S) -> Retention:
    """Every topic's retention settings, each topic asked of a broker holding it (its first partition's first
    replica that answers Metadata): Kafka answers for any topic on any broker, a moverd only for the topics it holds.
    One DescribeConfigs per broker, so the asking spreads over the fleet; at most `parallelism` at once."""
    asks: dict[tuple[str, int], tuple[BrokerEndpoint, list[str]]] = {}
    for v in views:
        endpoints = {b.broker: b for b in v.brokers}
        first: dict[str, list[int]] = {}
        for topic, _, replicas in v.partitions:  # sorted: a topic's partition 0 comes first
            first.setdefault(topic, replicas)
        for topic, replicas in first.items():
            holder = next((endpoints[r] for r in replicas if r in endpoints), None)
            if holder is not None:
                asks.setdefault((holder.cluster, holder.broker), (holder, []))[1].append(topic)
    if not asks:
        return {}
    out: Retention = {}
    with ThreadPoolExecutor(max_workers=min(parallelism, len(asks)), thread_name_prefix="configs") as pool:
        for found in pool.map(lambda ask: ask_retention(ask[0], ask[1], timeout), asks.values()):
            out.update(found)
    return out


# ------------------------------------------------------------------------------------------------ snapshot


def _partition_rows(views: list[ClusterView], retention: Retention | None = None) -> list[tuple[Any, ...]]:
    retention = retention or {}
    unknown = (None, None)
    return [(v.source.name, t, p, replicas, *retention.get((v.source.name, t), unknown))
            for v in views for t, p, replicas in v.partitions]


def _failed_cluster_rows(views: list[ClusterView], collected_at: datetime) -> list[tuple[Any, ...]]:
    """The clusters whose discovery failed (broker null), and the brokers their partitions name that no broker list
    does (down or fenced: there is no address to ask)."""
    return [(v.source.name, None, None, None, v.error, None, 0, 0, 0, collected_at)
            for v in views if v.error is not None and not v.brokers] + [
        (v.source.name, b, None, None, MISSING_BROKER, None, 0, 0, 0, collected_at)
        for v in views for b in v.missing]


def _begin(root: Path, collected_at: datetime) -> tuple[Path, Path]:
    final = root / snapshot_name(collected_at)
    if final.exists():
        raise AuditError(f"snapshot {final} already exists")
    tmp = root / f".{final.name}.{os.getpid()}.tmp"
    try:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    except OSError as e:
        raise AuditError(f"cannot create the snapshot under {root}: {e.strerror or e}") from None
    return tmp, final


def _commit(tmp: Path, final: Path) -> Path:
    # One rename publishes the whole snapshot; datasets are complete files by now. The name sorts by time, so a
    # reader that lists snapshots takes this one as the newest only once it is whole.
    try:
        tmp.rename(final)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise AuditError(f"cannot publish snapshot {final}: {e.strerror or e}") from None
    return final


def collect_local(views: list[ClusterView], root: Path, *, parallelism: int = DEFAULT_PARALLELISM,
                  timeout: float = DEFAULT_TIMEOUT_S, collected_at: datetime | None = None,
                  retention: Retention | None = None) -> Path:
    """Query from a thread pool here; write with pyarrow. `retention` (topic_retention's) fills the partitions'
    retention columns; without it they are null (unknown)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    at = (collected_at or datetime.now(UTC)).replace(microsecond=0)
    tmp, final = _begin(root, at)
    rows: dict[str, list[tuple[Any, ...]]] = {name: [] for name in OUTPUTS}
    for result in query_brokers([b for v in views for b in v.brokers], parallelism, timeout, at):
        rows["log_dirs"] += result.log_dirs
        rows["replicas"] += result.replicas
        rows["brokers"].append(result.broker)
    rows["brokers"] += _failed_cluster_rows(views, at)
    rows["partitions"] = _partition_rows(views, retention)
    try:
        for name, columns in OUTPUTS.items():
            schema = pa.schema([(c, _arrow_type(kind)) for c, kind in columns.items()])
            table = pa.Table.from_pylist([dict(zip(columns, r, strict=True)) for r in rows[name]], schema=schema)
            (tmp / name).mkdir()
            pq.write_table(table, tmp / name / "part-00000.parquet")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return _commit(tmp, final)


def collect_spark(spark: SparkSession, views: list[ClusterView], root: Path, *,
                  parallelism: int = DEFAULT_PARALLELISM, timeout: float = DEFAULT_TIMEOUT_S,
                  collected_at: datetime | None = None, retention: Retention | None = None) -> Path:
    """Query inside Spark tasks (parallelize the broker list, mapPartitions over it); write with Spark."""
    from pyspark import StorageLevel

    at = (collected_at or datetime.now(UTC)).replace(microsecond=0)
    tmp, final = _begin(root, at)
    brokers = [b for v in views for b in v.brokers]
    sc = spark.sparkContext
    slices = max(1, min(len(brokers), max(sc.defaultParallelism, math.ceil(len(brokers) / BROKERS_PER_TASK))))
    tagged = sc.parallelize(brokers, slices).mapPartitions(
        partial(_task, parallelism=parallelism, timeout=timeout, collected_at=at))
    # Three datasets come out of one pass over the brokers: keep the rows so each broker is asked once.
    tagged.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        for name in ("log_dirs", "replicas", "brokers"):
            rdd = tagged.filter(lambda r, n=name: r[0] == n).map(lambda r: r[1])
            if name == "brokers":
                rdd = rdd.union(sc.parallelize(_failed_cluster_rows(views, at), 1))
            spark.createDataFrame(rdd, schema=spark_ddl(OUTPUTS[name])).write.parquet(str(tmp / name))
        spark.createDataFrame(_partition_rows(views, retention), schema=spark_ddl(PARTITIONS_OUT)).write.parquet(
            str(tmp / "partitions"))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        tagged.unpersist()
    return _commit(tmp, final)


_ARROW_TYPES = {"string": "string", "int": "int32", "bigint": "int64", "boolean": "bool"}


def _arrow_type(kind: str) -> Any:
    import pyarrow as pa

    if kind == "timestamp":
        return pa.timestamp("us", tz="UTC")
    if kind == "array<int>":
        return pa.list_(pa.int32())
    return pa.type_for_alias(_ARROW_TYPES[kind])


def read_brokers(snapshot: Path) -> list[dict[str, Any]]:
    """The `brokers` dataset of a snapshot as dicts (small: one row per broker)."""
    import pyarrow.parquet as pq

    return pq.read_table(snapshot / "brokers").to_pylist()


def print_summary(path: Path, views: list[ClusterView], elapsed: float, out: Any = None) -> int:
    """Prints what the snapshot holds and each failure; returns how many brokers answered."""
    out = out or sys.stdout
    brokers = read_brokers(path)
    failed = [b for b in brokers if b["error"] is not None]
    print(f"snapshot {path}: {len(views)} cluster(s), {len(brokers) - len(failed)} broker(s) answered, "
          f"{len(failed)} failed, in {elapsed:.1f} s", file=out)
    for b in failed:
        who = f"broker {b['broker']} of {b['cluster']}" if b["broker"] is not None else f"cluster {b['cluster']}"
        print(f"  {who}: {b['error']}", file=out)
    return len(brokers) - len(failed)


assert set(OUTPUTS) - {"brokers"} == set(DATASETS)
