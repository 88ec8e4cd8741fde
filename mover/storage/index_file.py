"""IndexFile: what Kafka's offset and time indexes share (Kafka: AbstractIndex).

An index is a sorted array of fixed-size big-endian entries (key, value). Kafka preallocates an index
file (zero-filled, up to segment.index.bytes = 10 MB) and trims it only when the segment rolls or the broker
shuts down cleanly, so the entries of an existing file end at the first entry whose key is not strictly
greater than the one before (the zeros), not at the end of the file.

Crash-safety invariants:
* An index is only a hint for where to start walking batch headers in the .log: a missing or short index costs
  time, never correctness. Entries are written after the log bytes they point at, so a crash can lose index
  entries but never leave one pointing past the valid log data that the Log does not then drop on open.
* A file written by Kafka is never rewritten or truncated just because we read it; it is changed only by
  appending an entry (written in place over the zeros of a preallocated file) or when the log it indexes is
  truncated (torn tail), and then it is cut to its valid entries.
* The entries are loaded lazily on first use, so opening thousands of partitions reads no index file.
* The file is written through an `OpenFile` (open_files.py): the broker's LRU may close it between appends, and
  `flush` fsyncs through a reopened descriptor, which covers the same inode's dirty pages.
* The file is reached by path (a reopen, the lazy load, an unlink) only under the owning Log's PathGuard
  (path_guard.py), so never by a stale path while the partition's directory is being renamed.
"""

from __future__ import annotations

import bisect
import os
import threading
from array import array
from pathlib import Path

from mover.storage.dir_health import is_resource_limit
from mover.storage.files import read_exactly, write_all
from mover.storage.open_files import OpenFile, open_transient, read_whole_file
from mover.storage.path_guard import PathGuard


class IndexFile:
    """Entries (key, value) of one index file, keys strictly increasing. Subclasses define the format."""

    entry_size: int

    def __init__(self, path: Path, base_offset: int, guard: PathGuard | None = None) -> None:
        self.path = path
        self.base_offset = base_offset
        self._keys: array[int] | None = None
        self._values: array[int] | None = None
        self._guard = guard if guard is not None else PathGuard()
        self._file = OpenFile(path, create=True, guard=self._guard)
        self._dirty = False
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ the entry format (subclasses)

    def _decode(self, data: bytes) -> tuple[list[int], list[int]]:
        raise NotImplementedError

    def _encode(self, key: int, value: int) -> bytes:
        raise NotImplementedError

    def _value_ok(self, previous: int, value: int) -> bool:
        return value >= previous

    # ------------------------------------------------------------------ loading

    @property
    def loaded(self) -> bool:
        """The entries are in memory: an append or lookup reads no file."""
        return self._keys is not None and self._values is not None

    def assume_empty(self) -> None:
        """A new segment whose index file does not exist yet: no entries, nothing to read later."""
        with self._lock:
            self._keys, self._values = array("q"), array("q")

    def _load(self) -> tuple[array[int], array[int]]:
        keys, values = self._keys, self._values
        if keys is not None and values is not None:
            return keys, values
        with self._lock:
            if self._keys is None or self._values is None:
                try:
                    self._keys, self._values = self._read_entries()
                except OSError as e:
                    if not is_resource_limit(e):
                        raise
                    # Out of descriptors: an index is a hint, so answer without it this time (a longer walk of
                    # batch headers) and load it on a later call.
                    return array("q"), array("q")
            return self._keys, self._values

    def _read_entries(self) -> tuple[array[int], array[int]]:
        try:
            with self._guard:
                data = read_whole_file(self.path)
        except FileNotFoundError:
            return array("q"), array("q")
        # The zeros of a preallocated file are never entries; cut them first (in C, fast even for 10 MB).
        used = len(data.rstrip(b"\0"))
        used = -(-used // self.entry_size) * self.entry_size
        raw_keys, raw_values = self._decode(data[:min(used, len(data) - len(data) % self.entry_size)])
        n = 0
        prev_key, prev_value = None, None
        for key, value in zip(raw_keys, raw_values, strict=True):
            if prev_key is None:
                if key == 0 and value == 0 and self._zero_is_end():
                    break
            elif key <= prev_key or not self._value_ok(prev_value, value):  # type: ignore[arg-type]
                break
            prev_key, prev_value = key, value
            n += 1
        return array("q", raw_keys[:n]), array("q", raw_values[:n])

    def _zero_is_end(self) -> bool:
        # A first entry of all zeros is the preallocated space, not an entry: we never write one (no index
        # entry is made for a segment's first batch) and neither does Kafka.
        return True

    # ------------------------------------------------------------------ queries

    def __len__(self) -> int:
        return len(self._load()[0])

    def entries(self) -> list[tuple[int, int]]:
        keys, values = self._load()
        return list(zip(keys, values, strict=False))

    def floor(self, key: int) -> tuple[int, int] | None:
        """The entry with the largest key <= `key` (binary search), or None."""
        keys, values = self._load()
        n = min(len(keys), len(values))  # an append may be half-way between the two arrays in another thread
        i = bisect.bisect_right(keys, key, 0, n) - 1
        if i < 0:
            return None
        return keys[i], values[i]

    def last_entry(self) -> tuple[int, int] | None:
        keys, values = self._load()
        n = min(len(keys), len(values))
        return (keys[n - 1], values[n - 1]) if n else None

    # ------------------------------------------------------------------ changes

    def append(self, key: int, value: int) -> None:
        keys, values = self._load()
        if keys and (key <= keys[-1] or not self._value_ok(values[-1], value)):
            return  # out of order: an index is a hint, and a non-increasing entry would end it on reload
        # In place over the preallocated zeros, if any: the file is never truncated to append.
        with self._file as fd:
            write_all(fd, self._encode(key, value), len(keys) * self.entry_size)
        self._dirty = True
        keys.append(key)
        values.append(value)

    def load(self) -> None:
        """Read the entries now if they are not in memory (a renamer of the dir, before it takes the PathGuard: an
        append during the rename then reads no file, so it does not wait for the rename)."""
        self._load()

    @property
    def file(self) -> OpenFile:
        """The index's file, for a renamer to pin (Log.pin_files)."""
        return self._file

    def entry_count(self) -> int | None:
        """How many entries are in memory, None if not loaded. Entry i sits at byte i * entry_size of the file."""
        keys = self._keys
        return None if keys is None else len(keys)

    def encoded_since(self, n: int) -> bytes:
        """The file bytes of entries n.. (loaded entries only; the caller holds the replica lock, so no append runs):
        a mover writes them into its copy instead of reading the file again."""
        keys, values = self._load()
        return b"".join(self._encode(k, v) for k, v in zip(keys[n:], values[n:], strict=True))

    def adopt_entries(self, other: IndexFile) -> None:
        """Take `other`'s loaded entries: this file was just made a byte copy of its entries (a mover's swap), so the
        next append need not read it back."""
        keys, values = other._load()
        self.close()
        with self._lock:
            self._keys, self._values = array("q", keys), array("q", values)

    def truncate_to_entries(self, n: int) -> None:
        """Keep the first n entries, and cut the file there so the dropped ones cannot come back on reload."""
        keys, values = self._load()
        if n >= len(keys):
            return
        del keys[n:]
        del values[n:]
        with self._file as fd:
            os.ftruncate(fd, n * self.entry_size)
        self._dirty = True

    def flush(self) -> None:
        if self._dirty:
            # Durable together with the .log it indexes (Log.flush and segment roll call this).
            with self._file as fd:
                os.fsync(fd)
            self._dirty = False

    def forget(self) -> None:
        """Drop the loaded entries and the open file: the file was replaced on disk (a mover's copy)."""
        self.close()
        with self._lock:
            self._keys = None
            self._values = None

    def rename(self, path: Path) -> None:
        # An open fd follows the file through the rename of its directory; the caller holds the PathGuard.
        self.path = path
        self._file.path = path

    def close(self) -> None:
        self._file.close()
        self._dirty = False

    def delete(self) -> None:
        self.close()
        try:
            with self._guard:
                os.unlink(self.path)
        except FileNotFoundError:
            pass

    def read_last_entry_from_disk(self) -> tuple[int, int] | None:
        """The last entry without loading the whole file: Kafka trims a closed segment's index, so its last
        bytes are its last entry. Falls back to a full load when they are zeros (a preallocated file)."""
        if self._keys is not None:
            return self.last_entry()
        try:
            with self._guard:
                fd = open_transient(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            size = os.fstat(fd).st_size
            size -= size % self.entry_size
            if size == 0:
                return None
            data = read_exactly(fd, self.entry_size, size - self.entry_size)
        finally:
            os.close(fd)
        if data.strip(b"\0"):
            keys, values = self._decode(data)
            return keys[0], values[0]
        return self.last_entry()
