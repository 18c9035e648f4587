"""Multi-key, scan, aggregate and window queries (scatter-gather by partition).

Every gathered answer carries ``status`` (``OK``, or ``PARTIAL`` with
``missing_partitions`` when some partitions had no replica able to answer: never a
silently wrong total) and the ``X-Streamiq-Hops`` header (0 local, 1 forwarded).
A node answering a forwarded request (``X-Streamiq-Forwarded: 1`` plus the explicit
``partitions``) returns ``{"partial": ..., "not_active": [...]}`` and never forwards.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from streamiq.errors import BadRequest, NotUpToBound
from streamiq.serving.cluster.coordinator import HOPS, SERVED_BY
from streamiq.serving.cluster.placement import Here
from streamiq.serving.engines._json import loads_row
from streamiq.serving.engines.aggregate import (
    aggregate_partitions,
    finish,
    merge_partials,
    parse_aggs,
    parse_group_by,
)
from streamiq.serving.engines.partials import (
    AggregatePartial,
    GatherReply,
    MultiGetPartial,
    P,
    ScanPartial,
)
from streamiq.serving.engines.scan import KeyRange, decode_cursor, merge_rows, scan_partitions
from streamiq.serving.http.answers import Answers, check_key
from streamiq.serving.http.params import (
    Cursor,
    Fresh,
    Freshness,
    FromMs,
    Limit,
    Parts,
    Prefix,
    ToMs,
)
from streamiq.serving.routes import AGGREGATE, KEY_WINDOWS, MULTI_GET, SCAN, WINDOWS
from streamiq.views.base import View, window_bounds

__all__ = ["MAX_KEYS", "MultiGet", "query_routes"]

MAX_KEYS = 1000
_FAR = 1 << 62

class MultiGet(BaseModel):
    """Keys to look up (columns joined by ``|``)."""

    model_config = {"extra": "forbid"}
    keys: list[str] = Field(min_length=1, max_length=MAX_KEYS)


def _bad(message: str, field: str) -> BadRequest:
    return BadRequest(message, field=field)


class _Gather:
    """Runs one scatter-gather query for a route and shapes its response."""

    def __init__(self, deps: Answers, request: Request, view: View, fresh: Freshness,
                 partitions: str | None) -> None:
        self.deps = deps
        self.request = request
        self.view = view
        self.max_lag = deps.max_lag(fresh.max_lag)
        self.tokens = deps.tokens(fresh.position)
        self.wait_s = deps.wait_s(fresh.wait_ms)
        self.forwarded = deps.coordinator.gate.is_forwarded(request)
        n = deps.node.partitions[view.name]
        self.all = list(range(n))
        if self.forwarded and partitions:
            try:
                self.all = sorted({int(p) for p in partitions.split(",")})
            except ValueError:
                raise _bad(f"partitions: expected integers, got {partitions!r}",
                           "partitions") from None
            if any(not 0 <= p < n for p in self.all):
                raise _bad(f"partitions: out of range 0..{n - 1}", "partitions")

    async def run(self, local: Callable[[list[int]], Awaitable[P]],
                  finish: Callable[[list[P]], dict[str, Any]],
                  partitions: list[int] | None = None,
                  body: Callable[[list[int]], Any] | None = None) -> Response:
        wanted = self.all if partitions is None else partitions

        async def up_to_position(held: list[int]) -> P:
            """Every partition read reflects the position first (NOT_UP_TO_BOUND if one
            does not within the wait; a peer's refusal makes the entry ask another)."""
            if self.tokens:
                await asyncio.gather(*(self.deps.check_position(
                    self.view.name, p, self.tokens, self.wait_s) for p in held))
            return await local(held)

        partials, missing, hops = await self.deps.coordinator.gather(
            self.request, self.view.name, wanted, self.max_lag, up_to_position, body=body)
        node = self.deps.node.endpoint
        if self.forwarded:
            reply: GatherReply[P] = {"partial": partials[0] if partials else None,
                                     "not_active": missing}
            return JSONResponse(reply, headers={HOPS: "0", SERVED_BY: node})
        if missing and self.tokens:  # a partial answer would not read the writes it must
            raise NotUpToBound(f"no replica reflected the position within "
                               f"{self.wait_s:.3f}s for partitions {missing}",
                               missing_partitions=missing, served_by=node)
        doc = {"status": "PARTIAL" if missing else "OK", "view": self.view.name,
               **finish(partials), "partitions": len(wanted), "missing_partitions": missing,
               "served_by": node}
        return JSONResponse(doc, headers={HOPS: str(hops), SERVED_BY: node})


def query_routes(deps: Answers) -> APIRouter:
    r = APIRouter(tags=["queries"])
    _multi_get_route(r, deps)
    _scan_routes(r, deps)
    _key_windows_route(r, deps)
    _aggregate_route(r, deps)
    return r


def _multi_get_route(r: APIRouter, deps: Answers) -> None:
    """POST /v1/views/{view}/keys"""
    node = deps.node

    @r.post(MULTI_GET.path, summary="Multi-get: many keys, one call per owner")
    async def multi_get(request: Request, view: str, body: MultiGet, fresh: Fresh,
                        partitions: Parts = None) -> Response:
        v = deps.view(view)
        if v.windowed:
            raise _bad(f"view {v.name!r} is windowed: use /v1/views/{v.name}/windows", "view")
        keys = list(dict.fromkeys(body.keys))
        for i, k in enumerate(keys):
            check_key(v, k, f"keys[{i}]")
        n = node.partitions[v.name]
        part_of = {k: v.partition_of(k, n) for k in keys}
        g = _Gather(deps, request, v, fresh, partitions)
        store = node.stores[v.name]

        async def local(held: list[int]) -> MultiGetPartial:
            hs = set(held)
            mine = [k for k in keys if part_of[k] in hs]
            by_p: dict[int, list[str]] = {}
            for k in mine:
                by_p.setdefault(part_of[k], []).append(k)
            found: dict[str, Any] = {}
            for p, ks in by_p.items():
                for k, raw in zip(ks, store.multi_get(p, [k.encode() for k in ks]), strict=True):
                    if raw is not None:
                        found[k] = loads_row(raw)
            return {"found": found, "keys": mine}

        def shape(partials: list[MultiGetPartial]) -> dict[str, Any]:
            found: dict[str, Any] = {}
            answered: set[str] = set()
            for part in partials:
                found.update(part["found"])
                answered.update(part["keys"])
            results = [{"key": k, "partition": part_of[k], "found": k in found,
                        "value": found.get(k)} for k in keys if k in answered]
            return {"results": results, "missing_keys": [k for k in keys if k not in answered]}

        wanted = sorted(p for p in set(part_of.values()) if p in set(g.all))
        return await g.run(local, shape, partitions=wanted,
                           body=lambda ps: {"keys": [k for k in keys if part_of[k] in ps]})


async def _scan(deps: Answers, request: Request, v: View, rng: KeyRange, limit: int,
                fresh: Freshness, partitions: str | None, extra: dict[str, Any]) -> Response:
    g = _Gather(deps, request, v, fresh, partitions)
    store = deps.node.stores[v.name]

    async def local(held: list[int]) -> ScanPartial:
        return await asyncio.to_thread(scan_partitions, v, store, held, rng, limit)

    def shape(partials: list[ScanPartial]) -> dict[str, Any]:
        rows, cursor = merge_rows(v, partials, limit)
        return {**extra, "rows": rows, "count": len(rows), "next_cursor": cursor}

    return await g.run(local, shape)


def _after(v: View, cursor: str | None) -> bytes | None:
    """The store key a page resumes after (None: from the start)."""
    if cursor is None:
        return None
    try:
        return decode_cursor(v.name, cursor)
    except ValueError as exc:
        raise _bad(str(exc), "cursor") from None


def _scan_routes(r: APIRouter, deps: Answers) -> None:
    """GET /v1/views/{view}/scan and /v1/views/{view}/windows"""
    @r.get(SCAN.path, summary="Range / prefix scan in key order, paged")
    async def scan(request: Request, view: str, fresh: Fresh,
                   start: Annotated[str | None, Query(alias="from",
                                                      description="First key (inclusive).")] = None,
                   to: Annotated[str | None, Query(description="End key (exclusive).")] = None,
                   prefix: Prefix = None, limit: Limit = 100, cursor: Cursor = None,
                   partitions: Parts = None) -> Response:
        v = deps.view(view)
        if start is not None and to is not None and start > to:
            raise _bad(f"from {start!r} is after to {to!r}", "from")
        rng = KeyRange.build(start, to, prefix, _after(v, cursor))
        return await _scan(deps, request, v, rng, limit, fresh, partitions,
                           {"from": start, "to": to, "prefix": prefix, "limit": limit})

    @r.get(WINDOWS.path, summary="Windows of all keys starting in [from, to)")
    async def windows_range(request: Request, view: str, fresh: Fresh, start: FromMs = 0,
                            end: ToMs = _FAR, prefix: Prefix = None, limit: Limit = 100,
                            cursor: Cursor = None, partitions: Parts = None) -> Response:
        v = _windowed(deps, view)
        if start > end:
            raise _bad(f"from {start} is after to {end}", "from")
        rng = KeyRange.build(prefix=prefix, after=_after(v, cursor), wfrom=start, wto=end)
        return await _scan(deps, request, v, rng, limit, fresh, partitions,
                           {"from": start, "to": end, "prefix": prefix, "limit": limit})


def _windowed(deps: Answers, view: str) -> View:
    v = deps.view(view)
    if not v.windowed:
        raise _bad(f"view {v.name!r} is not windowed: use /v1/views/{v.name}/scan or "
                   f"/v1/views/{v.name}/keys/{{key}}", "view")
    return v


def _key_windows_route(r: APIRouter, deps: Answers) -> None:
    """GET /v1/views/{view}/keys/{key}/windows"""
    node = deps.node

    @r.get(KEY_WINDOWS.path, summary="One key's windows in [from, to)")
    async def key_windows(request: Request, view: str, key: str, fresh: Fresh,
                          start: FromMs = 0, end: ToMs = _FAR) -> Response:
        v = _windowed(deps, view)
        check_key(v, key)
        if start > end:
            raise _bad(f"from {start} is after to {end}", "from")
        p = v.partition_of(key, node.partitions[v.name])
        lo, hi = window_bounds(key, start, end)
        tokens = deps.tokens(fresh.position)

        async def local(here: Here) -> Response:  # placed here: held (placement.py)
            await deps.check_position(v.name, p, tokens, deps.wait_s(fresh.wait_ms))
            windows = [loads_row(raw) for _, raw in node.stores[v.name].scan(p, lo, hi)]
            return JSONResponse({"status": "OK", "view": v.name, "key": key, "partition": p,
                                 "from": start, "to": end, "windows": windows,
                                 **deps.stamp(v.name, p, here)},
                                headers={SERVED_BY: node.endpoint})

        return await deps.coordinator.route(request, v.name, p, deps.max_lag(fresh.max_lag),
                                            local)


def _aggregate_route(r: APIRouter, deps: Answers) -> None:
    """GET /v1/views/{view}/aggregate"""
    node = deps.node

    @r.get(AGGREGATE.path,
           summary="Group by columns with count/sum/min/max/avg, across all partitions")
    async def aggregate(request: Request, view: str, fresh: Fresh,
                        group_by: Annotated[list[str] | None, Query(
                            description="Column(s) to group by (repeat or comma-separate); "
                                        "none: one group.")] = None,
                        agg: Annotated[list[str] | None, Query(
                            description="FUNC(COLUMN), repeatable; FUNC is count, sum, min, "
                                        "max or avg; count(*) counts rows. Default count(*)."
                        )] = None,
                        prefix: Prefix = None, partitions: Parts = None) -> Response:
        v = deps.view(view)
        try:
            cols = parse_group_by(v, group_by)
            aggs = parse_aggs(v, agg)
        except ValueError as exc:
            raise _bad(str(exc), str(exc).split(":", 1)[0]) from None
        rng = KeyRange.build(prefix=prefix)
        g = _Gather(deps, request, v, fresh, partitions)
        store = node.stores[v.name]

        async def local(held: list[int]) -> AggregatePartial:
            return await asyncio.to_thread(aggregate_partitions, v, store, held, cols, aggs, rng)

        def shape(partials: list[AggregatePartial]) -> dict[str, Any]:
            merged, rows = merge_partials(aggs, partials)
            return {"group_by": cols, "aggregates": [a.name for a in aggs],
                    "groups": finish(cols, aggs, merged), "rows": rows}

        try:
            return await g.run(local, shape)
        except ValueError as exc:  # data that does not fit the aggregate (e.g. text sum)
            raise _bad(str(exc), "agg") from None
