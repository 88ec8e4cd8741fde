"""Who a request comes from: the principal, the listener, the client address. Handlers read it from a context
variable the connection sets while a request runs (`current()`), so handler signatures stay `(header, request)`.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

ANONYMOUS = "User:ANONYMOUS"


@dataclass
class Session:
    principal: str = ANONYMOUS
    listener: str = "PLAINTEXT"
    client_host: str = ""
    client_port: int = 0

    @property
    def address(self) -> str:
        return f"{self.client_host}:{self.client_port}"


# A request outside any connection (tests calling handlers directly) runs as the anonymous user on no listener.
_CURRENT: contextvars.ContextVar[Session | None] = contextvars.ContextVar("mover_session", default=None)


def current() -> Session | None:
    return _CURRENT.get()


def set_current(session: Session | None) -> contextvars.Token[Session | None]:
    return _CURRENT.set(session)


def reset(token: contextvars.Token[Session | None]) -> None:
    _CURRENT.reset(token)
