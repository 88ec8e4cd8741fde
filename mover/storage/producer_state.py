"""ProducerStateManager: per-partition state of idempotent producers (Kafka: ProducerStateManager).

For each producer id that wrote to the partition: its epoch and the metadata (first/last sequence, first/last
offset) of its last five batches. A batch is checked against it before it is appended (under the replica lock):
a retry of one of those five batches is answered with the original offsets and not written again; a sequence
gap, or a sequence other than 0 at a new epoch, is OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch is
INVALID_PRODUCER_EPOCH.

Where the state lives and how it survives:
* In memory on the Replica (`Replica.producer_state`), not on the Log: the swap at the end of a move replaces the
  Log object, the Replica stays, so the state follows the swap with nothing to copy. The bytes of the new Log are
  those of the old one, so the state is as valid for it.
* It is built lazily, at the first append of a batch that carries a producer id: from the latest usable
  snapshot file, then by walking the batch headers (61 bytes each, never the records) from the snapshot's offset
  to the log end offset. Opening 10,000 partitions therefore reads no snapshot and walks no log. The walk runs
  before the replica lock is taken (`prepare`); under the lock, `load` replays only what was appended since.
* Snapshots are Kafka's own file (`<20-digit offset>.snapshot` in the partition dir, format version 1, CRC-32C),
  so a Kafka broker can read ours and we read Kafka's. One is written when the log rolls a segment, holding the
  state as of the log end offset at that moment. A move copies every file of the partition dir, and again under
  the replica lock whatever changed since (mover/moves/future_log_copy.py, `copy_small_files`), so snapshots travel
  with the partition: each write or delete of a snapshot bumps the Log's `files_version` after it, under the lock.
* Unlike Kafka, no snapshot is written at shutdown: the format keeps only each producer's last batch, so a build
  from a snapshot at the log end would forget the other four batches a producer may still retry. Building from the
  last roll walks at most one segment of headers (once per partition, at its first idempotent append after a
  start) and remembers all five.

Crash-safety invariants:
* A snapshot is written atomically (`<name>.tmp`, fsync, rename, fsync dir: files.atomic_write); a torn or
  foreign-format snapshot fails its version or CRC check and is ignored (the log walk starts earlier instead).
* A snapshot's offset may exceed the log end offset after a crash (the appends it covered were never fsynced and
  the torn tail was cut on open). Such a snapshot describes a history the log no longer has: it is deleted when
  the state is built, which always happens before the next append to the partition, so it can never be taken for
  valid once the log grows past its offset again. (A first append without producer ids, which does not build the
  state, still deletes them first: one directory listing per partition per start.)
* `prepare` runs without the replica lock and only reads. It takes the log end offset before listing snapshots,
  and stale snapshots are deleted before any append can move the log end offset past them, so it never trusts one.
  What it builds is for the offsets below that log end offset; `load` replays the rest under the lock.
* Only this module creates or deletes `*.snapshot` files; it keeps the newest SNAPSHOTS_TO_KEEP of them. Losing
  them all costs a longer walk at the next build, never correctness.
* Snapshots are listed, read, written and deleted under the Log's PathGuard (path_guard.py), with `log_.dir` read
  under it: a swap renames the partition's dir outside the replica lock, and a snapshot written by the old name
  would fail (the name is gone) or land in the other copy (after the promotion the old name is the copy's).

Producer ids already in the log (`highest_producer_id`): the broker's allocator (mover/api/init_producer_id.py) must
never hand out an id a partition's state already holds, or that producer's first batch (epoch 0, sequence 0) is
refused with OUT_OF_ORDER_SEQUENCE_NUMBER. Ids written by another allocator (a Kafka broker that ran on these dirs,
its controller's blocks) are known to nobody but the logs, so the allocator starts above the highest id any loaded
log holds. That id is found without a second pass over what opening already read: the open walked the last segment's
headers (`Log.max_producer_id`, from `Log.producer_ids_from`); the newest usable snapshot holds every producer the
state would be built from below its offset; only the batches between that snapshot and `producer_ids_from` are
walked (none for a partition Kafka or moverd snapshotted at its last roll); batches appended since the open went
through `append`, so an idempotent one is in `producers`.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import crc32c

from mover.storage import record_batch
from mover.storage.errors import CorruptRecordError, StorageError
from mover.storage.files import atomic_write, read_exactly
from mover.storage.log import AppendInfo, Log
from mover.storage.names import SNAPSHOT_SUFFIX, TopicPartition, parse_segment_file_name, segment_file_name
from mover.storage.record_batch import HEADER_SIZE, BatchHeader
from mover.wire.errors import ErrorCode

log = logging.getLogger(__name__)

# Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN: the producer's max.in.flight.requests.per.connection may not
# exceed 5 with idempotence, so a retry is always of one of the last five batches.
BATCHES_TO_RETAIN = 5

# Kafka's producer.id.expiration.ms default (1 day): a producer silent this long (by its batches' timestamps) is
# forgotten when the state is loaded or snapshotted, so the map does not grow without bound.
PRODUCER_ID_EXPIRATION_MS = 86_400_000

# Snapshots kept per partition: the newest is the one a build starts from; one older survives in case the newest
# turns out to lie past the log end offset after a crash.
SNAPSHOTS_TO_KEEP = 2

# Header walks read this much at a time, so a log of small batches costs one pread per many headers (the same
# chunk LogSegment uses for its walk on open).
_WALK_CHUNK = 64 * 1024

INT32_MAX = 2**31 - 1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1

# Kafka's snapshot file, version 1: version i16, crc u32 (CRC-32C of everything after it), then an i32 count of
# entries {producer_id i64, epoch i16, last_sequence i32, last_offset i64, offset_delta i32, timestamp i64,
# coordinator_epoch i32, current_txn_first_offset i64}.
SNAPSHOT_VERSION = 1
_SNAP_HEAD = struct.Struct(">hIi")
_SNAP_ENTRY = struct.Struct(">qhiqiqiq")
_SNAP_ENTRIES_OFFSET = 6  # version + crc: the CRC covers the bytes from here


class ProducerStateError(StorageError):
    """A batch of an idempotent producer that the producer state refuses; `code` is Kafka's error code."""

    code = ErrorCode.UNKNOWN_SERVER_ERROR


class OutOfOrderSequenceError(ProducerStateError):
    code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(ProducerStateError):
    code = ErrorCode.INVALID_PRODUCER_EPOCH


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass
class ProducerEntry:
    producer_id: int
    epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_TO_RETAIN))
    last_timestamp: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def find_duplicate(self, h: BatchHeader) -> BatchMetadata | None:
        if h.producer_epoch != self.epoch:
            return None
        last = last_sequence(h)
        for b in self.batches:
            if b.first_seq == h.base_sequence and b.last_seq == last:
                return b
        return None

    def add(self, h: BatchHeader) -> None:
        if h.producer_epoch != self.epoch:
            # A new epoch starts a new sequence space: the old batches can no longer be retried (Kafka does the same).
            self.epoch = h.producer_epoch
            self.batches.clear()
        self.batches.append(BatchMetadata(h.base_sequence, last_sequence(h), h.base_offset, h.last_offset,
                                          h.max_timestamp))
        self.last_timestamp = max(self.last_timestamp, h.max_timestamp)


def last_sequence(h: BatchHeader) -> int:
    """The batch's last sequence; sequences wrap from 2^31-1 to 0 (Kafka's DefaultRecordBatch.incrementSequence)."""
    seq, inc = h.base_sequence, h.last_offset_delta
    if seq > INT32_MAX - inc:
        return inc - (INT32_MAX - seq) - 1
    return seq + inc


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerStateManager:
    """The state of one partition's producers. Every method runs under the replica lock."""

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.producers: dict[int, ProducerEntry] = {}
        self.loaded = False
        self._snapshots_checked = False
        self._prepare_lock = threading.Lock()
        self._prepared: tuple[dict[int, ProducerEntry], int] | None = None

    # ------------------------------------------------------------------ appends

    def append(self, log_: Log, buf: bytes | bytearray, headers: list[BatchHeader] | None = None,
               idempotent: bool | None = None) -> AppendInfo:
        """Append `buf` (whole v2 batches) to `log_`, checking and recording idempotent producers' batches.
        `headers`: what `record_batch.validate_batches(buf)` returned when the caller (Replica.append) already ran
        it; otherwise it runs here. Either way each batch is parsed and CRC-checked once. `idempotent`:
        `record_batch.any_idempotent(headers)`, when the caller already asked.

        A retried batch returns its original offsets and writes nothing (Kafka answers NONE with the original base
        offset; DUPLICATE_SEQUENCE_NUMBER is no longer used). Raises ProducerStateError subclasses, and whatever
        Log.append raises (RecordTooLargeError, OSError). The CRC was checked before this is called, as Kafka
        validates records before it looks at producer state: a corrupt copy of a retried batch is refused, not
        acknowledged as a duplicate."""
        if headers is None:
            headers = record_batch.validate_batches(buf)
        if idempotent is None:
            idempotent = record_batch.any_idempotent(headers)
        if not idempotent:
            if not self.loaded and not self._snapshots_checked:
                # Before the log grows past a stale snapshot's offset (see the module's invariants), once.
                self._delete_snapshots_past(log_)
            return log_.append(buf, headers=headers)  # the common non-idempotent case pays nothing more
        if not self.loaded:
            self.load(log_)
        pending: dict[int, ProducerEntry] = {}
        for h in headers:
            if h.producer_id < 0:
                continue
            entry = pending.get(h.producer_id) or self.producers.get(h.producer_id)
            if entry is not None:
                dup = entry.find_duplicate(h)
                if dup is not None:
                    log.info("%s: duplicate batch of producer %d (seq %d-%d) answered with offset %d", self.tp,
                             h.producer_id, dup.first_seq, dup.last_seq, dup.first_offset)
                    return AppendInfo(dup.first_offset, dup.last_offset, dup.timestamp, -1)
            updated = _copy_entry(entry) if entry is not None else ProducerEntry(h.producer_id)
            _check(self.tp, updated, h)
            updated.add(h)  # offsets are provisional here; the real ones are recorded after the append
            pending[h.producer_id] = updated
        rolled_from = log_.active_segment.base_offset
        info = log_.append(buf, headers=headers)
        # The batches now carry their assigned offsets: record them.
        offset = info.first_offset
        for h in headers:
            placed = h._replace(base_offset=offset)
            offset = placed.next_offset
            if h.producer_id < 0:
                continue
            entry = self.producers.get(h.producer_id)
            if entry is None:
                entry = self.producers[h.producer_id] = ProducerEntry(h.producer_id)
            entry.add(placed)
        if log_.active_segment.base_offset != rolled_from:
            self.take_snapshot(log_)
        return info

    def append_needs_io(self, idempotent: bool) -> bool:
        """Whether `append` would read or write files of its own before the Log's append: the first build of the
        state (idempotent batches) or the one-time stale-snapshot check (any batch). A roll's snapshot is not
        counted: callers that must not block also check that the append does not roll."""
        if self.loaded:
            return False
        return idempotent or not self._snapshots_checked

    # ------------------------------------------------------------------ building

    def prepare(self, log_: Log) -> None:
        """The expensive part of `load` (snapshot read, header walk up to the current log end offset), run *before*
        the replica lock is taken, so a partition with a long unsnapshotted tail does not block its appends (or a
        swap) for the walk. `load`, under the lock, then only replays what was appended since. Reads only: deletes
        nothing, and gives up quietly on an I/O error (the locked `load` will meet it and report it)."""
        with self._prepare_lock:  # one walk at a time; later callers find it done
            if self.loaded or self._prepared is not None:
                return
            try:
                self._prepared = self._build(log_, log_.log_end_offset)
            except (OSError, CorruptRecordError) as e:
                log.info("%s: producer state not prepared outside the lock: %s", self.tp, e)

    def load(self, log_: Log) -> None:
        """Build the state for `log_` (under the replica lock): from what `prepare` built if it ran, else from the
        newest snapshot at or below the log end offset; then the batch headers after that, up to the log end.
        Snapshots past the log end offset are deleted first (see the module's invariants)."""
        self._delete_snapshots_past(log_)
        leo = log_.log_end_offset
        with self._prepare_lock:
            prepared, self._prepared = self._prepared, None
        if prepared is not None and prepared[1] <= leo:
            # Valid for this Log even if a swap replaced the one it was built from: the bytes are the same.
            self.producers, built_to = prepared
            replayed = _replay(log_, self.producers, built_to, leo)
        else:
            self.producers, built_to = self._build(log_, leo)
            replayed = 0
        self.loaded = True
        log.info("%s: producer state loaded: %d producers; %d batches replayed under the lock", self.tp,
                 len(self.producers), replayed)

    def _build(self, log_: Log, leo: int) -> tuple[dict[int, ProducerEntry], int]:
        """(producers, offset they are built up to) from the newest snapshot <= leo and the headers after it."""
        producers: dict[int, ProducerEntry] = {}
        start = log_.log_start_offset
        now_ms = int(time.time() * 1000)
        newest = _newest_snapshot(log_, leo, (CorruptRecordError, OSError))
        if newest is not None:
            offset, entries = newest
            for entry in entries:
                if now_ms - entry.last_timestamp < PRODUCER_ID_EXPIRATION_MS:
                    producers[entry.producer_id] = entry
            start = max(offset, start)
        n = _replay(log_, producers, start, leo)
        log.info("%s: producer state built from offset %d to %d (%d batches walked)", self.tp, start, leo, n)
        return producers, leo

    # ------------------------------------------------------------------ snapshots

    def _delete_snapshots_past(self, log_: Log) -> None:
        leo = log_.log_end_offset
        deleted = False
        with log_.path_guard:
            for offset, path in list_snapshots(log_.dir):
                if offset > leo:
                    log.info("%s: deleting producer snapshot %s past the log end offset %d", self.tp, path.name, leo)
                    _unlink(path)
                    deleted = True
        if deleted:
            # A move's copy must lose it too, or it would trust it once its log grew past the offset.
            log_.note_files_changed()
        self._snapshots_checked = True

    def take_snapshot(self, log_: Log) -> None:
        """Write the state as of the log end offset to `<leo>.snapshot`; keep the newest SNAPSHOTS_TO_KEEP."""
        now_ms = int(time.time() * 1000)
        self.producers = {pid: e for pid, e in self.producers.items()
                          if now_ms - e.last_timestamp < PRODUCER_ID_EXPIRATION_MS}
        offset = log_.log_end_offset
        data = encode_snapshot(self.producers.values())
        # Under the guard from the dir's name to the last unlink (a rename of the dir waits, never the appends).
        with log_.path_guard:
            atomic_write(log_.dir / segment_file_name(offset, SNAPSHOT_SUFFIX), data)
            for _, path in sorted(list_snapshots(log_.dir), reverse=True)[SNAPSHOTS_TO_KEEP:]:
                # No directory fsync: an old snapshot that reappears after a crash is merely an older starting point.
                _unlink(path)
        # After the write: a move that listed the dir before it copies the small files again under the lock.
        log_.note_files_changed()


def _newest_snapshot(log_: Log, leo: int, skip: tuple[type[Exception], ...]
                     ) -> tuple[int, list[ProducerEntry]] | None:
    """(offset, entries) of the newest producer snapshot at or below `leo` that reads whole, or None; a snapshot
    failing with one of `skip` is logged and an older one tried. Under the Log's PathGuard: the dir's name is read
    and used while no rename can run."""
    with log_.path_guard:
        for offset, path in sorted(list_snapshots(log_.dir), reverse=True):
            if offset > leo:
                continue
            try:
                return offset, read_snapshot(path)
            except skip as e:
                log.warning("%s: ignoring producer snapshot %s: %s", log_.tp, path, e)
    return None


def highest_producer_id(log_: Log, state: ProducerStateManager | None = None) -> int:
    """The highest producer id `log_` holds in any batch its producer state is or would be built from (see the
    module's docstring), or -1. Reads the newest usable snapshot and walks only the headers the open did not.
    `state`: the partition's ProducerStateManager (its ids appended since the open). Raises OSError."""
    highest = log_.max_producer_id
    if state is not None and state.loaded:
        # list() copies the keys in one step, while an append on another thread may add one.
        highest = max(highest, max(list(state.producers), default=-1))
    leo = log_.log_end_offset
    start = log_.log_start_offset
    # As `_build` does: past a corrupt snapshot, an older one or the log itself is where the state comes from.
    newest = _newest_snapshot(log_, leo, (CorruptRecordError,))
    if newest is not None:
        offset, entries = newest
        highest = max(highest, max((e.producer_id for e in entries), default=-1))
        start = max(offset, start)
    walked_to = min(log_.producer_ids_from, leo)
    if start < walked_to:
        for h in walk_headers(log_, start):
            if h.base_offset >= walked_to:
                break
            if h.producer_id > highest:
                highest = h.producer_id
    return highest


def _replay(log_: Log, producers: dict[int, ProducerEntry], start: int, end: int) -> int:
    """Apply the producer batches holding offsets in [start, end) to `producers`, without validation (they are in
    the log already: Kafka's replay of its own log). Returns how many were applied."""
    n = 0
    for h in walk_headers(log_, start):
        if h.base_offset >= end:
            break
        if h.producer_id < 0 or h.is_control:
            continue
        entry = producers.get(h.producer_id)
        if entry is None:
            entry = producers[h.producer_id] = ProducerEntry(h.producer_id)
        if entry.batches and h.last_offset <= entry.batches[-1].last_offset:
            continue  # already in the snapshot or the prepared state
        entry.add(h)
        n += 1
    return n


def _check(tp: TopicPartition, entry: ProducerEntry, h: BatchHeader) -> None:
    """Kafka's ProducerAppendInfo.checkProducerEpoch and checkSequence, for a client's batch."""
    if h.producer_epoch < entry.epoch:
        raise InvalidProducerEpochError(
            f"{tp}: producer {h.producer_id} has epoch {h.producer_epoch}, older than the last seen {entry.epoch}")
    if h.producer_epoch != entry.epoch:
        # A new epoch must start at sequence 0, unless the producer is unknown here: its state may have been lost to
        # retention or expiry, so any sequence is accepted (Kafka >= 2.5, KIP-360; no UNKNOWN_PRODUCER_ID).
        if h.base_sequence != 0 and entry.epoch != NO_PRODUCER_EPOCH:
            raise OutOfOrderSequenceError(
                f"{tp}: producer {h.producer_id} starts epoch {h.producer_epoch} at sequence {h.base_sequence}, not 0")
        return
    if entry.batches and not _in_sequence(entry.last_seq, h.base_sequence):
        raise OutOfOrderSequenceError(
            f"{tp}: producer {h.producer_id} sent sequence {h.base_sequence} after {entry.last_seq}")


def _copy_entry(e: ProducerEntry) -> ProducerEntry:
    return ProducerEntry(e.producer_id, e.epoch, deque(e.batches, maxlen=BATCHES_TO_RETAIN), e.last_timestamp)


def walk_headers(log_: Log, start_offset: int) -> Iterator[BatchHeader]:
    """Headers of the batches holding offsets >= start_offset, up to the published end of each segment. A
    generator: a segment of a million small batches is walked, never held."""
    segments = log_.segments()
    for i, seg in enumerate(segments):
        if i + 1 < len(segments) and segments[i + 1].base_offset <= start_offset:
            continue
        size = seg.size
        pos = 0
        entry = seg.offset_index.lookup(start_offset) if start_offset > seg.base_offset else None
        if entry is not None and entry[1] < size:
            pos = entry[1]  # an index hint: the batch there ends at or before start_offset
        buf = b""
        buf_start = 0
        while pos + HEADER_SIZE <= size:
            if pos + HEADER_SIZE > buf_start + len(buf):
                buf_start = pos
                # Leased per chunk, never across a yield: the LRU may close an idle segment between chunks.
                with seg.file as fd:
                    buf = read_exactly(fd, min(_WALK_CHUNK, size - pos), pos)
                if len(buf) < HEADER_SIZE:
                    break
            h = record_batch.parse_header(buf, pos - buf_start)
            if h.last_offset >= start_offset:
                yield h
            pos += h.size


def list_snapshots(partition_dir: Path) -> list[tuple[int, Path]]:
    out = []
    try:
        names = os.listdir(partition_dir)
    except FileNotFoundError:
        return []
    for name in names:
        parsed = parse_segment_file_name(name)
        if parsed is not None and parsed[1] == SNAPSHOT_SUFFIX:
            out.append((parsed[0], partition_dir / name))
    return out


def encode_snapshot(entries: Iterable[ProducerEntry]) -> bytes:
    body = bytearray()
    count = 0
    for e in entries:
        if not e.batches:
            continue
        last = e.batches[-1]
        body += _SNAP_ENTRY.pack(e.producer_id, e.epoch, last.last_seq, last.last_offset,
                                 last.last_offset - last.first_offset, e.last_timestamp, -1, -1)
        count += 1
    after_crc = struct.pack(">i", count) + bytes(body)
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c.crc32c(after_crc)) + after_crc


def read_snapshot(path: Path) -> list[ProducerEntry]:
    """The entries of a snapshot file; CorruptRecordError if it is not a valid version-1 snapshot."""
    data = path.read_bytes()
    if len(data) < _SNAP_HEAD.size:
        raise CorruptRecordError(f"{path.name} is too short for a producer snapshot")
    version, crc, count = _SNAP_HEAD.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptRecordError(f"{path.name} has snapshot version {version}")
    if crc32c.crc32c(data[_SNAP_ENTRIES_OFFSET:]) != crc:
        raise CorruptRecordError(f"{path.name} fails its CRC check")
    if count < 0 or len(data) != _SNAP_HEAD.size + count * _SNAP_ENTRY.size:
        raise CorruptRecordError(f"{path.name} has {count} entries but {len(data)} bytes")
    out = []
    for pid, epoch, last_seq, last_offset, delta, ts, _coord, _txn in _SNAP_ENTRY.iter_unpack(
            data[_SNAP_HEAD.size:]):
        entry = ProducerEntry(pid, epoch, last_timestamp=ts)
        if last_offset >= 0:
            first_seq = last_seq - delta if last_seq >= delta else INT32_MAX - (delta - last_seq) + 1
            entry.batches.append(BatchMetadata(first_seq, last_seq, last_offset - delta, last_offset, ts))
        out.append(entry)
    return out


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
