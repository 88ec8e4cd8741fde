"""ApiVersions and Metadata: what every client sends first."""

from __future__ import annotations

from mover.wire.schema import BOOL, INT16, INT32, INT64, NULL, STRING, UUID, Api, Array, Field

# Kafka's "no authorized operations computed" sentinel (Integer.MIN_VALUE) for the authorized-operations fields.
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)

API_VERSIONS = Api(
    18,
    "ApiVersions",
    valid="0-4",
    flexible="3+",
    request=[
        Field("client_software_name", STRING, "3+"),
        Field("client_software_version", STRING, "3+"),
    ],
    response=[
        Field("error_code", INT16),
        Field(
            "api_keys",
            Array(
                Field("api_key", INT16),
                Field("min_version", INT16),
                Field("max_version", INT16),
                name="ApiVersion",
            ),
        ),
        Field("throttle_time_ms", INT32, "1+"),
        Field(
            "supported_features",
            Array(
                Field("name", STRING, "3+"),
                Field("min_version", INT16, "3+"),
                Field("max_version", INT16, "3+"),
                name="SupportedFeatureKey",
            ),
            "3+",
            tag=0,
        ),
        Field("finalized_features_epoch", INT64, "3+", tag=1, default=-1),
        Field(
            "finalized_features",
            Array(
                Field("name", STRING, "3+"),
                Field("max_version_level", INT16, "3+"),
                Field("min_version_level", INT16, "3+"),
                name="FinalizedFeatureKey",
            ),
            "3+",
            tag=2,
        ),
        Field("zk_migration_ready", BOOL, "3+", tag=3),
    ],
)

METADATA = Api(
    3,
    "Metadata",
    valid="0-12",
    flexible="9+",
    request=[
        Field(
            "topics",
            Array(
                Field("topic_id", UUID, "10+"),
                Field("name", STRING, nullable="10+"),
                name="MetadataRequestTopic",
            ),
            nullable="1+",
        ),
        Field("allow_auto_topic_creation", BOOL, "4+", default=True),
        Field("include_cluster_authorized_operations", BOOL, "8-10"),
        Field("include_topic_authorized_operations", BOOL, "8+"),
    ],
    response=[
        Field("throttle_time_ms", INT32, "3+"),
        Field(
            "brokers",
            Array(
                Field("node_id", INT32),
                Field("host", STRING),
                Field("port", INT32),
                Field("rack", STRING, "1+", nullable="1+", default=NULL),
                name="MetadataResponseBroker",
            ),
        ),
        Field("cluster_id", STRING, "2+", nullable="2+", default=NULL),
        Field("controller_id", INT32, "1+", default=-1),
        Field(
            "topics",
            Array(
                Field("error_code", INT16),
                Field("name", STRING, nullable="12+"),
                Field("topic_id", UUID, "10+"),
                Field("is_internal", BOOL, "1+"),
                Field(
                    "partitions",
                    Array(
                        Field("error_code", INT16),
                        Field("partition_index", INT32),
                        Field("leader_id", INT32),
                        Field("leader_epoch", INT32, "7+", default=-1),
                        Field("replica_nodes", Array(INT32)),
                        Field("isr_nodes", Array(INT32)),
                        Field("offline_replicas", Array(INT32), "5+"),
                        name="MetadataResponsePartition",
                    ),
                ),
                Field("topic_authorized_operations", INT32, "8+", default=AUTHORIZED_OPERATIONS_OMITTED),
                name="MetadataResponseTopic",
            ),
        ),
        Field("cluster_authorized_operations", INT32, "8-10", default=AUTHORIZED_OPERATIONS_OMITTED),
    ],
)
