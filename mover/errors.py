"""Errors the managers raise toward the API layer, each carrying its Kafka error code.

The codes come from the one table, mover.wire.errors.ErrorCode (Kafka's numbers, docs/kafka-compat.md#error-codes);
the API handlers answer with `err.code` and never need to know which layer raised it.
"""

from __future__ import annotations

from mover.wire.errors import ErrorCode


class ApiError(Exception):
    code: int = ErrorCode.UNKNOWN_SERVER_ERROR


class UnknownTopicOrPartitionError(ApiError):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class NotLeaderOrFollowerError(ApiError):
    code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class ReplicaNotAvailableError(ApiError):
    code = ErrorCode.REPLICA_NOT_AVAILABLE


class InvalidTopicError(ApiError):
    code = ErrorCode.INVALID_TOPIC_EXCEPTION


class TopicAlreadyExistsError(ApiError):
    code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidPartitionsError(ApiError):
    code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(ApiError):
    code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidReplicaAssignmentError(ApiError):
    """A move into a cordoned log dir (KIP-1066: Kafka 4.3 answers it so, docs/cordons.md)."""

    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


class InvalidConfigError(ApiError):
    code = ErrorCode.INVALID_CONFIG


class PolicyViolationError(ApiError):
    """A request the broker's limits refuse (partitions per request or per broker): nothing is invalid about it,
    the operator's bound says no. Kafka's controller answers this code past its 10,000 partitions per batch."""

    code = ErrorCode.POLICY_VIOLATION


class InvalidRequestError(ApiError):
    code = ErrorCode.INVALID_REQUEST


class KafkaStorageError(ApiError):
    code = ErrorCode.KAFKA_STORAGE_ERROR


class ResourceLimitError(KafkaStorageError):
    """A process limit (EMFILE, ENFILE, ENOMEM) failed the request; the log dir is fine and stays online.
    KAFKA_STORAGE_ERROR, which clients retry: the limit may be gone by then."""


class LogDirNotFoundError(ApiError):
    code = ErrorCode.LOG_DIR_NOT_FOUND
