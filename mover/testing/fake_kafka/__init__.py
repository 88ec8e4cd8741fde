"""In-process fake Apache Kafka brokers that answer as a given Kafka version does, for tests and benchmarks.

Apache Kafka cannot run here, so `collect`, `execute` and `mover-log-dirs` are tested against brokers that behave
exactly as each release behaves on the wire (docs/kafka-compat.md):

- ApiVersions at a version the broker does not know: a v0 answer with UNSUPPORTED_VERSION (35) whose api_keys is
  EMPTY before Kafka 2.4 and holds only ApiVersions' own range from 2.4 on (KIP-511);
- any other API at a version the broker does not offer: the connection is closed, no answer;
- DescribeLogDirs v0-1 before 2.6 and v0-4 (total/usable bytes) from 3.3; 4.0 removed DescribeLogDirs v0 and
  AlterReplicaLogDirs v0 (KIP-896); 4.3 adds DescribeLogDirs v5 (IsCordoned) and `cordoned.log.dirs` (KIP-1066): a
  move into a cordoned dir, even the replica's current one, answers INVALID_REPLICA_ASSIGNMENT (39).

    cluster = FakeCluster(KAFKA_2_3, brokers=3, dirs=["/d1", "/d2"])
    cluster.add_replica(broker=0, log_dir="/d1", topic="t", partition=0, size=1000)   # and Metadata's assignment
    with cluster:                                  # every broker listens on 127.0.0.1, free port
        cluster.bootstrap                          # "127.0.0.1:PORT,..."

From 2.4 the brokers serve KIP-455 (List/AlterPartitionReassignments) and ElectLeaders, with topic configs and the
replication throttle's broker keys: a reassignment completes after `cluster.reassign_polls` answers of
ListPartitionReassignments (its new replicas join the ISR then), a leader stays until ElectLeaders or until it leaves
the ISR. The 2.x fakes run in ZooKeeper mode: only `cluster.controller` carries those requests out and Metadata names
it; any other broker answers NOT_CONTROLLER. The 3.9 and 4.x fakes are KRaft: any broker answers, and Metadata's
controller_id is a random live broker, as a KRaft broker's is.

Moves asked for with AlterReplicaLogDirs grow a future replica by `move_step` bytes per DescribeLogDirs answered by
that broker (so a test drives time by polling), then swap. `cluster.peak_moves` records the most moves that ran at
once per broker, per dir and per cluster: what a test of execute's limits observes. One thread per connection.

`growing_copy_broker()` is the other kind of fake: a mover.server Server (moverd's own transport) answering
Metadata and DescribeLogDirs as Kafka does for one copy in progress, to which a test adds handlers of its own
(mover-log-dirs' progress and reassign tests hook AlterReplicaLogDirs or IncrementalAlterConfigs into it).

One job per module:

- `versions.py`: KafkaVersion and the releases (KAFKA_2_3 ... KAFKA_4_3, VERSIONS): each one's API ranges and flags.
- `cluster.py`: FakeCluster, what its brokers share (assignment, Metadata, the lock, peaks of moves, start/stop).
- `broker.py`: FakeBroker on the wire: sockets, ApiVersions and hang-ups per release, the misbehaviours, dispatch.
- `broker_state.py`: a broker's fields (dirs, replicas, Move, configs, OK/SLOW/REFUSE ...), which tests set.
- `log_dirs.py`: DescribeLogDirs and AlterReplicaLogDirs: moves that advance per poll, then swap (or not: unswapped).
- `configs.py`: IncrementalAlterConfigs and DescribeConfigs with each release's quirks, cordons, topic configs.
- `reassignments.py`: KIP-455 and ElectLeaders, the controller's side and each broker's (NOT_CONTROLLER).
- `growing_copy.py`: growing_copy_broker(), the mover.server fake with one growing copy.
"""

from __future__ import annotations

from mover.testing.fake_kafka.broker import FakeBroker
from mover.testing.fake_kafka.broker_state import OK, REFUSE, SLOW, Move
from mover.testing.fake_kafka.cluster import FakeCluster
from mover.testing.fake_kafka.growing_copy import GrowingCopyBroker, growing_copy_broker
from mover.testing.fake_kafka.versions import (
    KAFKA_2_3,
    KAFKA_2_4,
    KAFKA_3_9,
    KAFKA_4_1,
    KAFKA_4_3,
    VERSIONS,
    KafkaVersion,
)

__all__ = [
    "KAFKA_2_3",
    "KAFKA_2_4",
    "KAFKA_3_9",
    "KAFKA_4_1",
    "KAFKA_4_3",
    "OK",
    "REFUSE",
    "SLOW",
    "VERSIONS",
    "FakeBroker",
    "FakeCluster",
    "GrowingCopyBroker",
    "KafkaVersion",
    "Move",
    "growing_copy_broker",
]
