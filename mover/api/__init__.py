"""One module per Kafka API the broker answers; each exports `routes(broker) -> {api_key: handler or Route}`.

`mover.daemon.broker_server.BrokerServer` merges the routes of every module named in MODULES. A handler reads the
request dict (mover.wire's representation) and returns the response dict; storage work runs in the server's thread
pool (plain functions, or `await run_blocking(...)` inside async handlers) so the event loop never waits on a disk.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

from mover.api.authz import check_declared, guard_routes
from mover.api.error_responses import BUILDERS
from mover.api.produce import acks_zero
from mover.server import Handler, Route
from mover.wire.messages import PRODUCE

if TYPE_CHECKING:
    from mover.api.broker import Broker

# Add a module here when it lands. ApiVersions is answered by the server framework itself.
MODULES: tuple[str, ...] = (
    "mover.api.metadata",
    "mover.api.log_dirs",
    "mover.api.replica_moves",
    "mover.api.topics",
    "mover.api.configs",
    "mover.api.produce",
    "mover.api.fetch",
    "mover.api.list_offsets",
    "mover.api.init_producer_id",
    "mover.api.acls",
    "mover.api.scram_users",
)


def collect_routes(broker: Broker) -> dict[int, Handler | Route]:
    routes: dict[int, Handler | Route] = {}
    for name in MODULES:
        module_routes: Mapping[int, Handler | Route] = importlib.import_module(name).routes(broker)
        clash = routes.keys() & module_routes.keys()
        if clash:
            raise ValueError(f"{name} registers api keys {sorted(clash)} a module before it already has")
        routes.update(module_routes)
    # Every route says how it is authorized, checked whether or not ACLs are on, so a forgotten declaration stops
    # every broker from starting rather than serving the API unguarded on a secured one.
    check_declared(routes)
    authorizer = broker.security.authorizer if broker.security is not None else None
    if authorizer is not None:
        # Every API checks what Kafka checks before its handler runs (mover/api/authz.py); inside the API
        # defaults, so a refused acks=0 produce still closes the connection.
        routes = guard_routes(routes, authorizer)
    return with_api_defaults(routes)


def with_api_defaults(routes: Mapping[int, Handler | Route]) -> dict[int, Handler | Route]:
    """What the API layer adds to every route: its error answer (error_responses.BUILDERS; every API moverd serves
    has one, tests/api/test_authorization_declared.py) unless the route has its own, and Produce's acks=0 rule (no
    answer; a failure closes the connection). The server knows neither."""
    out: dict[int, Handler | Route] = {}
    for key, entry in routes.items():
        route = entry if isinstance(entry, Route) else Route(entry)
        if route.error_response is None and key in BUILDERS:
            route = dataclasses.replace(route, error_response=BUILDERS[key])
        if key == PRODUCE.key:
            route = dataclasses.replace(route, handler=acks_zero(route.handler))
        out[key] = route
    return out
