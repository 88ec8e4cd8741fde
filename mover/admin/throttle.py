"""--throttle / --remove-throttle, --execute's throttle and --verify's clean-up: the broker's dynamic limit on
log-dir move bytes, via IncrementalAlterConfigs (docs/kafka-compat.md, "The move throttle").

KIP-113 names the limit `intra.broker.throttled.rate`; Kafka shipped it as
`replica.alter.log.dirs.io.max.bytes.per.second`. moverd takes both (synonyms); Kafka only its own, and a Kafka
3.x broker ACCEPTS any other key without complaint (it stores it, and DescribeConfigs lists it as sensitive with no
value): a refusal cannot tell the two apart. What does is ApiVersions: moverd offers its own DescribeReplicaMoves
(key 32100), which no Kafka has. So:

- moverd gets KIP-113's key (its native name, what its operators read back);
- any other broker gets Kafka's key only, and a KIP-113 key left on it by an older mover-log-dirs (a "stray": it
  never limited anything) is deleted whenever the throttle is set, removed or restored there.
"""

from __future__ import annotations

from typing import Any, TextIO

from mover.admin.client import Client
from mover.admin.common import AdminError, error_name
from mover.config.broker import THROTTLE_KAFKA_KEY, THROTTLE_KEY
from mover.wire.errors import ErrorCode
from mover.wire.messages import DESCRIBE_CONFIGS, DESCRIBE_REPLICA_MOVES, INCREMENTAL_ALTER_CONFIGS

# The per-broker move throttle the tools apply when none is given, 100 MiB/s: a forgotten --throttle must not let
# moves saturate the disks (Kafka's default is unlimited). mover-audit execute applies it; plan estimates with it.
DEFAULT_THROTTLE = 100 << 20

BROKER_RESOURCE = 4  # Kafka's ConfigResource.Type.BROKER
TOPIC_RESOURCE = 2
OP_SET = 0
OP_DELETE = 1
# DescribeConfigs' ConfigSource of a value set dynamically for one topic, for one broker.
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
# Keys a Kafka broker may hold that never limit its moves: KIP-113's name, sent to Kafka by mover-log-dirs before it
# told moverd from Kafka by ApiVersions.
STRAY_KEYS = (THROTTLE_KEY,)
# What Kafka 3.x's kafka-reassign-partitions.sh --verify deletes once everything is done: every broker-level and
# topic-level reassignment throttle, whoever set it.
KAFKA_BROKER_THROTTLES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate",
                          THROTTLE_KAFKA_KEY)
KAFKA_TOPIC_THROTTLES = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


def is_moverd(client: Client, broker: int) -> bool:
    """moverd advertises its DescribeReplicaMoves (key 32100) in ApiVersions; Apache Kafka never does."""
    return client.connection(broker).supports(DESCRIBE_REPLICA_MOVES)


def throttle_key(client: Client, broker: int) -> str:
    """The key that limits log-dir moves on this broker."""
    return THROTTLE_KEY if is_moverd(client, broker) else THROTTLE_KAFKA_KEY


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
    """rate None: remove the throttle (moves run unthrottled). Strays go either way."""
    for broker in brokers:
        key = throttle_key(client, broker)
        refusal = _alter(client, broker, key, OP_SET if rate is not None else OP_DELETE,
                         str(rate) if rate is not None else None)
        if refusal is not None:
            raise AdminError(f"broker {broker} refused to {'set' if rate is not None else 'remove'} {key}: {refusal}")
        if key == THROTTLE_KAFKA_KEY:
            _remove_strays(client, broker)


def remove_if_set(client: Client, brokers: list[int]) -> bool:
    """Drop every dynamic move-throttle key set on these brokers, strays included (a stray's value is hidden: its
    presence is what counts). True if one was."""
    changed = False
    for broker in brokers:
        if not client.connection(broker).supports(DESCRIBE_CONFIGS):
            continue
        for key in _dynamic_entries(client, broker, [THROTTLE_KEY, THROTTLE_KAFKA_KEY]):
            _delete(client, broker, key)
            changed = True
    return changed


def clear_broker_throttles(client: Client, brokers: list[int]) -> None:
    """What kafka-reassign-partitions.sh 3.x --verify does to brokers once every move is done, minus the no-ops: on a
    Kafka broker, delete the reassignment throttles it holds dynamically, strays included; on moverd, which has
    only the move throttle, that one."""
    for broker in brokers:
        keys = [THROTTLE_KEY, THROTTLE_KAFKA_KEY] if is_moverd(client, broker) else [*KAFKA_BROKER_THROTTLES,
                                                                                       *STRAY_KEYS]
        for key in _dynamic_entries(client, broker, keys):
            _delete(client, broker, key)


def clear_topic_throttles(client: Client, topics: list[str]) -> None:
    """--verify's second half on Kafka: delete the topics' replica throttle lists where set. moverd has no
    replication between brokers and so none of these: a cluster of moverd only is left alone."""
    kafka_brokers = [b for b in sorted(client.brokers) if not is_moverd(client, b)]
    if not kafka_brokers or not topics:
        return
    conn = client.connection(kafka_brokers[0])
    reply = conn.call(DESCRIBE_CONFIGS, {"resources": [
        {"resource_type": TOPIC_RESOURCE, "resource_name": t, "configuration_keys": list(KAFKA_TOPIC_THROTTLES)}
        for t in topics]})
    for result in reply["results"]:
        held = [e["name"] for e in result["configs"] if e["config_source"] == DYNAMIC_TOPIC_CONFIG]
        if result["error_code"] == ErrorCode.NONE and held:
            _alter_resource(conn, TOPIC_RESOURCE, result["resource_name"],
                            [{"name": k, "config_operation": OP_DELETE, "value": None} for k in held])


def dynamic_throttle(client: Client, broker: int) -> dict[str, str]:
    """The move throttle set at run time on this one broker: {key: value}, empty when none is.

    Only DescribeConfigs' DYNAMIC_BROKER_CONFIG counts: a cluster-wide dynamic default, server.properties or the
    built-in default is not a per-broker value, and deleting the per-broker one brings it back by itself
    (docs/kafka-compat.md, dynamic broker config precedence). A moverd reports both names of the throttle; on Kafka
    only Kafka's key limits anything, so a stray is never part of what is kept and restored."""
    conn = client.connection(broker)
    if not conn.supports(DESCRIBE_CONFIGS):
        raise AdminError(f"broker {broker} does not answer DescribeConfigs: its throttle cannot be read")
    meaningful = (THROTTLE_KEY, THROTTLE_KAFKA_KEY) if is_moverd(client, broker) else (THROTTLE_KAFKA_KEY,)
    entries = _dynamic_entries(client, broker, list(meaningful))
    return {k: v for k, v in entries.items() if v is not None}


def restore_throttle(client: Client, broker: int, original: dict[str, str]) -> None:
    """Put back what dynamic_throttle read: the same value, or no per-broker throttle at all."""
    if not is_moverd(client, broker):
        value = original.get(THROTTLE_KAFKA_KEY)
        set_throttle(client, [broker], None if value is None else int(value))
        return
    if not original:
        set_throttle(client, [broker], None)
        return
    for key, value in original.items():
        refusal = _alter(client, broker, key, OP_SET, value)
        if refusal is not None:
            raise AdminError(f"broker {broker} refused to restore {key}={value}: {refusal}")


def _remove_strays(client: Client, broker: int) -> None:
    if not client.connection(broker).supports(DESCRIBE_CONFIGS):
        return
    for key in _dynamic_entries(client, broker, list(STRAY_KEYS)):
        _delete(client, broker, key)


def _dynamic_entries(client: Client, broker: int, keys: list[str]) -> dict[str, str | None]:
    """{key: value} of `keys` set dynamically for this broker; a value is None where the broker hides it (Kafka
    calls every key it does not know sensitive)."""
    reply = client.connection(broker).call(DESCRIBE_CONFIGS, {"resources": [{
        "resource_type": BROKER_RESOURCE, "resource_name": str(broker), "configuration_keys": keys}]})
    found: dict[str, str | None] = {}
    for result in reply["results"]:
        if result["error_code"] != ErrorCode.NONE:
            message = f": {result['error_message']}" if result["error_message"] else ""
            raise AdminError(f"broker {broker} refused DescribeConfigs: {error_name(result['error_code'])}{message}")
        for entry in result["configs"]:
            if entry["config_source"] == DYNAMIC_BROKER_CONFIG and entry["name"] in keys:
                found[entry["name"]] = entry["value"]
    return found


def _delete(client: Client, broker: int, key: str) -> None:
    refusal = _alter(client, broker, key, OP_DELETE, None)
    if refusal is not None:
        raise AdminError(f"broker {broker} refused to remove {key}: {refusal}")


def _alter(client: Client, broker: int, key: str, op: int, value: str | None) -> str | None:
    """None when the broker took it; the refusal (INVALID_CONFIG, INVALID_REQUEST) otherwise; other errors raise."""
    return _alter_resource(client.connection(broker), BROKER_RESOURCE, str(broker),
                           [{"name": key, "config_operation": op, "value": value}])


def _alter_resource(conn: Any, resource_type: int, name: str, configs: list[dict[str, Any]]) -> str | None:
    reply = conn.call(INCREMENTAL_ALTER_CONFIGS, {"resources": [
        {"resource_type": resource_type, "resource_name": name, "configs": configs}]})
    for r in reply["responses"]:
        code = r["error_code"]
        if code == ErrorCode.NONE:
            continue
        refusal = error_name(code) + (f": {r['error_message']}" if r["error_message"] else "")
        if code in (ErrorCode.INVALID_CONFIG, ErrorCode.INVALID_REQUEST):
            return refusal
        raise AdminError(f"{'broker' if resource_type == BROKER_RESOURCE else 'topic'} {name} refused to change "
                         f"{', '.join(c['name'] for c in configs)}: {refusal}")
    return None
