"""execute against a real moverd whose destination dir breaks while the run goes on: it fills up (a size-limited
tmpfs, filled by something else under the copy), goes unreadable (chmod 000; moverd runs without DAC capabilities,
so root is refused too), or is cordoned. The move into it fails in one line saying why, the other moves go on, the
throttle the operator had is back at the end, and every record acknowledged before is read back."""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from mover.admin import cordon, throttle
from mover.admin.client import Client
from mover.audit.cli import build_parser
from mover.audit.execute import run
from mover.testing.exactly_once import read_back
from mover.testing.execute_plan import write_plan_with_to_broker
from mover.testing.history import TP, Acked
from mover.testing.log_dirs_tool import create_topics, placement
from mover.testing.moverd import SETPRIV, Moverd
from mover.testing.producers import prefill
from mover.testing.wait import wait_for

MIB = 1 << 20
RECORDS = 3000  # of RECORD_BYTES each per partition: ~3 MiB, a few seconds of copy at RATE
RECORD_BYTES = 1000
RATE = 1 * MIB  # the run's throttle: slow enough to break a dir under a running copy
OWN = 5 * MIB  # the operator's own throttle, which the run must put back


class Setup:
    """moverd with three dirs: `victim` (d2) is where the plan's topic `a` moves and what breaks; topic `b` moves
    between d1 and d3 and must not notice."""

    def __init__(self, d: Moverd, acked: list[Acked], tps: list[TP]) -> None:
        self.d = d
        self.acked = acked
        self.tps = tps
        self.client = Client(d.bootstrap)
        self.victim = str(d.dirs[1])
        self.rows: list[dict[str, Any]] = []

    def plan(self, path: Path) -> Path:
        """a-* to the victim dir; b-* from d1 to d3 or back."""
        for (topic, partition), [(current, _)] in sorted(placement(self.d.bootstrap).items()):
            if topic == "a":
                to = self.victim
            else:
                to = next(str(p) for p in (self.d.dirs[0], self.d.dirs[2]) if str(p) != current)
            self.rows.append({"cluster": "east", "broker": 0, "topic": topic, "partition": partition,
                              "from_dir": current, "to_dir": to, "size_bytes": RECORDS * RECORD_BYTES, "step": 0})
        return write_plan_with_to_broker(path, self.rows)

    def copying(self, topic: str, partition: int) -> bool:
        """The replica's future copy in the victim dir has bytes."""
        from mover.admin.log_dir_state import describe_broker

        for info in describe_broker(self.client, 0, {topic: [partition]}):
            if info.path == self.victim and any(p.is_future and p.size > 0 for p in info.partitions):
                return True
        return False


@pytest.fixture
def setup(moverd: Callable[..., Moverd], tmp_path: Path) -> Iterator[Callable[..., Setup]]:
    made: list[Setup] = []

    def make(victim: Path, a_partitions: int = 1, **options: Any) -> Setup:
        dirs = [tmp_path / "d1", victim, tmp_path / "d3"]
        # Cordoned at start, so that creating the topics puts nothing on it; lifted before the run.
        props = {"cordoned.log.dirs": str(victim), "log.dir.health.check.interval.ms": 50}
        d = moverd(base=tmp_path, dirs=dirs, props=props, **options)
        create_topics(d.bootstrap, {"a": a_partitions, "b": 2})
        tps = [("a", p) for p in range(a_partitions)] + [("b", 0), ("b", 1)]
        acked = prefill(d.bootstrap, tps, RECORDS, RECORD_BYTES)
        s = Setup(d, acked, tps)
        made.append(s)
        cordon.set_cordon(s.client, 0, [s.victim], False)
        throttle.set_throttle(s.client, [0], OWN)
        return s

    yield make
    for s in made:
        s.client.close()


@contextmanager
def executing(s: Setup, plan: Path, *extra: str) -> Iterator[tuple[io.StringIO, list[int]]]:
    """mover-audit execute in a thread for the block; joined at its end."""
    out = io.StringIO()
    result: list[int] = []
    argv = ["execute", "--plan", str(plan), "--bootstrap-server", s.d.bootstrap, "--cluster", "east",
            "--poll-interval", "0.05", "--throttle", str(RATE), *extra]

    def target() -> None:
        result.append(run(build_parser(argv)[0].parse_args(argv), out))

    worker = threading.Thread(target=target)
    worker.start()
    try:
        yield out, result
    finally:
        worker.join(120)
    assert not worker.is_alive(), out.getvalue()


def check_the_rest(s: Setup, out: str, failed: set[TP], reason: str) -> None:
    """The failed moves failed once each, saying why, and left their replica where it was; the others are done; the
    operator's throttle is back; every acknowledged record is there."""
    for topic, partition in failed:
        lines = [line for line in out.splitlines() if line.startswith(f"failed: {topic}-{partition} on broker 0 ")]
        assert len(lines) == 1 and reason in lines[0], out
    assert f"executed: {len(s.rows) - len(failed)} done, {len(failed)} failed" in out, out
    where = placement(s.d.bootstrap)
    for row in s.rows:
        tp = (row["topic"], row["partition"])
        assert where[tp] == [(row["from_dir"] if tp in failed else row["to_dir"], False)], (tp, where)
    assert set(throttle.dynamic_throttle(s.client, 0).values()) == {str(OWN)}, out
    read_back("after", s.d.bootstrap, s.tps, s.acked)


def test_a_destination_that_fills_up_fails_its_move_and_the_others_go_on(setup: Callable[..., Setup], tmp_path: Path,
                                                                         tmpfs: Callable[[str, str], Path]) -> None:
    # moverd refuses a move that does not fit up front (size + 16 MiB): 24 MiB lets it start, the ballast fills it.
    s = setup(tmpfs("d2", "24m"))
    plan = s.plan(tmp_path / "plan")
    with executing(s, plan, "--max-moves-per-disk", "3", "--max-moves-per-broker", "3") as (out, result):
        wait_for(lambda: s.copying("a", 0), message="a-0 copying into the small dir")
        free = os.statvfs(s.victim)
        # The copy may have filled the dir already: then even the ballast's open is refused (ENOSPC), as the
        # broker's next write is.
        try:
            with open(Path(s.victim) / "ballast", "wb") as f:
                f.write(b"\0" * (free.f_bavail * free.f_frsize))
        except OSError:
            pass
    assert result == [1], out.getvalue()
    check_the_rest(s, out.getvalue(), {("a", 0)}, f"log dir {s.victim} of broker 0 is full (")


def test_a_destination_made_unreadable_fails_its_move_and_the_others_go_on(setup: Callable[..., Setup],
                                                                           tmp_path: Path) -> None:
    victim = tmp_path / "d2"
    s = setup(victim, prefix=SETPRIV)
    plan = s.plan(tmp_path / "plan")
    try:
        with executing(s, plan, "--max-moves-per-disk", "3", "--max-moves-per-broker", "3") as (out, result):
            wait_for(lambda: s.copying("a", 0), message="a-0 copying into d2")
            victim.chmod(0)
    finally:
        victim.chmod(0o755)
    assert result == [1], out.getvalue()
    check_the_rest(s, out.getvalue(), {("a", 0)},
                   f"log dir {s.victim} of broker 0 is offline (KAFKA_STORAGE_ERROR): the broker dropped the copy")


def test_a_destination_cordoned_mid_run_fails_the_moves_not_yet_started(setup: Callable[..., Setup],
                                                                        tmp_path: Path) -> None:
    s = setup(tmp_path / "d2", a_partitions=2)
    plan = s.plan(tmp_path / "plan")
    # One move at a time per disk: a-1 waits for a-0, which is running into d2 when d2 is cordoned.
    with executing(s, plan, "--max-moves-per-disk", "1", "--max-moves-per-broker", "3") as (out, result):
        wait_for(lambda: s.copying("a", 0), message="a-0 copying into d2")
        cordon.set_cordon(s.client, 0, [s.victim], True)
    assert result == [1], out.getvalue()
    # The running move finishes (as in Kafka); the next one into the dir is refused, said as a cordon.
    check_the_rest(s, out.getvalue(), {("a", 1)}, f"log dir {s.victim} of broker 0 is cordoned: Failed to move "
                                                  f"replica a-1-0 to log dir {s.victim}: INVALID_REPLICA_ASSIGNMENT")
