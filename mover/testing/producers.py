"""The system tests' writers: kafka-python and kcat producers on threads of their own, keeping what each was
acknowledged and what failed (mover.testing.history), so the checks can tell a lost record from one never
acknowledged; and `prefill`, the data a move has to copy before the traffic starts.

The bench scripts (bench/system_*.py) use the same producers with bigger numbers.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kafka import KafkaProducer
from kafka.errors import KafkaTimeoutError, UnknownBrokerIdError

from mover.testing.history import TP, Acked, Failure, make_value
from mover.testing.kcat import require_kcat
from mover.testing.wait import WAIT_S
from mover.testing.worker import Worker

# A stopped kcat producer flushes what it still holds; librdkafka's message.timeout.ms is 300 s, far too long
# to wait for a broken run.
KCAT_EXIT_S = 30.0
# kcat -vv prints one line per delivery report, in the order the messages were produced (per partition).
KCAT_DELIVERED = re.compile(r"^% Message delivered to partition (?P<partition>-?\d+) \(offset (?P<offset>-?\d+)\)")
KCAT_FAILED = re.compile(r"^% Delivery failed for message: (?P<error>.*)")


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
