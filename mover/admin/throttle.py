"""--throttle / --remove-throttle: the broker's dynamic limit on log-dir move bytes, via IncrementalAlterConfigs.

KIP-113 names it `intra.broker.throttled.rate`; Kafka shipped it as
`replica.alter.log.dirs.io.max.bytes.per.second`. mover accepts both; a real Kafka only the second, so a broker that
rejects the first is asked again with the second.
"""

from __future__ import annotations

from typing import TextIO

from mover.admin.client import Client
from mover.admin.common import AdminError, error_name
from mover.config.broker import THROTTLE_KAFKA_KEY, THROTTLE_KEY
from mover.wire.errors import ErrorCode
from mover.wire.messages import DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS

# The per-broker move throttle the tools apply when none is given, 100 MiB/s: a forgotten --throttle must not let
# moves saturate the disks (Kafka's default is unlimited). mover-audit execute applies it; plan estimates with it.
DEFAULT_THROTTLE = 100 << 20

BROKER_RESOURCE = 4  # Kafka's ConfigResource.Type.BROKER
OP_SET = 0
OP_DELETE = 1
# DescribeConfigs' ConfigSource of a value set dynamically for one broker.
DYNAMIC_BROKER_CONFIG = 2
# What a broker answers for a config key it does not know.
_UNKNOWN_KEY_ERRORS = frozenset({ErrorCode.INVALID_CONFIG, ErrorCode.INVALID_REQUEST})


def throttle_command(client: Client, brokers: list[int], rate: int | None, out: TextIO) -> int:
    """--throttle N / --remove-throttle."""
    set_throttle(client, brokers, rate)
    ids = ",".join(map(str, brokers))
    if rate is None:
        print(f"Throttle was removed on brokers {ids}", file=out)
    else:
        print(f"The replica-alter-dir throttle limit was set to {rate} B/s on brokers {ids}", file=out)
    return 0


def set_throttle(client: Client, brokers: list[int], rate: int | None) -> None:
    """rate None: remove the throttle (moves run unthrottled)."""
    for broker in brokers:
        if _alter(client, broker, THROTTLE_KEY, rate) is not None:
            refusal = _alter(client, broker, THROTTLE_KAFKA_KEY, rate)
            if refusal is not None:
                raise AdminError(f"broker {broker} refused both {THROTTLE_KEY} and {THROTTLE_KAFKA_KEY}: {refusal}")


def remove_if_set(client: Client, brokers: list[int]) -> bool:
    """What Kafka's --verify does once everything is done: drop a dynamic move throttle wherever one is set.
    True if one was."""
    changed = False
    for broker in brokers:
        if not client.connection(broker).supports(DESCRIBE_CONFIGS):
            continue
        for key in dynamic_throttle(client, broker):
            refusal = _alter(client, broker, key, None)
            if refusal is not None:
                raise AdminError(f"broker {broker} refused to remove {key}: {refusal}")
            changed = True
    return changed


def dynamic_throttle(client: Client, broker: int) -> dict[str, str]:
    """The move throttle set at run time on this one broker: {key: value}, empty when none is.

    Only DescribeConfigs' DYNAMIC_BROKER_CONFIG counts: a cluster-wide dynamic default, server.properties or the
    built-in default is not a per-broker value, and deleting the per-broker one brings it back by itself
    (docs/kafka-compat.md, dynamic broker config precedence). A moverd reports both names of the throttle; Kafka
    only its own."""
    conn = client.connection(broker)
    if not conn.supports(DESCRIBE_CONFIGS):
        raise AdminError(f"broker {broker} does not answer DescribeConfigs: its throttle cannot be read")
    reply = conn.call(DESCRIBE_CONFIGS, {"resources": [{
        "resource_type": BROKER_RESOURCE, "resource_name": str(broker),
        "configuration_keys": [THROTTLE_KEY, THROTTLE_KAFKA_KEY]}]})
    found: dict[str, str] = {}
    for result in reply["results"]:
        if result["error_code"] != ErrorCode.NONE:
            message = f": {result['error_message']}" if result["error_message"] else ""
            raise AdminError(f"broker {broker} refused DescribeConfigs: {error_name(result['error_code'])}{message}")
        for entry in result["configs"]:
            if entry["config_source"] == DYNAMIC_BROKER_CONFIG and entry["value"] is not None:
                found[entry["name"]] = entry["value"]
    return found


def restore_throttle(client: Client, broker: int, original: dict[str, str]) -> None:
    """Put back what dynamic_throttle read: the same keys and values, or no per-broker throttle at all."""
    if not original:
        set_throttle(client, [broker], None)
        return
    for key, value in original.items():
        refusal = _alter_value(client, broker, key, OP_SET, value)
        if refusal is not None:
            raise AdminError(f"broker {broker} refused to restore {key}={value}: {refusal}")


def _alter(client: Client, broker: int, key: str, rate: int | None) -> str | None:
    """None when the broker took it; the refusal when it may not know the key; other errors raise."""
    if rate is None:
        return _alter_value(client, broker, key, OP_DELETE, None)
    return _alter_value(client, broker, key, OP_SET, str(rate))


def _alter_value(client: Client, broker: int, key: str, op: int, value: str | None) -> str | None:
    config = {"name": key, "config_operation": op, "value": value}
    reply = client.connection(broker).call(INCREMENTAL_ALTER_CONFIGS, {"resources": [
        {"resource_type": BROKER_RESOURCE, "resource_name": str(broker), "configs": [config]}]})
    for r in reply["responses"]:
        code = r["error_code"]
        if code == ErrorCode.NONE:
            continue
        refusal = error_name(code) + (f": {r['error_message']}" if r["error_message"] else "")
        if code in _UNKNOWN_KEY_ERRORS:
            return refusal
        raise AdminError(f"broker {broker} refused to change {key}: {refusal}")
    return None
