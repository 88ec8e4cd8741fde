"""The system tests' readers: kafka-python and kcat consumers on threads of their own, each keeping what it read
(mover.testing.history.Consumed) for the checks, and the log end offsets they must reach before a check may judge
them (a consumer still behind would look like a lost record)."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer
from kafka import TopicPartition as KTP

from mover.testing.history import TP, Consumed
from mover.testing.kcat import require_kcat
from mover.testing.wait import WAIT_S, wait_for
from mover.testing.worker import Worker


class ReadSoFar:
    """What a consumer of either kind has read so far, read under its lock: wait_caught_up and the checks ask both
    kinds alike."""

    tps: list[TP]
    consumed: Consumed
    _lock: threading.Lock

    def next_offsets(self) -> dict[TP, int]:
        with self._lock:
            return {tp: self.consumed.next_offset(tp) for tp in self.tps}

    def count(self) -> int:
        with self._lock:
            return self.consumed.count()


class PyConsumer(Worker, ReadSoFar):
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

    def stop(self) -> Consumed:
        self.close()
        self._check_stopped()
        return self.consumed


class KcatConsumer(ReadSoFar):
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
