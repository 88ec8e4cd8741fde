"""The real Kafka 3.7 the tests of mover-reassign run on (KRaft: a controller and 5 brokers, one log dir each), and
their per-test fixtures. The cluster is package-scoped: one for every file here, started at the first test that asks
for it and stopped after the last test of this package (as it was for their one module, test_reassign.py, before it
was split). tests/conftest.py keeps the files of this package in one xdist group, one after the other on one worker,
so that a run starts it once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mover.testing.kafka_cluster import KafkaCluster

BROKERS = 5
HEAP = "-Xmx200m -Xms64m"


@pytest.fixture(scope="package")
def cluster(kafka_home_dir: Path, kafka_jvm_opts: str, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[KafkaCluster]:
    with KafkaCluster(tmp_path_factory.mktemp("kafka"), kafka_home_dir, brokers=BROKERS, log_dirs=1, controller=True,
                      heap=HEAP, jvm_opts=kafka_jvm_opts, props={"auto.leader.rebalance.enable": "false"}) as kafka:
        yield kafka


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def topic(request: pytest.FixtureRequest, cluster: KafkaCluster) -> Iterator[str]:
    name = request.node.name.removeprefix("test_")[:40]
    yield name
