"""KIP-113 log-dir APIs (DescribeLogDirs, AlterReplicaLogDirs) and our own KIP-179-style progress API."""

from __future__ import annotations

from mover.wire.schema import BOOL, INT16, INT32, INT64, STRING, Api, Array, Field

# KIP-113's log dir "any", in AlterReplicaLogDirs and in reassignment JSON (Kafka's tool, /admin/reassign_partitions):
# the broker keeps the replica wherever it is. The one spelling, for the broker and the tools.
ANY_LOG_DIR = "any"

DESCRIBE_LOG_DIRS = Api(
    35,
    "DescribeLogDirs",
    # v5 (Kafka 4.3, KIP-1066) adds IsCordoned per dir; v0 stays offered for old clients although Kafka 4.0
    # dropped it (KIP-896): this broker also serves 1.x-era tools (docs/kafka-compat.md#describelogdirs).
    valid="0-5",
    flexible="2+",
    request=[
        # null = every topic; [] = none (docs/kafka-compat.md#describelogdirs).
        Field(
            "topics",
            Array(Field("topic", STRING), Field("partitions", Array(INT32)), name="DescribableLogDirTopic"),
            nullable="0+",
        ),
    ],
    response=[
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16, "3+"),
        Field(
            "results",
            Array(
                Field("error_code", INT16),
                Field("log_dir", STRING),
                Field(
                    "topics",
                    Array(
                        Field("name", STRING),
                        Field(
                            "partitions",
                            Array(
                                Field("partition_index", INT32),
                                Field("partition_size", INT64),
                                Field("offset_lag", INT64),
                                Field("is_future_key", BOOL),
                                name="DescribeLogDirsPartition",
                            ),
                        ),
                        name="DescribeLogDirsTopic",
                    ),
                ),
                Field("total_bytes", INT64, "4+", default=-1),
                Field("usable_bytes", INT64, "4+", default=-1),
                # A plain (not tagged) field after UsableBytes, as Kafka's DescribeLogDirsResponse.json declares it.
                Field("is_cordoned", BOOL, "5+", default=False),
                name="DescribeLogDirsResult",
            ),
        ),
    ],
)

# Tag of our request_id field in AlterReplicaLogDirs v2+ responses, and its value when no move was started.
ALTER_REPLICA_LOG_DIRS_REQUEST_ID_TAG = 10000
NO_REQUEST_ID = -1

ALTER_REPLICA_LOG_DIRS = Api(
    34,
    "AlterReplicaLogDirs",
    valid="0-2",
    flexible="2+",
    request=[
        Field(
            "dirs",
            Array(
                Field("path", STRING),
                Field(
                    "topics",
                    Array(Field("name", STRING), Field("partitions", Array(INT32)), name="AlterReplicaLogDirTopic"),
                ),
                name="AlterReplicaLogDir",
            ),
        ),
    ],
    response=[
        Field("throttle_time_ms", INT32),
        Field(
            "results",
            Array(
                Field("topic_name", STRING),
                Field(
                    "partitions",
                    Array(
                        Field("partition_index", INT32),
                        Field("error_code", INT16),
                        name="AlterReplicaLogDirPartitionResult",
                    ),
                ),
                name="AlterReplicaLogDirTopicResult",
            ),
        ),
        # Ours, not Kafka's: the KIP-179 request id of the moves this request started (-1: it started none), to
        # pass to DescribeReplicaMoves. A tagged field, so clients that do not know it skip it (KIP-482); tag
        # 10000 stays clear of the small tags Kafka assigns upward from 0 when it extends a message.
        Field("request_id", INT64, "2+", tag=ALTER_REPLICA_LOG_DIRS_REQUEST_ID_TAG, default=NO_REQUEST_ID),
    ],
)

# Not a Kafka API: KIP-179 proposed reporting move progress, Kafka never did. The key sits above Kafka's range
# (Kafka's keys are below 100) so a real broker answers it by closing the connection, never by misreading it.
DESCRIBE_REPLICA_MOVES_KEY = 32100
# request_id meaning "the most recent AlterReplicaLogDirs request".
LATEST_REQUEST_ID = -1

REPLICA_MOVE_STATES = ("queued", "copying", "swapping", "completed", "cancelled", "failed")

DESCRIBE_REPLICA_MOVES = Api(
    DESCRIBE_REPLICA_MOVES_KEY,
    "DescribeReplicaMoves",
    valid="0",
    flexible="0+",
    request=[Field("request_id", INT64, default=LATEST_REQUEST_ID)],
    response=[
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16),
        Field("request_id", INT64, default=LATEST_REQUEST_ID),
        Field(
            "requests",
            Array(
                Field("request_id", INT64),
                Field("start_ms", INT64),
                Field("end_ms", INT64, default=-1),
                Field(
                    "replicas",
                    Array(
                        Field("topic", STRING),
                        Field("partition", INT32),
                        Field("source_dir", STRING),
                        Field("destination_dir", STRING),
                        Field("state", STRING),
                        Field("bytes_copied", INT64),
                        Field("bytes_total", INT64, default=-1),
                        Field("error_code", INT16),
                        Field("error_message", STRING, nullable="0+", default=None),
                        name="ReplicaMove",
                    ),
                ),
                name="MoveRequest",
            ),
        ),
    ],
)
