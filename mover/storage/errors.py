"""Errors of the storage layer.

Failures of the operating system (EIO, ENOSPC, EACCES, ...) are never wrapped: they propagate as the
`OSError` the OS raised, because the LogManager takes an `OSError` from a log dir as the signal to mark
that dir offline, except a resource limit (`is_resource_limit`: EMFILE, ENFILE, ENOMEM), which fails only the
request. Everything here describes bad *content* (a corrupt batch, a malformed checkpoint) or a
refusal (a locked dir).

Crash-safety invariants: none; this module touches no files.
"""

from __future__ import annotations

import errno

# Limits of the process or the machine, not faults of a disk: the request fails, the log dir stays online.
RESOURCE_LIMIT_ERRNOS = {
    errno.EMFILE: "the process's open file limit (RLIMIT_NOFILE, `ulimit -n`, systemd LimitNOFILE)",
    errno.ENFILE: "the system-wide open file limit (fs.file-max)",
    errno.ENOMEM: "memory (ENOMEM: RAM, vm.max_map_count or a cgroup memory limit)",
}


def is_resource_limit(err: BaseException | str) -> bool:
    """Whether an error is a process or system resource limit (EMFILE, ENFILE, ENOMEM) rather than a disk failure."""
    if isinstance(err, MemoryError):
        return True
    return isinstance(err, OSError) and err.errno in RESOURCE_LIMIT_ERRNOS


def describe_resource_limit(err: BaseException) -> str:
    """One line naming the limit that was hit, for the log and the error message of the failed request."""
    if isinstance(err, OSError) and err.errno in RESOURCE_LIMIT_ERRNOS:
        return f"out of {RESOURCE_LIMIT_ERRNOS[err.errno]}: {err}"
    return f"out of memory: {err!r}"


class StorageError(Exception):
    """Base of every error the storage layer raises on its own account (never for an OS-level I/O failure)."""


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
