"""Request ids (KIP-179) and the throttle values to put back, in a local file: the interface of the cluster's store
(mover/admin/reassign/request_store.py, what the tools use) for the simulated clusters of unit tests, which have no
status topic. One machine's view only: no claims between runs, no heartbeat.

    $MOVER_REASSIGN_STATE_DIR (default ~/.local/state/mover-reassign)/<cluster id>.json
    {"version": 1, "next_id": 3,
     "requests": {"1": {"started_ms": .., "ended_ms": -1, "state": "running",
                        "partitions": [{"topic": "t", "partition": 0, "replicas": [5, 6, 7]}]}},
     "originals": {"broker:5": {"leader.replication.throttled.rate": "100"}, "topic:t": {}}}

The file names requests and originals only: where each partition stands is always asked of the cluster, so a
resumed run starts from the cluster's state, never from here (docs/cli.md, "mover-reassign").

Crash-safety invariants (as mover/audit/execute_state.py):
* A resource's original value is in the file before the run changes that resource: after a crash the resource holds
  either its original or the run's value with the original recorded here, and a later run restores it.
* An original is never overwritten by what the resource says later (that may be the run's own value); it leaves the
  file only after the resource took it back.
* The file is replaced whole (tmp, fsync, rename, fsync of the dir): a reader sees the old or the new content.
* Request ids only grow: `next_id` is written with the request before the id is printed.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mover.admin.common import AdminError
from mover.storage.files import atomic_write

FORMAT_VERSION = 1
STATE_DIR_ENV = "MOVER_REASSIGN_STATE_DIR"
RUNNING = "running"
# A file that only moves replicas between log dirs: the brokers carry the moves out after --execute has ended.


def default_state_dir() -> Path:
    configured = os.environ.get(STATE_DIR_ENV)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "mover-reassign"


class RequestStore:
    def __init__(self, cluster_id: str | None, root: Path | None = None) -> None:
        root = root if root is not None else default_state_dir()
        self.path = root / f"{cluster_id or 'unknown-cluster'}.json"
        self._doc = self._load()

    def _load(self) -> dict[str, Any]:
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {"version": FORMAT_VERSION, "next_id": 1, "requests": {}, "originals": {}}
        except (OSError, ValueError) as e:
            raise AdminError(f"{self.path}: cannot read mover-reassign's state: {e}") from None
        if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION:
            raise AdminError(f"{self.path}: not a mover-reassign state file of version {FORMAT_VERSION}")
        return doc

    def _write(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, (json.dumps(self._doc, indent=1, sort_keys=True) + "\n").encode())
        except OSError as e:
            raise AdminError(f"cannot write {self.path}: {e.strerror or e}") from None

    # ------------------------------------------------------------------------------------------------ requests

    def new_request(self, partitions: list[dict[str, Any]]) -> int:
        request_id = int(self._doc["next_id"])
        self._doc["next_id"] = request_id + 1
        self._doc["requests"][str(request_id)] = {"started_ms": int(time.time() * 1000), "ended_ms": -1,
                                                  "state": RUNNING, "partitions": partitions}
        self._write()
        return request_id

    def latest(self) -> int | None:
        ids = [int(i) for i in self._doc["requests"]]
        return max(ids) if ids else None

    def request(self, request_id: int) -> dict[str, Any]:
        found = self._doc["requests"].get(str(request_id))
        if found is None:
            known = ", ".join(sorted(self._doc["requests"], key=int)) or "none"
            raise AdminError(f"unknown request id {request_id} (known here: {known})")
        return found

    def running_for(self, partitions: set[tuple[str, int]]) -> int | None:
        """The latest running request that covers all of `partitions` (a resumed --execute keeps its id)."""
        for rid in sorted((int(i) for i in self._doc["requests"]), reverse=True):
            req = self._doc["requests"][str(rid)]
            if req["state"] == RUNNING and {(p["topic"], p["partition"]) for p in req["partitions"]} == partitions:
                return rid
        return None

    def reloaded_state(self, request_id: int) -> str:
        """The request's state as the file says now (another process, --cancel, may have changed it)."""
        try:
            self._doc = self._load()
        except AdminError:
            return RUNNING
        found = self._doc["requests"].get(str(request_id))
        return RUNNING if found is None else str(found["state"])

    def finish(self, request_id: int, state: str) -> None:
        req = self.request(request_id)
        req["state"] = state
        req["ended_ms"] = -1 if state == RUNNING else int(time.time() * 1000)
        self._write()

    # ------------------------------------------------------------------------------------------------ originals

    def original(self, resource: str) -> dict[str, str] | None:
        return self._doc["originals"].get(resource)

    def originals(self) -> dict[str, dict[str, str]]:
        return dict(self._doc["originals"])

    def record(self, resource: str, values: dict[str, str]) -> None:
        if resource in self._doc["originals"]:
            return
        self._doc["originals"][resource] = dict(values)
        self._write()

    def hold(self, resource: str, describe: Callable[[], dict[str, str]]) -> dict[str, str]:
        if resource not in self._doc["originals"]:
            self.record(resource, describe())
        return dict(self._doc["originals"][resource])

    def release(self, resource: str) -> dict[str, str] | None:
        return self.original(resource)

    def ended(self, resource: str) -> None:
        self.forget(resource)

    def claim(self, partitions: list[dict[str, Any]]) -> tuple[int, bool]:
        running = self.running_for({(p["topic"], p["partition"]) for p in partitions})
        return (running, True) if running is not None else (self.new_request(partitions), False)

    def progress_tick(self, request_id: int, runs: Any) -> None:
        """Progress is asked of the cluster only here."""

    def close(self) -> None:
        """Nothing to let go (ClusterRequestStore's interface)."""

    def forget(self, resource: str) -> None:
        if self._doc["originals"].pop(resource, None) is not None:
            self._write()
