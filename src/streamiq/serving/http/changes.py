"""``GET /v1/views/{view}/changes``: a view's changes as Server-Sent Events (issue 40).

``key=`` (repeatable), ``prefix=`` or neither (the whole view); ``from=`` or the
``Last-Event-ID`` header resumes after a position. Each change is an event whose
``data:`` is the row (``found``, ``value``; ``deleted`` for a tombstone, ``coalesced``
for a newest value standing for several changes; windowed views' ``window_start`` and
``window_end``) and whose ``id:`` is the position after it. Parameters are checked
before the stream starts, so a refusal is a 4xx with a JSON problem. Every stream is a
merge (``serving/changes/merge.py``): partitions held here read here
(``serving/changes/stream.py``), the others from their owners, and a partition handed
over mid-stream resumed on its new owner. Subscriptions are limited per node
and per token (429, ``serving/changes/limits.py``); one whose token expires ends with
``event: end`` before anything else is sent.

``GET /v1/views/{view}/aggregate/changes`` takes the aggregate query's parameters and
``interval`` (ms, 50 by default): the merged result first, then each time it changes, at
most once per interval (``serving/changes/aggregate.py``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, Callable
from typing import Annotated

import orjson
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Send
from starlette.types import Scope as ASGIScope

from streamiq.errors import BadRequest
from streamiq.serving.changes.aggregate import AggregateChanges
from streamiq.serving.changes.limits import Limits, feed_metrics
from streamiq.serving.changes.merge import Merge
from streamiq.serving.changes.position import parse
from streamiq.serving.changes.stream import Event, Scope
from streamiq.serving.http.answers import Answers
from streamiq.serving.http.params import Aggs, GroupBy, Prefix
from streamiq.serving.http.queries import aggregate_body
from streamiq.serving.query import model as q
from streamiq.serving.query.model import MAX_KEYS, Caller, Gathered
from streamiq.serving.query.reads import check_key
from streamiq.serving.routes import AGGREGATE_CHANGES, CHANGES
from streamiq.views.base import View

__all__ = ["changes_routes", "sse"]

MEDIA = "text/event-stream"
_KEEPALIVE = b": keepalive\n\n"
_EXPIRED = b'{"reason":"the token has expired"}'

Keys = Annotated[list[str] | None, Query(alias="key", description=(
    "A key to watch (repeatable; columns joined by '|')."))]
From = Annotated[str | None, Query(alias="from", description=(
    "Resume after this position (an event's id): no gap, no duplicate."))]
Interval = Annotated[int, Query(ge=1, le=60_000, description=(
    "At most one result per this many milliseconds."))]


def sse(e: Event) -> bytes:
    """One event as Server-Sent Events text."""
    if e.kind == "keepalive":
        return _KEEPALIVE
    out = []
    if e.id is not None:
        out.append(b"id: " + e.id.encode() + b"\n")
    if e.kind is not None:
        out.append(b"event: " + e.kind.encode() + b"\n")
    data = e.data or b""
    for line in data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n"):
        out.append(b"data: " + line + b"\n")
    out.append(b"\n")
    return b"".join(out)


class _Stream(StreamingResponse):
    """A stream whose subscription slot is given back whatever happens: a client gone
    before the first byte (the body never started: its own ``finally`` never runs), an
    error or a cancellation while streaming, or the end of the stream."""

    def __init__(self, body: AsyncGenerator[bytes], events: AsyncGenerator[Event],
                 release: Callable[[], None]) -> None:
        super().__init__(body, media_type=MEDIA,
                         headers={"cache-control": "no-cache", "x-accel-buffering": "no"})
        self._generators = (body, events)
        self._release = release

    async def __call__(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            try:
                for g in self._generators:  # unstarted: closed without running
                    await g.aclose()
            finally:
                self._release()


def scope_of(view: View, partitions: int, keys: list[str] | None, prefix: str | None
             ) -> Scope:
    """What a request watches, or a 400 naming the parameter."""
    if keys and prefix is not None:
        raise BadRequest("key and prefix: give one of them (or neither: the whole view)",
                         field="prefix")
    if keys:
        if len(keys) > MAX_KEYS:
            raise BadRequest(f"key: {len(keys)} keys, more than {MAX_KEYS}", field="key")
        for k in keys:
            check_key(view, k)
        unique = tuple(dict.fromkeys(keys))
        parts = sorted({view.partition_of(k, partitions) for k in unique})
        return Scope(view, tuple(parts), keys=unique)
    return Scope(view, tuple(range(partitions)), prefix=prefix or None)


def changes_routes(deps: Answers) -> APIRouter:
    r = APIRouter(tags=["changes"])
    node = deps.node
    s = node.settings
    limits = Limits(s.changes_max_subscriptions, s.changes_max_per_token,
                    by_token=deps.coordinator.gate.auth.enabled)
    if hasattr(node, "collectors"):  # its metrics on /metrics (a test's fake node: none)
        node.collectors += [limits.metrics, feed_metrics(node.materializer.feed)]

    @r.get(CHANGES.path, response_class=StreamingResponse,
           summary="Live changes of keys, a prefix or the whole view (Server-Sent Events)",
           responses={200: {"content": {MEDIA: {}}}})
    async def changes(request: Request, view: str, key: Keys = None, prefix: Prefix = None,
                      start: From = None,
                      last_event_id: Annotated[str | None, Header()] = None
                      ) -> StreamingResponse:
        v = deps.queries.view(view)
        scope = scope_of(v, node.partitions[v.name], key, prefix)
        given, field = (start, "from") if start is not None else (last_event_id,
                                                                   "Last-Event-ID")
        position = None if given is None else parse(given, scope.partitions, field)
        authorization = request.headers.get("authorization")
        release = limits.admit(authorization)
        try:
            # always merged (serving/changes/merge.py): partitions held here are read
            # here, and a partition handed over while streaming resumes on its new owner
            co = deps.coordinator
            merge = Merge(node, co.placement, co.peers.mark, scope, position, authorization)
            return respond(merge.events(keepalive()), authorization, release)
        except BaseException:
            release()
            raise

    @r.get(AGGREGATE_CHANGES.path, response_class=StreamingResponse,
           summary="An aggregate's result each time it changes (Server-Sent Events)",
           responses={200: {"content": {MEDIA: {}}}})
    async def aggregate_changes(request: Request, view: str, group_by: GroupBy = None,
                                agg: Aggs = None, prefix: Prefix = None,
                                interval: Interval = 50) -> StreamingResponse:
        v = deps.queries.view(view)
        authorization = request.headers.get("authorization")
        query = q.Aggregate(v.name, tuple(group_by or ()), tuple(agg or ()), prefix)
        caller = Caller(authorization)

        async def ask() -> bytes:
            answer = await deps.queries.aggregate(query, caller)
            assert isinstance(answer, Gathered)  # a client's, not a peer's part
            return orjson.dumps({"status": answer.status, "view": answer.view,
                                 **aggregate_body(answer.result),
                                 "partitions": answer.partitions,
                                 "missing_partitions": answer.missing})

        first = await ask()  # a bad group_by or agg: its 400 now
        release = limits.admit(authorization)
        try:
            trigger = Merge(node, deps.coordinator.placement, deps.coordinator.peers.mark,
                            Scope(v, tuple(range(node.partitions[v.name])), prefix=prefix,
                                  tail=True), None, authorization)
            stream = AggregateChanges(trigger, ask, first, interval / 1000)
            return respond(stream.events(keepalive()), authorization, release)
        except BaseException:
            release()
            raise

    def keepalive() -> float:
        return float(node.settings.changes_keepalive_s)

    def respond(events: AsyncGenerator[Event], authorization: str | None,
                release: Callable[[], None]) -> StreamingResponse:
        expires = deps.coordinator.gate.auth.expires(authorization)

        async def body() -> AsyncGenerator[bytes]:
            try:
                async with contextlib.aclosing(events):
                    async for e in events:
                        if time.time() >= expires:  # nothing more for this token
                            yield sse(Event(kind="end", data=_EXPIRED))
                            return
                        limits.sending(e)
                        yield sse(e)
            finally:
                release()

        return _Stream(body(), events, release)

    return r
