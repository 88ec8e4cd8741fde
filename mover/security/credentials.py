"""SCRAM credentials: salted, never the password itself, in Kafka's format.

Kafka stores a user's credentials under ZooKeeper `/config/users/<name>` as
`{"version":1,"config":{"SCRAM-SHA-256":"salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>"}}`
(ScramCredentialUtils). We keep that exact value per user: in ZooKeeper when `zookeeper.connect` is configured (so
kafka-configs.sh --alter --entity-type users and moverd share one store), else in `scram-credentials.json` in every
log dir (`{"epoch": n, "users": {name: <the same config map>}}`), written atomically like the dynamic config so
losing one disk loses no user. The daemon re-reads the file when it changes, so `moverd --add-scram-user` works on
a running broker.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from scramp import ScramMechanism

from mover.config.security import SCRAM_SHA_256, SCRAM_SHA_512
from mover.storage.broker_files import BrokerFiles, as_broker_files
from mover.zk import bounded_json

log = logging.getLogger(__name__)

FILE_NAME = "scram-credentials.json"
USERS_PATH = "/config/users"

# Kafka refuses fewer (ScramMechanism.minIterations) and uses 4096 by default in kafka-configs.sh.
MIN_ITERATIONS = 4096
DEFAULT_ITERATIONS = 4096
MAX_ITERATIONS = 16384  # Kafka's ScramMechanism.maxIterations

# How often a lookup may re-check the credentials file for changes.
RELOAD_CHECK_S = 1.0


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_kafka(self) -> str:
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def from_kafka(cls, text: str) -> ScramCredential:
        fields = dict(part.split("=", 1) for part in text.split(","))
        return cls(
            salt=base64.b64decode(fields["salt"]),
            stored_key=base64.b64decode(fields["stored_key"]),
            server_key=base64.b64decode(fields["server_key"]),
            iterations=int(fields["iterations"]),
        )

    @classmethod
    def create(cls, mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ValueError(f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}")
        salt, stored_key, server_key, i = ScramMechanism(mechanism).make_auth_info(password, iteration_count=iterations)
        return cls(salt, stored_key, server_key, i)


class CredentialStore(Protocol):
    def lookup(self, user: str, mechanism: str) -> ScramCredential | None: ...

    def upsert(self, user: str, mechanism: str, credential: ScramCredential) -> None: ...

    def delete(self, user: str, mechanism: str) -> bool: ...


class FileCredentialStore:
    """scram-credentials.json in every log dir; the newest epoch wins on read."""

    def __init__(self, dirs: BrokerFiles | Iterable[Path]) -> None:
        self.files = as_broker_files(dirs)
        self._lock = threading.Lock()
        self._users: dict[str, dict[str, str]] = {}
        self._epoch = -1
        self._stamp: tuple[tuple[str, int, int], ...] = ()
        self._checked = 0.0
        self._reload(force=True)

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        self._reload()
        with self._lock:
            raw = self._users.get(user, {}).get(mechanism)
        if raw is None:
            return None
        try:
            return ScramCredential.from_kafka(raw)
        except (KeyError, ValueError) as e:
            log.warning("stored SCRAM credential of %s (%s) is unreadable: %s", user, mechanism, e)
            return None

    def upsert(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        with self._lock:
            self._reload_locked(force=True)
            self._users.setdefault(user, {})[mechanism] = credential.to_kafka()
            self._persist_locked()

    def delete(self, user: str, mechanism: str) -> bool:
        with self._lock:
            self._reload_locked(force=True)
            found = self._users.get(user, {}).pop(mechanism, None) is not None
            if user in self._users and not self._users[user]:
                del self._users[user]
            if found:
                self._persist_locked()
            return found

    def users(self) -> dict[str, list[str]]:
        self._reload()
        with self._lock:
            return {u: sorted(m) for u, m in self._users.items()}

    def _persist_locked(self) -> None:
        self._epoch += 1
        # Atomic and durable in every dir: a user added survives a crash and a lost disk.
        self.files.write_json(FILE_NAME, {"epoch": self._epoch, "users": self._users}, "SCRAM credentials")
        self._stamp = self.files.stamp(FILE_NAME)

    def _reload(self, force: bool = False) -> None:
        with self._lock:
            self._reload_locked(force)

    def _reload_locked(self, force: bool) -> None:
        now = time.monotonic()
        if not force and now - self._checked < RELOAD_CHECK_S:
            return
        self._checked = now
        stamp = self.files.stamp(FILE_NAME)
        if not force and stamp == self._stamp:
            return
        self._stamp = stamp
        best = self.files.read_newest_json(FILE_NAME, _epoch_of, "SCRAM credentials")
        if best is None:
            return
        users = best.get("users")
        if isinstance(users, dict):
            self._users = {u: dict(m) for u, m in users.items() if isinstance(m, dict)}
            self._epoch = int(best["epoch"])


class ZkCredentialStore:
    """Kafka's own store: `/config/users/<name>`, shared with kafka-configs.sh and the Kafka brokers."""

    def __init__(self, client: Any) -> None:
        self.zk = client  # a started kazoo.client.KazooClient

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self.zk.get(f"{USERS_PATH}/{user}")
        except NoNodeError:
            return None
        raw = _config_of(data).get(mechanism)
        return ScramCredential.from_kafka(raw) if raw else None

    def upsert(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        self._update(user, lambda config: config.__setitem__(mechanism, credential.to_kafka()))

    def delete(self, user: str, mechanism: str) -> bool:
        found = []
        self._update(user, lambda config: found.append(config.pop(mechanism, None) is not None))
        return bool(found and found[0])

    def _update(self, user: str, change: Any) -> None:
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        path = f"{USERS_PATH}/{user}"
        while True:
            try:
                data, stat = self.zk.get(path)
                config, version = _config_of(data), stat.version
            except NoNodeError:
                config, version = {}, None
            change(config)
            value = json.dumps({"version": 1, "config": config}).encode()
            try:
                if version is None:
                    self.zk.create(path, value, makepath=True)
                else:
                    self.zk.set(path, value, version=version)
                # kafka-configs.sh announces the change so brokers reload (ConfigChangeNotification).
                note = json.dumps({"version": 2, "entity_path": f"users/{user}"}).encode()
                self.zk.create("/config/changes/config_change_", note, sequence=True, makepath=True)
                return
            except (BadVersionError, NodeExistsError):
                continue  # a concurrent writer: read again


def _config_of(data: bytes) -> dict[str, str]:
    try:
        value = bounded_json.loads(data or b"{}")
    except ValueError:
        return {}
    config = value.get("config") if isinstance(value, dict) else None
    return dict(config) if isinstance(config, dict) else {}


def _epoch_of(data: dict) -> int:
    epoch = data["epoch"]
    if not isinstance(epoch, int):
        raise ValueError("not a SCRAM credentials file")
    return epoch


SCRAM_MECHANISMS = (SCRAM_SHA_256, SCRAM_SHA_512)
