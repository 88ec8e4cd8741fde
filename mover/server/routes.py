"""The handler registry: which APIs a server answers, at which versions, with what."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from mover.wire import API_BY_KEY, Api, Chunk, RequestHeader
from mover.wire.messages import API_VERSIONS

Body = dict[str, Any]
# `async def handle(header, request) -> response`, or a plain function (run in the server's thread pool).
# Returning None sends no response (Produce with acks=0); raising CloseConnection ends the connection instead.
Handler = Callable[[RequestHeader, Body], Awaitable[Body | None]] | Callable[[RequestHeader, Body], Body | None]
# Builds the answer carrying an error code when a handler failed: (version, request, code) -> response, or None when
# the version has no shape that can carry it (the connection is then closed). The API layer provides them.
Builder = Callable[[int, Body, int], Body | None]


class _NotNow:
    def __repr__(self) -> str:
        return "NOT_NOW"


# Returned by a route's `fast` function: it cannot answer without waiting; the route's handler runs instead.
NOT_NOW: Any = _NotNow()
# `fast(header, request) -> response | None | NOT_NOW`, a plain function run on the event loop (see Route.fast).
FastHandler = Callable[[RequestHeader, Body], Any]
# `fast_many([(header, request), ...]) -> [response | None, ...]` for a prefix of the requests (see Route.fast_many).
FastManyHandler = Callable[[list[tuple[RequestHeader, Body]]], list[Any]]
# `encode(version, correlation_id, response) -> chunks | None` (see Route.encode).
Encoder = Callable[[int, int, Body], list[Chunk] | None]


class Recogniser(Protocol):
    """One connection's recogniser of a route's repeated requests (see Route.repeats)."""

    def match(self, frame: bytes | bytearray) -> tuple[RequestHeader, Body] | None: ...

    def saw(self, frame: bytes | bytearray, header: RequestHeader, body: Body) -> None: ...


class CloseConnection(Exception):
    """Raised by a handler: send no answer and close the connection once the earlier answers are written (Kafka's
    only way to tell an acks=0 producer its request failed)."""


@dataclass(frozen=True)
class Route:
    """A handler with options; a bare handler in the registry means `Route(handler)`.

    Attributes:
        handler: async function, or sync function (then run in the thread pool so it may block).
        versions: (min, max) to advertise and accept; default: every version the codec declares for the API.
        concurrent: may run while earlier requests on the same connection are still running. Default False:
            like Kafka's broker, which handles one request per connection at a time, so e.g. two pipelined
            Produce requests to a partition are appended in the order they were sent. Read-only APIs can set True.
        error_response: builds the answer when the handler raises; None: close the connection instead. The API
            layer sets it for every API it serves (mover.api.error_responses).
        fast: an optional plain function the connection calls on the event loop, at once and without a task, when
            the request may start now (nothing earlier on the connection that it must wait for is still running).
            It returns the answer (or None for no answer), or NOT_NOW when answering would mean waiting; it must
            then have done nothing, and `handler` runs as usual. It must never block. It saves a request the
            task, the wait for its predecessor and the hand-offs between them: most of what a tiny request costs.
            A wrapper that adds checks to `handler` (authorization) must drop `fast` or add the same checks to it.
        fast_many: like `fast`, for a run of consecutive requests of this API read together from one connection
            (a pipelining producer's burst), when nothing earlier on the connection is still running and the
            connection's gate admits runs (ConnectionGate.admits_runs: without SASL). It answers a
            prefix of them, in order (a response, or None for no answer, per request), and must leave the rest
            untouched: they then take the usual way one by one. It must give each request the answer `fast` or
            the handler would have given it, and never block. What it saves is the per-call cost shared by the
            run (one append of all their batches instead of one each). The same rule as `fast` for wrappers.
        encode: an optional encoder the connection tries before the generic one for this route's answers: the
            framed answer, byte-equal to what `encode_response` would give, or None to leave it to the generic
            encoder. For answers an API can encode cheaper (a template patched with the answer's values,
            `mover.wire.frame_template`). It only encodes, so a wrapper may keep it.
        repeats: an optional factory of a per-connection `Recogniser` of this route's repeated requests, for APIs
            whose clients send request after request that differ in a few bytes only (a producer's batches:
            mover/api/produce_repeats.py). The connection makes one the first time it decodes a request of this
            route (a connection that never sends one pays nothing), tells it each request of the route it decoded
            the usual way (`saw(frame, header, body)`), and asks it first of every later frame (`match(frame)`):
            for a repeat of a request it saw, the header and body the generic decode would give that frame (the
            same API and version: the connection does not check them again), else None (decoded as usual). A
            match is admitted by the gate and started as a request of this route. It only decodes, so a wrapper
            may keep it.
    """

    handler: Handler
    versions: tuple[int, int] | None = None
    concurrent: bool = False
    error_response: Builder | None = None
    fast: FastHandler | None = None
    fast_many: FastManyHandler | None = None
    encode: Encoder | None = None
    repeats: Callable[[], Recogniser] | None = None


@dataclass(frozen=True)
class ResolvedRoute:
    api: Api
    handler: Handler
    is_async: bool
    min_version: int
    max_version: int
    concurrent: bool
    error_response: Builder | None
    fast: FastHandler | None = None
    fast_many: FastManyHandler | None = None
    encode: Encoder | None = None
    repeats: Callable[[], Recogniser] | None = None


def resolve_routes(
    handlers: Mapping[int, Handler | Route], apis: Mapping[int, Api] = API_BY_KEY
) -> dict[int, ResolvedRoute]:
    """Check a `{api_key: handler or Route}` registry against the codec's declarations.

    Raises:
        ValueError: an API the codec does not declare, a version range outside its declaration, or an attempt to
            register ApiVersions (the framework answers it from this very registry).
    """
    out: dict[int, ResolvedRoute] = {}
    for key, entry in handlers.items():
        route = entry if isinstance(entry, Route) else Route(entry)
        if key == API_VERSIONS.key:
            raise ValueError("ApiVersions is answered by the server from the registry; do not register it")
        api = apis.get(key)
        if api is None:
            raise ValueError(f"api key {key} has no declaration in mover.wire.messages")
        lo, hi = route.versions if route.versions is not None else (api.valid.lo, api.valid.hi)
        if not (api.valid.lo <= lo <= hi <= api.valid.hi):
            raise ValueError(f"{api.name}: versions {lo}-{hi} outside the declared {api.valid.lo}-{api.valid.hi}")
        out[key] = ResolvedRoute(
            api=api,
            handler=route.handler,
            is_async=is_async_handler(route.handler),
            min_version=lo,
            max_version=hi,
            concurrent=route.concurrent,
            error_response=route.error_response,
            fast=route.fast,
            fast_many=route.fast_many,
            encode=route.encode,
            repeats=route.repeats,
        )
    return out


def is_async_handler(handler: Handler) -> bool:
    # A class instance with `async def __call__` counts too (functools.partial is already unwrapped by inspect).
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(type(handler).__call__)
