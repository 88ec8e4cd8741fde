"""Errors of the storage layer.

Failures of the operating system (EIO, ENOSPC, EACCES, ...) are never wrapped: they propagate as the
`OSError` the OS raised, because the LogManager takes an `OSError` from a log dir as the signal to mark
that dir offline, except a resource limit (`dir_health.is_resource_limit`: EMFILE, ENFILE, ENOMEM), which fails
only the request. Everything here describes bad *content* (a corrupt batch, a malformed checkpoint) or a
refusal (a locked dir).

Crash-safety invariants: none; this module touches no files.
"""

from __future__ import annotations


class StorageError(Exception):
    """Base of every error the storage layer raises on its own account (never for an OS-level I/O failure)."""


class WouldBlock(StorageError):
    """A read asked not to wait (`nowait=True`) needs bytes that are not in the page cache, or an index not yet in
    memory: nothing was returned; read again where blocking is fine (the I/O threads). Not an OSError, so it is
    never taken for a failed disk."""


class CorruptRecordError(StorageError, ValueError):
    """A record batch that is short, has a bad length, an unsupported magic or a CRC that does not match."""


class RecordTooLargeError(StorageError, ValueError):
    """A batch larger than the segment size or `max_message_bytes`: it could never be stored."""


class OffsetOutOfRangeError(StorageError, ValueError):
    """A read below the log start offset or above the log end offset."""


class CorruptCheckpointError(StorageError, ValueError):
    """A checkpoint file that is not in Kafka's text format."""


class LogDirLockedError(StorageError):
    """Another process (a second moverd, or a Kafka broker) holds the log dir's `.lock`."""


class BrokerIdMismatchError(StorageError):
    """meta.properties names another broker: the dir belongs to a different broker."""


class ClusterIdMismatchError(StorageError):
    """meta.properties names another cluster."""


class CorruptMetaPropertiesError(StorageError, ValueError):
    """meta.properties exists but cannot be understood (no broker.id / node.id, or not a number)."""
