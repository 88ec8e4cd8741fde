"""Reassignment between brokers (KIP-455, Kafka 2.4+): AlterPartitionReassignments, ListPartitionReassignments, and
ElectLeaders (KIP-183/KIP-460) for the new preferred leader. moverd does not answer them (it has no replication);
mover-reassign sends them to Kafka brokers."""

from __future__ import annotations

from mover.wire.schema import INT8, INT16, INT32, NULL, STRING, Api, Array, Field

# Kafka's default TimeoutMs of the three requests.
DEFAULT_TIMEOUT_MS = 60000
# ElectLeaders' ElectionType (KIP-460).
ELECTION_PREFERRED = 0
ELECTION_UNCLEAN = 1

ALTER_PARTITION_REASSIGNMENTS = Api(
    45,
    "AlterPartitionReassignments",
    valid="0",
    flexible="0+",
    request=[
        Field("timeout_ms", INT32, default=DEFAULT_TIMEOUT_MS),
        Field(
            "topics",
            Array(
                Field("name", STRING),
                Field(
                    "partitions",
                    Array(
                        Field("partition_index", INT32),
                        # null cancels the partition's pending reassignment.
                        Field("replicas", Array(INT32), nullable="0+", default=NULL),
                        name="ReassignablePartition",
                    ),
                ),
                name="ReassignableTopic",
            ),
        ),
    ],
    response=[
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16),
        Field("error_message", STRING, nullable="0+"),
        Field(
            "responses",
            Array(
                Field("name", STRING),
                Field(
                    "partitions",
                    Array(
                        Field("partition_index", INT32),
                        Field("error_code", INT16),
                        Field("error_message", STRING, nullable="0+"),
                        name="ReassignablePartitionResponse",
                    ),
                ),
                name="ReassignableTopicResponse",
            ),
        ),
    ],
)

LIST_PARTITION_REASSIGNMENTS = Api(
    46,
    "ListPartitionReassignments",
    valid="0",
    flexible="0+",
    request=[
        Field("timeout_ms", INT32, default=DEFAULT_TIMEOUT_MS),
        Field(
            "topics",
            Array(
                Field("name", STRING),
                Field("partition_indexes", Array(INT32)),
                name="ListPartitionReassignmentsTopics",
            ),
            nullable="0+",
            default=NULL,
        ),
    ],
    response=[
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16),
        Field("error_message", STRING, nullable="0+"),
        Field(
            "topics",
            Array(
                Field("name", STRING),
                Field(
                    "partitions",
                    Array(
                        Field("partition_index", INT32),
                        Field("replicas", Array(INT32)),
                        Field("adding_replicas", Array(INT32)),
                        Field("removing_replicas", Array(INT32)),
                        name="OngoingPartitionReassignment",
                    ),
                ),
                name="OngoingTopicReassignment",
            ),
        ),
    ],
)

ELECT_LEADERS = Api(
    43,
    "ElectLeaders",
    valid="0-2",
    flexible="2+",
    request=[
        Field("election_type", INT8, "1+"),
        Field(
            "topic_partitions",
            Array(
                Field("topic", STRING),
                Field("partitions", Array(INT32)),
                name="TopicPartitions",
            ),
            nullable="0+",
        ),
        Field("timeout_ms", INT32, default=DEFAULT_TIMEOUT_MS),
    ],
    response=[
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16, "1+"),
        Field(
            "replica_election_results",
            Array(
                Field("topic", STRING),
                Field(
                    "partition_result",
                    Array(
                        Field("partition_id", INT32),
                        Field("error_code", INT16),
                        Field("error_message", STRING, nullable="0+"),
                        name="PartitionResult",
                    ),
                ),
                name="ReplicaElectionResult",
            ),
        ),
    ],
)
