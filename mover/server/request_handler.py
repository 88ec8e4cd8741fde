"""Running a request's handler, one way for every route: Kafka's KafkaRequestHandler, per connection.

A route's handler runs on the loop (`fast`, `run`), as a task (`handler`, `run_task`) or for a run of requests read
together (`fast_many`, `run_many`), and whichever way it runs it must behave the same: in the connection's context
(the server, whose pool `run_blocking` uses, and the session the authorizer reads), a raise answered by `failed`
(the route's error answer, or a close where Kafka hangs up), every answer encoded and reported to the server's
request observer by `finish` (Kafka's RequestChannel.updateRequestMetrics). Kept apart from the connection so that
no way of running a handler can forget one of these steps, and so that the connection's reader only decides when a
request runs, never how.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mover.security import session as sessions
from mover.security.session import Session
from mover.server.response_queue import CLOSE
from mover.server.routes import NOT_NOW, Body, CloseConnection, ResolvedRoute
from mover.wire import EncodeError, ErrorCode, RequestHeader, encode_response

if TYPE_CHECKING:
    from mover.server.server import Server

log = logging.getLogger("mover.server")


class RequestHandler:
    """Runs the handlers of one connection's requests; answers are what the connection queues (chunks, None for
    no answer, CLOSE)."""

    __slots__ = ("server", "peer", "context")

    def __init__(self, server: Server, session: Session, peer: Any) -> None:
        self.server = server
        self.peer = peer
        # What every handler of this connection runs in: the server (run_blocking's pool) and the session, set once.
        # A sync handler runs in it (`run`), a task in a copy of it (`run_task`).
        self.context = contextvars.copy_context()
        self.context.run(server._current.set, server)
        self.context.run(sessions.set_current, session)

    def run(self, route: ResolvedRoute, header: RequestHeader, body: Body, admitted: float,
            call: Callable[[RequestHeader, Body], Any]) -> Any:
        """`call` (the route's `fast`) on the loop: encoded chunks, None (no answer), CLOSE, or NOT_NOW (it could not
        answer without waiting; nothing was done, nothing is reported). Never raises."""
        try:
            response = self.context.run(call, header, body)
        except Exception as e:
            response = self.failed(route, header, body, e)
        if response is NOT_NOW:
            return NOT_NOW
        return self.finish(route, header, body, response, admitted)

    async def run_task(
        self, route: ResolvedRoute, header: RequestHeader, body: Body, deps: list[Any], admitted: float
    ) -> Any:
        """The route's handler, once `deps` are done: as `run`, without NOT_NOW; CLOSE if cancelled."""
        if deps:
            await asyncio.wait(deps)
        try:
            if route.is_async:
                response = await route.handler(header, body)  # type: ignore[misc]
            else:
                response = await self.server.run_blocking(route.handler, header, body)
        except asyncio.CancelledError:
            response = CLOSE
        except Exception as e:
            response = self.failed(route, header, body, e)
        return self.finish(route, header, body, response, admitted)

    def run_many(self, route: ResolvedRoute, items: list[tuple[RequestHeader, Body, float, int]]) -> list[Any]:
        """The route's `fast_many` on `items`, in the connection's context: the answers of the prefix it took ([]
        when none), not yet encoded (the connection's reader `finish`es them). If it raises, each item gets
        `failed`'s answer (logged once). The caller has checked that nothing earlier on the connection runs."""
        assert route.fast_many is not None
        try:
            return self.context.run(route.fast_many, [(h, b) for h, b, _a, _s in items])[:len(items)]
        except Exception as e:
            first = self.failed(route, items[0][0], items[0][1], e)
            return [first, *(error_answer(route, h, b) for h, b, _a, _s in items[1:])]

    def failed(self, route: ResolvedRoute, header: RequestHeader, body: Body, e: Exception) -> Any:
        """What a handler that raised `e` answers: CLOSE for CloseConnection, else the route's error answer (CLOSE
        where it has none). Called while `e` is handled (its traceback is logged)."""
        if isinstance(e, CloseConnection):
            log.info("connection %s: closing it after %s v%d: %s", self.peer, route.api.name, header.api_version, e)
            return CLOSE
        log.exception("connection %s: %s v%d handler failed", self.peer, route.api.name, header.api_version)
        return error_answer(route, header, body)

    def finish(self, route: ResolvedRoute, header: RequestHeader, body: Body, response: Any, admitted: float) -> Any:
        """The handler's `response` encoded (None and CLOSE as they are; CLOSE if it cannot be answered), the request
        reported to the server's request observer."""
        try:
            result = response if response is None or response is CLOSE else self.encode(route, header, body, response)
        except Exception:
            log.exception("connection %s: failed to answer %s v%d", self.peer, route.api.name, header.api_version)
            result = CLOSE
        observer = self.server.request_observer
        if observer is not None:
            try:
                observer(route.api.name, time.perf_counter() - admitted)
            except Exception:
                log.exception("request observer failed")
        return result

    def encode(self, route: ResolvedRoute, header: RequestHeader, body: Body, response: Body) -> Any:
        """The answer's chunks; the error answer if the handler's cannot be encoded; CLOSE if neither can."""
        api = route.api
        version = header.api_version
        try:
            if route.encode is not None:
                chunks = route.encode(version, header.correlation_id, response)
                if chunks is not None:
                    return chunks
            return encode_response(api, version, header.correlation_id, response)
        except EncodeError:
            log.exception(
                "connection %s: %s v%d handler returned an unencodable response", self.peer, api.name, version
            )
            fallback = error_answer(route, header, body)
            if fallback is CLOSE:
                return CLOSE
            return encode_response(api, version, header.correlation_id, fallback)


def error_answer(route: ResolvedRoute, header: RequestHeader, body: Body) -> Any:
    """The route's error answer to the request (UNKNOWN_SERVER_ERROR); CLOSE where it has none."""
    response = None if route.error_response is None else route.error_response(
        header.api_version, body, int(ErrorCode.UNKNOWN_SERVER_ERROR))
    return CLOSE if response is None else response
