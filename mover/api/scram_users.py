"""AlterUserScramCredentials (51, KIP-554): add, change and remove SCRAM users over the wire, as
`kafka-configs.sh --bootstrap-server ... --alter --add-config 'SCRAM-SHA-256=[password=...]' --entity-type users`
and kafka-python's `alter_user_scram_credentials` send it.

The client salts and hashes (PBKDF2) the password; the broker derives stored_key and server_key from the salted
password (RFC 5802) and stores only those, in the store moverd authenticates from (mover/security/credentials.py).
Needs Alter on CLUSTER when an authorizer is configured (Kafka's check).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from typing import TYPE_CHECKING, Any

from mover.config.security import SCRAM_SHA_256, SCRAM_SHA_512
from mover.security import session as sessions
from mover.security.acls import CLUSTER_NAME, Operation, ResourceType
from mover.security.credentials import MAX_ITERATIONS, MIN_ITERATIONS, FileCredentialStore, ScramCredential
from mover.server import Handler, Route
from mover.wire import ErrorCode, RequestHeader
from mover.wire.messages import ALTER_USER_SCRAM_CREDENTIALS

if TYPE_CHECKING:
    from mover.api.broker import Broker

log = logging.getLogger(__name__)

Body = dict[str, Any]
MECHANISM_CODES = {1: SCRAM_SHA_256, 2: SCRAM_SHA_512}


def routes(broker: Broker) -> dict[int, Handler | Route]:
    def alter(header: RequestHeader, req: Body) -> Body:
        security = broker.security
        authz = security.authorizer if security is not None else None
        users = [d["name"] for d in req["deletions"]] + [u["name"] for u in req["upsertions"]]
        if authz is not None and not authz.authorize(sessions.current(), Operation.ALTER, ResourceType.CLUSTER,
                                                     CLUSTER_NAME):
            return {"results": [_result(u, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None) for u in dict.fromkeys(users)]}
        store = security.credentials if security is not None else None
        if store is None:
            # No SCRAM listener yet: keep users where one would read them, so enabling SCRAM later finds them.
            store = FileCredentialStore(broker.manager.broker_files)
            if security is not None:
                security.credentials = store
        errors: dict[str, tuple[ErrorCode, str | None]] = {}
        seen: set[tuple[str, int]] = set()
        for item in [*req["deletions"], *req["upsertions"]]:
            key = (item["name"], item["mechanism"])
            if key in seen:
                errors.setdefault(item["name"], (ErrorCode.DUPLICATE_RESOURCE,
                                                 "A user credential cannot be altered twice in the same request"))
            seen.add(key)
            if item["mechanism"] not in MECHANISM_CODES:
                errors.setdefault(item["name"], (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"))
            if not item["name"]:
                errors.setdefault(item["name"], (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"))
        for u in req["upsertions"]:
            if u["name"] in errors:
                continue
            if not MIN_ITERATIONS <= u["iterations"] <= MAX_ITERATIONS:
                errors[u["name"]] = (ErrorCode.UNACCEPTABLE_CREDENTIAL,
                                     f"Iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}")
            elif not u["salt"] or not u["salted_password"]:
                errors[u["name"]] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty")
        for d in req["deletions"]:
            if d["name"] in errors:
                continue
            if store.lookup(d["name"], MECHANISM_CODES[d["mechanism"]]) is None:
                errors[d["name"]] = (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does "
                                                                   "not exist")
        for d in req["deletions"]:
            if d["name"] not in errors:
                store.delete(d["name"], MECHANISM_CODES[d["mechanism"]])
        for u in req["upsertions"]:
            if u["name"] not in errors:
                mechanism = MECHANISM_CODES[u["mechanism"]]
                store.upsert(u["name"], mechanism, _credential(mechanism, u["salt"], u["salted_password"],
                                                                u["iterations"]))
        changed = [u for u in dict.fromkeys(users) if u not in errors]
        if changed:
            s = sessions.current()
            log.info("SCRAM credentials changed by %s: %s", s.principal if s else "-", ", ".join(changed))
        return {"results": [_result(u, *errors.get(u, (ErrorCode.NONE, None))) for u in dict.fromkeys(users)]}

    return {ALTER_USER_SCRAM_CREDENTIALS.key: alter}


def _credential(mechanism: str, salt: bytes, salted_password: bytes, iterations: int) -> ScramCredential:
    digest = hashlib.sha256 if mechanism == SCRAM_SHA_256 else hashlib.sha512
    client_key = hmac.new(salted_password, b"Client Key", digest).digest()
    return ScramCredential(
        salt=salt,
        stored_key=digest(client_key).digest(),
        server_key=hmac.new(salted_password, b"Server Key", digest).digest(),
        iterations=iterations,
    )


def _result(user: str, code: ErrorCode, message: str | None) -> Body:
    return {"user": user, "error_code": int(code), "error_message": message}
