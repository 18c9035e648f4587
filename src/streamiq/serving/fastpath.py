"""A lean ASGI path for forwarded key lookups (the internal hop of a forwarded GET).

A forwarded lookup (``X-Streamiq-Forwarded: 1``, no query string) for a key this node
holds is answered straight from the store, before FastAPI routing and parameter
validation, with the exact body and headers of the regular route. Anything else
(unknown view, malformed key, windowed view, a partition not held, a missing key,
position waits) falls through to the regular route, which owns the error answers.
Client-facing requests never take this path, so every client request still goes
through the documented FastAPI route.

Why: forwarding costs a second full HTTP request; measured with bench/bench_queries.py
the FastAPI route is most of a node's CPU per lookup, so the owner's half of a
forwarded lookup is where the hop's cost can be cut without changing the protocol.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from streamiq.serving.coordinator import FORWARDED, HOPS, SERVED_BY

if TYPE_CHECKING:
    from streamiq.serving.app import NodeDeps

__all__ = ["InternalLookups"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]],
                    Callable[[Message], Awaitable[None]]], Awaitable[None]]

_FWD = (FORWARDED.encode(), b"1")


def _dumps(v: Any) -> bytes:
    return json.dumps(v, ensure_ascii=False).encode()


class InternalLookups:
    """ASGI middleware: ``app.add_middleware(InternalLookups, deps=deps)``."""

    def __init__(self, app: ASGIApp, deps: NodeDeps) -> None:
        self.app = app
        self.deps = deps

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if (scope["type"] == "http" and scope["method"] == "GET" and not scope["query_string"]
                and _FWD in scope["headers"]):
            answer = self.answer(scope["path"])
            if answer is not None:
                body, headers = answer
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)

    def answer(self, path: str) -> tuple[bytes, list[tuple[bytes, bytes]]] | None:
        parts = path.split("/")
        if len(parts) != 6 or parts[1] != "v1" or parts[2] != "views" or parts[4] != "keys":
            return None
        node = self.deps.node
        view = node.views.get(parts[3])
        key = parts[5]
        if view is None or view.windowed:
            return None
        try:
            view.parse_key(key)
        except ValueError:
            return None
        p = view.partition_of(key, node.partitions[view.name])
        if not node.holds(view.name, p):
            return None
        raw = node.stores[view.name].get(p, key.encode())
        if raw is None:
            return None
        stamp = self.deps.stamp(view.name, p)
        body = b"".join((
            b'{"view":', _dumps(view.name), b',"key":', _dumps(key),
            b',"partition":', str(p).encode(), b',"value":', raw,
            b',"served_by":', _dumps(stamp["served_by"]), b',"role":', _dumps(stamp["role"]),
            b',"lag":', str(stamp["lag"]).encode(), b"}"))
        headers = [(b"content-type", b"application/json"),
                   (b"content-length", str(len(body)).encode()),
                   (SERVED_BY.encode(), node.endpoint.encode()), (HOPS.encode(), b"0")]
        return body, headers
