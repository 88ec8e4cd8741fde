"""LogManager.storage_guard, the one place an OSError from a log dir becomes a failed dir: a process limit
(EMFILE, ENFILE, ENOMEM) fails the request and leaves the dir online; any other error takes the dir offline."""

from __future__ import annotations

import errno
import json
import os
import resource
from collections.abc import Iterator

import pytest

from mover.config.broker import THROTTLE_KEY, BrokerConfig
from mover.config.dynamic import FILE_NAME as DYNAMIC_FILE
from mover.config.dynamic import AlterOp, Scope
from mover.errors import KafkaStorageError, ResourceLimitError
from mover.log.log_manager import LogManager
from mover.security.acls import PatternType, Resource, ResourceType
from mover.security.authorizer import FILE_NAME as ACL_FILE
from mover.security.authorizer import FileAclStore
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


def test_broker_wide_files_go_through_the_guard(manager: LogManager) -> None:
    """The dynamic config, request ids, ACLs, SCRAM users and the ZooKeeper session id are kept in every online dir
    through `LogManager.broker_files`: a write that fails on one dir takes that dir offline (it skipped and logged it
    before) and the other keeps the copy; a dir gone offline is never written again."""
    d1, d2 = manager.config.log_dirs
    # A real kernel error on d2: the copy's temporary name is taken by a directory (EISDIR at open).
    (d2 / f"{DYNAMIC_FILE}.tmp").mkdir()
    manager.dynamic_config.alter(Scope.BROKER, [(THROTTLE_KEY, AlterOp.SET, "1000000")])
    assert manager.dirs[d1].online and not manager.dirs[d2].online
    assert json.loads((d1 / DYNAMIC_FILE).read_text())["broker"] == {THROTTLE_KEY: "1000000"}
    # The ACL store of a broker gets the same files: the offline dir is not written, the online one is.
    acls = FileAclStore(manager.broker_files)
    acls.update(lambda a: a.setdefault(Resource(ResourceType.TOPIC, "t", PatternType.LITERAL), set()))
    assert (d1 / ACL_FILE).exists() and not (d2 / ACL_FILE).exists()


def test_an_unreadable_broker_wide_file_takes_its_dir_offline(make_config) -> None:  # type: ignore[no-untyped-def]
    """At start-up a copy that cannot be read (EISDIR from the kernel) is that dir's failure; the other dir's copy
    is loaded."""
    config: BrokerConfig = make_config()
    d1, d2 = config.log_dirs
    for d in (d1, d2):
        d.mkdir(parents=True, exist_ok=True)
    (d1 / DYNAMIC_FILE).write_text(json.dumps({"version": 1, "epoch": 3, "broker": {THROTTLE_KEY: "2000000"},
                                                "cluster_default": {}}))
    (d2 / DYNAMIC_FILE).mkdir()
    m = LogManager(config)
    m.startup()
    try:
        assert m.dirs[d1].online and not m.dirs[d2].online
        assert m.config.throttle_rate == 2000000
    finally:
        m.shutdown()
