"""DescribeConfigs (key 32, v0-4), IncrementalAlterConfigs (key 44, v0-1) and the legacy AlterConfigs (key 33,
v0-2) for this broker's settings.

BROKER resources (type 4) name this broker (`str(broker.id)`, per-broker layer) or are "" (the cluster-wide
dynamic default, as `kafka-configs.sh --entity-default` sends); another broker id is INVALID_REQUEST, as Kafka
answers. Only the throttle, the move threads and cordoned.log.dirs change at run time (mover.config.dynamic);
every other key is described read-only. TOPIC resources (type 2) are described with the broker-wide values they
inherit (topics have no configs of their own here); altering them is INVALID_REQUEST. Other resource types are
INVALID_REQUEST. AlterConfigs replaces a broker layer's dynamic keys with the set it names, as Kafka's does (a key
it leaves out is removed): kafka-configs.sh up to 3.7 sends the layer's current keys plus --add-config minus
--delete-config.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from mover.config.broker import (
    CORDONED_KEY,
    DIR_BUDGET_KEY,
    THREADS_KEY,
    THROTTLE_KAFKA_KEY,
    THROTTLE_KEY,
    BrokerConfig,
)
from mover.config.dynamic import AlterOp, ConfigSource, DynamicBrokerConfig, Scope
from mover.errors import ApiError, InvalidRequestError, UnknownTopicOrPartitionError
from mover.server import Handler, Route
from mover.wire import RequestHeader
from mover.wire.messages import ALTER_CONFIGS, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS

if TYPE_CHECKING:
    from mover.api.broker import Broker

log = logging.getLogger(__name__)

Body = dict[str, Any]


class ResourceType(IntEnum):
    """Kafka's ConfigResource.Type numbers."""

    TOPIC = 2
    BROKER = 4


class ConfigType(IntEnum):
    """DescribeConfigs v3+ config_type (Kafka's ConfigDef.Type as DescribeConfigsResponse numbers it)."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    LONG = 5
    LIST = 7


@dataclass(frozen=True)
class StaticKey:
    name: str
    type: ConfigType
    value: Callable[[BrokerConfig], str | None]
    documentation: str


def _joined(items: list[Any] | None) -> str | None:
    return None if items is None else ",".join(map(str, items))


# server.properties keys described read-only (Kafka's names; all are static in Kafka too, or, like
# log.segment.bytes, only dynamic as cluster-wide topic defaults, which this broker does not support).
STATIC_KEYS: tuple[StaticKey, ...] = (
    StaticKey("broker.id", ConfigType.INT, lambda c: str(c.broker_id), "This broker's id."),
    StaticKey("log.dirs", ConfigType.LIST, lambda c: _joined(c.log_dirs), "The log dirs (JBOD disks)."),
    StaticKey("listeners", ConfigType.LIST, lambda c: _joined(c.listeners), "Where the broker listens."),
    StaticKey("advertised.listeners", ConfigType.LIST, lambda c: _joined(c.advertised_listeners),
              "What Metadata tells clients to connect to (default: listeners)."),
    StaticKey("log.segment.bytes", ConfigType.INT, lambda c: str(c.log_segment_bytes), "Maximum segment size."),
    StaticKey("log.retention.bytes", ConfigType.LONG, lambda c: str(c.log_retention_bytes),
              "Maximum partition size before old segments are deleted (-1: no limit)."),
    StaticKey("log.retention.ms", ConfigType.LONG, lambda c: str(c.log_retention_ms),
              "Maximum age of a segment before it is deleted (-1: no limit)."),
    StaticKey("log.retention.check.interval.ms", ConfigType.LONG, lambda c: str(c.log_retention_check_interval_ms),
              "How often retention runs."),
    StaticKey("log.segment.delete.delay.ms", ConfigType.LONG, lambda c: str(c.log_segment_delete_delay_ms),
              "How long a retired file or partition dir waits before it is deleted."),
    StaticKey("log.index.interval.bytes", ConfigType.INT, lambda c: str(c.log_index_interval_bytes),
              "Bytes between offset index entries."),
    StaticKey("log.flush.interval.ms", ConfigType.LONG, lambda c: str(c.log_flush_interval_ms),
              "How often logs are flushed to disk."),
    StaticKey("socket.request.max.bytes", ConfigType.INT, lambda c: str(c.socket_request_max_bytes),
              "Largest request the broker accepts."),
    StaticKey("auto.create.topics.enable", ConfigType.BOOLEAN, lambda c: str(c.auto_create_topics_enable).lower(),
              "Create a topic when Metadata asks for an unknown one."),
    StaticKey("num.partitions", ConfigType.INT, lambda c: str(c.num_partitions),
              "Partitions of an auto-created topic."),
    StaticKey("message.max.bytes", ConfigType.INT, lambda c: str(c.message_max_bytes),
              "Largest record batch a produce may append."),
    StaticKey("reassign.partitions.status.min.retention.ms", ConfigType.LONG,
              lambda c: str(c.reassign_status_retention_ms),
              "How long a finished move request's status stays queryable (KIP-179)."),
)

DYNAMIC_DOCS: dict[str, tuple[ConfigType, str]] = {
    THROTTLE_KEY: (ConfigType.LONG, "Bytes per second all replica moves share (KIP-113's name)."),
    THROTTLE_KAFKA_KEY: (ConfigType.LONG, "Bytes per second all replica moves share (Kafka's name)."),
    THREADS_KEY: (ConfigType.INT, "Replica moves that copy at the same time (default: one per log dir)."),
    CORDONED_KEY: (ConfigType.LIST, "Log dirs that take no new partition and no replica move (KIP-1066); * for "
                   "all. Replicas already there stay and keep serving."),
    DIR_BUDGET_KEY: (ConfigType.STRING, "moverd's own: bytes per second replica moves may read from plus write to each "
                     "log dir, as dir:rate entries (*:rate for every dir not named), beside the broker-wide "
                     "replica.alter.log.dirs.io.max.bytes.per.second. Empty: no per-dir budget."),
}

# Topic configs and the broker keys they inherit (Kafka's LogConfig synonyms).
TOPIC_SYNONYMS: tuple[tuple[str, str, ConfigType], ...] = (
    ("segment.bytes", "log.segment.bytes", ConfigType.INT),
    ("retention.bytes", "log.retention.bytes", ConfigType.LONG),
    ("retention.ms", "log.retention.ms", ConfigType.LONG),
    ("index.interval.bytes", "log.index.interval.bytes", ConfigType.INT),
    ("max.message.bytes", "message.max.bytes", ConfigType.INT),
)


def routes(broker: Broker) -> dict[int, Handler | Route]:
    configs = BrokerConfigs(broker, broker.manager.dynamic_config)

    def describe_configs(header: RequestHeader, request: Body) -> Body:
        return configs.describe(header.api_version, request)

    def incremental_alter_configs(header: RequestHeader, request: Body) -> Body:
        return configs.alter(request)

    def alter_configs(header: RequestHeader, request: Body) -> Body:
        return configs.alter(request, replace=True)

    return {DESCRIBE_CONFIGS.key: describe_configs, INCREMENTAL_ALTER_CONFIGS.key: incremental_alter_configs,
            ALTER_CONFIGS.key: alter_configs}


class BrokerConfigs:
    def __init__(self, broker: Broker, dynamic: DynamicBrokerConfig) -> None:
        self.broker = broker
        self.dynamic = dynamic
        self._static_by_name = {k.name: k for k in STATIC_KEYS}
        self._defaults = BrokerConfig()

    # ------------------------------------------------------------------------------------------ DescribeConfigs

    def describe(self, version: int, request: Body) -> Body:
        results = []
        for r in request["resources"]:
            body = {"resource_type": r["resource_type"], "resource_name": r["resource_name"], "configs": [],
                    "error_code": 0, "error_message": None}
            try:
                entries = self._describe_resource(r["resource_type"], r["resource_name"])
            except ApiError as e:
                body.update(error_code=e.code, error_message=str(e))
            else:
                keys = r["configuration_keys"]
                if keys is not None:
                    wanted = set(keys)
                    entries = [e for e in entries if e["name"] in wanted]
                for e in entries:
                    if not request["include_synonyms"]:
                        e["synonyms"] = []
                    if not request["include_documentation"]:
                        e["documentation"] = None
                body["configs"] = entries
            results.append(body)
        return {"throttle_time_ms": 0, "results": results}

    def _describe_resource(self, resource_type: int, name: str) -> list[Body]:
        if resource_type == ResourceType.BROKER:
            self._scope(name)
            return self._broker_entries()
        if resource_type == ResourceType.TOPIC:
            if name not in self.broker.manager.topics:
                raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
            return self._topic_entries()
        raise InvalidRequestError(f"unsupported resource type {resource_type}; this broker has BROKER (4), TOPIC (2)")

    def _scope(self, name: str) -> Scope:
        if name == "":
            return Scope.CLUSTER_DEFAULT
        if name == str(self.broker.node_id):
            return Scope.BROKER
        # Kafka's words: a broker answers only for itself or for the cluster-wide default.
        raise InvalidRequestError(f"unexpected broker id, expected {self.broker.node_id} or empty string, "
                                  f"but received {name!r}")

    def _broker_entries(self) -> list[Body]:
        out = []
        for name, (ctype, doc) in DYNAMIC_DOCS.items():
            eff = self.dynamic.effective(name)
            out.append(_entry(name, eff.value, False, eff.source, ctype, doc,
                              [(n, v, s) for n, v, s in eff.layers]))
        config = self.broker.config
        for key in STATIC_KEYS:
            value = key.value(config)
            source = (ConfigSource.DEFAULT_CONFIG if value == key.value(self._defaults)
                      else ConfigSource.STATIC_BROKER_CONFIG)
            out.append(_entry(key.name, value, True, source, key.type, key.documentation,
                              [(key.name, value, source)]))
        return out

    def _topic_entries(self) -> list[Body]:
        out = []
        for topic_key, broker_key, ctype in TOPIC_SYNONYMS:
            static = self._static_by_name[broker_key]
            value = static.value(self.broker.config)
            source = (ConfigSource.DEFAULT_CONFIG if value == static.value(self._defaults)
                      else ConfigSource.STATIC_BROKER_CONFIG)
            # Read-only: topics take the broker's values; IncrementalAlterConfigs refuses to change them.
            out.append(_entry(topic_key, value, True, source, ctype, f"Inherited from {broker_key}.",
                              [(broker_key, value, source)]))
        return out

    # -------------------------------------------------------------------- IncrementalAlterConfigs, AlterConfigs

    def alter(self, request: Body, *, replace: bool = False) -> Body:
        """IncrementalAlterConfigs, or with `replace` the legacy AlterConfigs (each config a SET; the layer becomes
        exactly those)."""
        counts = Counter((r["resource_type"], r["resource_name"]) for r in request["resources"])
        responses = []
        for r in request["resources"]:
            rtype, name = r["resource_type"], r["resource_name"]
            code, message = 0, None
            try:
                if counts[(rtype, name)] > 1:
                    raise InvalidRequestError(f"resource ({rtype}, {name!r}) is listed more than once")
                self._alter_resource(rtype, name, r["configs"], request["validate_only"], replace)
            except ApiError as e:
                code, message = e.code, str(e)
                log.info("%s %s %r: %s", "AlterConfigs" if replace else "IncrementalAlterConfigs", rtype, name, e)
            responses.append({"error_code": int(code), "error_message": message, "resource_type": rtype,
                              "resource_name": name})
        return {"throttle_time_ms": 0, "responses": responses}

    def _alter_resource(self, rtype: int, name: str, configs: list[Body], validate_only: bool, replace: bool) -> None:
        if rtype == ResourceType.BROKER:
            scope = self._scope(name)
            ops = [(c["name"], AlterOp.SET if replace else c["config_operation"], c["value"]) for c in configs]
            self.dynamic.alter(scope, ops, validate_only=validate_only, replace=replace)
            return
        if rtype == ResourceType.TOPIC:
            if name not in self.broker.manager.topics:
                raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
            raise InvalidRequestError("topic configs cannot be altered: topics use the broker's settings")
        raise InvalidRequestError(f"unsupported resource type {rtype}; this broker has BROKER (4), TOPIC (2)")


def _entry(name: str, value: str | None, read_only: bool, source: ConfigSource, ctype: ConfigType, doc: str,
           synonyms: list[tuple[str, str | None, ConfigSource]]) -> Body:
    return {
        "name": name,
        "value": value,
        "read_only": read_only,
        "config_source": int(source),
        "is_default": source == ConfigSource.DEFAULT_CONFIG,
        "is_sensitive": False,
        "synonyms": [{"name": n, "value": v, "source": int(s)} for n, v, s in synonyms],
        "config_type": int(ctype),
        "documentation": doc,
    }
