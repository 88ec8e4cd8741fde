"""DynamicBrokerConfig: the broker settings an operator changes at run time, layered over server.properties.

As in Kafka (kafka.server.DynamicBrokerConfig), a key's value comes from the first layer that has it:
1. the per-broker dynamic value (DescribeConfigs source DYNAMIC_BROKER_CONFIG; resource name = the broker id),
2. the cluster-wide dynamic default (DYNAMIC_DEFAULT_BROKER_CONFIG; resource name ""),
3. server.properties (STATIC_BROKER_CONFIG), or the built-in default (DEFAULT_CONFIG).
Only DYNAMIC_KEYS (the throttle, the move threads and cordoned.log.dirs) have dynamic layers; cordoned.log.dirs,
which names this broker's own paths, has no cluster-wide default layer (Kafka 4.3: per-broker only).

Who reacts to a change (Kafka's BrokerReconfigurable): this class holds no component. An owner of a setting
registers `register(keys, callback)`; after every change of an effective value (IncrementalAlterConfigs through
`alter`, a ZooKeeper watch or a server.properties reload through `update(changes, source)`, the persisted layers
at `load`), each callback whose keys changed is called once with {key: new typed value} (None = the default).
The LogManager registers the throttle (-> the move token bucket) and the move threads (-> the pool size).

Persistence: Kafka keeps dynamic configs in ZooKeeper (`/config/brokers/<id>` and `/config/brokers/<default>`) or
the KRaft metadata log; a moverd has neither, so both layers go to `dynamic-broker-config.json` in every online
log dir, written atomically (tmp, fsync, rename, fsync of the dir). At start-up the copy with the highest `epoch`
wins, so losing one disk loses no setting (the same scheme as move-requests.json).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

from mover.config.broker import (
    CORDONED_KEY,
    DIR_BUDGET_KEY,
    DYNAMIC_KEYS,
    KNOWN_KEYS,
    LIST_KEYS,
    LONG_MAX,
    PER_BROKER_KEYS,
    THREADS_KEY,
    THROTTLE_KAFKA_KEY,
    THROTTLE_KEY,
    BrokerConfig,
    ConfigError,
    check_cordoned,
    check_dir_budgets,
)
from mover.errors import InvalidConfigError, InvalidRequestError
from mover.storage.broker_files import BrokerFiles, as_broker_files

log = logging.getLogger(__name__)

FILE_NAME = "dynamic-broker-config.json"
FORMAT_VERSION = 1


class ConfigSource(IntEnum):
    """DescribeConfigs' ConfigSource numbers (Kafka's DescribeConfigsResponse.ConfigSource)."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class Scope(IntEnum):
    BROKER = 0  # resource name = this broker's id
    CLUSTER_DEFAULT = 1  # resource name ""


class AlterOp(IntEnum):
    """IncrementalAlterConfigs' operations (Kafka's AlterConfigOp.OpType)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


# The BrokerConfig attribute behind each dynamic key; the two throttle names are synonyms (KIP-113's and Kafka's).
ATTRIBUTE = {THROTTLE_KEY: "throttle_rate", THROTTLE_KAFKA_KEY: "throttle_rate", THREADS_KEY: "num_move_threads",
             CORDONED_KEY: "cordoned_log_dirs", DIR_BUDGET_KEY: "log_dir_io_budgets"}
assert set(ATTRIBUTE) == DYNAMIC_KEYS


# A change callback: {config key: new typed value (None = the built-in default)} for the keys it registered.
Reconfigure = Callable[[Mapping[str, object]], None]

# The layer `update` writes for each source it accepts.
_SCOPE_OF = {ConfigSource.DYNAMIC_BROKER_CONFIG: Scope.BROKER,
             ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG: Scope.CLUSTER_DEFAULT}


@dataclass(frozen=True)
class Effective:
    value: str | None
    source: ConfigSource
    # Lower-precedence layers that also hold a value, for DescribeConfigs' synonyms (Kafka lists them in order).
    layers: tuple[tuple[str, str | None, ConfigSource], ...]


class DynamicBrokerConfig:
    def __init__(self, config: BrokerConfig, files: BrokerFiles | Callable[[], Iterable[Path]]) -> None:
        """`config`: the live BrokerConfig (its dynamic attributes are kept at their effective values);
        `files`: where the dynamic layers are persisted (every online log dir)."""
        self.config = config
        self._files = as_broker_files(files)
        self._callbacks: list[tuple[frozenset[str], Reconfigure]] = []
        # server.properties' values, before any dynamic layer touched the live config.
        self._static = {attr: getattr(config, attr) for attr in set(ATTRIBUTE.values())}
        self._builtin = BrokerConfig()
        self._layers: dict[Scope, dict[str, str]] = {Scope.BROKER: {}, Scope.CLUSTER_DEFAULT: {}}
        self._epoch = 0
        self._lock = threading.Lock()
        # Told of every change made through alter() (ZooKeeper writes it to /config/brokers, mover/zk).
        self.change_listeners: list[Callable[[Scope, dict[str, str]], None]] = []

    # ---------------------------------------------------------------- owners

    def register(self, keys: Iterable[str], callback: Reconfigure) -> None:
        """Call `callback({key: value})` whenever the effective value of one of `keys` (DYNAMIC_KEYS) changes.

        Called from the thread that made the change, with this object's lock held: a callback applies the value
        and returns (it must not call back into this object)."""
        wanted = frozenset(keys)
        unknown = wanted - DYNAMIC_KEYS
        if unknown:
            raise ValueError(f"not dynamic broker configs: {', '.join(sorted(unknown))}")
        self._callbacks.append((wanted, callback))

    def update(self, changes: Mapping[str, str | None], source: ConfigSource) -> None:
        """Set (or, for None, remove) `changes` in the layer of `source`, all or none, then notify the owners.

        For ZooKeeper watches (DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG: persisted like `alter`) and
        server.properties reloads (STATIC_BROKER_CONFIG: replaces the static value; None restores the built-in
        default). Raises InvalidRequestError / InvalidConfigError as `alter` does."""
        if source in _SCOPE_OF:
            ops = [(k, AlterOp.DELETE if v is None else AlterOp.SET, v) for k, v in changes.items()]
            self.alter(_SCOPE_OF[source], ops)
            return
        if source is not ConfigSource.STATIC_BROKER_CONFIG:
            raise ValueError(f"dynamic config cannot be updated from {source.name}")
        parsed: dict[str, object] = {}
        for key, value in changes.items():
            _check_key(key)
            try:
                parsed[ATTRIBUTE[key]] = self._parse(key, value)
            except ConfigError as e:
                raise InvalidConfigError(f"invalid value {value!r} for {key}: {e}") from None
        with self._lock:
            self._static.update(parsed)
            self._apply_locked()

    # ---------------------------------------------------------------- reading

    def effective(self, key: str) -> Effective:
        """The value `key` has now (as DescribeConfigs shows it), with where it comes from."""
        attr = ATTRIBUTE[key]
        layers: list[tuple[str, str | None, ConfigSource]] = []
        with self._lock:
            for scope, source in ((Scope.BROKER, ConfigSource.DYNAMIC_BROKER_CONFIG),
                                  (Scope.CLUSTER_DEFAULT, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)):
                for name, value in self._layers[scope].items():
                    if ATTRIBUTE[name] == attr:
                        layers.append((name, value, source))
        static = self._static[attr]
        if static != getattr(self._builtin, attr):
            layers.append((key, self._format(attr, static), ConfigSource.STATIC_BROKER_CONFIG))
        layers.append((key, self._format(attr, getattr(self._builtin, attr)), ConfigSource.DEFAULT_CONFIG))
        value, source = layers[0][1], layers[0][2]
        return Effective(value, source, tuple(layers))

    def _format(self, attr: str, value: object) -> str | None:
        if attr == "throttle_rate":
            # Kafka's default is Long.MAX_VALUE, meaning "no limit"; None is how BrokerConfig says it.
            return str(LONG_MAX if value is None else value)
        if attr == "cordoned_log_dirs":
            return ",".join(value)  # type: ignore[call-overload]
        if attr == "log_dir_io_budgets":
            return ",".join(f"{where}:{rate}" for where, rate in value)  # type: ignore[attr-defined]
        if attr == "num_move_threads" and value is None:
            # Kafka's default is "one per log dir": show the number that implies rather than null.
            return str(max(1, len(self.config.log_dirs)))
        return None if value is None else str(value)

    # ---------------------------------------------------------------- altering

    def alter(self, scope: Scope, ops: Iterable[tuple[str, int, str | None]], *, validate_only: bool = False,
              replace: bool = False) -> None:
        """Apply IncrementalAlterConfigs operations (key, op, value) to one layer, all or none. With `replace`
        (the legacy AlterConfigs), the layer starts empty: it becomes exactly the keys the ops SET.

        Raises InvalidRequestError (duplicate key, a key that cannot change at run time, an unknown operation) or
        InvalidConfigError (unknown key, invalid value, APPEND/SUBTRACT on a key that is not a list)."""
        ops = list(ops)
        names = [k for k, _, _ in ops]
        duplicates = sorted({k for k in names if names.count(k) > 1})
        if duplicates:
            raise InvalidRequestError(f"duplicate config keys: {', '.join(duplicates)}")
        with self._lock:
            if replace:
                ops = _replacement(self._layers[scope], ops)
            layer = {} if replace else dict(self._layers[scope])
            for key, op, value in ops:
                _check_key(key)
                if scope is Scope.CLUSTER_DEFAULT and key in PER_BROKER_KEYS:
                    # Kafka's words for a per-broker config sent to the cluster-wide default.
                    raise InvalidRequestError(f"Cannot update these configs at default cluster level, broker id "
                                              f"must be specified: {key}")
                if op in (AlterOp.APPEND, AlterOp.SUBTRACT) and key in LIST_KEYS:
                    if value is None:
                        raise InvalidConfigError(f"null value is not allowed for {AlterOp(op).name} of {key}")
                    value = self._list_op(key, layer, AlterOp(op), value)
                    op = AlterOp.SET
                if op == AlterOp.SET:
                    if value is None:
                        raise InvalidConfigError(f"null value is not allowed for {key}; use DELETE")
                    try:
                        # A scratch config checks and normalises the value exactly as server.properties would.
                        self._parse(key, value)
                    except ConfigError as e:
                        raise InvalidConfigError(f"invalid value {value!r} for {key}: {e}") from None
                    for other in [k for k in layer if ATTRIBUTE[k] == ATTRIBUTE[key]]:
                        del layer[other]  # its synonym is replaced, not shadowed
                    layer[key] = value.strip()
                elif op == AlterOp.DELETE:
                    for other in [k for k in layer if ATTRIBUTE[k] == ATTRIBUTE[key]]:
                        del layer[other]
                elif op in (AlterOp.APPEND, AlterOp.SUBTRACT):
                    raise InvalidConfigError(f"{AlterOp(op).name} is only allowed on list configs; {key} is not")
                else:
                    raise InvalidRequestError(f"unknown config operation {op} for {key}")
            if validate_only:
                return
            self._layers[scope] = layer
            self._epoch += 1
            self._persist_locked()
            self._apply_locked()
        for listener in self.change_listeners:
            listener(scope, dict(layer))

    def _parse(self, key: str, value: str | None) -> object:
        """`value` typed as server.properties would type it (ConfigError if invalid); a cordon must name this
        broker's log dirs."""
        scratch = BrokerConfig()
        scratch.dynamic_update(key, value)
        if key == CORDONED_KEY:
            check_cordoned(scratch.cordoned_log_dirs, self.config.log_dirs)
        if key == DIR_BUDGET_KEY:
            check_dir_budgets(scratch.log_dir_io_budgets, self.config.log_dirs)
        return getattr(scratch, ATTRIBUTE[key])

    def _list_op(self, key: str, layer: dict[str, str], op: AlterOp, value: str) -> str:
        """APPEND / SUBTRACT on a list key, as the new SET value. Kafka starts from the layer's own value (else the
        empty default); this starts from the effective value when the layer has none, so appending a dir to a
        cordon set in server.properties keeps the static one cordoned too (docs/cordons.md)."""
        base = layer.get(key)
        if base is None:
            base = self._format(ATTRIBUTE[key], getattr(self.config, ATTRIBUTE[key])) or ""
        try:
            current = list(self._parse(key, base))  # type: ignore[call-overload]
            given = list(self._parse(key, value))  # type: ignore[call-overload]
        except ConfigError as e:
            raise InvalidConfigError(f"invalid value {value!r} for {key}: {e}") from None
        if op is AlterOp.APPEND:
            merged = current + [v for v in given if v not in current]
            if "*" in merged:
                merged = ["*"]
        else:
            if current == ["*"] and "*" not in given:
                # Uncordoning one dir of "every dir" leaves the others cordoned.
                current = [str(p) for p in self.config.log_dirs]
            merged = [v for v in current if v not in given]
        return ",".join(merged)

    def replace_layer(self, scope: Scope, values: dict[str, str], *, source: str) -> None:
        """Set a whole layer from an outside source of truth (ZooKeeper's /config/brokers): invalid values are
        logged and skipped, the rest applied at once. No change listener is told (the change came from there)."""
        layer: dict[str, str] = {}
        for key, value in values.items():
            try:
                _check_key(key)
                if scope is Scope.CLUSTER_DEFAULT and key in PER_BROKER_KEYS:
                    raise InvalidRequestError("a per-broker config cannot be a cluster-wide default")
                self._parse(key, value)
            except (ConfigError, InvalidConfigError, InvalidRequestError) as e:
                log.warning("ignoring %s=%r from %s: %s", key, value, source, e)
                continue
            layer[key] = value.strip()
        with self._lock:
            if self._layers[scope] == layer:
                return
            self._layers[scope] = layer
            self._epoch += 1
            self._persist_locked()
            self._apply_locked()
        log.info("dynamic config %s from %s: %s", scope.name, source, layer)

    def _apply_locked(self) -> None:
        """Make the live config hold the effective values, then tell the owners of what changed."""
        changed: dict[str, object] = {}
        for attr in sorted(set(ATTRIBUTE.values())):
            raw = None
            for scope in (Scope.BROKER, Scope.CLUSTER_DEFAULT):
                for name, value in self._layers[scope].items():
                    if ATTRIBUTE[name] == attr:
                        raw = (name, value)
                        break
                if raw is not None:
                    break
            if raw is not None:
                value = self._parse(raw[0], raw[1])
            else:
                value = self._static[attr]
            if value == getattr(self.config, attr):
                continue
            setattr(self.config, attr, value)
            changed[attr] = value
            log.info("dynamic config: %s is now %s", attr, "default" if value is None else value)
        if not changed:
            return
        for keys, callback in self._callbacks:
            mine = {key: changed[ATTRIBUTE[key]] for key in sorted(keys) if ATTRIBUTE[key] in changed}
            if mine:
                callback(mine)

    def set_static(self, config: BrokerConfig) -> None:
        """server.properties was re-read (mover/config/reloader.py): its values become the static layer and apply
        at once unless a dynamic layer sets the same key, which still wins, as in Kafka."""
        with self._lock:
            self._static = {attr: getattr(config, attr) for attr in set(ATTRIBUTE.values())}
            self._apply_locked()

    # ---------------------------------------------------------------- persistence

    def load(self, dirs: Iterable[Path] | None = None) -> None:
        """The persisted layers, from this config's files (or, for a test, from `dirs`)."""
        files = self._files if dirs is None else as_broker_files(dirs)
        best = files.read_newest_json(FILE_NAME, _epoch_of, "dynamic config")
        if best is None:
            return
        with self._lock:
            self._epoch = best["epoch"]
            for scope, field in ((Scope.BROKER, "broker"), (Scope.CLUSTER_DEFAULT, "cluster_default")):
                layer: dict[str, str] = {}
                for key, value in (best.get(field) or {}).items():
                    try:
                        _check_key(key)
                        if scope is Scope.CLUSTER_DEFAULT and key in PER_BROKER_KEYS:
                            raise InvalidRequestError("a per-broker config cannot be a cluster-wide default")
                        self._parse(key, value)
                    except (ConfigError, InvalidConfigError, InvalidRequestError, AttributeError) as e:
                        log.warning("ignoring persisted dynamic config %s=%r: %s", key, value, e)
                        continue
                    layer[key] = value
                self._layers[scope] = layer
            self._apply_locked()
        log.info("dynamic config loaded (epoch %d): %s", self._epoch, self._layers)

    def _persist_locked(self) -> None:
        # Every online dir, atomically and durably: an acknowledged change survives power loss and a lost disk.
        self._files.write_json(FILE_NAME, {
            "version": FORMAT_VERSION,
            "epoch": self._epoch,
            "broker": self._layers[Scope.BROKER],
            "cluster_default": self._layers[Scope.CLUSTER_DEFAULT],
        }, "dynamic config")


def _epoch_of(data: dict) -> int:
    epoch = data["epoch"]
    if not isinstance(epoch, int):
        raise ValueError("not a dynamic config file")
    return epoch


def _check_key(key: str) -> None:
    if key in DYNAMIC_KEYS:
        return
    if key in KNOWN_KEYS:
        # Kafka: "Cannot update these configs dynamically" (InvalidRequestException).
        raise InvalidRequestError(f"{key} cannot be updated dynamically; change server.properties and restart")
    raise InvalidConfigError(f"unknown broker config {key}")


def _replacement(held: dict[str, str], ops: list[tuple[str, int, str | None]]) -> list[tuple[str, int, str | None]]:
    """The SETs of a legacy AlterConfigs, which sends a layer's whole set back as the client read it. DescribeConfigs
    lists a set key under each of its names (intra.broker.throttled.rate and Kafka's
    replica.alter.log.dirs.io.max.bytes.per.second), so the set carries the held name and an echo of its value
    under the other. Per attribute: the names whose value the client changed win; else the held name is kept; a
    name the layer does not hold that only echoes a value held under a name the request left out is a removal
    (kafka-configs.sh --delete-config of the held name)."""
    by_attr: dict[str | None, list[tuple[str, int, str | None]]] = {}
    for op in ops:
        by_attr.setdefault(ATTRIBUTE.get(op[0]), []).append(op)
    out: list[tuple[str, int, str | None]] = []
    for attr, entries in by_attr.items():
        if attr is None:
            out += entries  # an unknown key: alter refuses it
            continue
        mine = {k: v for k, v in held.items() if ATTRIBUTE[k] == attr}
        changed = [e for e in entries if e[2] is None or e[2].strip() not in mine.values()]
        out += changed or [e for e in entries if e[0] in mine][:1]
    return out

