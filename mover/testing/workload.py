"""Real clients against a real moverd for KIP-113's system tests: kafka-python and kcat producers and consumers
running on their own threads / processes, what they were acknowledged and what they consumed, and the checks
"every acknowledged record consumed exactly once, in order per partition".

Every record value is unique: `<producer>-<topic>-<partition>-<seq>-<padding>`, seq counting per producer and
partition from 0, so a value read back says who wrote it and in which order.

`MoveWatcher` polls DescribeLogDirs (in process, mover.admin.client) for future copies, of a moverd or of each broker
of a Kafka cluster, and tells which acknowledged records were sent and acknowledged while their own partition was
being moved: the proof that a test's traffic really overlapped its moves, not just the run of the command that
started them. It can also poll one broker key (DescribeConfigs) alongside, to show what a broker was set to while it
moved replicas (the log-dir throttle).

The bench scripts (bench/system_*.py) use the same pieces with bigger numbers.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self, TypeVar

from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTP
from kafka.errors import KafkaTimeoutError, UnknownBrokerIdError

from mover.admin.client import Client, ClientError
from mover.admin.common import AdminError
from mover.admin.log_dir_state import ReplicaDirs, describe_broker, replica_dirs
from mover.admin.throttle import BROKER_RESOURCE
from mover.testing.wait import WAIT_S, wait_for
from mover.wire.messages import DESCRIBE_CONFIGS

T = TypeVar("T")

TP = tuple[str, int]
# A stopped kcat producer flushes what it still holds; librdkafka's message.timeout.ms is 300 s, far too long
# to wait for a broken run.
KCAT_EXIT_S = 30.0
KCAT = shutil.which("kcat")
VALUE_RE = re.compile(r"^(?P<producer>[\w.]+)-(?P<topic>[\w.]+)-(?P<partition>\d+)-(?P<seq>\d+)-")
# kcat -vv prints one line per delivery report, in the order the messages were produced (per partition).
KCAT_DELIVERED = re.compile(r"^% Message delivered to partition (?P<partition>-?\d+) \(offset (?P<offset>-?\d+)\)")
KCAT_FAILED = re.compile(r"^% Delivery failed for message: (?P<error>.*)")

log = logging.getLogger(__name__)


def require_kcat() -> str:
    """kcat's path; CI installs it (Debian package `kcat`), so its absence is a failure, not a skip."""
    assert KCAT is not None, "kcat is not installed (apt-get install kcat): the system tests need it"
    return KCAT


def make_value(producer: str, tp: TP, seq: int, pad: int) -> bytes:
    head = f"{producer}-{tp[0]}-{tp[1]}-{seq}-"
    return (head + "x" * max(0, pad - len(head))).encode()


@dataclass(frozen=True)
class Acked:
    """A record its producer got an acknowledgement for: where the broker said it put it, and when."""

    topic: str
    partition: int
    offset: int
    value: bytes
    at: float  # time.monotonic() of the acknowledgement
    # time.monotonic() when it was handed to the client (kafka-python producers): the broker appended it in
    # [sent, at], which is what tells a record written while a move ran from one acknowledged during it.
    sent: float | None = None


@dataclass
class Failure:
    topic: str
    partition: int
    value: bytes
    error: str
    at: float


class Worker:
    """A client on a thread of its own: `start()`, `close()` (stop without judging, for finally blocks), and
    `_check_stopped()`, which fails the test when the thread hung or crashed (a dead client must not pass)."""

    kind = "worker"
    join_timeout_s = WAIT_S

    def __init__(self, name: str) -> None:
        self.name = name
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run_guarded, name=f"{self.kind}-{name}", daemon=True)
        self.crash: BaseException | None = None

    def start(self) -> Self:
        self._thread.start()
        return self

    def _run_guarded(self) -> None:
        try:
            self._run()
        except BaseException as e:  # reported by _check_stopped()
            self.crash = e
            log.exception("%s %s crashed", self.kind, self.name)

    def _run(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._stop.set()
        self._thread.join(self.join_timeout_s)

    def _check_stopped(self) -> None:
        assert not self._thread.is_alive(), f"{self.kind} {self.name} did not stop"
        assert self.crash is None, f"{self.kind} {self.name} crashed: {self.crash!r}"


class Producer(Worker):
    """What every producer shares: the acknowledged and failed records, under a lock (callbacks come from
    the client's own threads)."""

    kind = "producer"
    join_timeout_s = WAIT_S + KCAT_EXIT_S

    def __init__(self, name: str, tps: list[TP], rate: float | None, pad: int) -> None:
        super().__init__(name)
        self.tps = tps
        self.rate = rate  # records per second over all its partitions; None: as fast as the client goes
        self.pad = pad
        self.sent = 0
        self.acked: list[Acked] = []
        self.failed: list[Failure] = []
        self.abandoned = False  # stop() gave up on pending records; their failures say so
        self._lock = threading.Lock()

    def _pace(self, started: float) -> None:
        if self.rate:
            # Rate limiting by a short sleep: the point is a steady trickle of records, not a condition to poll.
            ahead = self.sent / self.rate - (time.monotonic() - started)
            if ahead > 0:
                self._stop.wait(ahead)

    def _ok(self, tp: TP, value: bytes, offset: int, sent: float | None = None) -> None:
        with self._lock:
            self.acked.append(Acked(tp[0], tp[1], offset, value, time.monotonic(), sent))

    def _fail(self, tp: TP, value: bytes, error: str) -> None:
        if self.abandoned:
            error = f"abandoned at stop ({error})"
        with self._lock:
            self.failed.append(Failure(tp[0], tp[1], value, error, time.monotonic()))

    def acked_count(self, tps: Iterable[TP] | None = None) -> int:
        with self._lock:
            if tps is None:
                return len(self.acked)
            wanted = set(tps)
            return sum((a.topic, a.partition) in wanted for a in self.acked)

    def snapshot(self) -> tuple[list[Acked], list[Failure]]:
        with self._lock:
            return list(self.acked), list(self.failed)

    def stop(self) -> None:
        self.close()
        self._check_stopped()


def survive_unknown_brokers(producer: KafkaProducer) -> KafkaProducer:
    """`producer` made to live through a leader killed and gone from the metadata. In kafka-python 3.0.12 the
    sender's connect to a node the metadata no longer lists raises UnknownBrokerIdError (kafka.net's
    get_connection, since its PR #2876), which the sender does not catch: each turn of its loop raises before
    its poll, so the metadata that would name the new leader is never fetched, and every record to that
    partition waits until the producer gives up (a test's broker kill -9 failed so, the batch ready as the broker
    left the metadata). Here that node is taken as not ready and the metadata asked for again, as for any node
    not ready."""
    client = producer._sender._client
    connect = client.maybe_connect

    def maybe_connect(node_id: int, **kwargs: Any) -> Any:
        try:
            return connect(node_id, **kwargs)
        except UnknownBrokerIdError:
            producer._metadata.request_update()
            return None

    client.maybe_connect = maybe_connect
    return producer


class PyProducer(Producer):
    """A kafka-python KafkaProducer sending round-robin to its partitions; `config` goes to KafkaProducer
    (the default is kafka-python 3.0's own: idempotent, acks=all)."""

    def __init__(self, name: str, bootstrap: str, tps: list[TP], *, rate: float | None = 100, pad: int = 100,
                 config: dict[str, Any] | None = None, flush_timeout: float | None = None) -> None:
        """`flush_timeout`: how long stop() waits for the records still pending; None = until done (bounded by
        WAIT_S, then the producer crashed). With a value, what is still pending then is abandoned and counted
        as failed: for a producer whose partitions are expected to be unavailable."""
        super().__init__(name, tps, rate, pad)
        self.bootstrap = bootstrap
        self.config = dict(config or {})
        self.flush_timeout = flush_timeout

    def _run(self) -> None:
        producer = survive_unknown_brokers(
            KafkaProducer(bootstrap_servers=self.bootstrap, client_id=self.name, **self.config))
        try:
            seq: Counter[TP] = Counter()
            started = time.monotonic()
            while not self._stop.is_set():
                for tp in self.tps:
                    value = make_value(self.name, tp, seq[tp], self.pad)
                    seq[tp] += 1
                    sent = time.monotonic()
                    future = producer.send(tp[0], value=value, partition=tp[1])
                    future.add_callback(
                        lambda md, tp=tp, value=value, sent=sent: self._ok(tp, value, md.offset, sent))
                    future.add_errback(lambda e, tp=tp, value=value: self._fail(tp, value, type(e).__name__))
                    self.sent += 1
                self._pace(started)
            try:
                producer.flush(timeout=self.flush_timeout or WAIT_S)
            except KafkaTimeoutError:
                if self.flush_timeout is None:
                    raise
                self._abandon(producer)
        finally:
            producer.close(timeout=10)

    def _abandon(self, producer: KafkaProducer) -> None:
        """Give up on what is pending. kafka-python 3.0.12's close(timeout) flushes first and raises when that
        times out, so it never reaches its own force-close; do that here (its abort fails the pending futures)."""
        self.abandoned = True
        producer._sender.force_close()
        producer._sender.join(WAIT_S)


class KcatProducer(Producer):
    """`kcat -P -t topic -p N` fed one value per line on its stdin. Its delivery reports (stderr at -vv) come in
    produce order for one partition, so the n-th report belongs to the n-th line; each carries the offset.
    The reports are read once kcat has exited, so its Acked.at is the stop time, not the acknowledgement's."""

    def __init__(self, name: str, bootstrap: str, tp: TP, *, rate: float | None = 50, pad: int = 100,
                 stderr_path: Path, extra: tuple[str, ...] = ()) -> None:
        super().__init__(name, [tp], rate, pad)
        self.argv = [require_kcat(), "-b", bootstrap, "-P", "-t", tp[0], "-p", str(tp[1]), "-vv", "-E", *extra]
        self.stderr_path = stderr_path
        self.lines: list[bytes] = []
        self.returncode: int | None = None

    def _run(self) -> None:
        tp = self.tps[0]
        with open(self.stderr_path, "wb") as err:
            proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err)
        try:
            assert proc.stdin is not None
            started = time.monotonic()
            while not self._stop.is_set():
                value = make_value(self.name, tp, len(self.lines), self.pad)
                self.lines.append(value)
                proc.stdin.write(value + b"\n")
                proc.stdin.flush()
                self.sent += 1
                self._pace(started)
            proc.stdin.close()  # EOF: kcat flushes what it holds and exits
            self.returncode = proc.wait(KCAT_EXIT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self._read_reports()

    def _read_reports(self) -> None:
        n = 0
        for line in self.stderr_path.read_text(errors="replace").splitlines():
            m = KCAT_DELIVERED.match(line)
            f = KCAT_FAILED.match(line)
            if not (m or f):
                continue
            assert n < len(self.lines), f"{self.name}: more delivery reports than lines produced"
            tp = self.tps[0]
            if m:
                assert int(m["partition"]) == tp[1], line
                self._ok(tp, self.lines[n], int(m["offset"]))
            else:
                self._fail(tp, self.lines[n], f["error"] if f else "")
            n += 1
        # Lines with no report at all were neither acknowledged nor reported failed: count them as failed.
        for value in self.lines[n:]:
            self._fail(self.tps[0], value, "no delivery report")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-3000:]


@dataclass
class Consumed:
    """Per partition, (offset, value) in the order the consumer received them."""

    records: dict[TP, list[tuple[int, bytes]]] = field(default_factory=lambda: defaultdict(list))

    def next_offset(self, tp: TP) -> int:
        got = self.records.get(tp)
        return got[-1][0] + 1 if got else 0

    def count(self) -> int:
        return sum(len(v) for v in self.records.values())


class PyConsumer(Worker):
    """A kafka-python KafkaConsumer with assign() to every partition, from the beginning, no group."""

    kind = "consumer"

    def __init__(self, name: str, bootstrap: str, tps: list[TP], **config: Any) -> None:
        super().__init__(name)
        self.bootstrap = bootstrap
        self.tps = tps
        self.config = config
        self.consumed = Consumed()
        self._lock = threading.Lock()

    def _run(self) -> None:
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, client_id=self.name, group_id=None,
                                 enable_auto_commit=False, auto_offset_reset="earliest", **self.config)
        try:
            consumer.assign([KTP(t, p) for t, p in self.tps])
            consumer.seek_to_beginning()
            while not self._stop.is_set():
                for ktp, records in consumer.poll(timeout_ms=200).items():
                    with self._lock:
                        self.consumed.records[(ktp.topic, ktp.partition)].extend(
                            (r.offset, bytes(r.value)) for r in records)
        finally:
            consumer.close()

    def next_offsets(self) -> dict[TP, int]:
        with self._lock:
            return {tp: self.consumed.next_offset(tp) for tp in self.tps}

    def count(self) -> int:
        with self._lock:
            return self.consumed.count()

    def stop(self) -> Consumed:
        self.close()
        self._check_stopped()
        return self.consumed


class KcatConsumer:
    """`kcat -C -t topic -o beginning -u -f '%p %o %s\\n'`: every partition of one topic, read on a thread."""

    def __init__(self, name: str, bootstrap: str, topic: str, partitions: int, *, stderr_path: Path) -> None:
        self.name = name
        self.topic = topic
        self.tps = [(topic, p) for p in range(partitions)]
        self.argv = [require_kcat(), "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-u", "-E",
                     "-f", "%p %o %s\\n"]
        self.stderr_path = stderr_path
        self.consumed = Consumed()
        self._lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self._thread = threading.Thread(target=self._read, name=f"kcat-{name}", daemon=True)
        self.bad_lines: list[bytes] = []

    def start(self) -> KcatConsumer:
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err)
        self._thread.start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            parts = line.rstrip(b"\n").split(b" ", 2)
            if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
                self.bad_lines.append(line)
                continue
            with self._lock:
                self.consumed.records[(self.topic, int(parts[0]))].append((int(parts[1]), parts[2]))

    def next_offsets(self) -> dict[TP, int]:
        with self._lock:
            return {tp: self.consumed.next_offset(tp) for tp in self.tps}

    def count(self) -> int:
        with self._lock:
            return self.consumed.count()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._thread.join(10)

    def stop(self) -> Consumed:
        self.close()
        assert not self.bad_lines, f"kcat consumer {self.name} printed unexpected lines: {self.bad_lines[:5]}"
        return self.consumed

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-3000:]

    def offset_resets(self) -> list[str]:
        """librdkafka's notes of jumping to another offset (e.g. after OFFSET_OUT_OF_RANGE): records skipped."""
        return [line for line in self.stderr_path.read_text(errors="replace").splitlines() if "offset reset" in line]


def end_offsets(bootstrap: str, tps: list[TP]) -> dict[TP, int]:
    """Log end offsets (ListOffsets latest), through a kafka-python consumer of its own."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        got = consumer.end_offsets([KTP(t, p) for t, p in tps])
        return {(k.topic, k.partition): v for k, v in got.items()}
    finally:
        consumer.close()


def wait_caught_up(consumers: list[PyConsumer | KcatConsumer], ends: dict[TP, int],
                   deadline_s: float = WAIT_S) -> None:
    def behind() -> dict[str, dict[TP, tuple[int, int]]]:
        out = {}
        for c in consumers:
            offsets = c.next_offsets()
            lag = {tp: (offsets[tp], end) for tp, end in ends.items() if tp in offsets and offsets[tp] < end}
            if lag:
                out[c.name] = lag
        return out

    try:
        wait_for(lambda: not behind(), deadline_s, "consumers to catch up to the log end", interval=0.1)
    except AssertionError as e:
        raise AssertionError(f"consumers never caught up to the log end: (next, end) {behind()}") from e


@dataclass
class Report:
    """What one consumer's view says about the acknowledged records."""

    consumer: str
    consumed: int = 0
    acked: int = 0
    lost: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        if len(self.problems) < 20:
            self.problems.append(text)


def check(consumer: str, consumed: Consumed, ends: dict[TP, int], acked: list[Acked]) -> Report:
    """Every acknowledged record consumed exactly once, at the offset it was acknowledged with; each partition
    read as offsets 0..end-1 without a gap, a repeat or a duplicate value; each producer's records in the order
    it sent them."""
    report = Report(consumer, consumed=consumed.count(), acked=len(acked))
    by_offset: dict[TP, dict[int, bytes]] = {}
    for tp, end in ends.items():
        got = consumed.records.get(tp, [])
        offsets = [o for o, _ in got]
        if offsets != list(range(end)):
            repeats = sum(n - 1 for n in Counter(offsets).values())
            report.duplicates += repeats
            report.problem(f"{consumer}: {tp} consumed offsets are not 0..{end - 1} once each in order "
                           f"({len(offsets)} records, {repeats} repeated, first {offsets[:3]}, last {offsets[-3:]})")
        values = Counter(v for _, v in got)
        dup_values = [v for v, n in values.items() if n > 1]
        if dup_values:
            report.duplicates += sum(values[v] - 1 for v in dup_values)
            report.problem(f"{consumer}: {tp} holds {len(dup_values)} values more than once, e.g. {dup_values[0]!r}")
        by_offset[tp] = dict(got)
        # Per producer: seq strictly increasing along the log.
        last_seq: dict[str, int] = {}
        for offset, value in got:
            m = VALUE_RE.match(value.decode(errors="replace"))
            if m is None:
                report.problem(f"{consumer}: {tp}@{offset} holds a value no producer wrote: {value[:60]!r}")
                continue
            if (m["topic"], int(m["partition"])) != tp:
                report.problem(f"{consumer}: {tp}@{offset} holds a value meant for another partition: {value[:60]!r}")
            producer, seq = m["producer"], int(m["seq"])
            if producer in last_seq and seq <= last_seq[producer]:
                report.out_of_order += 1
                report.problem(f"{consumer}: {tp}@{offset}: {producer} seq {seq} after {last_seq[producer]}")
            last_seq[producer] = seq
    for a in acked:
        tp = (a.topic, a.partition)
        if tp not in ends:
            report.problem(f"{consumer}: acked record on unchecked partition {tp}")
            continue
        if by_offset[tp].get(a.offset) != a.value:
            report.lost += 1
            report.problem(f"{consumer}: acked {a.value[:40]!r} at {tp}@{a.offset} but consumed "
                           f"{by_offset[tp].get(a.offset, b'<nothing>')[:40]!r} there")
    return report


def assert_clean(report: Report) -> None:
    assert (report.lost, report.duplicates, report.out_of_order) == (0, 0, 0) and not report.problems, \
        f"{report.consumer}: lost {report.lost}, duplicates {report.duplicates}, out of order " \
        f"{report.out_of_order}:\n" + "\n".join(report.problems)


def read_back(name: str, bootstrap: str, tps: list[TP], acked: list[Acked]) -> None:
    """Read `tps` from the start to their ends now and assert every acknowledged record is there once, in order."""
    ends = end_offsets(bootstrap, tps)
    reader = PyConsumer(name, bootstrap, tps).start()
    wait_caught_up([reader], ends)
    assert_clean(check(name, reader.stop(), ends, acked))


def prefill(bootstrap: str, tps: list[TP], per_partition: int | Mapping[TP, int], pad: int,
            name: str = "pre") -> list[Acked]:
    """Write `per_partition` records to each partition (a number for all, or one per partition) as fast as
    kafka-python goes (so a move has something to copy), and return their acknowledgements; any failure fails the
    caller."""
    counts = {tp: per_partition for tp in tps} if isinstance(per_partition, int) else dict(per_partition)
    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id=name, linger_ms=5, batch_size=256 * 1024)
    acked: list[Acked] = []
    try:
        futures = []
        for seq in range(max(counts.values(), default=0)):
            for tp in tps:
                if seq >= counts.get(tp, 0):
                    continue
                value = make_value(name, tp, seq, pad)
                futures.append((tp, value, producer.send(tp[0], value=value, partition=tp[1])))
        producer.flush(timeout=WAIT_S)
        for tp, value, future in futures:
            md = future.get(timeout=WAIT_S)
            acked.append(Acked(tp[0], tp[1], md.offset, value, time.monotonic()))
    finally:
        producer.close(timeout=10)
    return acked


def describe_placement(client: Client, broker: int | None = None) -> dict[TP, ReplicaDirs]:
    """Where a broker keeps each replica (its dir, and the future copy's while it moves): DescribeLogDirs in this
    process through mover.admin.client, no CLI to start. `broker` None: the only broker Metadata names (a moverd
    is a single-node cluster, its Metadata names only itself)."""
    if broker is None:
        [broker] = client.brokers
    return {(r.topic, r.partition): info for r, info in replica_dirs(broker, describe_broker(client, broker)).items()}


def replica_placement(bootstrap: str) -> dict[TP, ReplicaDirs]:
    with Client(bootstrap) as client:
        return describe_placement(client)


def broker_config(client: Client, broker: int, key: str) -> str | None:
    """The value of one broker key as DescribeConfigs gives it for this broker (whatever its source), or None."""
    reply = client.connection(broker).call(DESCRIBE_CONFIGS, {"resources": [{
        "resource_type": BROKER_RESOURCE, "resource_name": str(broker), "configuration_keys": [key]}]})
    for result in reply["results"]:
        assert result["error_code"] == 0, f"broker {broker} refused DescribeConfigs: {result}"
        for entry in result["configs"]:
            if entry["name"] == key:
                return entry["value"]
    return None


@dataclass(frozen=True)
class MoveWindow:
    """A stretch of time during which `tp` had a future copy on `broker` throughout: from the answer of the first
    poll that saw it to the request of the last one. A future copy lives from the move's start to its swap and a
    plan moves a replica once, so two polls seeing it bracket one move that ran in between."""

    tp: TP
    start: float
    end: float
    broker: int | None = None


@dataclass(frozen=True)
class Sample:
    """One poll of one broker: when it was asked and answered (time.monotonic()), the replicas with a future copy,
    and the value of the watched config key (None: not watched, or not set). The key is read before and after
    DescribeLogDirs; `config_held` says both reads agreed, so the value held while the copies were seen."""

    broker: int | None
    asked: float
    answered: float
    moving: frozenset[TP]
    config: str | None = None
    config_held: bool = True


class MoveWatcher(Worker):
    """Polls DescribeLogDirs every `interval` seconds and keeps which replicas had a future copy, so a test can show
    that records were written to a partition while that very partition was being moved. `brokers` None: a moverd
    (its Metadata names only itself); else each of these brokers of a cluster, a broker that does not answer (killed
    by the test) being skipped until it does. `config_key`: also DescribeConfigs of that key on each broker at each
    poll, to show what a broker was set to while it moved replicas (Sample.config)."""

    kind = "move-watcher"

    def __init__(self, name: str, bootstrap: str, *, interval: float = 0.05, brokers: list[int] | None = None,
                 config_key: str | None = None) -> None:
        super().__init__(name)
        self.bootstrap = bootstrap
        self.interval = interval
        self.brokers = brokers
        self.config_key = config_key
        self.samples: list[Sample] = []
        self._lock = threading.Lock()

    def _run(self) -> None:
        with Client(self.bootstrap, timeout=5) as client:
            while not self._stop.is_set():
                for broker in self.brokers or [None]:
                    asked = time.monotonic()
                    try:
                        before = self._config(client, broker)
                        placement = describe_placement(client, broker)
                        after = self._config(client, broker)
                    except (ClientError, AdminError):
                        if broker is None:
                            raise
                        try:
                            client.reconnect(broker)
                        except ClientError:
                            pass  # still down: asked again at the next poll
                        continue
                    moving = frozenset(tp for tp, info in placement.items() if info.future is not None)
                    with self._lock:
                        self.samples.append(Sample(broker, asked, time.monotonic(), moving, after, before == after))
                # A poll cadence, not a condition to wait for.
                self._stop.wait(self.interval)

    def _config(self, client: Client, broker: int | None) -> str | None:
        if self.config_key is None or broker is None:
            return None
        return broker_config(client, broker, self.config_key)

    def stop(self) -> None:
        self.close()
        self._check_stopped()

    def moved(self, broker: int | None = None) -> set[TP]:
        """Every replica seen with a future copy (on `broker`, or on any)."""
        with self._lock:
            return {tp for s in self.samples if broker is None or s.broker == broker for tp in s.moving}

    def configs_while_moving(self, broker: int) -> set[str | None]:
        """The values the watched key held on `broker` in the polls where it had a future copy (a poll during which
        the value changed is left out: it cannot tell which value the copies saw)."""
        with self._lock:
            return {s.config for s in self.samples if s.broker == broker and s.moving and s.config_held}

    def windows(self) -> list[MoveWindow]:
        with self._lock:
            samples = list(self.samples)
        out: list[MoveWindow] = []
        open_: dict[tuple[int | None, TP], list[float]] = {}  # (broker, tp) -> [first answer, last request]
        for s in samples:
            for key in [k for k in open_ if k[0] == s.broker]:
                if key[1] not in s.moving:
                    out.append(MoveWindow(key[1], *open_.pop(key), broker=key[0]))
            for tp in s.moving:
                key = (s.broker, tp)
                if key in open_:
                    open_[key][1] = s.asked
                else:
                    open_[key] = [s.answered, s.answered]  # one poll alone brackets nothing
        out += [MoveWindow(tp, *span, broker=broker) for (broker, tp), span in open_.items()]
        return [w for w in out if w.end > w.start]

    def written_while_moving(self, acked: Iterable[Acked]) -> list[Acked]:
        """The records whose partition had a future copy (on some watched broker) from before they were sent until
        after they were acknowledged: a broker appended them while their partition was being copied to another
        dir."""
        by_tp: dict[TP, list[MoveWindow]] = defaultdict(list)
        for w in self.windows():
            by_tp[w.tp].append(w)
        return [a for a in acked if a.sent is not None
                and any(w.start <= a.sent and a.at <= w.end for w in by_tp.get((a.topic, a.partition), ()))]


def merge(parts: Iterable[Consumed]) -> Consumed:
    """One view from consumers that read disjoint partitions (one kcat per topic)."""
    out = Consumed()
    for part in parts:
        for tp, records in part.records.items():
            assert tp not in out.records, f"{tp} read by two of the merged consumers"
            out.records[tp] = list(records)
    return out
