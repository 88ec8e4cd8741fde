"""The shared test harness, shipped with the package as kazoo ships `kazoo.testing`: real peers started for tests and
benchmarks (a ZooKeeper server, moverd processes), polling helpers and data writers. Nothing here imports pytest, so
`bench/` and the tests use the same code; pytest fixtures that wrap these live in `tests/conftest.py`."""
