"""PLANDIR/execute-state.json: each broker's move throttle from before `execute` changed it, until it is restored.

`execute` sets its own log-dir throttle on the brokers it moves replicas on, and at the end puts back what the
operator had (docs/audit.md, execute, Throttle). If execute itself dies (killed, the host rebooted) the brokers keep
the run's throttle; reading them again would then take the run's value for the operator's. So the original is kept
here, and a later run on the same plan restores it.

    {"version": 1, "throttles": {"<cluster>": {"<broker id>": {"<config key>": "<value>", ...}, ...}}}

An empty {} for a broker means it had no per-broker throttle: restoring it deletes the run's.

Crash-safety invariants:
* A broker's original is in the file before execute changes that broker's throttle: after a crash at any point the
  broker holds either its original or the run's throttle with the original recorded here.
* An entry leaves the file only after the broker took the restored value; a crash in between restores the same
  value again (idempotent).
* An entry already here is never overwritten by what a broker says now: that may be the run's own throttle.
* The file is replaced whole with storage's atomic_write (tmp, fsync, rename, fsync of the dir): a reader sees the
  old or the new content, never a mix. When no entry is left the file is unlinked (a plan directory with no file has
  nothing to restore).
"""

from __future__ import annotations

import json
from pathlib import Path

from mover.audit.errors import AuditError
from mover.storage.files import atomic_write, fsync_dir

FILE_NAME = "execute-state.json"
FORMAT_VERSION = 1


class SavedThrottles:
    """The originals recorded in PLANDIR, per cluster and broker."""

    def __init__(self, plan: Path) -> None:
        self.path = plan / FILE_NAME
        self._entries: dict[str, dict[int, dict[str, str]]] = self._load()

    def _load(self) -> dict[str, dict[int, dict[str, str]]]:
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise AuditError(f"{self.path}: cannot read the throttles saved by an earlier run: {e}") from None
        try:
            if doc["version"] != FORMAT_VERSION:
                raise AuditError(f"{self.path}: version {doc['version']!r}, this execute reads {FORMAT_VERSION}")
            return {cluster: {int(broker): {str(k): str(v) for k, v in original.items()}
                              for broker, original in brokers.items()}
                    for cluster, brokers in doc["throttles"].items()}
        except (KeyError, TypeError, ValueError, AttributeError):
            raise AuditError(f"{self.path}: not a throttle state written by execute") from None

    def original(self, cluster: str, broker: int) -> dict[str, str] | None:
        """What the broker had before a run changed it; None when no run has changed it (or it was restored)."""
        return self._entries.get(cluster, {}).get(broker)

    def brokers(self, cluster: str) -> list[int]:
        return sorted(self._entries.get(cluster, {}))

    def record(self, cluster: str, broker: int, original: dict[str, str]) -> None:
        """Keep `original` for the broker, durably, unless one is kept already (that one is older, so right)."""
        if self.original(cluster, broker) is not None:
            return
        self._entries.setdefault(cluster, {})[broker] = dict(original)
        self._write()

    def forget(self, cluster: str, broker: int) -> None:
        """The broker took its original back."""
        brokers = self._entries.get(cluster, {})
        if brokers.pop(broker, None) is None:
            return
        if not brokers:
            del self._entries[cluster]
        self._write()

    def _write(self) -> None:
        try:
            if not self._entries:
                self.path.unlink(missing_ok=True)
                # The unlink must survive a crash, or a later run would restore a value the operator changed since.
                fsync_dir(self.path.parent)
                return
            doc = {"version": FORMAT_VERSION, "throttles": {
                cluster: {str(b): original for b, original in sorted(brokers.items())}
                for cluster, brokers in sorted(self._entries.items())}}
            atomic_write(self.path, (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())
        except OSError as e:
            raise AuditError(f"cannot write {self.path}: {e.strerror or e}") from None
