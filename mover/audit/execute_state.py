"""PLANDIR/execute-state.json: where `execute` kept each broker's move throttle from before it changed it, until
2026-12-05. The originals are held in the cluster now (mover/audit/executor/throttles.py: a file on one operator's
machine let a run elsewhere, or of another plan, take a broker's throttle for its own). A file an older run left is
still read: its brokers get their own value back at the next run of the plan, and it is removed. Nothing writes
new entries.

    {"version": 1, "throttles": {"<cluster>": {"<broker id>": {"<config key>": "<value>", ...}, ...}}}

An empty {} for a broker means it had no per-broker throttle: restoring it deletes the run's.

Crash-safety invariants (of the forgetting that remains):
* An entry leaves the file only after the broker took the restored value; a crash in between restores the same
  value again (idempotent).
* The file is replaced whole with storage's atomic_write (tmp, fsync, rename, fsync of the dir): a reader sees the
  old or the new content, never a mix. When no entry is left the file is unlinked, and the unlink is made durable
  (fsync of the dir) before the run goes on: a later run must not restore a value the operator has changed since.
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
