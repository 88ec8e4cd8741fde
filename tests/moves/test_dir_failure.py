"""A log dir failing under a running daemon that has no DAC capabilities (so `chmod 000` really bites root)."""

from __future__ import annotations

import os
from pathlib import Path

from mover.testing.driver import Driver, write_config
from mover.testing.moverd import SETPRIV
from mover.testing.records import read_records
from mover.testing.wait import wait_for


def _start(conf: Path) -> Driver:
    return Driver(conf, prefix=SETPRIV)


def dir_codes(drv: Driver) -> dict[str, int]:
    return {d["path"]: d["error_code"] for d in drv.call(op="describe")["dirs"]}


def test_chmod_000_takes_one_dir_offline_and_the_other_keeps_working(tmp_path: Path) -> None:
    conf, (d1, d2) = write_config(tmp_path, **{"log.dir.health.check.interval.ms": 50})
    drv = _start(conf)
    drv.call(op="create", topic="a", partitions=1, dir=str(d1))
    drv.call(op="create", topic="b", partitions=1, dir=str(d2))
    drv.call(op="create", topic="c", partitions=1, dir=str(d1))
    drv.call(op="append", tp="a-0", values=["a1"])
    drv.call(op="append", tp="b-0", values=["b1", "b2"])
    os.chmod(d2, 0)
    try:
        wait_for(lambda: dir_codes(drv)[str(d2)] == 56, 30, "the failed dir to be noticed")
        assert dir_codes(drv)[str(d1)] == 0
        drv.call(op="append", tp="a-0", values=["a2"])
        # The failed dir's partition reports the storage error; the daemon is still up.
        reply = drv.try_call(op="append", tp="b-0", values=["lost?"])
        assert not reply["ok"] and reply["code"] == 56
        # A move into the failed dir fails with a storage error.
        assert drv.call(op="move", tp="c-0", dir=str(d2))["error_code"] == 56
        drv.call(op="append", tp="c-0", values=["c1"])
        drv.stop()

        # A dir unreadable at start-up starts offline, and the daemon still starts.
        drv = _start(conf)
        assert dir_codes(drv) == {str(d1): 0, str(d2): 56}
        drv.call(op="append", tp="a-0", values=["a3"])
        drv.stop()
    finally:
        os.chmod(d2, 0o755)
    drv = _start(conf)
    assert dir_codes(drv) == {str(d1): 0, str(d2): 0}
    drv.stop()
    assert [v for _, v in read_records(d1 / "a-0")] == [b"a1", b"a2", b"a3"]
    assert [v for _, v in read_records(d2 / "b-0")] == [b"b1", b"b2"]
    assert not any(n.endswith(".move") for n in os.listdir(d2))
