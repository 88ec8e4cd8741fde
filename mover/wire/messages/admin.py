"""Topic and config administration: CreateTopics, DeleteTopics, DescribeConfigs, IncrementalAlterConfigs."""

from __future__ import annotations

from mover.wire.schema import BOOL, INT8, INT16, INT32, NULL, STRING, UUID, Api, Array, Field

# Kafka's CreateTopics default request timeout (the schema's default for timeoutMs).
CREATE_TOPICS_DEFAULT_TIMEOUT_MS = 60000

CREATE_TOPICS = Api(
    19,
    "CreateTopics",
    valid="0-7",
    flexible="5+",
    request=[
        Field(
            "topics",
            Array(
                Field("name", STRING),
                Field("num_partitions", INT32),
                Field("replication_factor", INT16),
                Field(
                    "assignments",
                    Array(
                        Field("partition_index", INT32),
                        Field("broker_ids", Array(INT32)),
                        name="CreatableReplicaAssignment",
                    ),
                ),
                Field(
                    "configs",
                    Array(Field("name", STRING), Field("value", STRING, nullable="0+"), name="CreatableTopicConfig"),
                ),
                name="CreatableTopic",
            ),
        ),
        Field("timeout_ms", INT32, default=CREATE_TOPICS_DEFAULT_TIMEOUT_MS),
        Field("validate_only", BOOL, "1+"),
    ],
    response=[
        Field("throttle_time_ms", INT32, "2+"),
        Field(
            "topics",
            Array(
                Field("name", STRING),
                Field("topic_id", UUID, "7+"),
                Field("error_code", INT16),
                Field("error_message", STRING, "1+", nullable="0+"),
                Field("topic_config_error_code", INT16, "5+", tag=0),
                Field("num_partitions", INT32, "5+", default=-1),
                Field("replication_factor", INT16, "5+", default=-1),
                Field(
                    "configs",
                    Array(
                        Field("name", STRING, "5+"),
                        Field("value", STRING, "5+", nullable="5+"),
                        Field("read_only", BOOL, "5+"),
                        Field("config_source", INT8, "5+", default=-1),
                        Field("is_sensitive", BOOL, "5+"),
                        name="CreatableTopicConfigs",
                    ),
                    "5+",
                    nullable="5+",
                ),
                name="CreatableTopicResult",
            ),
        ),
    ],
)

DELETE_TOPICS = Api(
    20,
    "DeleteTopics",
    valid="0-6",
    flexible="4+",
    request=[
        Field(
            "topics",
            Array(
                Field("name", STRING, "6+", nullable="6+", default=NULL),
                Field("topic_id", UUID, "6+"),
                name="DeleteTopicState",
            ),
            "6+",
        ),
        Field("topic_names", Array(STRING), "0-5"),
        Field("timeout_ms", INT32),
    ],
    response=[
        Field("throttle_time_ms", INT32, "1+"),
        Field(
            "responses",
            Array(
                Field("name", STRING, nullable="6+"),
                Field("topic_id", UUID, "6+"),
                Field("error_code", INT16),
                Field("error_message", STRING, "5+", nullable="5+", default=NULL),
                name="DeletableTopicResult",
            ),
        ),
    ],
)

# Kafka 3.7 answers v0-3; v2 is the first flexible one, v3 only changed quota throttling (KIP-599).
CREATE_PARTITIONS = Api(
    37,
    "CreatePartitions",
    valid="0-3",
    flexible="2+",
    request=[
        Field(
            "topics",
            Array(
                Field("name", STRING),
                Field("count", INT32),
                Field(
                    "assignments",
                    Array(Field("broker_ids", Array(INT32)), name="CreatePartitionsAssignment"),
                    nullable="0+",
                    default=NULL,
                ),
                name="CreatePartitionsTopic",
            ),
        ),
        Field("timeout_ms", INT32),
        Field("validate_only", BOOL),
    ],
    response=[
        Field("throttle_time_ms", INT32),
        Field(
            "results",
            Array(
                Field("name", STRING),
                Field("error_code", INT16),
                Field("error_message", STRING, nullable="0+", default=NULL),
                name="CreatePartitionsTopicResult",
            ),
        ),
    ],
)

DESCRIBE_CONFIGS = Api(
    32,
    "DescribeConfigs",
    valid="0-4",
    flexible="4+",
    request=[
        Field(
            "resources",
            Array(
                Field("resource_type", INT8),
                Field("resource_name", STRING),
                Field("configuration_keys", Array(STRING), nullable="0+"),
                name="DescribeConfigsResource",
            ),
        ),
        Field("include_synonyms", BOOL, "1+"),
        Field("include_documentation", BOOL, "3+"),
    ],
    response=[
        Field("throttle_time_ms", INT32),
        Field(
            "results",
            Array(
                Field("error_code", INT16),
                Field("error_message", STRING, nullable="0+"),
                Field("resource_type", INT8),
                Field("resource_name", STRING),
                Field(
                    "configs",
                    Array(
                        Field("name", STRING),
                        Field("value", STRING, nullable="0+"),
                        Field("read_only", BOOL),
                        Field("config_source", INT8, "1+", default=-1),
                        Field("is_default", BOOL, "0"),
                        Field("is_sensitive", BOOL),
                        Field(
                            "synonyms",
                            Array(
                                Field("name", STRING, "1+"),
                                Field("value", STRING, "1+", nullable="0+"),
                                Field("source", INT8, "1+"),
                                name="DescribeConfigsSynonym",
                            ),
                            "1+",
                        ),
                        Field("config_type", INT8, "3+"),
                        Field("documentation", STRING, "3+", nullable="0+"),
                        name="DescribeConfigsResourceResult",
                    ),
                ),
                name="DescribeConfigsResult",
            ),
        ),
    ],
)



def _alter_configs_request(*config: Field) -> list[Field]:
    """AlterConfigs' and IncrementalAlterConfigs' request: resources, each with configs of these fields."""
    return [
        Field(
            "resources",
            Array(
                Field("resource_type", INT8),
                Field("resource_name", STRING),
                Field("configs", Array(*config, name="AlterableConfig")),
                name="AlterConfigsResource",
            ),
        ),
        Field("validate_only", BOOL),
    ]


# AlterConfigs and IncrementalAlterConfigs answer alike (Kafka's two schemas have the same fields).
ALTER_CONFIGS_RESPONSE = [
    Field("throttle_time_ms", INT32),
    Field(
        "responses",
        Array(
            Field("error_code", INT16),
            Field("error_message", STRING, nullable="0+"),
            Field("resource_type", INT8),
            Field("resource_name", STRING),
            name="AlterConfigsResourceResponse",
        ),
    ),
]

# The legacy, whole-set form: kafka-configs.sh up to 3.7 alters broker configs with it (--add-config on a broker).
ALTER_CONFIGS = Api(
    33,
    "AlterConfigs",
    valid="0-2",
    flexible="2+",
    request=_alter_configs_request(Field("name", STRING), Field("value", STRING, nullable="0+")),
    response=ALTER_CONFIGS_RESPONSE,
)

INCREMENTAL_ALTER_CONFIGS = Api(
    44,
    "IncrementalAlterConfigs",
    valid="0-1",
    flexible="1+",
    request=_alter_configs_request(Field("name", STRING), Field("config_operation", INT8),
                                   Field("value", STRING, nullable="0+")),
    response=ALTER_CONFIGS_RESPONSE,
)
