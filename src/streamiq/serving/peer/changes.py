"""The owner's side of a peer's subscription (issue 40): one request of kind ``changes``,
answered by a stream of reply frames under its request id.

The request's query is a ``Changes`` (``query/model.py``: the view, its keys or prefix,
the position to start from) over the partitions ``p`` (the entry node sends only the
keys of those partitions), read by ``codec.decode`` as any typed query. Each event is one 200 frame
whose body is ``{"i": id, "e": kind, "d": data}``; a ``keepalive`` frame every
``HEARTBEAT_S`` at most, so the entry tells a hung owner from an idle stream; the
stream's end (its partitions handed over) is its ``end`` event, and an error (before or
during the stream) one error frame. The stream stops when the connection closes, and
waits while the entry reads nothing (the transport's buffer past ``HIGH_WATER``): the
subscription's inbox then coalesces, so the owner's memory stays bounded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import orjson

from streamiq.serving.changes.position import parse
from streamiq.serving.changes.stream import Event, Scope, Subscription
from streamiq.serving.cluster.wire import reply_frame
from streamiq.serving.peer.failures import failure
from streamiq.serving.query.model import Changes
from streamiq.serving.query.run import Queries

__all__ = ["HEARTBEAT_S", "HIGH_WATER", "Waiting", "Write", "serve_changes"]

log = logging.getLogger("streamiq.routing")

#: at most this long between two frames of a stream (the entry's hang bound is 3x)
HEARTBEAT_S = 1.0
#: bytes waiting unsent to the entry past which the stream stops taking events (its
#: subscription's bounded buffer then takes them, and past it the newest value per
#: key). Small: the transport holds each small frame written with some hundreds of
#: bytes of its own (16 stalled streams grew a node 72 MB with 1 MiB here)
HIGH_WATER = 64 * 1024

#: write a frame
Write = Callable[[bytes], None]
#: the bytes still waiting in the transport, -1 once it closes
Waiting = Callable[[], int]


def event_body(e: Event) -> bytes:
    doc: dict[str, Any] = {"i": e.id, "e": e.kind,
                           "d": None if e.data is None else orjson.Fragment(e.data)}
    return orjson.dumps(doc)


def _scope(queries: Queries, q: Changes, partitions: tuple[int, ...]
           ) -> tuple[Scope, dict[int, int] | None]:
    scope = Scope(queries.view(q.view), partitions, keys=q.keys, prefix=q.prefix, tail=q.tail)
    return scope, None if q.start is None else parse(q.start, partitions)


async def serve_changes(queries: Queries, rid: int, q: Changes, partitions: tuple[int, ...],
                        write: Write, waiting: Waiting) -> None:
    """Stream a peer's subscription until it ends or the connection closes."""
    sub: Subscription | None = None
    try:
        scope, start = _scope(queries, q, partitions)
        sub = await Subscription.open(queries.node, scope, start)
        async for e in sub.events(HEARTBEAT_S):
            write(reply_frame(rid, 200, event_body(e)))
            unsent = waiting()
            while unsent > HIGH_WATER:  # the entry reads nothing: let the inbox coalesce
                await asyncio.sleep(0.01)
                unsent = waiting()
            if unsent < 0:
                return
    except Exception as exc:
        write(failure(rid, exc, "peer subscription"))
    finally:
        if sub is not None:
            sub.close()
