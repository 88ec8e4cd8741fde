"""Errors the LogManager raises toward the API layer, each carrying its Kafka error code.

The codes are Kafka's (docs/kafka-compat.md#error-codes); the API handlers answer with `err.code` and never need
to know which layer raised it.
"""

from __future__ import annotations


class ApiError(Exception):
    code = -1  # UNKNOWN_SERVER_ERROR


class UnknownTopicOrPartitionError(ApiError):
    code = 3


class NotLeaderOrFollowerError(ApiError):
    code = 6


class ReplicaNotAvailableError(ApiError):
    code = 9


class InvalidTopicError(ApiError):
    code = 17


class TopicAlreadyExistsError(ApiError):
    code = 36


class InvalidPartitionsError(ApiError):
    code = 37


class InvalidReplicationFactorError(ApiError):
    code = 38


class InvalidConfigError(ApiError):
    code = 40


class InvalidRequestError(ApiError):
    code = 42


class KafkaStorageError(ApiError):
    code = 56


class LogDirNotFoundError(ApiError):
    code = 57
