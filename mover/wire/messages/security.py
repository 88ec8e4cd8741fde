"""SASL (KIP-43, KIP-152) and ACL (KIP-140) APIs, as Kafka's message schemas declare them."""

from __future__ import annotations

from mover.wire.schema import BYTES, INT8, INT16, INT32, INT64, STRING, Api, Array, Field

SASL_HANDSHAKE = Api(
    17,
    "SaslHandshake",
    valid="0-1",
    flexible="none",
    request=[Field("mechanism", STRING)],
    response=[Field("error_code", INT16), Field("mechanisms", Array(STRING))],
)

SASL_AUTHENTICATE = Api(
    36,
    "SaslAuthenticate",
    valid="0-2",
    flexible="2+",
    request=[Field("auth_bytes", BYTES)],
    response=[
        Field("error_code", INT16),
        Field("error_message", STRING, nullable="0+"),
        Field("auth_bytes", BYTES),
        # KIP-368: how long the session may live before the client must re-authenticate; 0 = no limit.
        Field("session_lifetime_ms", INT64, "1+"),
    ],
)

# ACL APIs: v0 is pre-KIP-290 (no pattern type, always LITERAL); v1 adds pattern types; v2 is flexible.
# The fields below recur across the three ACL APIs; declared once so the schemas cannot drift apart.
# A filter (DescribeAcls request, DeleteAcls filters): null strings match anything.
_ACL_FILTER = (
    Field("resource_type_filter", INT8),
    Field("resource_name_filter", STRING, nullable="0+"),
    Field("pattern_type_filter", INT8, "1+", default=3),
    Field("principal_filter", STRING, nullable="0+"),
    Field("host_filter", STRING, nullable="0+"),
    Field("operation", INT8),
    Field("permission_type", INT8),
)
# Who may do what from where: the tail of every ACL binding.
_ACL_ENTRY = (
    Field("principal", STRING),
    Field("host", STRING),
    Field("operation", INT8),
    Field("permission_type", INT8),
)

DESCRIBE_ACLS = Api(
    29,
    "DescribeAcls",
    valid="0-3",
    flexible="2+",
    request=[*_ACL_FILTER],
    response=[
        Field("throttle_time_ms", INT32),
        Field("error_code", INT16),
        Field("error_message", STRING, nullable="0+"),
        Field(
            "resources",
            Array(
                Field("resource_type", INT8),
                Field("resource_name", STRING),
                Field("pattern_type", INT8, "1+", default=3),
                Field("acls", Array(*_ACL_ENTRY, name="AclDescription")),
                name="DescribeAclsResource",
            ),
        ),
    ],
)

CREATE_ACLS = Api(
    30,
    "CreateAcls",
    valid="0-3",
    flexible="2+",
    request=[
        Field(
            "creations",
            Array(
                Field("resource_type", INT8),
                Field("resource_name", STRING),
                Field("resource_pattern_type", INT8, "1+", default=3),
                *_ACL_ENTRY,
                name="AclCreation",
            ),
        ),
    ],
    response=[
        Field("throttle_time_ms", INT32),
        Field(
            "results",
            Array(
                Field("error_code", INT16),
                Field("error_message", STRING, nullable="0+"),
                name="AclCreationResult",
            ),
        ),
    ],
)

DELETE_ACLS = Api(
    31,
    "DeleteAcls",
    valid="0-3",
    flexible="2+",
    request=[
        Field(
            "filters",
            Array(
                *_ACL_FILTER,
                name="DeleteAclsFilter",
            ),
        ),
    ],
    response=[
        Field("throttle_time_ms", INT32),
        Field(
            "filter_results",
            Array(
                Field("error_code", INT16),
                Field("error_message", STRING, nullable="0+"),
                Field(
                    "matching_acls",
                    Array(
                        Field("error_code", INT16),
                        Field("error_message", STRING, nullable="0+"),
                        Field("resource_type", INT8),
                        Field("resource_name", STRING),
                        Field("pattern_type", INT8, "1+", default=3),
                        *_ACL_ENTRY,
                        name="DeleteAclsMatchingAcl",
                    ),
                ),
                name="DeleteAclsFilterResult",
            ),
        ),
    ],
)

# KIP-554: SCRAM credentials managed over the wire (kafka-configs.sh --bootstrap-server --entity-type users).
# Mechanism codes: 1 = SCRAM-SHA-256, 2 = SCRAM-SHA-512 (Kafka's ScramMechanism).
ALTER_USER_SCRAM_CREDENTIALS = Api(
    51,
    "AlterUserScramCredentials",
    valid="0",
    flexible="0+",
    request=[
        Field("deletions", Array(Field("name", STRING), Field("mechanism", INT8), name="ScramCredentialDeletion")),
        Field(
            "upsertions",
            Array(
                Field("name", STRING),
                Field("mechanism", INT8),
                Field("iterations", INT32),
                Field("salt", BYTES),
                Field("salted_password", BYTES),
                name="ScramCredentialUpsertion",
            ),
        ),
    ],
    response=[
        Field("throttle_time_ms", INT32),
        Field(
            "results",
            Array(
                Field("user", STRING),
                Field("error_code", INT16),
                Field("error_message", STRING, nullable="0+"),
                name="AlterUserScramCredentialsResult",
            ),
        ),
    ],
)
