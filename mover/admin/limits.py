"""The limits a run of steps keeps (docs/cli.md#kip-435-steps, docs/audit.md "execute"), one set for both tools:
KIP-435's three for replicas moving between brokers, the throttle, and for `mover-audit execute` the limits of moves
between the log dirs of a broker. The command lines build them from their options; a limits file (JSON or TOML, the
options' names without dashes) changes them while the run goes on, read again when it changes and applied at the next
step.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from mover.admin.common import AdminError
from mover.admin.common import format_bytes as _size
from mover.admin.reassign.steps import Limits
from mover.config.broker import LONG_MAX
from mover.zk import bounded_json

# mover-audit execute's defaults for moves between the log dirs of a broker: one copy per disk keeps each disk's
# I/O to one sequential reader or writer; two per broker, ten per cluster keep a rebalance calm (docs/audit.md).
DEFAULT_MAX_PER_DISK = 1
DEFAULT_MAX_PER_BROKER = 2
DEFAULT_MAX_PER_CLUSTER = 10


@dataclass(frozen=True)
class DiskLimits:
    """Moves between the log dirs of a broker at once: touching one disk (as source or destination), on one broker,
    in one cluster (moves between brokers count there too: `--max-moves` bounds a cluster's moves of both kinds)."""

    per_disk: int = DEFAULT_MAX_PER_DISK
    per_broker: int = DEFAULT_MAX_PER_BROKER
    per_cluster: int = DEFAULT_MAX_PER_CLUSTER
    # (log dir path, bytes/s): the most a move may read from or write to that dir, on any broker that has it. Kafka
    # has one log-dir move quota per broker, so a broker running moves gets the smallest budget of their disks.
    budgets: tuple[tuple[str, int], ...] = ()

    def budget(self, log_dir: str) -> int | None:
        return next((rate for d, rate in self.budgets if d == log_dir), None)

    def describe_budgets(self) -> str:
        return ", ".join(f"{d} {rate_text(rate)}" for d, rate in self.budgets)


# Limits file key -> (where it goes, the field). Disk keys are known only to a run with log-dir moves.
_STEP_KEYS = {f.name: ("steps", f.name) for f in fields(Limits)}
_DISK_KEYS = {"max_moves_per_disk": ("disks", "per_disk"), "max_moves_per_broker": ("disks", "per_broker"),
              "max_moves": ("disks", "per_cluster")}
BUDGETS_KEY = "disk_budgets"  # a table: log dir -> bytes per second (--disk-budget DIR=RATE)


# Kafka's throttles (the log-dir move one and the replication ones) are longs: a broker refuses a larger value with
# INVALID_CONFIG, after a run had started, so the tools refuse it where they read it (docs/cli.md, Throttles).
MAX_RATE = LONG_MAX
RATE_RANGE = f"1 to {MAX_RATE}, a Java long"


def is_rate(value: object) -> bool:
    """A throttle Kafka takes: an integer (not a bool) of bytes per second in 1..MAX_RATE."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_RATE


def rate_text(rate: int) -> str:
    return f"{rate} B/s ({_size(rate)}/s)" if rate >= 1024 else f"{rate} B/s"


@dataclass(frozen=True)
class RunLimits:
    steps: Limits = field(default_factory=Limits)
    throttle: int | None = None  # bytes/s on the brokers of running steps; None = unthrottled
    disks: DiskLimits | None = None  # None: a run without log-dir moves (mover-reassign)

    @property
    def keys(self) -> tuple[str, ...]:
        """The keys a limits file may set for this run."""
        return (*_STEP_KEYS, *((*_DISK_KEYS, BUDGETS_KEY) if self.disks is not None else ()), "throttle")

    def describe_steps(self) -> str:
        return (f"max {self.steps.max_partition_movements} partition movements, "
                f"{self.steps.max_replica_movements} replica movements per partition, "
                f"{self.steps.max_leader_movements} leader movements")

    def describe(self, between_brokers: bool = True) -> str:
        """One line; `between_brokers`: say KIP-435's limits too (a run with log-dir moves only need not)."""
        if self.disks is None:
            return f"{self.describe_steps()}; " + ("unthrottled" if self.throttle is None
                                                   else f"throttle {self.throttle} B/s")
        d = self.disks
        rate = "unthrottled" if self.throttle is None else f"throttle {rate_text(self.throttle)}"
        text = (f"at most {d.per_disk} move(s) per disk, {d.per_broker} per broker, {d.per_cluster} per cluster; "
                f"{rate}" + (f"; disk budgets {d.describe_budgets()}" if d.budgets else ""))
        return text + (f"; between brokers {self.describe_steps()}" if between_brokers else "")


def read_limits(path: Path, base: RunLimits) -> RunLimits:
    """The limits file over `base`: JSON or TOML (by content), keys as the options without dashes."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise AdminError(f"limits file {path}: {e.strerror or e}") from None
    try:
        # A UnicodeDecodeError is a ValueError too: bounded_json.reason words it.
        doc = bounded_json.loads(data) if data.lstrip().startswith(b"{") else tomllib.loads(data.decode("utf-8"))
    except (ValueError, tomllib.TOMLDecodeError) as e:
        raise AdminError(f"limits file {path} is neither JSON nor TOML: {bounded_json.reason(e)}") from None
    except RecursionError:
        # tomllib recurses once per nested array or inline table and has no bound of its own.
        raise AdminError(f"limits file {path} is neither JSON nor TOML: nested too deeply") from None
    if not isinstance(doc, dict):
        raise AdminError(f"limits file {path}: expected a table of limits")
    changes: dict[str, dict[str, object]] = {"steps": {}, "disks": {}}
    throttle = base.throttle
    for key, value in doc.items():
        name = key.replace("-", "_")
        if name not in base.keys:
            raise AdminError(f"limits file {path}: unknown key {key!r} (known: {', '.join(base.keys)})")
        if name == BUDGETS_KEY:
            changes["disks"]["budgets"] = _budgets(value, f"limits file {path}: {key}")
        elif name == "throttle":
            unlimited = value is None or (isinstance(value, int) and not isinstance(value, bool) and value == -1)
            if not unlimited and not is_rate(value):
                raise AdminError(f"limits file {path}: {key} must be bytes per second ({RATE_RANGE}) or -1, got "
                                 f"{value!r}")
            throttle = None if unlimited else value
        elif not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise AdminError(f"limits file {path}: {key} must be a positive integer, got {value!r}")
        else:
            where, attr = {**_STEP_KEYS, **_DISK_KEYS}[name]
            changes[where][attr] = value
    disks = replace(base.disks, **changes["disks"]) if base.disks is not None else None
    return RunLimits(replace(base.steps, **changes["steps"]), throttle, disks)


def _budgets(value: object, where: str) -> tuple[tuple[str, int], ...]:
    if not isinstance(value, dict):
        raise AdminError(f"{where} must be a table of log dir = bytes per second, got {value!r}")
    for d, rate in value.items():
        if not d.startswith("/") or not is_rate(rate):
            raise AdminError(f"{where}: expected an absolute log dir = bytes per second ({RATE_RANGE}), got "
                             f"{d!r} = {rate!r}")
    return tuple(sorted((d.rstrip("/") or "/", rate) for d, rate in value.items()))


def parse_budget(text: str) -> tuple[str, int]:
    """--disk-budget DIR=RATE; AdminError with the reason."""
    d, eq, rate = text.rpartition("=")
    if not eq or not d.startswith("/") or not rate.isdigit() or not is_rate(int(rate)):
        raise AdminError(f"expected LOG_DIR=BYTES_PER_S (an absolute path, {RATE_RANGE}), got {text!r}")
    return d.rstrip("/") or "/", int(rate)


class LimitsFile:
    """Re-read when its modification time or size changes. Polled once a step, with a stat: editors replace files by
    renaming, which a stat sees as well as a watch would, and a poll needs no thread to stop."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen = self._stamp()

    def _stamp(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def changed(self) -> bool:
        stamp = self._stamp()
        if stamp != self._seen:
            self._seen = stamp
            return stamp is not None
        return False

    def read_if_changed(self, current: RunLimits, say: Callable[[str], None],
                        between_brokers: bool = True) -> RunLimits | None:
        """The file's new limits when it changed to other valid ones; a change that does not parse is said in one
        line and the run keeps `current` (None), so a typo never stops a run."""
        if not self.changed():
            return None
        try:
            new = read_limits(self.path, current)
        except AdminError as e:
            say(f"{e} (keeping: {current.describe(between_brokers)})")
            return None
        return new if new != current else None
