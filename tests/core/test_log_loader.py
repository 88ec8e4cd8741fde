"""LogLoader (Kafka's loadLogs/LogLoader) on real dirs: it reports what it found, failures included, and calls
nothing above it; the LogManager then takes a dir that failed while loading offline with every partition in it."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

from mover.config.broker import BrokerConfig
from mover.log.log_loader import LogLoader
from mover.log.log_manager import LogManager
from mover.storage.log import LogConfig
from mover.storage.names import TopicPartition
from mover.testing.records import write_partition

GOOD = [TopicPartition("good", p) for p in range(8)]
BROKEN = TopicPartition("broken", 0)


def _dirs_with_a_broken_partition(tmp_path: Path) -> tuple[Path, Path]:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    for i, tp in enumerate(GOOD):
        write_partition(d1 if i % 2 == 0 else d2, tp, 2)
    # A partition whose segment cannot be opened: its `.log` is a directory (EISDIR, an I/O error of d1, not a
    # process limit). The good partitions of d1 are listed before and after it.
    (d1 / str(BROKEN) / "00000000000000000000.log").mkdir(parents=True)
    return d1, d2


def test_the_loader_reports_a_dir_that_failed_and_builds_the_rest(
        tmp_path: Path, make_config: Callable[..., BrokerConfig]) -> None:
    d1, d2 = _dirs_with_a_broken_partition(tmp_path)
    config = make_config([d1, d2])
    loader = LogLoader(config, LogConfig())
    dirs = loader.open_dirs("test-cluster")
    try:
        assert all(state.online for state in dirs.values())
        loaded = loader.load(dirs)
        assert [(path, getattr(err, "errno", None)) for path, err in loaded.failed] == [(d1, errno.EISDIR)]
        assert all(state.online for state in dirs.values()), "the loader changes nothing: it reports"
        assert set(loaded.replicas) == set(GOOD), "an unopenable partition (not a process limit) is not built"
        assert loaded.topics == {"good": len(GOOD)}
        assert loaded.resume == [] and loaded.deletes == []
    finally:
        for replica in loaded.replicas.values():
            if replica.log is not None:
                replica.log.close()
        for state in dirs.values():
            if state.log_dir is not None:
                state.log_dir.close()


def test_every_partition_of_a_dir_that_failed_while_loading_is_offline(
        tmp_path: Path, make_config: Callable[..., BrokerConfig]) -> None:
    d1, d2 = _dirs_with_a_broken_partition(tmp_path)
    m = LogManager(make_config([d1, d2]))
    m.startup()
    try:
        assert not m.dirs[d1].online and m.dirs[d2].online
        in_d1 = [r for r in m.replicas.values() if r.log_dir == d1]
        in_d2 = [r for r in m.replicas.values() if r.log_dir == d2]
        assert len(in_d1) == len(in_d2) == len(GOOD) // 2
        # Opened before or after the failure, a partition of the failed dir never serves (nothing is written to
        # an offline dir again).
        assert all(r.offline for r in in_d1)
        assert not any(r.offline for r in in_d2)
    finally:
        m.shutdown()
