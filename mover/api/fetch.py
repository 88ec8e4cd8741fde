"""Fetch (key 1, v4-12): records from the replica's current log, sent from the segment file with sendfile.

* Small fetches whose reads hit only memory and the page cache are answered on the event loop (Route.fast,
  `fetch_from_cache`); the others, and every fetch that must wait for data, read in the I/O threads.
* Reads need no lock: Log.read reads the log end offset before the segments, so it only returns whole batches
  already written. A swap at the end of a move replaces `replica.log`; a read that started on the old Log finishes
  on it (its files stay open until log.segment.delete.delay.ms after the swap), and the next read uses the new one.
  The bytes are identical, so a consumer cannot tell.
* The record bytes never enter Python: each partition's records are a `mover.wire.FileRegion` owning its *own* dup
  of the segment's fd, which the server sends with os.sendfile and which closes when the response is dropped. So a
  slow consumer is never left sending from an fd the old Log closed (and the kernel reused) after a swap.
* Long polling: a fetch that found fewer than min_bytes waits up to max_wait_ms for an append to one of its
  partitions (an asyncio future woken from the appending thread through loop.call_soon_threadsafe), then reads
  again. No polling loop, no thread parked per waiting fetch.
* Fetch sessions (KIP-227) are not kept: every fetch is a full one and is answered with session_id 0, as a broker
  with max.incremental.fetch.session.cache.slots=0 does; clients then keep sending full fetches. A request naming
  a session (an incremental fetch) gets FETCH_SESSION_ID_NOT_FOUND.
* No transactions here: last_stable_offset = high watermark, and read_committed (isolation_level 1) reads the same
  bytes with an empty aborted_transactions list.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import TYPE_CHECKING, Any

from mover.errors import ApiError
from mover.server import NOT_NOW, Handler, Route, run_blocking
from mover.storage.errors import OffsetOutOfRangeError, WouldBlock
from mover.storage.names import TopicPartition
from mover.wire import ErrorCode, FileRegion, RequestHeader
from mover.wire.messages import FETCH

if TYPE_CHECKING:
    from mover.api.broker import Broker
    from mover.log.log_manager import LogManager

log = logging.getLogger(__name__)

Body = dict[str, Any]

# KIP-227: epoch 0 asks for a new session, -1 for none; both are full fetches. Anything else names a session.
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
READ_COMMITTED = 1


class AppendNotifier:
    """Wakes waiting fetches when a partition gets new data. `appended` runs on the appending thread; everything
    else on the event loop.

    No wake-up is lost: the appender bumps the partition's version *then* looks for waiters; a fetch registers its
    waiter *then* compares the versions it read before its read. Either the appender sees the waiter, or the fetch
    sees the new version (and reads again at once)."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        # Fetches waiting now, and how many times any fetch parked; written on the event loop only.
        self._parked = 0
        self._parked_total = 0
        self._versions: dict[TopicPartition, int] = {}
        self._counter = itertools.count(1)  # next() is atomic under the GIL
        self._waiters: dict[TopicPartition, set[asyncio.Future[None]]] = {}

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def appended(self, tp: TopicPartition) -> None:
        self._versions[tp] = next(self._counter)
        loop = self._loop
        if tp in self._waiters and loop is not None:
            try:
                loop.call_soon_threadsafe(self._wake, tp)
            except RuntimeError:  # the loop is closed: shutting down, nobody waits any more
                pass

    @property
    def parked(self) -> int:
        """How many fetches wait for an append now (Kafka's fetch purgatory size). Readable from any thread."""
        return self._parked

    @property
    def parked_total(self) -> int:
        """How many times a fetch has parked since start (a fetch woken without enough data parks again)."""
        return self._parked_total

    def versions(self, tps: list[TopicPartition]) -> list[int]:
        return [self._versions.get(tp, 0) for tp in tps]

    def _wake(self, tp: TopicPartition) -> None:
        for fut in self._waiters.pop(tp, ()):
            if not fut.done():
                fut.set_result(None)

    async def wait(self, tps: list[TopicPartition], seen: list[int], timeout: float) -> None:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        for tp in tps:
            self._waiters.setdefault(tp, set()).add(fut)
        try:
            if self.versions(tps) != seen:
                return
            self._parked += 1
            self._parked_total += 1
            try:
                await asyncio.wait_for(fut, timeout)
            finally:
                self._parked -= 1
        except TimeoutError:
            pass
        finally:
            for tp in tps:
                waiting = self._waiters.get(tp)
                if waiting is not None:
                    waiting.discard(fut)
                    if not waiting:
                        del self._waiters[tp]


def routes(broker: Broker) -> dict[int, Handler | Route]:
    notifier = broker.fetch_purgatory
    broker.manager.append_listeners.append(notifier.appended)

    async def fetch(header: RequestHeader, request: Body) -> Body:
        return await handle_fetch(broker.manager, notifier, header.api_version, request)

    def fetch_now(header: RequestHeader, request: Body) -> Body | None:
        return fetch_from_cache(broker.manager, request)

    # Concurrent: a fetch only reads, so pipelined fetches may overlap (answers still go out in order).
    return {FETCH.key: Route(fetch, concurrent=True, fast=fetch_now)}


# Partitions a fetch may have for its reads to run on the event loop (each costs an index lookup, a few cached
# preads and a dup); a fetch of more goes to the I/O threads, so one big fetch cannot hold up other connections.
FAST_FETCH_MAX_PARTITIONS = 16


def fetch_from_cache(manager: LogManager, request: Body) -> Body | None:
    """The server's fast path (Route.fast) for a fetch that can be answered now from memory and the page cache:
    at most FAST_FETCH_MAX_PARTITIONS partitions, every index it needs loaded and every batch header it reads
    cached (preadv2 RWF_NOWAIT), and enough data (or an error) to answer without waiting. Otherwise NOT_NOW: the
    handler reads in the I/O threads and long-polls. Reads change nothing, so a read dropped here costs only time;
    the records themselves go out by sendfile from the loop either way."""
    if request["session_id"] != 0 or request["session_epoch"] not in (INITIAL_EPOCH, FINAL_EPOCH):
        return NOT_NOW
    partitions = sum(len(t["partitions"]) for t in request["topics"])
    if partitions > FAST_FETCH_MAX_PARTITIONS:
        return NOT_NOW
    try:
        responses, nbytes, errors = read_partitions(manager, request, nowait=True)
    except WouldBlock:
        return NOT_NOW
    if not partitions or nbytes >= request["min_bytes"] or errors or request["max_wait_ms"] <= 0:
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": responses}
    return NOT_NOW  # would wait for data: the handler long-polls (dropping `responses` closes their fds)


async def handle_fetch(manager: LogManager, notifier: AppendNotifier, version: int, request: Body) -> Body:
    loop = asyncio.get_running_loop()
    notifier.bind(loop)
    if request["session_id"] != 0 or request["session_epoch"] not in (INITIAL_EPOCH, FINAL_EPOCH):
        # An incremental fetch of a session we never created (we create none).
        return {"throttle_time_ms": 0, "error_code": int(ErrorCode.FETCH_SESSION_ID_NOT_FOUND), "session_id": 0,
                "responses": []}
    tps = [TopicPartition(t["topic"], p["partition"]) for t in request["topics"] for p in t["partitions"]]
    max_wait = max(request["max_wait_ms"], 0) / 1000
    deadline = loop.time() + max_wait
    while True:
        seen = notifier.versions(tps)
        responses, nbytes, errors = await run_blocking(read_partitions, manager, request)
        remaining = deadline - loop.time()
        # Kafka's DelayedFetch: answer now when there is nothing to wait for, enough data, or an error.
        if not tps or nbytes >= request["min_bytes"] or errors or remaining <= 0:
            return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": responses}
        del responses  # closes the fds of a partial answer we will read again
        await notifier.wait(tps, seen, remaining)


def read_partitions(manager: LogManager, request: Body, *, nowait: bool = False) -> tuple[list[Body], int, bool]:
    """(responses, bytes of records, whether any partition has an error). Runs in the thread pool; with `nowait`
    on the event loop, raising WouldBlock when a read would wait for the disk."""
    read_committed = request["isolation_level"] == READ_COMMITTED
    budget = request["max_bytes"]
    total = 0
    errors = False
    out = []
    for t in request["topics"]:
        parts = []
        for p in t["partitions"]:
            tp = TopicPartition(t["topic"], p["partition"])
            # KIP-74: max_bytes is soft for the first partition with data, which returns at least one whole batch,
            # so a batch larger than the limit cannot stall a consumer.
            limit = min(p["partition_max_bytes"], budget - total)
            resp = _read_partition(manager, tp, p["fetch_offset"], limit, min_one=total == 0, nowait=nowait)
            if resp["error_code"]:
                errors = True
            elif read_committed:
                resp["aborted_transactions"] = []
            records = resp["records"]
            if isinstance(records, FileRegion):
                total += records.length
            parts.append(resp)
        out.append({"topic": t["topic"], "partitions": parts})
    return out, total, errors


def _error(tp: TopicPartition, code: int) -> Body:
    # Kafka's LogReadResult for a failed read: unknown offsets (-1), empty records.
    return {"partition_index": tp.partition, "error_code": code, "high_watermark": -1, "last_stable_offset": -1,
            "log_start_offset": -1, "records": b""}


def _read_partition(manager: LogManager, tp: TopicPartition, offset: int, limit: int, *, min_one: bool,
                    nowait: bool = False) -> Body:
    try:
        current, found = manager.read(tp, offset, limit, min_one=min_one, nowait=nowait)
    except OffsetOutOfRangeError:
        return _error(tp, int(ErrorCode.OFFSET_OUT_OF_RANGE))
    except ApiError as e:
        return _error(tp, e.code)
    records: FileRegion | bytes = b""
    if found.data is not None:
        records = found.data  # out of descriptors: the bytes, read while the segment was pinned
    elif found.length:
        # Our own fd for the response's lifetime (see the module docstring): the slice's dup, handed over.
        records = FileRegion(found.detach(), found.position, found.length, owned=True)
    hw = current.high_watermark  # read after the records, so it covers every offset they hold
    return {"partition_index": tp.partition, "error_code": 0, "high_watermark": hw, "last_stable_offset": hw,
            "log_start_offset": current.log_start_offset, "records": records}
