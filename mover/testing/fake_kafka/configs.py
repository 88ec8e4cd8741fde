"""Kafka's config APIs on a fake broker, where the releases differ most: which broker keys a release takes, what
DescribeConfigs lists for a key unset or unknown (3.x keeps an unknown key and lists it sensitive with a null value,
and leaves its own unset move throttle out; the 2.x fakes refuse an unknown key), 4.3's per-broker
`cordoned.log.dirs`, and the topic configs a reassignment's throttle sets. The tools pick their keys and read
throttles back from these answers, so the answers keep each release's quirks (docs/kafka-compat.md)."""

from __future__ import annotations

import threading
from typing import Any

from mover.admin.reassign.replication_throttle import FOLLOWER_RATE, LEADER_RATE
from mover.config.broker import CORDON_ALL, CORDONED_KEY, THROTTLE_KAFKA_KEY
from mover.testing.fake_kafka.broker_state import BrokerState
from mover.wire.errors import ErrorCode

# Kafka's ConfigResource.Type.BROKER, IncrementalAlterConfigs' SET / DELETE, DescribeConfigs' config sources.
_BROKER_RESOURCE = 4
_TOPIC_RESOURCE = 2
_DYNAMIC_TOPIC_CONFIG = 1
# Topic keys and their defaults as DescribeConfigs lists them when a topic does not set them.
_TOPIC_DEFAULTS = {"min.insync.replicas": "1", "leader.replication.throttled.replicas": "",
                   "follower.replication.throttled.replicas": ""}
# Broker keys every version knows besides its move throttle: KIP-73's replication throttle (unset: Long.MAX_VALUE).
_REPLICATION_RATES = (LEADER_RATE, FOLLOWER_RATE)
_OP_SET = 0
_OP_DELETE = 1
_OP_APPEND = 2
_OP_SUBTRACT = 3
_DYNAMIC_BROKER_CONFIG = 2
_STATIC_BROKER_CONFIG = 4
_DEFAULT_CONFIG = 5
# Kafka's default move throttle: Long.MAX_VALUE, i.e. unlimited.
_THROTTLE_DEFAULT = str((1 << 63) - 1)


class BrokerConfigs(BrokerState):
    """IncrementalAlterConfigs and DescribeConfigs of FakeBroker; a topic's configs are the cluster's (TopicConfigs)."""

    def incremental_alter_configs(self, version: int, request: dict[str, Any]) -> dict[str, Any]:
        quirks = self.cluster.version.config_quirks_3x
        responses = []
        with self.cluster.lock:
            for r in request["resources"]:
                if r["resource_type"] == _TOPIC_RESOURCE:
                    code, message = self.cluster.alter_topic_config(r["resource_name"], r["configs"])
                    responses.append({"error_code": int(code), "error_message": message,
                                      "resource_type": r["resource_type"], "resource_name": r["resource_name"]})
                    continue
                code, message = self._other_broker(r)
                for c in r["configs"] if code == ErrorCode.NONE else []:
                    if c["name"] == CORDONED_KEY and self.cluster.version.has_cordons:
                        code, message = self._alter_cordon(r["resource_name"], c["config_operation"], c["value"])
                        if code:
                            break
                        continue
                    # The move throttle is the only other broker key this fake knows. 2.x's fakes refuse any other;
                    # a 3.x broker takes and keeps it, where it limits nothing.
                    if c["name"] not in (THROTTLE_KAFKA_KEY, *_REPLICATION_RATES) and not quirks:
                        code, message = ErrorCode.INVALID_CONFIG, f"Unknown broker config {c['name']}"
                        break
                    if c["config_operation"] == _OP_SET:
                        self.configs[c["name"]] = c["value"]
                        self.forgotten.discard(c["name"])
                    elif c["config_operation"] == _OP_DELETE:
                        if self.configs.pop(c["name"], None) is not None and c["name"] != THROTTLE_KAFKA_KEY:
                            self.forgotten.add(c["name"])
                    self.config_history.append((c["name"], self.configs.get(c["name"])))
                responses.append({"error_code": int(code), "error_message": message,
                                  "resource_type": r["resource_type"], "resource_name": r["resource_name"]})
        return {"responses": responses}

    def _alter_cordon(self, resource: str, op: int, value: str | None) -> tuple[ErrorCode, str | None]:
        """cordoned.log.dirs as Kafka 4.3 takes it: per broker only; entries must be log dirs or `*`; APPEND and
        SUBTRACT start from the broker's own dynamic value (else the empty default)."""
        if resource == "":
            return (ErrorCode.INVALID_REQUEST, "Cannot update these configs at default cluster level, broker id "
                    f"must be specified: {CORDONED_KEY}")
        given = [e.strip() for e in (value or "").split(",") if e.strip()]
        bad = [e for e in given if e != CORDON_ALL and e not in self.dirs]
        if bad:
            return ErrorCode.INVALID_CONFIG, f"Invalid value for {CORDONED_KEY}: {', '.join(bad)} not in log.dirs"
        current = [e for e in self.configs.get(CORDONED_KEY, "").split(",") if e]
        if op == _OP_SET:
            new: list[str] | None = given
        elif op == _OP_DELETE:
            new = None
        elif op == _OP_APPEND:
            new = current + [e for e in given if e not in current]
        else:
            new = [e for e in current if e not in given]
        if new is None:
            self.configs.pop(CORDONED_KEY, None)
        else:
            self.configs[CORDONED_KEY] = ",".join(new)
        self.config_history.append((CORDONED_KEY, self.configs.get(CORDONED_KEY)))
        return ErrorCode.NONE, None

    def _other_broker(self, resource: dict[str, Any]) -> tuple[ErrorCode, str | None]:
        """A broker answers for its own configs only, on every version (docs/kafka-compat.md): another's id is
        INVALID_REQUEST in both DescribeConfigs and IncrementalAlterConfigs."""
        name = resource["resource_name"]
        if resource["resource_type"] != _BROKER_RESOURCE or name in ("", str(self.node_id)):
            return ErrorCode.NONE, None
        return ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {self.node_id}, but received {name}"

    def describe_configs(self, version: int, request: dict[str, Any]) -> dict[str, Any]:
        """As Kafka answers: every key it knows (here its move throttle, and from 4.3 cordoned.log.dirs) with its
        effective value and where that comes from (per-broker dynamic, server.properties, built-in default). 2.x
        leaves keys it does not know out; 3.x lists an unknown key set at run time as sensitive with a null value,
        and leaves its own move throttle out while nothing sets it (docs/kafka-compat.md)."""
        quirks = self.cluster.version.config_quirks_3x
        results = []
        with self.cluster.lock:
            own = [THROTTLE_KAFKA_KEY, *_REPLICATION_RATES,
                   *([CORDONED_KEY] if self.cluster.version.has_cordons else [])]
            for r in request["resources"]:
                if r["resource_type"] == _TOPIC_RESOURCE:
                    code, message, entries = self.cluster.topic_config(r["resource_name"], r["configuration_keys"])
                    results.append({"error_code": int(code), "error_message": message,
                                    "resource_type": r["resource_type"], "resource_name": r["resource_name"],
                                    "configs": entries})
                    continue
                code, message = self._other_broker(r)
                keys = r["configuration_keys"]
                if code != ErrorCode.NONE:
                    keys = []
                elif keys is None:
                    keys = [*own, *(k for k in self.configs if k not in own), *sorted(self.forgotten)]
                entries = [e for e in (self._config_entry(k, quirks) for k in keys) if e is not None]
                results.append({"error_code": int(code), "error_message": message,
                                "resource_type": r["resource_type"], "resource_name": r["resource_name"],
                                "configs": entries})
        return {"results": results}

    def _config_entry(self, key: str, quirks: bool) -> dict[str, Any] | None:
        read_only = quirks  # 3.7.0 calls even its dynamic move throttle read-only in DescribeConfigs
        sensitive = False
        if key == CORDONED_KEY and self.cluster.version.has_cordons:
            read_only = False  # a per-broker dynamic key in 4.3
            if key in self.configs:
                value, source = self.configs[key], _DYNAMIC_BROKER_CONFIG
            elif key in self.static_configs:
                value, source = self.static_configs[key], _STATIC_BROKER_CONFIG
            else:
                value, source = "", _DEFAULT_CONFIG
        elif key in _REPLICATION_RATES:
            read_only = False
            value, source = (self.configs[key], _DYNAMIC_BROKER_CONFIG) if key in self.configs else (
                _THROTTLE_DEFAULT, _DEFAULT_CONFIG)
        elif key != THROTTLE_KAFKA_KEY:
            if not quirks or (key not in self.configs and key not in self.forgotten):
                return None
            value, source, sensitive = None, _DYNAMIC_BROKER_CONFIG if key in self.configs else _DEFAULT_CONFIG, True
        elif key in self.configs:
            value, source = self.configs[key], _DYNAMIC_BROKER_CONFIG
        elif key in self.static_configs:
            value, source = self.static_configs[key], _STATIC_BROKER_CONFIG
        elif quirks:
            return None
        else:
            value, source = _THROTTLE_DEFAULT, _DEFAULT_CONFIG
        return {"name": key, "value": value, "read_only": read_only, "config_source": source,
                "is_default": source == _DEFAULT_CONFIG, "is_sensitive": sensitive, "synonyms": []}


class TopicConfigs:
    """FakeCluster's topic configs: one copy for the cluster, since any broker answers for any topic; only SET and
    DELETE, and DescribeConfigs' defaults for the topic keys the tools read."""

    lock: threading.RLock
    assignment: dict[tuple[str, int], list[int]]
    topic_configs: dict[str, dict[str, str]]

    def _has_topic(self, topic: str) -> bool:
        return any(t == topic for t, _ in self.assignment)

    def topic_config(self, topic: str, keys: list[str] | None) -> tuple[ErrorCode, str | None, list[dict[str, Any]]]:
        with self.lock:
            if not self._has_topic(topic):
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, []
            own = self.topic_configs.get(topic, {})
            entries = []
            for key in keys if keys is not None else [*_TOPIC_DEFAULTS, *(k for k in own if k not in _TOPIC_DEFAULTS)]:
                if key in own:
                    value, source = own[key], _DYNAMIC_TOPIC_CONFIG
                elif key in _TOPIC_DEFAULTS:
                    value, source = _TOPIC_DEFAULTS[key], _DEFAULT_CONFIG
                else:
                    continue
                entries.append({"name": key, "value": value, "read_only": False, "config_source": source,
                                "is_default": source == _DEFAULT_CONFIG, "is_sensitive": False, "synonyms": []})
            return ErrorCode.NONE, None, entries

    def alter_topic_config(self, topic: str, configs: list[dict[str, Any]]) -> tuple[ErrorCode, str | None]:
        with self.lock:
            if not self._has_topic(topic):
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
            own = self.topic_configs.setdefault(topic, {})
            for c in configs:
                if c["config_operation"] == _OP_SET:
                    own[c["name"]] = c["value"]
                elif c["config_operation"] == _OP_DELETE:
                    own.pop(c["name"], None)
                else:
                    return ErrorCode.INVALID_REQUEST, f"{c['name']}: only SET and DELETE here"
            return ErrorCode.NONE, None
