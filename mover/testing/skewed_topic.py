"""The skewed topic of the mover-audit tests against a real Apache Kafka 3.7 cluster (tests/kafka/test_audit_cluster.py,
whose docstring tells how it is made, and tests/kafka/test_balancer_kafka.py): 24 partitions of replication factor 3
on brokers 1-3 of three log dirs each, filled with Kafka's own skew (equal partition counts per dir, unequal bytes),
chosen from where Kafka put them so that every broker has one disk far above its mean; and the brokers' modified
configs read through kafka-python (an independent client).

    acked = fill_unevenly(cluster)          # the topic created and filled; every record acknowledged
    with Client(cluster.bootstrap) as client:
        dir_index(cluster, client)           # broker -> partition -> index of its log dir
    admin_configs(cluster)                   # broker -> {key: (value, source)}
"""

from __future__ import annotations

import itertools
import random
from collections import Counter

from kafka.admin import ConfigResource, ConfigResourceType

from mover.admin.client import Client
from mover.testing.history import TP, Acked
from mover.testing.kafka_cluster import KafkaCluster
from mover.testing.placement import describe_placement
from mover.testing.producers import prefill

TOPIC = "skew"
PARTITIONS = 24
TPS: list[TP] = [(TOPIC, p) for p in range(PARTITIONS)]
BROKERS = [1, 2, 3]
CLUSTER = "k"
RECORD_BYTES = 4000
HEAVY = 4  # partitions made big, all on broker 1's first dir


def dir_index(cluster: KafkaCluster, client: Client, topic: str = TOPIC) -> dict[int, dict[int, int]]:
    """broker -> partition -> index of the log dir holding it (current copies of the topic)."""
    out: dict[int, dict[int, int]] = {}
    for b in BROKERS:
        dirs = [str(d) for d in cluster.log_dirs(b)]
        out[b] = {p: dirs.index(info.current) for (t, p), info in describe_placement(client, b).items()
                  if t == topic and info.current is not None}
    return out


def skew(where: dict[int, dict[int, int]], counts: dict[int, int]) -> float:
    """How far the fullest disk of the least skewed broker is above its broker's mean (0.2 = 20%), with each
    partition holding `counts` records."""
    def above(b: int) -> float:
        per_dir = [sum(n for p, n in counts.items() if where[b][p] == d) for d in range(3)]
        return max(per_dir) / (sum(per_dir) / 3) - 1
    return min(above(b) for b in BROKERS)


MIN_SKEW = 0.2  # every broker's fullest disk this far above its mean: well out of the audit's default +-9% band


def skewed_counts(where: dict[int, dict[int, int]]) -> dict[int, int]:
    """Records per partition: HEAVY partitions of broker 1's first dir made big (75-120 records), the others small
    (10-40), chosen among Kafka's placement so that every broker has a disk far above its mean. Which of broker 1's
    partitions pile on one dir of the other brokers is Kafka's choice: in one CI run the first pick left broker 2
    in band (no move planned there), so the small sizes are also dealt out (same sizes, seeded shuffles) until the
    least skewed broker is at MIN_SKEW."""
    first = sorted(p for p, d in where[1].items() if d == 0)
    base = {p: 10 + 10 * (p % 4) for p in range(PARTITIONS)}

    def counts(heavy: tuple[int, ...], small: dict[int, int]) -> dict[int, int]:
        return {p: (75 + 15 * (p % 4)) if p in heavy else small[p] for p in range(PARTITIONS)}

    heavy = max(itertools.combinations(first, HEAVY), key=lambda h: skew(where, counts(h, base)))
    best = counts(heavy, base)
    others = [p for p in range(PARTITIONS) if p not in heavy]
    shuffler = random.Random(0)
    for _ in range(500):
        if skew(where, best) >= MIN_SKEW:
            break
        sizes = [base[p] for p in others]
        shuffler.shuffle(sizes)
        tried = counts(heavy, {**base, **dict(zip(others, sizes, strict=True))})
        if skew(where, tried) > skew(where, best):
            best = tried
    assert skew(where, best) >= MIN_SKEW, (where, best)
    return best


def fill_unevenly(cluster: KafkaCluster) -> list[Acked]:
    """Kafka's own skew (docs/audit.md): equal partition counts per dir, unequal bytes. A few partitions get many
    records, the rest few, chosen so that each broker ends with one disk well above the others."""
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    with Client(cluster.bootstrap) as client:
        where = dir_index(cluster, client)
    per_dir = PARTITIONS // 3
    assert all(Counter(where[b].values()) == {0: per_dir, 1: per_dir, 2: per_dir} for b in BROKERS), where
    # 300-480 KB for the heavy ones, 40-160 KB for the others: the small ones, also on the heaviest dirs, let the
    # plan land every disk in its band (+-9% of about 1.2 MB) with whole partitions.
    counts = skewed_counts(where)
    return prefill(cluster.bootstrap, TPS, {tp: counts[tp[1]] for tp in TPS}, RECORD_BYTES, name="fill")


def admin_configs(cluster: KafkaCluster) -> dict[int, dict[str, tuple[str | None, str]]]:
    """Per broker, its modified configs {key: (value, source)}, through kafka-python (an independent client)."""
    admin = cluster.admin()
    try:
        got = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, str(b)) for b in BROKERS])
    finally:
        admin.close()
    return {int(b): {k: (v["value"], str(v["config_source"])) for k, v in configs.items()}
            for b, configs in got["broker"].items()}
