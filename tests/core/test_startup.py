"""LogManager start-up at scale: what keeps its cost linear in the partitions (bench/startup.py measures it).

Start-up builds a few dozen GC-tracked objects per partition, all long-lived. The cyclic GC is paused while they
are built (each full collection walked all of them: 20 of them at 100,000 partitions), and they are left in the
oldest generation, not young, so that the first collection after start-up does not walk them all either. A create
of many partitions does the same (in moverd, where start-up's objects are frozen, it ends with one collection).
moverd's freeze is safe because a deleted partition's objects form no cycle: reference counting frees them."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterator

import pytest

from mover.config.broker import BrokerConfig
from mover.log.log_loader import cyclic_gc_paused
from mover.log.log_manager import LogManager
from mover.testing.wait import wait_for


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


@pytest.mark.parametrize("frozen", [False, True], ids=["fresh", "after-moverd-freeze"])
def test_a_create_of_many_partitions_leaves_them_in_the_oldest_generation(
        frozen: bool, make_config: Callable[..., BrokerConfig],
        manager_of: Callable[[BrokerConfig], LogManager]) -> None:
    m = manager_of(make_config())
    if frozen:
        gc.freeze()  # as moverd does after start-up: the create's block then ends with one collection
    try:
        m.create_topic("t", 300)
        assert gc.isenabled()
        replicas = list(m.replicas.values())
        # Without the pause, the partitions made last are still young, and the full collection the create made due
        # falls into whatever request comes next (a DeleteTopics of them).
        assert _in_oldest_generation(replicas + [r.log for r in replicas] + [r.log.active_segment for r in replicas])
    finally:
        if frozen:
            gc.unfreeze()


def test_a_deleted_partition_is_freed_by_reference_counting(
        make_config: Callable[..., BrokerConfig], manager_of: Callable[[BrokerConfig], LogManager]) -> None:
    """moverd freezes the partitions start-up opened; deleted, they must not stay: a cycle among a partition's objects
    would keep every deleted partition frozen for good."""
    m = manager_of(make_config(**{"log.segment.delete.delay.ms": 0}))
    m.create_topic("t", 100)
    refs = []
    for r in m.replicas.values():
        seg = r.log.active_segment
        refs += [weakref.ref(x) for x in (r, r.log, seg, seg.offset_index, seg.time_index)]
    del r, seg
    gc.collect()
    gc.disable()
    try:
        m.delete_topic("t")
        wait_for(lambda: not any(ref() is not None for ref in refs), message="every deleted partition's objects freed")
    finally:
        gc.enable()


def test_a_delete_of_many_partitions_leaves_the_objects_it_made_old(
        make_config: Callable[..., BrokerConfig], manager_of: Callable[[BrokerConfig], LogManager]) -> None:
    m = manager_of(make_config(**{"log.segment.delete.delay.ms": 60_000}))
    m.create_topic("t", 300)
    logs = [r.log for r in m.replicas.values()]
    m.delete_topic("t")
    assert gc.isenabled()
    # The retired dirs' new paths live until the delayed delete. Without the pause, those made last are still
    # young; with it, one collection at the end walked them all once and left them in the oldest generation.
    assert _in_oldest_generation([lg.dir for lg in logs] + [lg.active_segment.log_path for lg in logs])
