"""LogManager.storage_guard, the one place an OSError from a log dir becomes a failed dir: a process limit
(EMFILE, ENFILE, ENOMEM) fails the request and leaves the dir online; any other error takes the dir offline."""

from __future__ import annotations

import errno
import os
import resource
from collections.abc import Iterator

import pytest

from mover.config.broker import BrokerConfig
from mover.errors import KafkaStorageError, ResourceLimitError
from mover.log.log_manager import LogManager
from mover.storage.dir_health import is_resource_limit, probe_log_dir


@pytest.fixture
def manager(make_config) -> Iterator[LogManager]:  # type: ignore[no-untyped-def]
    config: BrokerConfig = make_config()
    m = LogManager(config)
    m.startup()
    yield m
    m.shutdown()


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE, errno.ENOMEM])
def test_a_process_limit_fails_the_work_and_keeps_the_dir(manager: LogManager, code: int,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    d1 = manager.config.log_dirs[0]
    assert is_resource_limit(OSError(code, os.strerror(code)))
    with pytest.raises(ResourceLimitError, match=errno.errorcode[code]):
        with manager.storage_guard(d1, "test work"):
            raise OSError(code, os.strerror(code))
    assert manager.dirs[d1].online
    assert errno.errorcode[code] in caplog.text, "the log line names the limit"


def test_any_other_error_takes_the_dir_offline(manager: LogManager) -> None:
    d1, d2 = manager.config.log_dirs
    with pytest.raises(KafkaStorageError) as e:
        with manager.storage_guard(d1, "test work"):
            raise OSError(errno.EIO, "Input/output error")
    assert not isinstance(e.value, ResourceLimitError)
    assert not manager.dirs[d1].online and manager.dirs[d2].online
    with manager.storage_guard(d2, "background work", reraise=False) as failed:
        raise OSError(errno.EROFS, "Read-only file system")
    assert [err.errno for err in failed] == [errno.EROFS]
    assert not manager.dirs[d2].online


def test_running_out_of_descriptors_for_real_leaves_every_dir_online(manager: LogManager) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 8, hard))
    try:
        with pytest.raises(ResourceLimitError, match="EMFILE"):
            manager.create_topic("many", 64)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert all(state.online for state in manager.dirs.values())
    assert all(probe_log_dir(path) is None for path in manager.config.log_dirs)
    manager.create_topic("after", 2)
    assert all(state.online for state in manager.dirs.values())
