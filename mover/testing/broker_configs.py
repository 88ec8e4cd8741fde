"""What a broker answers when asked about another broker's configs, the same question put to the fakes
(tests/cli/test_kafka_versions.py) and to a real Apache Kafka (tests/kafka/test_log_dirs_cli.py)."""

from __future__ import annotations

from mover.admin.client import Client
from mover.config.broker import THROTTLE_KAFKA_KEY
from mover.wire.messages import DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS


def another_brokers_id_refusals(client: Client, asked: int, other: int) -> list[tuple[int, str | None]]:
    """Broker `asked` sent an IncrementalAlterConfigs (the move throttle, Kafka's key) and a DescribeConfigs of broker
    `other`'s id: the (error code, error message) of each answer, in that order; the describe lists no config."""
    alter = client.connection(asked).call(INCREMENTAL_ALTER_CONFIGS, {"resources": [{
        "resource_type": 4, "resource_name": str(other),
        "configs": [{"name": THROTTLE_KAFKA_KEY, "config_operation": 0, "value": "500000"}]}]})["responses"][0]
    describe = client.connection(asked).call(DESCRIBE_CONFIGS, {"resources": [{
        "resource_type": 4, "resource_name": str(other), "configuration_keys": None}]})["results"][0]
    assert describe["configs"] == []
    return [(r["error_code"], r["error_message"]) for r in (alter, describe)]
