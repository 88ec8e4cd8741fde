"""The one set of run limits (mover/admin/limits.py): a limits file sets the keys its run has, mover-reassign's
(KIP-435 and the throttle) or mover-audit execute's (those and the log-dir moves' limits), and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from mover.admin.common import AdminError
from mover.admin.limits import DiskLimits, RunLimits, read_limits
from mover.admin.reassign.steps import Limits


def test_disk_keys_belong_to_a_run_with_log_dir_moves(tmp_path: Path) -> None:
    path = tmp_path / "limits.json"
    path.write_text('{"max_moves": 4, "max-moves-per-disk": 2, "max_partition_movements": 7, "throttle": 9}')
    audit = RunLimits(Limits(), 1000, DiskLimits())
    assert read_limits(path, audit) == RunLimits(Limits(max_partition_movements=7), 9,
                                                 DiskLimits(per_disk=2, per_cluster=4))
    with pytest.raises(AdminError, match="unknown key 'max_moves'"):
        read_limits(path, RunLimits(Limits(), 1000))  # mover-reassign has no log-dir moves
    path.write_text('{"max_moves_per_broker": 0}')
    with pytest.raises(AdminError, match="must be a positive integer"):
        read_limits(path, audit)


def test_describe_says_each_runs_limits() -> None:
    assert RunLimits(Limits(5, 1, 2), None).describe() == \
        "max 5 partition movements, 1 replica movements per partition, 2 leader movements; unthrottled"
    audit = RunLimits(Limits(5, 1, 2), 2048, DiskLimits(1, 2, 10))
    assert audit.describe(between_brokers=False) == \
        "at most 1 move(s) per disk, 2 per broker, 10 per cluster; throttle 2048 B/s (2.0 KiB/s)"
    assert audit.describe().endswith("; between brokers max 5 partition movements, 1 replica movements per "
                                     "partition, 2 leader movements")


@pytest.mark.parametrize(("text", "accepted"), [
    ("throttle = 9223372036854775807", True),  # Long.MAX_VALUE: Kafka's own "unlimited"
    ("throttle = -1", True),
    ('{"throttle": 9223372036854775808}', False),  # 2^63: every broker refuses it (INVALID_CONFIG)
    ('{"throttle": 1180591620717411303424}', False),  # 2^70
    ("throttle = -5", False),
    ("throttle = 0", False),
    ("throttle = 1.5e30", False),
    ('{"throttle": true}', False),
])
def test_a_throttle_kafka_refuses_is_refused_naming_the_file_and_key(tmp_path: Path, text: str,
                                                                     accepted: bool) -> None:
    path = tmp_path / "limits"
    path.write_text(text)
    base = RunLimits(Limits(), 1000)
    if accepted:
        read_limits(path, base)
        return
    with pytest.raises(AdminError) as e:
        read_limits(path, base)
    assert str(e.value).startswith(f"limits file {path}: throttle must be bytes per second (1 to "
                                   f"9223372036854775807, a Java long) or -1, got ")
