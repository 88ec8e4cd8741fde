"""The Kafka releases the fakes imitate, each in one place: a test picks a release and every broker of its FakeCluster
answers as that release does. Where releases differ by more than a version range (2.3's empty ApiVersions list, 3.x's
config quirks, ZooKeeper mode against KRaft, 4.3's cordons), the difference is a flag or a range here and the handler
concerned reads it, so a new release is a new row, not new code in every handler (docs/kafka-compat.md)."""

from __future__ import annotations

from dataclasses import dataclass

from mover.testing.fake_topic_log import APIS_2, APIS_3
from mover.wire.messages import (
    ALTER_PARTITION_REASSIGNMENTS,
    ALTER_REPLICA_LOG_DIRS,
    API_VERSIONS,
    DESCRIBE_CONFIGS,
    DESCRIBE_LOG_DIRS,
    ELECT_LEADERS,
    INCREMENTAL_ALTER_CONFIGS,
    LIST_PARTITION_REASSIGNMENTS,
    METADATA,
)


@dataclass(frozen=True)
class KafkaVersion:
    """What one Apache Kafka release offers: {api key: (min, max)} and how it answers an unknown ApiVersions."""

    name: str
    apis: dict[int, tuple[int, int]]
    empty_api_keys_on_unknown_version: bool  # before 2.4 (KIP-511)
    # 3.x (measured on 3.7.0, KRaft): IncrementalAlterConfigs stores a broker key it does not know, DescribeConfigs
    # lists it sensitive with a null value, and Kafka's unset move throttle is left out of DescribeConfigs. 2.x
    # brokers were not measured on this: their fakes refuse an unknown key, as the tools once assumed.
    config_quirks_3x: bool = False
    # ZooKeeper mode: only the controller carries out KIP-455's requests and ElectLeaders; any other broker answers
    # NOT_CONTROLLER, and Metadata names the controller. KRaft (the 3.9 and 4.x fakes): every broker forwards them,
    # and Metadata names a random live broker (docs/kafka-compat.md).
    zookeeper: bool = False

    @property
    def has_cordons(self) -> bool:
        return self.apis.get(DESCRIBE_LOG_DIRS.key, (0, 0))[1] >= 5

    def offers(self, api_key: int, version: int) -> bool:
        lo_hi = self.apis.get(api_key)
        return lo_hi is not None and lo_hi[0] <= version <= lo_hi[1]


_ADMIN_2_3 = {DESCRIBE_CONFIGS.key: (0, 2), INCREMENTAL_ALTER_CONFIGS.key: (0, 0), ALTER_REPLICA_LOG_DIRS.key: (0, 1)}
_ADMIN_3 = {DESCRIBE_CONFIGS.key: (0, 4), INCREMENTAL_ALTER_CONFIGS.key: (0, 1), ALTER_REPLICA_LOG_DIRS.key: (0, 2)}
# KIP-455 (2.4+) and ElectLeaders (KIP-460).
_KIP_455 = {ALTER_PARTITION_REASSIGNMENTS.key: (0, 0), LIST_PARTITION_REASSIGNMENTS.key: (0, 0),
            ELECT_LEADERS.key: (0, 2)}
KAFKA_2_3 = KafkaVersion("2.3", {API_VERSIONS.key: (0, 2), METADATA.key: (0, 7), DESCRIBE_LOG_DIRS.key: (0, 1),
                                 **_ADMIN_2_3, **APIS_2}, True, zookeeper=True)
KAFKA_2_4 = KafkaVersion("2.4", {API_VERSIONS.key: (0, 3), METADATA.key: (0, 9), DESCRIBE_LOG_DIRS.key: (0, 1),
                                 **_ADMIN_2_3, INCREMENTAL_ALTER_CONFIGS.key: (0, 1), **_KIP_455, **APIS_2}, False,
                         zookeeper=True)
KAFKA_3_9 = KafkaVersion("3.9", {API_VERSIONS.key: (0, 4), METADATA.key: (0, 12), DESCRIBE_LOG_DIRS.key: (0, 4),
                                 **_ADMIN_3, **_KIP_455, **APIS_3}, False, config_quirks_3x=True)
# 4.0 removed DescribeLogDirs v0 and AlterReplicaLogDirs v0 (KIP-896) and added Metadata v13; clients that speak
# less pick their own maximum.
_ADMIN_4 = {**_ADMIN_3, ALTER_REPLICA_LOG_DIRS.key: (1, 2), **_KIP_455, **APIS_3}
KAFKA_4_1 = KafkaVersion("4.1", {API_VERSIONS.key: (0, 4), METADATA.key: (0, 13), DESCRIBE_LOG_DIRS.key: (1, 4),
                                 **_ADMIN_4}, False, config_quirks_3x=True)
# 4.3 (KIP-1066): DescribeLogDirs v5 reports IsCordoned; cordoned.log.dirs is a per-broker dynamic key.
KAFKA_4_3 = KafkaVersion("4.3", {API_VERSIONS.key: (0, 4), METADATA.key: (0, 13), DESCRIBE_LOG_DIRS.key: (1, 5),
                                 **_ADMIN_4}, False, config_quirks_3x=True)
VERSIONS = {v.name: v for v in (KAFKA_2_3, KAFKA_2_4, KAFKA_3_9, KAFKA_4_1, KAFKA_4_3)}
