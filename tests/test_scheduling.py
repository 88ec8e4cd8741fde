"""The run's own scheduling: under pytest-xdist's `--dist loadgroup` (scripts/test.sh) every test carries its group,
a file or "spark" (tests/conftest.py), so one worker runs a whole file and its module-scoped clusters start once.
pytest 9.2 with pytest-xdist 3.8 dropped the group without a word (docs/dependencies.md): this test says so."""

from __future__ import annotations

import pytest


def test_a_test_runs_in_its_files_group(request: pytest.FixtureRequest) -> None:
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not run by pytest-xdist's loadgroup (scripts/test.sh runs it so)")
    assert request.node.nodeid.endswith("@tests/test_scheduling.py"), request.node.nodeid
