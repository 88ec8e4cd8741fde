"""Every API moverd speaks, and the three reassignment APIs mover-reassign sends to Kafka brokers, declared once
as data (see `mover.wire.schema`), indexed by API key."""

from __future__ import annotations

from mover.wire.messages.admin import (
    ALTER_CONFIGS,
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    DESCRIBE_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS,
)
from mover.wire.messages.core import API_VERSIONS, METADATA
from mover.wire.messages.data import FETCH, INIT_PRODUCER_ID, LIST_OFFSETS, PRODUCE
from mover.wire.messages.log_dirs import ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS, DESCRIBE_REPLICA_MOVES
from mover.wire.messages.reassignment import (
    ALTER_PARTITION_REASSIGNMENTS,
    ELECT_LEADERS,
    LIST_PARTITION_REASSIGNMENTS,
)
from mover.wire.messages.security import (
    ALTER_USER_SCRAM_CREDENTIALS,
    CREATE_ACLS,
    DELETE_ACLS,
    DESCRIBE_ACLS,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
)
from mover.wire.schema import Api

__all__ = [
    "ALL_APIS",
    "ALTER_CONFIGS",
    "ALTER_PARTITION_REASSIGNMENTS",
    "ALTER_REPLICA_LOG_DIRS",
    "ALTER_USER_SCRAM_CREDENTIALS",
    "API_BY_KEY",
    "API_VERSIONS",
    "CREATE_ACLS",
    "CREATE_PARTITIONS",
    "CREATE_TOPICS",
    "DELETE_ACLS",
    "DELETE_TOPICS",
    "DESCRIBE_ACLS",
    "DESCRIBE_CONFIGS",
    "DESCRIBE_LOG_DIRS",
    "DESCRIBE_REPLICA_MOVES",
    "ELECT_LEADERS",
    "FETCH",
    "INCREMENTAL_ALTER_CONFIGS",
    "INIT_PRODUCER_ID",
    "LIST_PARTITION_REASSIGNMENTS",
    "LIST_OFFSETS",
    "METADATA",
    "PRODUCE",
    "SASL_AUTHENTICATE",
    "SASL_HANDSHAKE",
]

ALL_APIS: tuple[Api, ...] = (
    PRODUCE,
    FETCH,
    LIST_OFFSETS,
    METADATA,
    API_VERSIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    SASL_HANDSHAKE,
    INIT_PRODUCER_ID,
    DESCRIBE_ACLS,
    CREATE_ACLS,
    DELETE_ACLS,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
    ALTER_REPLICA_LOG_DIRS,
    DESCRIBE_LOG_DIRS,
    SASL_AUTHENTICATE,
    CREATE_PARTITIONS,
    INCREMENTAL_ALTER_CONFIGS,
    ALTER_USER_SCRAM_CREDENTIALS,
    DESCRIBE_REPLICA_MOVES,
    ELECT_LEADERS,
    ALTER_PARTITION_REASSIGNMENTS,
    LIST_PARTITION_REASSIGNMENTS,
)

API_BY_KEY: dict[int, Api] = {api.key: api for api in ALL_APIS}
