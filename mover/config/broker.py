"""BrokerConfig: every `server.properties` key moverd understands, typed and validated in one place.

Keys keep Kafka's names. Where KIP-113 and the real broker named a setting differently, both names are accepted
(`intra.broker.throttled.rate` / `replica.alter.log.dirs.io.max.bytes.per.second`). An unknown key is warned about,
never fatal, so one server.properties can be shared with a real broker; an invalid value raises ConfigError, which
moverd turns into a one-line message and exit code 2.

Configurations that would lose data are refused, not repaired (docs/operations.md#configuration-that-is-refused):
a relative log dir (it would depend on the directory moverd happened to start in), and log dirs that are the same
directory or nested, after resolving symlinks (the inner dir would be loaded as a partition of the outer, and a
move of that "partition" renames a whole log dir away). A key set twice is a warning naming both lines, and a file
that is not UTF-8 is one line naming the byte.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mover.config.properties import ConfigError, Listener, parse_properties, read_properties_text
from mover.config.security import SecurityConfig, is_security_key

log = logging.getLogger(__name__)

THROTTLE_KEY = "intra.broker.throttled.rate"
THROTTLE_KAFKA_KEY = "replica.alter.log.dirs.io.max.bytes.per.second"
THREADS_KEY = "num.replica.alter.log.dirs.threads"
# KIP-1066 (Kafka 4.3): log dirs that take no new partition and no move; `*` cordons every dir (docs/cordons.md).
CORDONED_KEY = "cordoned.log.dirs"
CORDON_ALL = "*"
# moverd's own (Kafka has no per-disk move quota): bytes per second a move may read from plus write to each log dir,
# `dir:rate` entries, `*:rate` for every dir not named (docs/operations.md, "A budget per disk").
DIR_BUDGET_KEY = "mover.log.dir.io.max.bytes.per.second"

# Kafka's default for the throttle is Long.MAX_VALUE, which it treats as "no limit".
LONG_MAX = 2**63 - 1


@dataclass
class BrokerConfig:
    broker_id: int = 0
    cluster_id: str | None = None
    log_dirs: list[Path] = field(default_factory=list)
    listeners: list[Listener] = field(default_factory=lambda: [Listener("PLAINTEXT", "127.0.0.1", 9092)])
    advertised_listeners: list[Listener] | None = None
    throttle_rate: int | None = None  # bytes per second; None = unlimited
    num_move_threads: int | None = None  # None = one per log dir, as KIP-113 says
    # cordoned.log.dirs as written (normalised absolute paths, or "*"); `cordoned_dirs()` resolves it.
    cordoned_log_dirs: tuple[str, ...] = ()
    # mover.log.dir.io.max.bytes.per.second as written: (normalised absolute path or "*", rate); `dir_budgets()`.
    log_dir_io_budgets: tuple[tuple[str, int], ...] = ()
    log_segment_bytes: int = 1073741824
    log_retention_bytes: int = -1
    log_retention_ms: int = 7 * 24 * 3600 * 1000
    log_retention_check_interval_ms: int = 300000
    log_segment_delete_delay_ms: int = 60000
    log_index_interval_bytes: int = 4096
    log_flush_interval_ms: int = 60000
    # Kafka's timers for the recovery-point and log-start-offset checkpoint files (both 60 s by default).
    log_flush_offset_checkpoint_interval_ms: int = 60000
    log_flush_start_offset_checkpoint_interval_ms: int = 60000
    # Bounds on partitions: one CreateTopics request (Kafka's controller allows 10,000 per batch) and the whole
    # broker. Past either, CreateTopics answers POLICY_VIOLATION (docs/operations.md).
    create_topics_max_partitions_per_request: int = 10_000
    max_broker_partitions: int = 200_000
    log_dir_health_check_interval_ms: int = 5000
    socket_request_max_bytes: int = 104857600
    auto_create_topics_enable: bool = True
    num_partitions: int = 1
    message_max_bytes: int = 1048588
    reassign_status_retention_ms: int = 24 * 3600 * 1000
    zookeeper_connect: str | None = None
    # TLS, SASL, ACLs and connection limits (mover/config/security.py); set by from_properties.
    security: SecurityConfig | None = None
    metrics_listener: tuple[str, int] | None = None  # (host, port) of the Prometheus endpoint; None = off
    zookeeper_session_timeout_ms: int = 18000
    zookeeper_connection_timeout_ms: int = 18000

    @property
    def move_threads(self) -> int:
        return self.num_move_threads if self.num_move_threads is not None else max(1, len(self.log_dirs))

    def cordoned_dirs(self) -> frozenset[Path]:
        """The configured log dirs that are cordoned now (KIP-1066): `*` means every one."""
        if CORDON_ALL in self.cordoned_log_dirs:
            return frozenset(self.log_dirs)
        wanted = set(self.cordoned_log_dirs)
        return frozenset(p for p in self.log_dirs if str(p) in wanted)

    def dir_budgets(self) -> dict[Path, int]:
        """Each configured log dir's move I/O budget in bytes per second, where it has one: its own entry, else the
        `*` entry."""
        named = dict(self.log_dir_io_budgets)
        out: dict[Path, int] = {}
        for p in self.log_dirs:
            rate = named.get(str(p), named.get(CORDON_ALL))
            if rate is not None:
                out[p] = rate
        return out

    @property
    def advertised(self) -> list[Listener]:
        return self.advertised_listeners or self.listeners

    @property
    def listener_protocols(self) -> dict[str, str]:
        """Listener name -> security protocol (SecurityConfig.protocol_map; Kafka's default map when no security
        keys were parsed, as for a BrokerConfig built in code)."""
        return (self.security or SecurityConfig.parse({}, self.listeners)).protocol_map

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> BrokerConfig:
        return cls.from_properties(parse_properties(read_properties_text(path), source=str(path)))

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> BrokerConfig:
        cfg = cls()
        values: dict[str, Any] = {}
        security_props: dict[str, str] = {}
        for key, raw in props.items():
            spec = _KEYS.get(key)
            if spec is None and is_security_key(key):
                security_props[key] = raw
                continue
            if spec is None:
                log.warning("unknown configuration key %r ignored", key)
                continue
            attr, convert = spec
            try:
                values[attr] = convert(raw.strip())
            except ConfigError as e:
                raise ConfigError(f"invalid value for {key}: {e}") from None
            except ValueError:
                raise ConfigError(f"invalid value for {key}: {raw.strip()!r}") from None
        cfg = dataclasses.replace(cfg, **values)
        if not cfg.log_dirs:
            raise ConfigError("log.dirs is required: a comma-separated list of absolute paths")
        check_log_dirs(cfg.log_dirs)
        check_cordoned(cfg.cordoned_log_dirs, cfg.log_dirs)
        check_dir_budgets(cfg.log_dir_io_budgets, cfg.log_dirs)
        cfg.security = SecurityConfig.parse(security_props, cfg.listeners)
        if cfg.advertised_listeners:
            known = {ls.name for ls in cfg.listeners}
            for a in cfg.advertised_listeners:
                if a.name not in known:
                    raise ConfigError(f"advertised.listeners names {a.name}, which is not in listeners")
        return cfg

    def dynamic_update(self, key: str, value: str | None) -> None:
        """Apply a run-time change of one of DYNAMIC_KEYS (None restores the default). Raises ConfigError."""
        if key not in DYNAMIC_KEYS:
            raise ConfigError(f"{key} cannot be changed while the broker runs")
        attr, convert = _KEYS[key]
        default = getattr(BrokerConfig(), attr)
        setattr(self, attr, default if value is None else convert(value.strip()))


def check_log_dirs(dirs: list[Path]) -> None:
    """Refuse log dirs that are relative, listed twice, the same directory or nested (after resolving symlinks).
    Raises ConfigError naming both entries."""
    for p in dirs:
        if not p.is_absolute():
            raise ConfigError(f"log.dirs entry {str(p)!r} is not an absolute path (a relative log dir would depend on "
                              "the directory moverd was started in)")
    if len(set(dirs)) != len(dirs):
        raise ConfigError("log.dirs lists a directory twice")
    # realpath never raises: a missing tail (a dir moverd will create) stays as written, a symlink loop as found.
    real = {p: Path(os.path.realpath(p)) for p in dirs}
    for a, b in itertools.permutations(dirs, 2):
        ra, rb = real[a], real[b]
        via = "" if (ra, rb) == (a, b) else f" (resolving symlinks: {a} -> {ra}, {b} -> {rb})"
        if ra == rb and dirs.index(a) < dirs.index(b):
            raise ConfigError(f"log.dirs entries {a} and {b} are the same directory{via}")
        if ra != rb and ra.is_relative_to(rb):
            raise ConfigError(f"log.dirs entry {a} is inside log dir {b}{via}: it would be loaded as a partition "
                              "of that dir and could be moved away with it")


def check_cordoned(entries: tuple[str, ...], log_dirs: list[Path]) -> None:
    """Each entry of cordoned.log.dirs must be `*` or one of log.dirs (Kafka 4.3 refuses the same). Raises
    ConfigError naming the first that is not."""
    known = {str(p) for p in log_dirs}
    for entry in entries:
        if entry != CORDON_ALL and entry not in known:
            raise ConfigError(f"{CORDONED_KEY} entry {entry!r} is not one of log.dirs ({', '.join(sorted(known))}) "
                              f"nor {CORDON_ALL!r}")


def _int(lo: int | None = None, hi: int = LONG_MAX) -> Callable[[str], int]:
    def convert(s: str) -> int:
        try:
            v = int(s)
        except ValueError:
            raise ConfigError(f"{s!r} is not an integer") from None
        if (lo is not None and v < lo) or v > hi:
            raise ConfigError(f"{v} is out of range [{lo}, {hi}]")
        return v

    return convert


def _rate(s: str) -> int | None:
    v = _int(1)(s)
    return None if v >= LONG_MAX else v


def _threads(s: str) -> int:
    return _int(1, 1024)(s)


def _bool(s: str) -> bool:
    if s.lower() in ("true", "false"):
        return s.lower() == "true"
    raise ConfigError(f"{s!r} is not true or false")


def _dirs(s: str) -> list[Path]:
    parts = [p.strip() for p in s.split(",") if p.strip()]
    if not parts:
        raise ConfigError("empty list")
    return [Path(os.path.normpath(p)) if os.path.isabs(p) else Path(p) for p in parts]


def _cordoned(s: str) -> tuple[str, ...]:
    """cordoned.log.dirs: a comma-separated list, empty by default (nothing cordoned); `*` alone for every dir."""
    parts = [p.strip() for p in s.split(",") if p.strip()]
    if CORDON_ALL in parts and len(parts) > 1:
        raise ConfigError(f"{CORDON_ALL!r} cordons every log dir and cannot be combined with paths")
    out = []
    for p in parts:
        if p != CORDON_ALL and not os.path.isabs(p):
            raise ConfigError(f"{p!r} is not an absolute path")
        entry = p if p == CORDON_ALL else os.path.normpath(p)
        if entry not in out:
            out.append(entry)
    return tuple(out)


def _dir_budgets(s: str) -> tuple[tuple[str, int], ...]:
    """mover.log.dir.io.max.bytes.per.second: comma-separated `dir:rate` (an absolute log dir, or `*` for every dir
    not named), rates in bytes per second from 1 to Kafka's long maximum; empty by default (no per-dir budget)."""
    out: dict[str, int] = {}
    for entry in (e.strip() for e in s.split(",")):
        if not entry:
            continue
        where, sep, rate = entry.rpartition(":")
        if not sep or not where:
            raise ConfigError(f"{DIR_BUDGET_KEY} entry {entry!r} is not dir:bytes-per-second")
        if where != CORDON_ALL:
            if not where.startswith("/"):
                raise ConfigError(f"{DIR_BUDGET_KEY} entry {entry!r}: {where!r} is not an absolute path or *")
            where = os.path.normpath(where)
        try:
            value = int(rate)
        except ValueError:
            raise ConfigError(f"{DIR_BUDGET_KEY} entry {entry!r}: {rate!r} is not a whole number") from None
        if not 1 <= value <= LONG_MAX:
            raise ConfigError(f"{DIR_BUDGET_KEY} entry {entry!r}: the rate must be from 1 to {LONG_MAX}")
        if where in out:
            raise ConfigError(f"{DIR_BUDGET_KEY} names {where} twice")
        out[where] = value
    return tuple(out.items())


def check_dir_budgets(entries: tuple[tuple[str, int], ...], log_dirs: list[Path]) -> None:
    """Each entry of mover.log.dir.io.max.bytes.per.second must be `*` or one of log.dirs. Raises ConfigError."""
    known = {str(p) for p in log_dirs}
    for where, _ in entries:
        if where != CORDON_ALL and where not in known:
            raise ConfigError(f"{DIR_BUDGET_KEY} entry {where!r} is not one of log.dirs ({', '.join(sorted(known))})")


def _listeners(s: str) -> list[Listener]:
    out = []
    for part in (p.strip() for p in s.split(",") if p.strip()):
        name, sep, rest = part.partition("://")
        host, colon, port = rest.rpartition(":")
        if not sep or not colon:
            raise ConfigError(f"{part!r} is not NAME://HOST:PORT")
        name = name.strip().upper()
        if not name or not all(c.isalnum() or c == "_" for c in name):
            raise ConfigError(f"{part!r}: a listener name is letters, digits and _")
        out.append(Listener(name, host.strip("[]") or "0.0.0.0", _int(0, 65535)(port)))
    if not out:
        raise ConfigError("empty list")
    return out


def _http_listener(s: str) -> tuple[str, int] | None:
    """`http://HOST:PORT` (the scheme may be left out); empty = off."""
    if not s:
        return None
    rest = s[len("http://"):] if s.startswith("http://") else s
    host, colon, port = rest.rstrip("/").rpartition(":")
    if not colon or "/" in rest.rstrip("/") or "://" in rest:
        raise ConfigError(f"{s!r} is not http://HOST:PORT")
    return host.strip("[]") or "0.0.0.0", _int(0, 65535)(port)


def _hours_to_ms(s: str) -> int:
    return _int(-1)(s) * 3600 * 1000


_KEYS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "broker.id": ("broker_id", _int(0, 2**31 - 1)),
    "node.id": ("broker_id", _int(0, 2**31 - 1)),
    "cluster.id": ("cluster_id", str),
    "log.dirs": ("log_dirs", _dirs),
    "log.dir": ("log_dirs", _dirs),
    "listeners": ("listeners", _listeners),
    "advertised.listeners": ("advertised_listeners", _listeners),
    THROTTLE_KEY: ("throttle_rate", _rate),
    THROTTLE_KAFKA_KEY: ("throttle_rate", _rate),
    THREADS_KEY: ("num_move_threads", _threads),
    CORDONED_KEY: ("cordoned_log_dirs", _cordoned),
    DIR_BUDGET_KEY: ("log_dir_io_budgets", _dir_budgets),
    "log.segment.bytes": ("log_segment_bytes", _int(14, 2**31 - 1)),
    "log.retention.bytes": ("log_retention_bytes", _int(-1)),
    "log.retention.ms": ("log_retention_ms", _int(-1)),
    "log.retention.hours": ("log_retention_ms", _hours_to_ms),
    "log.retention.check.interval.ms": ("log_retention_check_interval_ms", _int(1)),
    "log.segment.delete.delay.ms": ("log_segment_delete_delay_ms", _int(0)),
    "log.index.interval.bytes": ("log_index_interval_bytes", _int(0, 2**31 - 1)),
    "log.flush.interval.ms": ("log_flush_interval_ms", _int(1)),
    "log.flush.offset.checkpoint.interval.ms": ("log_flush_offset_checkpoint_interval_ms", _int(1)),
    "log.flush.start.offset.checkpoint.interval.ms": ("log_flush_start_offset_checkpoint_interval_ms", _int(1)),
    "create.topics.max.partitions.per.request": ("create_topics_max_partitions_per_request", _int(1, 2**31 - 1)),
    "max.broker.partitions": ("max_broker_partitions", _int(1, 2**31 - 1)),
    "log.dir.health.check.interval.ms": ("log_dir_health_check_interval_ms", _int(1)),
    "socket.request.max.bytes": ("socket_request_max_bytes", _int(1, 2**31 - 1)),
    "auto.create.topics.enable": ("auto_create_topics_enable", _bool),
    "num.partitions": ("num_partitions", _int(1, 100000)),
    "message.max.bytes": ("message_max_bytes", _int(0, 2**31 - 1)),
    "reassign.partitions.status.min.retention.ms": ("reassign_status_retention_ms", _int(0)),
    "zookeeper.connect": ("zookeeper_connect", str),
    "metrics.listener": ("metrics_listener", _http_listener),
    "zookeeper.session.timeout.ms": ("zookeeper_session_timeout_ms", _int(1, 2**31 - 1)),
    "zookeeper.connection.timeout.ms": ("zookeeper_connection_timeout_ms", _int(1, 2**31 - 1)),
}

# Keys an operator may change while moves run (DescribeConfigs / IncrementalAlterConfigs, `--throttle`).
DYNAMIC_KEYS = frozenset({THROTTLE_KEY, THROTTLE_KAFKA_KEY, THREADS_KEY, CORDONED_KEY, DIR_BUDGET_KEY})
# Dynamic keys whose value is a list: IncrementalAlterConfigs may APPEND to / SUBTRACT from them.
LIST_KEYS = frozenset({CORDONED_KEY})
# Dynamic keys that name this broker's own paths: per-broker only, never a cluster-wide default (Kafka 4.3 keeps
# cordoned.log.dirs in its PER_BROKER_CONFIGS).
PER_BROKER_KEYS = frozenset({CORDONED_KEY, DIR_BUDGET_KEY})

KNOWN_KEYS = frozenset(_KEYS)


def default_config(root: Path) -> BrokerConfig:
    """The embedded configuration `moverd` runs with when no --config is given: two log dirs under ./var."""
    return BrokerConfig(
        broker_id=0,
        log_dirs=[root / "var" / "log-dir-1", root / "var" / "log-dir-2"],
    )
