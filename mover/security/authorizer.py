"""The ACL authorizer (Kafka's AclAuthorizer semantics): super users, DENY wins, implied Describe, and the
allow-everyone-if-no-ACL switch.

Decision for (principal, host, operation, resource), as Kafka makes it:
1. a super user (`super.users`) is allowed everything;
2. the ACLs that apply are those on the literal name, on the wildcard `*`, and on every PREFIXED pattern the name
   starts with;
3. if none exist at all, `allow.everyone.if.no.acl.found` decides;
4. any DENY for the principal (or `User:*`), the host (or `*`) and the operation (or All) refuses;
5. else an ALLOW of the operation, All, or an operation that implies it (Read/Write/Delete/Alter imply Describe,
   AlterConfigs implies DescribeConfigs) allows; nothing else does.
Every refusal is logged with principal, operation, resource and client address (logger `mover.security.audit`).

Persistence: in ZooKeeper in Kafka's layout when `zookeeper.connect` is set (literal patterns under
`/kafka-acl/<Type>/<name>`, prefixed under `/kafka-acl-extended/prefixed/<Type>/<name>`, each
`{"version":1,"acls":[{"principal":...,"permissionType":"Allow","operation":"Read","host":"*"}]}`, with a sequential
node under `/kafka-acl-changes` or `/kafka-acl-extended-changes` per change so other brokers reload), else
`acls.json` in every log dir, written atomically like the dynamic config.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mover.config.security import SecurityConfig
from mover.security.acls import (
    IMPLIED_BY,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    ZK_TYPE_NAMES,
    AclEntry,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    Resource,
    ResourceType,
)
from mover.security.session import Session
from mover.storage.broker_files import BrokerFiles, as_broker_files
from mover.zk import bounded_json

log = logging.getLogger(__name__)
audit = logging.getLogger("mover.security.audit")

FILE_NAME = "acls.json"
LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"

# Kafka's authorizer class names; any of them (or ours) turns authorization on.
KNOWN_AUTHORIZERS = (
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "mover.security.authorizer.Authorizer",
)

Acls = dict[Resource, set[AclEntry]]


class Authorizer:
    def __init__(self, config: SecurityConfig, store: AclStore) -> None:
        self.super_users = config.super_users
        self.allow_if_no_acl = config.allow_everyone_if_no_acl_found
        self.store = store

    @classmethod
    def build(cls, config: SecurityConfig, dirs: BrokerFiles | Iterable[Path], zk: Any = None) -> Authorizer:
        store: AclStore = ZkAclStore(zk) if zk is not None else FileAclStore(dirs)
        return cls(config, store)

    def close(self) -> None:
        self.store.close()

    # -------------------------------------------------------------------------------------------------- decisions

    def authorize(self, session: Session | None, operation: Operation, resource_type: ResourceType, name: str,
                  *, log_denial: bool = True) -> bool:
        principal = session.principal if session is not None else "User:ANONYMOUS"
        host = session.client_host if session is not None else ""
        allowed = self._decide(principal, host, operation, resource_type, name)
        if not allowed and log_denial:
            audit.warning(
                "DENIED principal=%s operation=%s resource=%s:%s client=%s listener=%s",
                principal, operation.name, resource_type.name, name,
                session.address if session is not None else "-", session.listener if session is not None else "-",
            )
        return allowed

    def _decide(self, principal: str, host: str, operation: Operation, resource_type: ResourceType,
                name: str) -> bool:
        if principal in self.super_users:
            return True
        entries = [e for r, es in self.store.snapshot().items() if r.matches(resource_type, name) for e in es]
        if not entries:
            return self.allow_if_no_acl
        for e in entries:
            if e.permission == Permission.DENY and e.applies(principal, host, operation):
                return False
        allowing = IMPLIED_BY.get(operation, (operation,))
        return any(
            e.permission == Permission.ALLOW and any(e.applies(principal, host, op) for op in allowing)
            for e in entries
        )

    # ------------------------------------------------------------------------------------------------ management

    def describe(self, flt: AclFilter) -> Acls:
        out: Acls = {}
        for r, es in self.store.snapshot().items():
            if not flt.matches_resource(r):
                continue
            chosen = {e for e in es if flt.matches_entry(e)}
            if chosen:
                out[r] = chosen
        return out

    def create(self, bindings: list[tuple[Resource, AclEntry]]) -> None:
        self.store.update(lambda acls: [acls.setdefault(r, set()).add(e) for r, e in bindings])

    def delete(self, filters: list[AclFilter]) -> list[list[tuple[Resource, AclEntry]]]:
        removed: list[list[tuple[Resource, AclEntry]]] = [[] for _ in filters]

        def change(acls: Acls) -> None:
            for i, flt in enumerate(filters):
                for r in list(acls):
                    if not flt.matches_resource(r):
                        continue
                    gone = {e for e in acls[r] if flt.matches_entry(e)}
                    removed[i].extend((r, e) for e in sorted(gone))
                    acls[r] -= gone
                    if not acls[r]:
                        del acls[r]

        self.store.update(change)
        return removed


class AclStore:
    def snapshot(self) -> Acls:
        raise NotImplementedError

    def update(self, change: Any) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class FileAclStore(AclStore):
    """acls.json in every log dir; the newest epoch wins at start-up."""

    def __init__(self, dirs: BrokerFiles | Iterable[Path]) -> None:
        self.files = as_broker_files(dirs)
        self._lock = threading.Lock()
        self._epoch = 0
        self._acls: Acls = {}
        best = self.files.read_newest_json(FILE_NAME, _epoch_of, "ACLs")
        if best is not None:
            self._epoch = best["epoch"]
            self._acls = _acls_from_json(best.get("acls", []))
            log.info("ACLs loaded (epoch %d): %d resources", self._epoch, len(self._acls))

    def snapshot(self) -> Acls:
        return self._acls  # replaced, never mutated, under the lock: a reader sees one whole version

    def update(self, change: Any) -> None:
        with self._lock:
            acls = {r: set(es) for r, es in self._acls.items()}
            change(acls)
            self._epoch += 1
            # Every dir, atomically and durably, before the change is visible or acknowledged.
            self.files.write_json(FILE_NAME, {"epoch": self._epoch, "acls": _acls_to_json(acls)}, "ACLs")
            self._acls = acls


class ZkAclStore(AclStore):
    """Kafka's ZooKeeper layout; a watch on the change-notification paths reloads what other brokers change."""

    def __init__(self, zk: Any) -> None:
        self.zk = zk
        self._lock = threading.Lock()
        self._acls: Acls = self._load()
        for path in (LITERAL_CHANGES, EXTENDED_CHANGES):
            zk.ensure_path(path)
            zk.ChildrenWatch(path, self._on_change)

    def _on_change(self, _children: list[str]) -> bool:
        try:
            self._acls = self._load()
        except Exception as e:  # a ZooKeeper hiccup: keep the ACLs we have, the next change reloads
            log.warning("reloading ACLs from ZooKeeper failed: %s", e)
        return True

    def _load(self) -> Acls:
        from kazoo.exceptions import NoNodeError

        out: Acls = {}
        for root, pattern in ((LITERAL_ROOT, PatternType.LITERAL), (PREFIXED_ROOT, PatternType.PREFIXED)):
            for rtype, tname in ZK_TYPE_NAMES.items():
                try:
                    names = self.zk.get_children(f"{root}/{tname}")
                except NoNodeError:
                    continue
                for name in names:
                    try:
                        data, _ = self.zk.get(f"{root}/{tname}/{name}")
                        entries = {AclEntry.from_zk(a) for a in bounded_json.loads(data or b"{}").get("acls", [])}
                    except (NoNodeError, ValueError, KeyError, TypeError, AttributeError) as e:
                        log.warning("ignoring unreadable ACL node %s/%s/%s: %s", root, tname, name, e)
                        continue
                    if entries:
                        out[Resource(rtype, name, pattern)] = entries
        return out

    def snapshot(self) -> Acls:
        return self._acls

    def update(self, change: Any) -> None:
        with self._lock:
            before = self._load()
            after = {r: set(es) for r, es in before.items()}
            change(after)
            for r in set(before) | set(after):
                if before.get(r) == after.get(r):
                    continue
                self._write(r, after.get(r, set()))
            self._acls = after

    def _write(self, r: Resource, entries: set[AclEntry]) -> None:
        from kazoo.exceptions import NoNodeError

        root = LITERAL_ROOT if r.pattern == PatternType.LITERAL else PREFIXED_ROOT
        path = f"{root}/{ZK_TYPE_NAMES[r.type]}/{r.name}"
        if entries:
            value = json.dumps({"version": 1, "acls": [e.to_zk() for e in sorted(entries)]}).encode()
            if self.zk.exists(path):
                self.zk.set(path, value)
            else:
                self.zk.create(path, value, makepath=True)
        else:
            try:
                self.zk.delete(path)
            except NoNodeError:
                pass
        if r.pattern == PatternType.LITERAL:
            note = f"{ZK_TYPE_NAMES[r.type]}:{r.name}".encode()
            changes = LITERAL_CHANGES
        else:
            note = json.dumps({"version": 1, "resourceType": ZK_TYPE_NAMES[r.type], "name": r.name,
                               "patternType": r.pattern.name}).encode()
            changes = EXTENDED_CHANGES
        self.zk.create(f"{changes}/{CHANGE_PREFIX}", note, sequence=True, makepath=True)


def _acls_to_json(acls: Acls) -> list[dict[str, Any]]:
    return [
        {"resourceType": ZK_TYPE_NAMES[r.type], "name": r.name, "patternType": r.pattern.name,
         "acls": [e.to_zk() for e in sorted(es)]}
        for r, es in sorted(acls.items())
    ]


def _acls_from_json(items: list[dict[str, Any]]) -> Acls:
    by_name = {v: k for k, v in ZK_TYPE_NAMES.items()}
    out: Acls = {}
    for item in items:
        try:
            r = Resource(by_name[item["resourceType"]], item["name"], PatternType[item["patternType"]])
            out[r] = {AclEntry.from_zk(a) for a in item["acls"]}
        except (KeyError, TypeError) as e:
            log.warning("ignoring unreadable stored ACL %r: %s", item, e)
    return out


def _epoch_of(data: dict) -> int:
    epoch = data["epoch"]
    if not isinstance(epoch, int):
        raise ValueError("not an ACL file")
    return epoch


__all__ = ["Authorizer", "KNOWN_AUTHORIZERS", "WILDCARD", "WILDCARD_PRINCIPAL"]
