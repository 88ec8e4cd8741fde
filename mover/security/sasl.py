"""One SASL mechanism's exchange on one connection (KIP-43, KIP-152): PLAIN and SCRAM-SHA-256/512, as Java's
javax.security.sasl.SaslServer is one: `evaluate_response(token)` takes the client's next token and returns the
answer, failing or completing with the user's name.

Which requests may come when (ApiVersions, SaslHandshake, SaslAuthenticate, v0 bare tokens, KIP-368
re-authentication and session expiry) is not decided here but in mover/server/gate.py, which owns the connection's
phase and asks this class only to check credentials. Sans-IO: bytes in, an Outcome out.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
from dataclasses import dataclass

from scramp import ScramException, ScramMechanism

from mover.config.security import PLAIN, SCRAM_SHA_256, SCRAM_SHA_512, ListenerSecurity
from mover.security.credentials import CredentialStore
from mover.wire.errors import ErrorCode

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    """The answer to one authentication step: an error, or the next token, with `user` once complete."""

    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    token: bytes = b""
    user: str | None = None  # the authenticated user: the exchange is complete

    @property
    def failed(self) -> bool:
        return self.error != ErrorCode.NONE


class SaslServer:
    def __init__(self, mechanism: str, listener: ListenerSecurity, credentials: CredentialStore | None) -> None:
        if mechanism not in (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512):
            raise ValueError(f"SASL mechanism {mechanism!r} is not offered")
        self.mechanism = mechanism
        self.listener = listener
        self.credentials = credentials
        self._scram = None
        self._scram_step = 0
        self._done = False

    def evaluate_response(self, token: bytes) -> Outcome:
        if self._done:
            return Outcome(ErrorCode.ILLEGAL_SASL_STATE, "SASL exchange already finished")
        try:
            if self.mechanism == PLAIN:
                self._done = True
                return Outcome(user=self._plain(token))
            return self._scram_step_(token)
        except _AuthFailed as e:
            self._done = True
            return Outcome(ErrorCode.SASL_AUTHENTICATION_FAILED, str(e))

    # ----------------------------------------------------------------------------------------------- mechanisms

    def _plain(self, token: bytes) -> str:
        # RFC 4616: [authzid] NUL authcid NUL passwd, UTF-8.
        try:
            parts = token.decode("utf-8").split("\0")
        except UnicodeDecodeError:
            raise _AuthFailed("Authentication failed: invalid SASL/PLAIN message") from None
        if len(parts) != 3 or not parts[1] or not parts[2]:
            raise _AuthFailed("Authentication failed: invalid SASL/PLAIN message")
        authzid, user, password = parts
        if authzid and authzid != user:
            raise _AuthFailed("Authentication failed: Client requested an authorization id that is different from "
                              "username")
        expected = self.listener.plain_users.get(user)
        # compare_digest on both paths: the answer takes as long for an unknown user as for a wrong password.
        ok = hmac.compare_digest(password.encode(), (expected or "\0" + password).encode())
        if expected is None or not ok:
            raise _AuthFailed("Authentication failed: Invalid username or password")
        return user

    def _scram_step_(self, token: bytes) -> Outcome:
        assert self.mechanism in (SCRAM_SHA_256, SCRAM_SHA_512)
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise _AuthFailed("Authentication failed: invalid SCRAM message") from None
        if self._scram_step == 0:
            mechanism = self.mechanism
            store = self.credentials

            def auth_fn(user: str) -> tuple[bytes, bytes, bytes, int] | None:
                cred = store.lookup(user, mechanism) if store is not None else None
                if cred is None:
                    return None
                return cred.salt, cred.stored_key, cred.server_key, cred.iterations

            try:
                self._scram = ScramMechanism(mechanism).make_server(auth_fn)
                self._scram.set_client_first(text)
                first = self._scram.get_server_first()
            except ScramException as e:
                log.info("SCRAM client-first refused: %s", e)
                raise _AuthFailed("Authentication failed: Invalid user credentials") from None
            self._scram_step = 1
            return Outcome(token=first.encode())
        if self._scram_step == 1 and self._scram is not None:
            server = self._scram
            signature = _verify_client_final(
                self.mechanism, text, str(server.nonce), str(server.client_first_bare), str(server.server_first),
                server.stored_key, server.server_key,
            )
            if signature is None:
                raise _AuthFailed("Authentication failed: Invalid user credentials")
            self._done = True
            return Outcome(token=b"v=" + base64.b64encode(signature), user=_scram_user(server))
        raise _AuthFailed("Authentication failed: unexpected SCRAM message")


def _verify_client_final(mechanism: str, client_final: str, nonce: str, client_first_bare: str, server_first: str,
                         stored_key: bytes, server_key: bytes) -> bytes | None:
    """RFC 5802's check of the client proof; the server signature to answer with, or None when it fails.

    Done here rather than by scramp for one reason: librdkafka before 2.6.1 echoes the client nonce twice (client
    nonce + the server's full nonce), and Kafka 3.8.1-3.9 accepted that (nonce checked by suffix), so kcat and
    confluent-kafka of those years authenticate there. We accept the exact nonce or exactly that doubled form,
    nothing looser; the proof is checked over the message as the client sent it, as Kafka does.
    """
    digest = hashlib.sha256 if mechanism == SCRAM_SHA_256 else hashlib.sha512
    without_proof, sep, proof_attr = client_final.rpartition(",p=")
    if not sep:
        return None
    attrs = without_proof.split(",")
    if len(attrs) < 2 or attrs[0] != "c=biws" or not attrs[1].startswith("r="):
        return None  # channel binding is not offered, so the client must say "n,," (biws)
    client_nonce = next((a[2:] for a in client_first_bare.split(",") if a.startswith("r=")), "")
    if attrs[1][2:] not in (nonce, client_nonce + nonce):
        return None
    try:
        proof = base64.b64decode(proof_attr, validate=True)
    except ValueError:
        return None
    auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
    client_signature = hmac.new(stored_key, auth_message, digest).digest()
    if len(proof) != len(client_signature):
        return None
    client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
    if not hmac.compare_digest(digest(client_key).digest(), stored_key):
        return None
    return hmac.new(server_key, auth_message, digest).digest()


def _scram_user(server: object) -> str:
    # scramp keeps the client-first-bare message; the user name is its n= attribute, with RFC 5802's escapes.
    bare = str(getattr(server, "client_first_bare", ""))
    for attr in bare.split(","):
        if attr.startswith("n="):
            return attr[2:].replace("=2C", ",").replace("=3D", "=")
    raise _AuthFailed("Authentication failed: no user name in the SCRAM message")


class _AuthFailed(Exception):
    pass
