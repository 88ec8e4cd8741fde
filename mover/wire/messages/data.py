"""The single-node data path: Produce, Fetch, ListOffsets, InitProducerId.

Fields Kafka added after the highest version we speak (topic ids in Produce v13 / Fetch v13, Fetch v15's
ReplicaState, ...) are left out: a field no version of ours carries would only be dead declaration.
"""

from __future__ import annotations

from mover.wire.schema import INT8, INT16, INT32, INT64, NULL, RECORDS, STRING, Api, Array, Field, Struct

# Kafka's defaults for "no limit" on a fetch (the schema's default for MaxBytes).
FETCH_MAX_BYTES_UNLIMITED = 0x7FFFFFFF

PRODUCE = Api(
    0,
    "Produce",
    valid="3-9",
    flexible="9+",
    request=[
        Field("transactional_id", STRING, "3+", nullable="3+", default=NULL),
        Field("acks", INT16),
        Field("timeout_ms", INT32),
        Field(
            "topic_data",
            Array(
                Field("name", STRING),
                Field(
                    "partition_data",
                    Array(Field("index", INT32), Field("records", RECORDS, nullable="0+"), name="PartitionProduceData"),
                ),
                name="TopicProduceData",
            ),
        ),
    ],
    response=[
        Field(
            "responses",
            Array(
                Field("name", STRING),
                Field(
                    "partition_responses",
                    Array(
                        Field("index", INT32),
                        Field("error_code", INT16),
                        Field("base_offset", INT64),
                        Field("log_append_time_ms", INT64, "2+", default=-1),
                        Field("log_start_offset", INT64, "5+", default=-1),
                        Field(
                            "record_errors",
                            Array(
                                Field("batch_index", INT32, "8+"),
                                Field("batch_index_error_message", STRING, "8+", nullable="8+", default=NULL),
                                name="BatchIndexAndErrorMessage",
                            ),
                            "8+",
                        ),
                        Field("error_message", STRING, "8+", nullable="8+", default=NULL),
                        name="PartitionProduceResponse",
                    ),
                ),
                name="TopicProduceResponse",
            ),
        ),
        Field("throttle_time_ms", INT32, "1+"),
    ],
)

FETCH = Api(
    1,
    "Fetch",
    valid="4-12",
    flexible="12+",
    request=[
        Field("cluster_id", STRING, "12+", nullable="12+", default=NULL, tag=0),
        Field("replica_id", INT32, "0-14", default=-1),
        Field("max_wait_ms", INT32),
        Field("min_bytes", INT32),
        Field("max_bytes", INT32, "3+", default=FETCH_MAX_BYTES_UNLIMITED),
        Field("isolation_level", INT8, "4+"),
        Field("session_id", INT32, "7+"),
        Field("session_epoch", INT32, "7+", default=-1),
        Field(
            "topics",
            Array(
                Field("topic", STRING, "0-12"),
                Field(
                    "partitions",
                    Array(
                        Field("partition", INT32),
                        Field("current_leader_epoch", INT32, "9+", default=-1),
                        Field("fetch_offset", INT64),
                        Field("last_fetched_epoch", INT32, "12+", default=-1),
                        Field("log_start_offset", INT64, "5+", default=-1),
                        Field("partition_max_bytes", INT32),
                        name="FetchPartition",
                    ),
                ),
                name="FetchTopic",
            ),
        ),
        Field(
            "forgotten_topics_data",
            Array(Field("topic", STRING, "7-12"), Field("partitions", Array(INT32), "7+"), name="ForgottenTopic"),
            "7+",
        ),
        Field("rack_id", STRING, "11+"),
    ],
    response=[
        Field("throttle_time_ms", INT32, "1+"),
        Field("error_code", INT16, "7+"),
        Field("session_id", INT32, "7+"),
        Field(
            "responses",
            Array(
                Field("topic", STRING, "0-12"),
                Field(
                    "partitions",
                    Array(
                        Field("partition_index", INT32),
                        Field("error_code", INT16),
                        Field("high_watermark", INT64),
                        Field("last_stable_offset", INT64, "4+", default=-1),
                        Field("log_start_offset", INT64, "5+", default=-1),
                        Field(
                            "diverging_epoch",
                            Struct(
                                (Field("epoch", INT32, default=-1), Field("end_offset", INT64, default=-1)),
                                "EpochEndOffset",
                            ),
                            "12+",
                            tag=0,
                        ),
                        Field(
                            "current_leader",
                            Struct(
                                (Field("leader_id", INT32, default=-1), Field("leader_epoch", INT32, default=-1)),
                                "LeaderIdAndEpoch",
                            ),
                            "12+",
                            tag=1,
                        ),
                        Field(
                            "snapshot_id",
                            Struct(
                                (Field("end_offset", INT64, default=-1), Field("epoch", INT32, default=-1)),
                                "SnapshotId",
                            ),
                            "12+",
                            tag=2,
                        ),
                        Field(
                            "aborted_transactions",
                            Array(Field("producer_id", INT64), Field("first_offset", INT64), name="AbortedTransaction"),
                            "4+",
                            nullable="4+",
                        ),
                        Field("preferred_read_replica", INT32, "11+", default=-1),
                        Field("records", RECORDS, nullable="0+"),
                        name="PartitionData",
                    ),
                ),
                name="FetchableTopicResponse",
            ),
        ),
    ],
)

LIST_OFFSETS = Api(
    2,
    "ListOffsets",
    valid="1-7",
    flexible="6+",
    request=[
        Field("replica_id", INT32),
        Field("isolation_level", INT8, "2+"),
        Field(
            "topics",
            Array(
                Field("name", STRING),
                Field(
                    "partitions",
                    Array(
                        Field("partition_index", INT32),
                        Field("current_leader_epoch", INT32, "4+", default=-1),
                        Field("timestamp", INT64),
                        name="ListOffsetsPartition",
                    ),
                ),
                name="ListOffsetsTopic",
            ),
        ),
    ],
    response=[
        Field("throttle_time_ms", INT32, "2+"),
        Field(
            "topics",
            Array(
                Field("name", STRING),
                Field(
                    "partitions",
                    Array(
                        Field("partition_index", INT32),
                        Field("error_code", INT16),
                        Field("timestamp", INT64, "1+", default=-1),
                        Field("offset", INT64, "1+", default=-1),
                        Field("leader_epoch", INT32, "4+", default=-1),
                        name="ListOffsetsPartitionResponse",
                    ),
                ),
                name="ListOffsetsTopicResponse",
            ),
        ),
    ],
)

INIT_PRODUCER_ID = Api(
    22,
    "InitProducerId",
    valid="0-4",
    flexible="2+",
    request=[
        Field("transactional_id", STRING, nullable="0+"),
        Field("transaction_timeout_ms", INT32),
        Field("producer_id", INT64, "3+", default=-1),
        Field("producer_epoch", INT16, "3+", default=-1),
    ],
    response=[
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16),
        Field("producer_id", INT64, default=-1),
        Field("producer_epoch", INT16),
    ],
)
