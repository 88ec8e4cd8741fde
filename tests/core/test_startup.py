"""LogManager start-up at scale: what keeps its cost linear in the partitions (bench/startup.py measures it).

Start-up builds a few dozen GC-tracked objects per partition, all long-lived. The cyclic GC is paused while they
are built (each full collection walked all of them: 20 of them at 100,000 partitions), and they are left in the
oldest generation, not young, so that the first collection after start-up does not walk them all either."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator

import pytest

from mover.config.broker import BrokerConfig
from mover.log.log_loader import cyclic_gc_paused
from mover.log.log_manager import LogManager


class _Cycle:
    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generation of every cyclic collection that starts while the test runs."""
    seen: list[int] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(callback)
    yield seen
    gc.callbacks.remove(callback)


def _in_oldest_generation(objects: list[object]) -> bool:
    old = {id(o) for o in gc.get_objects(generation=2)}
    return all(id(o) in old for o in objects)


def test_start_up_leaves_every_partition_in_the_oldest_generation(make_config: Callable[..., BrokerConfig]) -> None:
    config = make_config()
    first = LogManager(config)
    first.startup()
    first.create_topic("t", 300)
    first.shutdown()
    assert gc.isenabled()
    m = LogManager(config)
    m.startup()
    try:
        assert gc.isenabled()
        assert len(m.replicas) == 300
        # Without the pause, the partitions opened last would still be young (300 partitions make ten or so
        # collections of the youngest generation, the last of them long before start-up returns).
        built = [r for r in m.replicas.values()] + [r.log for r in m.replicas.values()]
        assert _in_oldest_generation(built)
    finally:
        m.shutdown()


def test_a_paused_block_runs_no_collection_and_restores_the_gc(collections: list[int]) -> None:
    assert gc.isenabled()
    with cyclic_gc_paused():
        assert not gc.isenabled()
        made = [_Cycle() for _ in range(20_000)]  # far past the youngest generation's threshold (700)
        during = list(collections)
    assert gc.isenabled()
    assert during == []
    assert _in_oldest_generation(made)


def test_a_paused_block_leaves_a_disabled_gc_and_frozen_objects_alone() -> None:
    gc.disable()
    try:
        with cyclic_gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
    gc.freeze()  # as moverd does after start-up; an unfreeze inside the block would thaw these
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        with cyclic_gc_paused():
            made = [_Cycle() for _ in range(1000)]
        # Not ==: frozen objects that other threads (pytest-xdist's) free meanwhile leave the permanent generation;
        # an unfreeze inside the block would have emptied it.
        assert gc.get_freeze_count() > frozen // 2
        assert gc.isenabled()
        assert _in_oldest_generation(made)  # collected once instead: the survivors are old
    finally:
        gc.unfreeze()
