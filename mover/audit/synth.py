"""synth: a generated fleet snapshot in the snapshot layout (docs/audit.md), for the demo, the tests and the benchmarks.

The skew is Kafka's own: a broker puts each new partition on the log dir holding the fewest partitions, whatever their
size (LogManager.nextLogDirs), so every dir of a broker ends with the same number of replicas (+-1) while the bytes
differ as much as the partitions' sizes do. Sizes are lognormal per topic (topics differ by orders of magnitude) times
a smaller lognormal per partition (keys are not spread evenly); all replicas of a partition have its size.

Everything is computed inside Spark from `spark.range` with column expressions and hashes of the seed (no Python
per row, no shuffle but one small aggregation for usable bytes), so 20 million replica rows take seconds per core.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from mover.audit import snapshot, spark
from mover.audit.errors import AuditError, make_dir
from mover.cli.arguments import positive_int

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

GIB = 1 << 30
FULLEST = 0.95  # no generated disk is fuller than this
OFFLINE_ERROR = "KAFKA_STORAGE_ERROR"  # what DescribeLogDirs says of an offline dir (mover/wire/errors.py)


@dataclass(frozen=True)
class FleetShape:
    clusters: int = 2
    brokers: int = 10  # per cluster
    disks: int = 4  # per broker
    replicas_per_disk: int = 100
    replication_factor: int = 3
    partitions_per_topic: int = 12
    median_bytes: int = GIB  # median partition size
    topic_sigma: float = 1.4  # lognormal sigma of the topics' sizes
    partition_sigma: float = 0.4  # lognormal sigma of a partition around its topic
    fill: float = 0.5  # mean disk usage as a fraction of the disk
    mixed_capacity: float = 0.1  # fraction of brokers whose first disk is twice the others (a replaced disk)
    unknown_capacity: float = 0.0  # fraction of brokers that do not report total/usable bytes (before v4)
    offline: float = 0.0  # fraction of log dirs offline
    moving: float = 0.0  # fraction of replicas with a move in progress (a future copy in another dir)
    stuck: float = 0.5  # of the moving ones, the fraction that made no progress since the previous snapshot
    seed: int = 0

    @property
    def partitions_per_cluster(self) -> int:
        return math.ceil(self.brokers * self.disks * self.replicas_per_disk / self.replication_factor)

    def disk_total_bytes(self) -> int:
        sigma2 = self.topic_sigma ** 2 + self.partition_sigma ** 2
        mean_replica = self.median_bytes * math.exp(sigma2 / 2)
        return int(self.replicas_per_disk * mean_replica / self.fill)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = FleetShape()
    parser.add_argument("--out", required=True, metavar="ROOT",
                        help="write the snapshot in ROOT/<UTC yyyymmddTHHMMSSZ>/")
    parser.add_argument("--clusters", type=positive_int, default=d.clusters)
    parser.add_argument("--brokers", type=positive_int, default=d.brokers, help="brokers per cluster")
    parser.add_argument("--disks", type=positive_int, default=d.disks, help="log dirs per broker")
    parser.add_argument("--replicas-per-disk", type=positive_int, default=d.replicas_per_disk)
    parser.add_argument("--replication-factor", type=positive_int, default=d.replication_factor)
    parser.add_argument("--partitions-per-topic", type=positive_int, default=d.partitions_per_topic)
    parser.add_argument("--median-bytes", type=positive_int, default=d.median_bytes, help="median partition size")
    parser.add_argument("--fill", type=_fraction, default=d.fill, help="mean disk usage, 0-1 (default 0.5)")
    parser.add_argument("--mixed-capacity", type=_fraction, default=d.mixed_capacity, metavar="FRACTION",
                        help="brokers whose first disk is twice the size of the others")
    parser.add_argument("--unknown-capacity", type=_fraction, default=d.unknown_capacity, metavar="FRACTION",
                        help="brokers that report no total/usable bytes")
    parser.add_argument("--offline", type=_fraction, default=d.offline, metavar="FRACTION", help="offline log dirs")
    parser.add_argument("--moving", type=_fraction, default=d.moving, metavar="FRACTION",
                        help="replicas with a move in progress")
    parser.add_argument("--history", action="store_true",
                        help="also write a snapshot ten minutes earlier in which the moves had copied less, "
                             "except the stuck ones (--stuck of them)")
    parser.add_argument("--stuck", type=_fraction, default=d.stuck, metavar="FRACTION")
    parser.add_argument("--seed", type=int, default=d.seed)
    grown = parser.add_argument_group(
        "history: a fleet grown over simulated weeks, one snapshot every few hours, its truth in ROOT/truth.parquet "
        "(for the forecast; numpy and pyarrow, no Spark)")
    grown.add_argument("--days", type=_positive_float, metavar="N", help="grow the fleet over N simulated days")
    grown.add_argument("--every", type=_positive_float, default=2.0, metavar="HOURS",
                       help="hours between snapshots (default 2)")
    spark.add_arguments(parser)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text!r}")
    return value


def shape_from_args(args: argparse.Namespace) -> FleetShape:
    if args.replication_factor > args.brokers:
        raise AuditError(f"--replication-factor {args.replication_factor} needs at least that many --brokers")
    if args.fill == 0:
        raise AuditError("--fill must be above 0")
    return FleetShape(clusters=args.clusters, brokers=args.brokers, disks=args.disks,
                      replicas_per_disk=args.replicas_per_disk, replication_factor=args.replication_factor,
                      partitions_per_topic=args.partitions_per_topic, median_bytes=args.median_bytes,
                      fill=args.fill, mixed_capacity=args.mixed_capacity, unknown_capacity=args.unknown_capacity,
                      offline=args.offline, moving=args.moving, stuck=args.stuck, seed=args.seed)


def run(args: argparse.Namespace) -> int:
    shape = shape_from_args(args)
    # Made before any snapshot is generated: a root that cannot be is one line, not Spark's error from inside a
    # write job after its JVM started.
    make_dir(Path(args.out))
    if args.days is not None:
        from mover.audit import synth_history

        grown = synth_history.GrowthShape(
            clusters=shape.clusters, brokers=shape.brokers, disks=shape.disks,
            replicas_per_disk=shape.replicas_per_disk, replication_factor=shape.replication_factor,
            days=args.days, every_hours=args.every, seed=shape.seed)
        paths = synth_history.write_history(grown, Path(args.out))
        print(f"Wrote {len(paths)} snapshots over {args.days:g} days of {shape.clusters} clusters x "
              f"{shape.brokers} brokers x {shape.disks} disks to {args.out} (truth: "
              f"{Path(args.out) / synth_history.TRUTH_FILE})")
        return 0
    session = spark.from_args(args)
    paths = write_fleet(session, shape, Path(args.out), history=args.history)
    rows = shape.clusters * shape.partitions_per_cluster * shape.replication_factor
    print(f"Wrote a snapshot of {shape.clusters} clusters x {shape.brokers} brokers x {shape.disks} disks "
          f"(about {rows:,} replicas) to {paths[-1]}")
    return 0


def write_fleet(session: SparkSession, shape: FleetShape, root: Path, at: datetime | None = None,
                history: bool = False) -> list[Path]:
    """Writes the snapshot taken `at` (now) under `root` (and, with `history`, one ten minutes earlier); returns the
    snapshot directories, oldest first."""
    at = (at or datetime.now(UTC)).replace(microsecond=0)
    times = [at - timedelta(minutes=10), at] if history else [at]
    paths = []
    for i, when in enumerate(times):
        path = root / snapshot.snapshot_name(when)
        snapshot.write(path, generate(session, shape, when, earlier=history and i == 0))
        paths.append(path)
    return paths


def _name(prefix: str, number: Column, count: int) -> Column:
    """prefix + the number zero-padded to the width of the largest (lpad cuts longer strings: never narrower)."""
    from pyspark.sql import functions as F

    width = max(2, len(str(max(0, count - 1))))
    return F.concat(F.lit(prefix), F.lpad(number.cast("string"), width, "0"))


def _unit(*parts: Column) -> Column:
    """A uniform number in (0, 1) from a hash of the parts: the same inputs give the same number on every executor."""
    from pyspark.sql import functions as F

    bits = F.xxhash64(*parts).bitwiseAND(F.lit((1 << 52) - 1))
    return (bits.cast("double") + F.lit(0.5)) / F.lit(float(1 << 52))


def _normal(*parts: Column) -> Column:
    """A standard normal number (Box-Muller) from hashes of the parts."""
    from pyspark.sql import functions as F

    u1 = _unit(*parts, F.lit("n1"))
    u2 = _unit(*parts, F.lit("n2"))
    return F.sqrt(F.lit(-2.0) * F.log(u1)) * F.cos(F.lit(2 * math.pi) * u2)


def generate(session: SparkSession, shape: FleetShape, at: datetime, earlier: bool = False) -> dict[str, DataFrame]:
    """The three datasets of one synthetic snapshot (lazy DataFrames)."""
    from pyspark.sql import functions as F

    seed = F.lit(shape.seed)
    per_cluster = shape.partitions_per_cluster
    b_count, d_count, rf = shape.brokers, shape.disks, shape.replication_factor
    collected_at = F.lit(at.astimezone(UTC).replace(tzinfo=None)).cast("timestamp")
    # Enough input partitions for parallel generation, few enough that the files stay large.
    slices = max(2, min(400, shape.clusters * per_cluster * rf // 250_000))

    ids = session.range(0, shape.clusters * per_cluster, numPartitions=slices)
    partitions = (ids
                  .withColumn("c", (F.col("id") / per_cluster).cast("long"))
                  .withColumn("j", F.col("id") % per_cluster)
                  .withColumn("cluster", _name("cluster-", F.col("c"), shape.clusters))
                  .withColumn("t", (F.col("j") / shape.partitions_per_topic).cast("long"))
                  .withColumn("topic", _name("topic-", F.col("t"), per_cluster // shape.partitions_per_topic + 1))
                  .withColumn("partition", (F.col("j") % shape.partitions_per_topic).cast("int"))
                  # Consecutive partitions start on consecutive brokers, followers on the next ones: the spread of
                  # Kafka's rack-unaware assignment, without its random start.
                  .withColumn("replicas", F.array(*[((F.col("j") + r) % b_count).cast("int") for r in range(rf)]))
                  .withColumn("size", F.exp(
                      F.lit(math.log(shape.median_bytes))
                      + F.lit(shape.topic_sigma) * _normal(seed, F.col("c"), F.col("t"))
                      + F.lit(shape.partition_sigma) * _normal(seed, F.col("c"), F.col("j"))).cast("long")))

    replicas = (partitions
                .select("c", "j", "cluster", "topic", "partition", "size",
                        F.posexplode("replicas").alias("r", "broker"))
                # The n-th replica a broker receives goes to the dir with the fewest partitions: dir n mod disks
                # (started at a per-broker offset so brokers differ).
                .withColumn("n", ((F.col("j") + F.col("r")) / b_count).cast("long") * rf + F.col("r"))
                .withColumn("k", ((F.col("n") + F.col("broker")) % d_count).cast("int")))

    dirs = (session.range(0, shape.clusters * b_count * d_count, numPartitions=max(1, slices // 8))
            .withColumn("c", (F.col("id") / (b_count * d_count)).cast("long"))
            .withColumn("broker", ((F.col("id") / d_count) % b_count).cast("int"))
            .withColumn("k", (F.col("id") % d_count).cast("int"))
            .withColumn("cluster", _name("cluster-", F.col("c"), shape.clusters))
            .withColumn("log_dir", F.concat(F.lit("/var/lib/kafka/d"), F.col("k").cast("string")))
            .withColumn("offline", _unit(seed, F.lit("offline"), F.col("id")) < F.lit(shape.offline))
            .withColumn("unknown", _unit(seed, F.lit("unknown"), F.col("c"), F.col("broker"))
                        < F.lit(shape.unknown_capacity))
            .withColumn("double", (F.col("k") == 0)
                        & (_unit(seed, F.lit("mixed"), F.col("c"), F.col("broker")) < F.lit(shape.mixed_capacity))))

    current = (replicas
               .join(F.broadcast(dirs.select("c", "broker", "k", "log_dir", "offline")), ["c", "broker", "k"])
               .where(~F.col("offline"))
               .select("c", "cluster", "broker", "k", "log_dir", "topic", "partition",
                       F.col("size").alias("size_bytes"), F.lit(0).cast("long").alias("offset_lag"),
                       F.lit(False).alias("is_future")))
    moving = _unit(seed, F.lit("moving"), F.col("cluster"), F.col("broker"), F.col("topic"), F.col("partition"))
    progress = _unit(seed, F.lit("progress"), F.col("cluster"), F.col("broker"), F.col("topic"), F.col("partition"))
    stuck = _unit(seed, F.lit("stuck"), F.col("cluster"), F.col("broker"), F.col("topic"), F.col("partition"))
    copied = F.col("size_bytes").cast("double") * progress
    if earlier:
        # Ten minutes before, a move that is progressing had copied half of what it has now; a stuck one the same.
        copied = F.when(stuck < F.lit(shape.stuck), copied).otherwise(copied / 2)
    future = (current.where((moving < F.lit(shape.moving)) & F.lit(d_count > 1))
              .withColumn("k", ((F.col("k") + 1 + (progress * 1000).cast("int") % max(1, d_count - 1)) % d_count)
                          .cast("int"))
              .withColumn("size_bytes", copied.cast("long"))
              .withColumn("offset_lag", ((F.lit(1.0) - progress) * F.lit(100_000)).cast("long") + 1)
              .withColumn("is_future", F.lit(True))
              .drop("log_dir")
              .join(F.broadcast(dirs.where(~F.col("offline")).select("c", "broker", "k", "log_dir")),
                    ["c", "broker", "k"]))
    columns = list(snapshot.REPLICAS)
    all_replicas = (current.unionByName(future.select(current.columns))
                    .withColumn("collected_at", collected_at).select(*columns))

    used = (all_replicas.groupBy("cluster", "broker", "log_dir").agg(F.sum("size_bytes").alias("used")))
    size = F.when(F.col("double"), 2).otherwise(1)
    with_used = dirs.join(used, ["cluster", "broker", "log_dir"], "left")
    # A disk holds what is on it: where the lognormal sizes would overfill the nominal disk, the broker has bigger
    # disks (all alike, a doubled one still double), so its fullest is at most FULLEST of its size.
    need = (with_used.groupBy("cluster", "broker")
            .agg(F.max(F.coalesce(F.col("used"), F.lit(0)) / size).alias("need")))
    base = F.greatest(F.lit(shape.disk_total_bytes()), F.ceil(F.col("need") / F.lit(FULLEST)))
    total = base * size
    log_dirs = (with_used.join(need, ["cluster", "broker"])
                .withColumn("error", F.when(F.col("offline"), F.lit(OFFLINE_ERROR)))
                .withColumn("total_bytes", F.when(~F.col("offline") & ~F.col("unknown"), total).cast("long"))
                .withColumn("usable_bytes", F.when(
                    F.col("total_bytes").isNotNull(),
                    F.greatest(F.lit(0), F.col("total_bytes") - F.coalesce(F.col("used"), F.lit(0)))).cast("long"))
                .withColumn("collected_at", collected_at)
                .select(*snapshot.LOG_DIRS))
    return {"log_dirs": log_dirs, "replicas": all_replicas,
            "partitions": partitions.select(*snapshot.PARTITIONS)}
