"""Cordoning log dirs (KIP-1066): `cordoned.log.dirs` of one broker read with DescribeConfigs (its effective value,
server.properties included), the dirs added or taken out, and the result SET with IncrementalAlterConfigs on the
broker's own resource, after checking that the broker knows the key.

Not APPEND / SUBTRACT: Kafka 4.3 applies those to the broker's dynamic value only (an empty default when there is
none), and a dynamic value hides server.properties' whole list, so appending one dir to a broker whose
server.properties cordons another would lift that other cordon without a word.

Whether a broker knows it is read from ApiVersions (DescribeLogDirs v5 came with it in Kafka 4.3), never from
whether it refuses the key: Kafka 3.7 in KRaft mode stores an unknown broker key without a word
(docs/kafka-compat.md), so a cordon "set" on it would silently do nothing.
"""

from __future__ import annotations

import time

from mover.admin.client import Client
from mover.admin.common import AdminError, error_name
from mover.admin.log_dir_state import CORDON_VERSION, DirInfo, describe_broker
from mover.config.broker import CORDON_ALL, CORDONED_KEY
from mover.wire.errors import ErrorCode
from mover.wire.messages import DESCRIBE_CONFIGS, DESCRIBE_LOG_DIRS, INCREMENTAL_ALTER_CONFIGS

BROKER_RESOURCE = 4  # Kafka's ConfigResource.Type.BROKER
# A Kafka 4.3 broker applies the change when the controller's record reaches it, not before it answers: how long to
# wait for DescribeLogDirs to show it.
SETTLE_S = 10.0
OP_SET = 0


def supports_cordons(client: Client, broker: int) -> bool:
    conn = client.connection(broker)
    return (conn.supports(DESCRIBE_LOG_DIRS) and conn.version_for(DESCRIBE_LOG_DIRS) >= CORDON_VERSION
            and conn.supports(INCREMENTAL_ALTER_CONFIGS) and conn.supports(DESCRIBE_CONFIGS))


def require_cordons(client: Client, broker: int) -> None:
    if not supports_cordons(client, broker):
        offered = client.connection(broker).api_versions.get(DESCRIBE_LOG_DIRS.key)
        top = f"v{offered.hi}" if offered is not None else "none"
        raise AdminError(f"broker {broker} does not support cordoned log dirs (KIP-1066 needs Kafka 4.3+ or moverd; "
                         f"its DescribeLogDirs stops at {top})")


def current_cordon(client: Client, broker: int) -> list[str]:
    """The broker's cordoned.log.dirs as it applies now (DescribeConfigs' value: dynamic over static)."""
    reply = client.connection(broker).call(DESCRIBE_CONFIGS, {"resources": [{
        "resource_type": BROKER_RESOURCE, "resource_name": str(broker), "configuration_keys": [CORDONED_KEY]}]})
    for result in reply["results"]:
        if result["error_code"] != ErrorCode.NONE:
            message = f": {result['error_message']}" if result["error_message"] else ""
            raise AdminError(f"broker {broker} refused DescribeConfigs: {error_name(result['error_code'])}{message}")
        for entry in result["configs"]:
            if entry["name"] == CORDONED_KEY and entry["value"]:
                return [e.strip() for e in entry["value"].split(",") if e.strip()]
    return []


def set_cordon(client: Client, broker: int, dirs: list[str], cordon: bool) -> list[DirInfo]:
    """Cordon or uncordon `dirs` on `broker`, keeping the rest of its cordon as it is; returns its log dirs as
    described afterwards. Raises AdminError when the broker cannot, or a dir is not one of its log dirs."""
    require_cordons(client, broker)
    known = [d.path for d in describe_broker(client, broker, {})]
    unknown = [d for d in dirs if d != CORDON_ALL and d not in known]
    if unknown:
        raise AdminError(f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not a log dir of broker "
                         f"{broker} ({', '.join(known)})")
    now = current_cordon(client, broker)
    if CORDON_ALL in now:
        now = list(known)
    if cordon:
        new = [CORDON_ALL] if CORDON_ALL in dirs else now + [d for d in dirs if d not in now]
    else:
        new = [] if CORDON_ALL in dirs else [d for d in now if d not in dirs]
    config = {"name": CORDONED_KEY, "config_operation": OP_SET, "value": ",".join(new)}
    reply = client.connection(broker).call(INCREMENTAL_ALTER_CONFIGS, {"resources": [
        {"resource_type": BROKER_RESOURCE, "resource_name": str(broker), "configs": [config]}]})
    for r in reply["responses"]:
        if r["error_code"] != ErrorCode.NONE:
            message = f": {r['error_message']}" if r["error_message"] else ""
            raise AdminError(f"broker {broker} refused to {'cordon' if cordon else 'uncordon'} "
                             f"{','.join(dirs)}: {error_name(r['error_code'])}{message}")
    wanted = set(known) if CORDON_ALL in dirs else set(dirs)
    deadline = time.monotonic() + SETTLE_S
    while True:
        after = describe_broker(client, broker, {})
        if all(bool(d.is_cordoned) == cordon for d in after if d.path in wanted) or time.monotonic() > deadline:
            return after
        time.sleep(0.2)


def cordoned(dirs: list[DirInfo]) -> list[str]:
    return [d.path for d in dirs if d.is_cordoned]
