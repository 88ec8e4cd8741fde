"""Fixtures of the mover-audit tests that more than one file uses."""

from __future__ import annotations

from pathlib import Path

import pytest

from mover.audit import cli
from mover.testing.audit_cli import SPARK


# Session-scoped: the files split from test_pipeline.py (tests/audit/test_pipeline_*.py) share the one fleet their
# module synthesized once; tests/conftest.py keeps those files in one xdist group, so that one worker synthesizes it
# (and no other worker starts a Spark session for them). The tests copy a snapshot before they change it.
@pytest.fixture(scope="session")
def fleet(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: ANN001 (the SparkSession fixture)
    """Two snapshots ten minutes apart of 2 clusters x 8 brokers x 3 disks, with moves running (half of them stuck),
    an offline dir and a broker of unknown capacity."""
    root = tmp_path_factory.mktemp("fleet") / "snapshots"
    code = cli.main(["synth", "--out", str(root), "--clusters", "2", "--brokers", "8", "--disks", "3",
                     "--replicas-per-disk", "40", "--moving", "0.02", "--offline", "0.05", "--unknown-capacity",
                     "0.15", "--history", "--seed", "3", *SPARK])
    assert code == 0
    return root
