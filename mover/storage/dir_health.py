"""What an OSError from a log dir means, and the one health probe of a log dir.

An OSError raised by storage is one of three things, and only the first takes a dir offline:
* a failed dir (EIO, EROFS, EACCES after `chmod 000`, a vanished mount): Kafka's LogDirFailureChannel;
* a full dir (ENOSPC, EDQUOT): the dir still works; the operation that needed room fails;
* a process limit (EMFILE, ENFILE, ENOMEM): this process ran out of descriptors or memory. The disk is fine, so the
  request fails with a clear error and the dir stays online.

Crash-safety invariants: the write probe creates a uniquely named empty file and unlinks it; a crash in between
leaves a `.mover-probe-*` file that nothing reads (recovery ignores names it does not know).
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from mover.storage.names import META_PROPERTIES

# Limits of the process, not of the disk.
RESOURCE_LIMITS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_resource_limit(err: OSError) -> bool:
    """True when `err` is a process limit (descriptors, memory): never a reason to call a dir failed."""
    return err.errno in RESOURCE_LIMITS


# What each limit is, for the log line and the error message of the failed request.
_LIMIT_DESCRIPTIONS = {
    errno.EMFILE: "the process's open file limit (RLIMIT_NOFILE, `ulimit -n`, systemd LimitNOFILE)",
    errno.ENFILE: "the system-wide open file limit (fs.file-max)",
    errno.ENOMEM: "memory (RAM, vm.max_map_count or a cgroup memory limit)",
}


def describe_resource_limit(err: OSError) -> str:
    """One line naming the limit that was hit (EMFILE: `ulimit -n`, ...)."""
    what = _LIMIT_DESCRIPTIONS.get(err.errno or 0, "a process limit")
    return f"process limit {limit_name(err)} reached, out of {what}: {err}"


def is_no_space(err: OSError) -> bool:
    return err.errno in NO_SPACE


def limit_name(err: OSError) -> str:
    """The errno's symbolic name (EMFILE, ...), for log lines and error messages an operator can search for."""
    return errno.errorcode.get(err.errno or 0, str(err.errno))


def probe_log_dir(path: Path, *, write: bool = False) -> OSError | None:
    """None when `path` works as a log dir, else the error that says it does not.

    The read probe opens the dir, stats its file system and looks up meta.properties: files already open keep
    working after `chmod 000` or a disk going read-only, so only a fresh lookup notices. `write=True` also creates
    and removes a file (a failed move checks this on its two dirs); a full disk passes, being full and not broken.
    A process limit passes too: it says nothing about the disk."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fstatvfs(fd)
            try:
                # Searching the dir needs the execute bit, which `chmod 000` also removes.
                os.stat(META_PROPERTIES, dir_fd=fd)
            except FileNotFoundError:
                pass
        finally:
            os.close(fd)
        if write:
            # A name of its own: moves failing together probe the same dir at once, and a shared probe file unlinked
            # under another probe would read as a dead disk.
            probe_fd, probe = tempfile.mkstemp(prefix=".mover-probe-", dir=path)
            os.close(probe_fd)
            os.unlink(probe)
    except OSError as e:
        if is_no_space(e) or is_resource_limit(e):
            return None
        return e
    return None
