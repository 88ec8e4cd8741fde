"""kill -9 a real daemon process at each named step of a move and at random moments; restart; nothing is lost.

The process under test is `python -m mover.testing.driver`: the LogManager exactly as moverd runs it, driven through its
Python API over stdin/stdout (see mover/testing/driver.py); the swap's unlocked rename windows are also hit in moverd
itself under a kafka-python producer. Named steps use mover/faults.py (the process SIGKILLs itself at the point);
random moments are SIGKILLs sent by the test.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from mover.storage.names import DirKind, parse_partition_dir
from mover.testing.consumers import PyConsumer, end_offsets, wait_caught_up
from mover.testing.driver import Driver, write_config
from mover.testing.exactly_once import assert_clean, check
from mover.testing.moverd import Moverd
from mover.testing.producers import PyProducer, prefill
from mover.testing.raw import RawClient, alter_dir
from mover.testing.records import dir_of, read_records
from mover.testing.wait import wait_for

APPENDS_PER_ROUND = 50


def layout(dirs: list[Path]) -> dict[DirKind, list[Path]]:
    out: dict[DirKind, list[Path]] = {}
    for d in dirs:
        for name in os.listdir(d):
            parsed = parse_partition_dir(name)
            if parsed is not None:
                out.setdefault(parsed.kind, []).append(d / name)
    return out


def settle(drv: Driver, dirs: list[Path], timeout: float = 60) -> Path:
    """Wait until resumed moves and delayed deletes are done; return the one live copy."""
    assert drv.call(op="wait_moves", timeout=timeout)["idle"]

    def settled() -> Path | None:
        found = layout(dirs)
        if set(found) == {DirKind.CURRENT} and len(found[DirKind.CURRENT]) == 1:
            return found[DirKind.CURRENT][0]
        return None

    try:
        return wait_for(settled, timeout, "one live copy and nothing else")
    except AssertionError as e:
        raise AssertionError(f"not settled: {layout(dirs)}") from e


def seed(conf: Path, batches: int = 40) -> list[str]:
    drv = Driver(conf)
    drv.call(op="create", topic="k", partitions=1)
    values = []
    for b in range(batches):
        vs = [f"{b}-{i}-".ljust(200, "v") for i in range(10)]
        drv.call(op="append", tp="k-0", values=vs)
        values += vs
    drv.stop()
    return values


def other_dir(dirs: list[Path], current: Path) -> Path:
    return dirs[1] if current.parent == dirs[0] else dirs[0]


def values_in(copy: Path) -> list[str]:
    return [v.decode() for _, v in read_records(copy)]


@pytest.mark.parametrize("point", ["move.before_copy", "move.mid_copy", "move.retired", "move.locked",
                                   "move.switched", "move.after_swap", "delete.during"])
def test_kill_at_named_step(tmp_path: Path, point: str) -> None:
    conf, dirs = write_config(tmp_path)
    values = seed(conf)
    (current,) = layout(dirs)[DirKind.CURRENT]
    drv = Driver(conf, crash_at=point)
    status = drv.call_then_die(op="move", tp="k-0", dir=str(other_dir(dirs, current)))
    assert status == -signal.SIGKILL, f"the daemon should have died at {point}"

    drv = Driver(conf)
    live = settle(drv, dirs)
    assert values_in(live) == values
    # The daemon still works after recovery: append, and move again.
    drv.call(op="append", tp="k-0", values=["after"])
    assert drv.call(op="move", tp="k-0", dir=str(other_dir(dirs, live)))["error_code"] == 0
    live = settle(drv, dirs)
    assert values_in(live) == values + ["after"]
    drv.stop()


@pytest.mark.parametrize(("point", "serving"), [("move.retired", DirKind.DELETE), ("move.switched", DirKind.MOVE)])
def test_kill_inside_an_unlocked_rename_window_under_produce(tmp_path: Path, point: str, serving: DirKind) -> None:
    """The swap renames outside the replica lock while appends go on: after the retirement rename the source (now
    `-delete`) takes them, after the switch the copy (still `.move`) does. Appends run without pause while the
    window is held open for half a second, then the daemon kills itself there. Before the restart, the copy that
    served holds every acknowledged record and the other fewer (the window's appends are in one copy only); after
    it, recovery promoted that copy: every acknowledged record is there once, in order."""
    conf, dirs = write_config(tmp_path)
    acked = seed(conf)
    (current,) = layout(dirs)[DirKind.CURRENT]
    drv = Driver(conf, crash_at=point, pause_at=f"{point}:0.5")
    assert drv.call(op="move", tp="k-0", dir=str(other_dir(dirs, current)))["error_code"] == 0
    n = 0
    deadline = time.monotonic() + 60  # only bounds a broken test: the move of 80 kB ends in well under a second
    try:
        while time.monotonic() < deadline:
            vs = [f"w{n}-{i}" for i in range(5)]
            n += 1
            drv.call(op="append", tp="k-0", values=vs)
            acked = acked + vs
    except (EOFError, BrokenPipeError):
        pass  # the daemon died; the append in flight was not acknowledged
    else:
        drv.kill()
        pytest.fail(f"the daemon should have died at {point}")
    assert drv.wait_dead() == -signal.SIGKILL
    found = layout(dirs)
    assert set(found) == {DirKind.MOVE, DirKind.DELETE}, found  # killed inside the window
    copies = {kind: values_in(paths[0]) for kind, paths in found.items()}
    (other,) = set(copies) - {serving}
    assert copies[serving][: len(acked)] == acked
    assert len(copies[other]) < len(acked), "no acknowledged append landed in the window"

    drv = Driver(conf)
    live = settle(drv, dirs)
    assert values_in(live)[: len(acked)] == acked
    drv.call(op="append", tp="k-0", values=["after"])
    assert drv.call(op="move", tp="k-0", dir=str(other_dir(dirs, live)))["error_code"] == 0
    live = settle(drv, dirs)
    got = values_in(live)
    assert got[: len(acked)] == acked and got[-1] == "after"
    drv.stop()


@pytest.mark.parametrize(("point", "serving"), [("move.retired", DirKind.DELETE), ("move.switched", DirKind.MOVE)])
def test_moverd_killed_inside_an_unlocked_rename_window_under_a_kafka_producer(tmp_path: Path, point: str,
                                                                               serving: DirKind) -> None:
    """The same windows in moverd itself, the records coming from kafka-python (acks=1) over the wire: after the
    restart a consumer reads every acknowledged record exactly once, at the offset it was acknowledged with."""
    tp = ("crash", 0)
    d = Moverd(tmp_path, props={"log.segment.bytes": 64 * 1024},
               env={"MOVERD_CRASH_AT": point, "MOVERD_PAUSE_AT": f"{point}:0.5"})
    d.start()
    try:
        acked = prefill(d.bootstrap, [tp], 300, pad=100)
        home = dir_of(d.dirs, *tp)
        producer = PyProducer("w", d.bootstrap, [tp], rate=2000, flush_timeout=1,
                              config={"acks": 1, "enable_idempotence": False, "retries": 0}).start()
        try:
            with RawClient(d.port) as admin:
                assert alter_dir(admin, *tp, next(p for p in d.dirs if p != home)) == 0
            assert d.proc is not None
            wait_for(lambda: d.proc.poll() is not None, message=f"moverd to die at {point}")
            assert d.proc.returncode == -signal.SIGKILL, d.log()
        finally:
            producer.stop()
        acked += producer.snapshot()[0]
        found = layout(d.dirs)
        assert set(found) == {DirKind.MOVE, DirKind.DELETE}, found
        copies = {kind: [v for _, v in read_records(paths[0])] for kind, paths in found.items()}
        (other,) = set(copies) - {serving}
        in_serving = set(copies[serving])
        assert all(a.value in in_serving for a in acked)
        assert not all(a.value in set(copies[other]) for a in acked), "no acknowledged record landed in the window"

        d.env = {}
        d.start()
        ends = end_offsets(d.bootstrap, [tp])
        consumer = PyConsumer("c", d.bootstrap, [tp]).start()
        try:
            wait_caught_up([consumer], ends)
        finally:
            consumed = consumer.stop()
        assert_clean(check("c", consumed, ends, acked))
    finally:
        d.__exit__()


def test_kill_at_random_moments(tmp_path: Path) -> None:
    """50 SIGKILLs at random moments of moves under appends; after each restart every acknowledged record is
    there once, in order, in exactly one live copy."""
    # 2 MB/s and at most APPENDS_PER_ROUND appends per round keep each move a few tenths of a second long, so the
    # random kills land before, during and after swaps rather than always mid-copy of an ever-growing log.
    conf, dirs = write_config(tmp_path, **{"intra.broker.throttled.rate": 2_000_000})
    acked = seed(conf, batches=60)
    rnd = random.Random(113)
    drv = Driver(conf)
    n = 0
    for kill in range(50):
        live = settle(drv, dirs)
        got = values_in(live)
        # An append in flight when the daemon died may or may not have landed; nothing acknowledged may be lost.
        assert got[: len(acked)] == acked, f"lost acknowledged records after kill {kill}"
        acked = got
        assert drv.call(op="move", tp="k-0", dir=str(other_dir(dirs, live)))["error_code"] == 0
        deadline = time.monotonic() + rnd.uniform(0, 0.4)
        for _ in range(APPENDS_PER_ROUND):
            if time.monotonic() >= deadline:
                break
            vs = [f"r{n}-{i}" for i in range(5)]
            n += 1
            drv.call(op="append", tp="k-0", values=vs)
            acked = acked + vs
        # The kill moment itself is what is random here, so this is a wait for a time, not for a condition.
        time.sleep(max(0.0, deadline - time.monotonic()))
        drv.kill()
        drv = Driver(conf)
    live = settle(drv, dirs)
    got = values_in(live)
    assert got[: len(acked)] == acked
    drv.stop()
