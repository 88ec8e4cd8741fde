"""Produce (key 0, v3-9): append a client's record batches to this broker's partitions.

One node holds the only replica of each partition, so acks=-1 ("all in-sync replicas") means the same as acks=1:
the answer goes out once the batch is in the leader's log (written, not fsynced, as Kafka). acks=0 gets no answer;
when such a request fails the connection is closed, as Kafka does (`acks_zero`, applied to every Produce route by
mover.api.with_api_defaults).

Per partition, in Kafka's order: topic known (else auto-created, see below) -> partition known (3) -> request-level
record checks (87 INVALID_RECORD: no batch, magic other than 2, more than one batch, a control batch, a negative
sequence; 10 MESSAGE_TOO_LARGE over message.max.bytes) -> the append under the replica lock (LogManager.append):
size and CRC-32C (2 CORRUPT_MESSAGE), idempotent producer state (45, 47), the disk (56 KAFKA_STORAGE_ERROR). Every
partition is answered on its own: one on a failed log dir does not fail the others of the same request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mover.api.produce_repeats import ProduceRepeats
from mover.errors import ApiError
from mover.server import NOT_NOW, CloseConnection, Handler, Route, is_async_handler, run_blocking
from mover.storage import record_batch
from mover.storage.errors import CorruptRecordError, RecordTooLargeError
from mover.storage.names import TopicPartition, is_valid_topic_name
from mover.storage.producer_state import ProducerStateError
from mover.storage.record_batch import HEADER_SIZE, MAGIC_V2
from mover.wire import Chunk, EncodeError, ErrorCode, FrameTemplate, RequestHeader, frame_template
from mover.wire.messages import PRODUCE

if TYPE_CHECKING:
    from mover.api.broker import Broker
    from mover.log.log_manager import LogManager
    from mover.log.replica import Replica
    from mover.storage.log import AppendInfo

log = logging.getLogger(__name__)

Body = dict[str, Any]

ZSTD = 4  # compression codec id in the batch attributes
# KIP-110: zstd batches need Produce v7+, so older clients that could not read them back never see them.
ZSTD_MIN_PRODUCE_VERSION = 7


def routes(broker: Broker) -> dict[int, Handler | Route]:
    quick = QuickAppends()

    async def produce(header: RequestHeader, request: Body) -> Body:
        return await handle_produce(broker, header.api_version, request, quick)

    def produce_now(header: RequestHeader, request: Body) -> Body | None:
        return produce_one_now(broker, header.api_version, request, quick)

    def produce_many(items: list[tuple[RequestHeader, Body]]) -> list[Body | None]:
        return produce_run_now(broker, items, quick)

    # Not concurrent: requests of one connection append in the order they were sent (Kafka's muted channel), which
    # an idempotent producer with several requests in flight relies on.
    return {PRODUCE.key: Route(produce, fast=produce_now, fast_many=produce_many, encode=AnswerTemplates().encode,
                               repeats=ProduceRepeats)}


class OneAnswer(dict):  # type: ignore[type-arg]
    """The answer to a Produce of one partition that succeeded (`one_answer`): an ordinary answer dict to everyone,
    which `AnswerTemplates` recognises by its type and encodes from a template."""

    __slots__ = ()


def _partition_answer(partition: int, base_offset: int, log_start_offset: int) -> Body:
    # log_append_time_ms -1: CreateTime, the producer's timestamps are kept.
    return {"index": partition, "error_code": 0, "base_offset": base_offset, "log_append_time_ms": -1,
            "log_start_offset": log_start_offset}


def one_answer(topic: str, partition: int, base_offset: int, log_start_offset: int) -> OneAnswer:
    return OneAnswer(responses=[{"name": topic, "partition_responses": [
        _partition_answer(partition, base_offset, log_start_offset)]}], throttle_time_ms=0)


class AnswerTemplates:
    """Route.encode for Produce: a `OneAnswer` is encoded from a template per (version, topic, partition), derived
    from the declared encoder (`mover.wire.frame_template`, which checks it byte for byte against a second
    encoding) and patched with the correlation id, the base offset and the log start offset. The generic encode
    of that answer was ~4 us of a one-record request's ~35 on the loop (docs/data-path.md, "Fifth round"); a fill
    is one copy and three packs. Anything else: None (the generic encoder). At most MAX templates are kept (a
    producer to thousands of partitions just starts over)."""

    MAX = 4096

    def __init__(self) -> None:
        self._templates: dict[tuple[int, str, int], FrameTemplate | None] = {}

    def encode(self, version: int, correlation_id: int, response: Body) -> list[Chunk] | None:
        if type(response) is not OneAnswer:
            return None
        # What the template bakes in, checked again: an answer is a dict anyone may have changed on its way here.
        topics = response["responses"]
        if len(response) != 2 or len(topics) != 1 or response["throttle_time_ms"] != 0:
            return None
        topic = topics[0]
        parts = topic["partition_responses"]
        if len(topic) != 2 or len(parts) != 1:
            return None
        p = parts[0]
        if len(p) != 5 or p["error_code"] != 0 or p["log_append_time_ms"] != -1:
            return None
        name = topic["name"]
        key = (version, name, p["index"])
        templates = self._templates
        template = templates.get(key)
        if template is None:
            if key in templates:
                return None  # no template for this layout (refused once): the generic encoder, always
            template = self._make(version, name, p["index"])
            if len(templates) >= self.MAX:
                templates.clear()
            templates[key] = template
            if template is None:
                return None
        if version < 5:  # no log_start_offset before v5
            return [template.fill(correlation_id, p["base_offset"])]
        return [template.fill(correlation_id, p["base_offset"], p["log_start_offset"])]

    @staticmethod
    def _make(version: int, name: str, partition: int) -> FrameTemplate | None:
        try:
            if version < 5:
                return frame_template(PRODUCE, version, lambda base: one_answer(name, partition, base, -1), (8,))
            return frame_template(PRODUCE, version, lambda base, start: one_answer(name, partition, base, start),
                                  (8, 8))
        except (ValueError, EncodeError) as e:
            log.warning("no Produce v%d answer template for %s-%d (%s): encoding them one by one", version, name,
                        partition, e)
            return None


def produce_run_now(broker: Broker, items: list[tuple[RequestHeader, Body]], quick: QuickAppends) -> list[Body | None]:
    """The server's Route.fast_many: a run of pipelined one-partition Produce requests to the same partition,
    appended together with one Replica.try_append (one lock, one pwrite, one index check) instead of one each, on
    the event loop. Only requests `produce_one_now` would append on the loop and that pass `_checked_header`, with
    acks 1 or -1 and no idempotent producer (its sequence checks answer per batch); the run stops before the first
    other one, which then goes the usual way. The answers are those of one-by-one appends: each request's batch
    gets the offsets it would have had (the same bytes in the same order), and a failure that stops the append
    before it writes (a bad CRC, a busy lock, a roll) answers none of them here, so each is retried alone.
    Returns the answers of the prefix it appended; [] when it did nothing."""
    manager = broker.manager
    max_bytes = broker.config.message_max_bytes
    first: tuple[str, int] | None = None
    batches: list[bytes] = []
    parsed: list[record_batch.BatchHeader] = []
    total = 0
    for header, request in items:
        topics = request["topic_data"]
        if request["acks"] not in (-1, 1) or len(topics) != 1 or len(topics[0]["partition_data"]) != 1:
            break
        p = topics[0]["partition_data"][0]
        key = (topics[0]["name"], p["index"])
        if first is None:
            first = key
        elif key != first:
            break
        records = p["records"]
        code, h = _checked_header(header.api_version, records, max_bytes)
        if code or h is None:
            break
        if h.producer_id >= 0 or total + len(records) > QuickAppends.MAX_BYTES:
            break
        total += len(records)
        batches.append(records)
        parsed.append(h)
    if len(batches) < 2 or first is None:
        return []
    name, partition = first
    if name not in manager.topics:
        return []
    replica = manager.replicas.get(TopicPartition(name, partition))
    if replica is None:
        return []
    try:
        got = quick.append(manager, replica, b"".join(batches), parsed)
    except (CorruptRecordError, RecordTooLargeError, ProducerStateError):
        return []  # refused before writing: each request alone gets its own answer
    except ApiError as e:  # the partition went away, its replica is offline or its dir failed: all of them alike
        code = e.code
        return [{"responses": [{"name": name, "partition_responses": [
            {"index": partition, "error_code": code, "base_offset": -1, "log_start_offset": -1}]}],
            "throttle_time_ms": 0} for _ in batches]
    if got is None:
        return []
    current = replica.log
    log_start = current.log_start_offset if current is not None else -1
    out: list[Body | None] = []
    base = got.first_offset
    for h in parsed:
        out.append(one_answer(name, partition, base, log_start))
        base += h.last_offset_delta + 1
    return out


def produce_one_now(broker: Broker, version: int, request: Body, quick: QuickAppends) -> Body | None:
    """The server's fast path (Route.fast) for the commonest small request: one partition, acks 1 or -1, appended
    on the event loop if QuickAppends allows; else NOT_NOW, having done nothing. Requests of several partitions
    take the handler (one partition appended here and the next sent to a thread would be appended twice on the
    retry through the handler); acks=0 does too (its no-answer rule lives in acks_zero)."""
    topics = request["topic_data"]
    if request["acks"] not in (-1, 1) or len(topics) != 1 or len(topics[0]["partition_data"]) != 1:
        return NOT_NOW
    name = topics[0]["name"]
    p = topics[0]["partition_data"][0]
    done = _produce_partition(broker, version, name, p["index"], p["records"], quick)
    if done is None:
        return NOT_NOW
    code, resp = done
    if resp is None:
        resp = {"index": p["index"], "error_code": code, "base_offset": -1, "log_start_offset": -1}
        return {"responses": [{"name": name, "partition_responses": [resp]}], "throttle_time_ms": 0}
    return OneAnswer(responses=[{"name": name, "partition_responses": [resp]}], throttle_time_ms=0)


class QuickAppends:
    """Which appends run on the event loop instead of the thread pool.

    A hop to the pool and back costs two thread wake-ups: on a busy 2-core machine that was most of a one-record
    Produce (docs/data-path.md, "Performance"). A small append that needs no lock wait, no roll and no producer-state
    build is a CRC check and one pwrite into the page cache, cheaper than the hop. It blocks the loop only if
    the write itself blocks (dirty-page throttling, a failing disk): when SLOW_COUNT inline appends to one log dir
    took longer than SLOW_S each within PENALTY_S, and they were at least SLOW_FRACTION of that dir's inline appends
    since the first of them, that dir's appends go to the pool for PENALTY_S, so a slow disk cannot keep stalling
    every connection. A few slow appends are not enough: on a busy machine the loop thread is sometimes not
    scheduled for tens of ms (50 ms stalls were seen here with nothing wrong with the disk, three of them within
    10 s at a load average of 20-40, which sent a one-record benchmark to the pool for most of its run), and such
    stalls hit one append in thousands, while a disk that throttles or hangs makes most writes slow.
    Durability is the same either way: the same write, no fsync (Kafka's default; flushes run on their timer)."""

    MAX_BYTES = 64 * 1024  # records of one partition; larger appends (big batches) amortise the hop anyway
    SLOW_S = 0.05
    SLOW_COUNT = 3
    SLOW_FRACTION = 0.05
    PENALTY_S = 10.0

    def __init__(self) -> None:
        # Recent slow inline appends per log dir: (time, that dir's count of inline appends then).
        self._slow: dict[Path, list[tuple[float, int]]] = {}
        self._appends: dict[Path, int] = {}  # inline appends per log dir, ever
        self._pool_until: dict[Path, float] = {}

    def allowed(self, replica: Replica, nbytes: int) -> bool:
        if nbytes > self.MAX_BYTES:
            return False
        if self._pool_until:
            until = self._pool_until.get(replica.log_dir)
            if until is not None:
                if time.monotonic() < until:
                    return False
                del self._pool_until[replica.log_dir]
        return True

    def append(self, manager: LogManager, replica: Replica, records: bytes,
               parsed: Sequence[record_batch.BatchHeader] = ()) -> AppendInfo | None:
        """LogManager.try_append on the event loop, timed, if this allows it; None when it did nothing (the caller
        then appends through the I/O threads)."""
        if not self.allowed(replica, len(records)):
            return None
        started = time.perf_counter()
        got = manager.try_append(replica, records, parsed)
        self.took(replica, time.perf_counter() - started)
        return got

    def took(self, replica: Replica, seconds: float) -> None:
        d = replica.log_dir
        count = self._appends[d] = self._appends.get(d, 0) + 1
        if seconds <= self.SLOW_S:
            return
        now = time.monotonic()
        recent = [(t, c) for t, c in self._slow.get(d, ()) if now - t < self.PENALTY_S] + [(now, count)]
        self._slow[d] = recent
        if len(recent) >= self.SLOW_COUNT and len(recent) >= self.SLOW_FRACTION * (count - recent[0][1] + 1):
            log.warning("%d appends on the event loop to %s took over %.0f ms (the last, to %s, %.1f ms): its "
                        "appends go through the I/O threads for %.0f s", len(recent), replica.log_dir,
                        self.SLOW_S * 1000, replica.tp, seconds * 1000, self.PENALTY_S)
            self._pool_until[replica.log_dir] = now + self.PENALTY_S
            del self._slow[replica.log_dir]


def acks_zero(handler: Handler) -> Handler:
    """Produce's acks=0 rule around `handler`: the producer reads no answer, so none is sent; if the request failed
    (a partition error, or the handler raised) the connection is closed, the only signal such a producer gets."""

    def settle(request: Body, response: Body | None) -> Body | None:
        if request["acks"] != 0:
            return response
        if response is not None and _failed(response):
            raise CloseConnection("acks=0 produce failed; closing the connection as Kafka does")
        return None

    if is_async_handler(handler):
        async def wrapped_async(header: RequestHeader, request: Body) -> Body | None:
            try:
                response = await handler(header, request)  # type: ignore[misc]
            except Exception as e:
                if request["acks"] == 0 and not isinstance(e, CloseConnection):
                    log.exception("acks=0 produce failed")
                    raise CloseConnection("acks=0 produce failed") from e
                raise
            return settle(request, response)

        return wrapped_async

    def wrapped(header: RequestHeader, request: Body) -> Body | None:
        try:
            response = handler(header, request)
        except Exception as e:
            if request["acks"] == 0 and not isinstance(e, CloseConnection):
                log.exception("acks=0 produce failed")
                raise CloseConnection("acks=0 produce failed") from e
            raise
        return settle(request, response)  # type: ignore[arg-type]

    return wrapped


def _failed(response: Body) -> bool:
    return any(
        p.get("error_code", 0) != 0 for t in response.get("responses", []) for p in t.get("partition_responses", [])
    )


async def handle_produce(broker: Broker, version: int, request: Body, quick: QuickAppends | None = None) -> Body:
    """Each partition is appended on the event loop when `quick` allows it and nothing would block (see QuickAppends),
    else in the server's thread pool; partitions are appended in request order either way."""
    acks = request["acks"]
    responses = []
    for topic in request["topic_data"]:
        name = topic["name"]
        parts = []
        for p in topic["partition_data"]:
            if acks not in (-1, 0, 1):
                code, resp = int(ErrorCode.INVALID_REQUIRED_ACKS), None
            else:
                done = _produce_partition(broker, version, name, p["index"], p["records"], quick) \
                    if quick is not None else None
                if done is None:
                    done = await run_blocking(_produce_partition, broker, version, name, p["index"], p["records"])
                code, resp = done
            if resp is None:
                resp = {"index": p["index"], "error_code": code, "base_offset": -1, "log_start_offset": -1}
            parts.append(resp)
        responses.append({"name": name, "partition_responses": parts})
    return {"responses": responses, "throttle_time_ms": 0}


def _produce_partition(broker: Broker, version: int, topic: str, partition: int, records: bytes | None,
                       quick: QuickAppends | None = None) -> tuple[int, Body | None] | None:
    """(error code, answer or None). With `quick` (on the event loop): None when the partition needs work that may
    block (auto-creating its topic, an append that must wait), which the caller then runs here again without it."""
    manager = broker.manager
    if topic not in manager.topics:
        if quick is not None:
            return None
        code = _ensure_topic(broker, topic)
        if code:
            return code, None
    tp = TopicPartition(topic, partition)
    replica = manager.replicas.get(tp)
    if replica is None:
        return int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), None
    code, header = _checked_header(version, records, broker.config.message_max_bytes)
    if code:
        return code, None
    assert records is not None and header is not None
    try:
        if quick is not None:
            got = quick.append(manager, replica, records, (header,))
            if got is None:
                return None
            info = got
        else:
            info = manager.append(tp, records, (header,))
    except CorruptRecordError as e:
        log.info("produce to %s: %s", tp, e)
        return int(ErrorCode.CORRUPT_MESSAGE), None
    except RecordTooLargeError as e:
        log.info("produce to %s: %s", tp, e)
        return int(ErrorCode.MESSAGE_TOO_LARGE), None
    except ProducerStateError as e:
        log.info("produce to %s: %s", tp, e)
        return e.code, None
    except ApiError as e:  # unknown partition (deleted meanwhile), offline replica or failed dir
        return e.code, None
    current = replica.log
    return 0, _partition_answer(partition, info.first_offset, current.log_start_offset if current is not None else -1)


def _ensure_topic(broker: Broker, topic: str) -> int:
    """0 if the topic exists or was just created; else the partition's error code.

    Kafka creates topics only through Metadata and answers the produce itself with UNKNOWN_TOPIC_OR_PARTITION. Real
    clients always ask Metadata first, so both behave the same for them; creating here as well saves a raw or
    metadata-less producer a round trip and a retry."""
    manager = broker.manager
    if topic in manager.topics:
        return 0
    if not is_valid_topic_name(topic):
        return int(ErrorCode.INVALID_TOPIC_EXCEPTION)
    if not broker.config.auto_create_topics_enable:
        return int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    try:
        manager.create_topic(topic, broker.config.num_partitions)
        log.info("auto-created topic %r with %d partitions on produce", topic, broker.config.num_partitions)
    except ApiError as e:
        if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:  # created by a concurrent request: fine
            return e.code
    return 0


def _checked_header(version: int, records: bytes | None, max_message_bytes: int
                    ) -> tuple[int, record_batch.BatchHeader | None]:
    """Kafka's ProduceRequest.validateRecords and the per-batch checks of LogValidator that need no CRC: the error
    code (0: none), and the batch header parsed (None when none could be), which the append takes as it is.

    v3+ requests carry exactly one magic-2 batch per partition; anything else is INVALID_RECORD (87) in Kafka 2.6+
    (older brokers said CORRUPT_MESSAGE). The header is read with record_batch's parser (the CRC is checked once,
    by the append)."""
    if not records:
        return int(ErrorCode.INVALID_RECORD), None
    if len(records) < HEADER_SIZE:
        return int(ErrorCode.CORRUPT_MESSAGE), None
    if record_batch.magic_of(records) != MAGIC_V2:
        return int(ErrorCode.INVALID_RECORD), None
    try:
        header = record_batch.parse_header(records)
    except CorruptRecordError:
        return int(ErrorCode.CORRUPT_MESSAGE), None
    size = header.size
    if size > len(records):
        return int(ErrorCode.CORRUPT_MESSAGE), header
    if size < len(records):
        return int(ErrorCode.INVALID_RECORD), header  # more than one batch
    if size > max_message_bytes:
        return int(ErrorCode.MESSAGE_TOO_LARGE), header
    if header.compression == ZSTD and version < ZSTD_MIN_PRODUCE_VERSION:
        return int(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE), header
    if header.is_control:
        return int(ErrorCode.INVALID_RECORD), header  # clients may not write control records
    if header.is_transactional:
        # No transaction coordinator here (InitProducerId refuses transactional ids), so no transaction can be open.
        return int(ErrorCode.INVALID_TXN_STATE), header
    if header.producer_id >= 0 and header.base_sequence < 0:
        return int(ErrorCode.INVALID_RECORD), header
    return 0, header
