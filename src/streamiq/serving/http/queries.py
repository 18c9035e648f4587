"""HTTP routes of multi-key, scan, aggregate and window queries (scatter-gather by
partition): each parses its request into a typed query (``serving/query/model.py``),
runs it through the query layer (``Answers``, a ``Queries``) and renders the answer.

Every gathered answer carries ``status`` (``OK``, or ``PARTIAL`` with
``missing_partitions`` when some partitions had no replica able to answer: never a
silently wrong total) and the ``X-Streamiq-Hops`` header (0 local, 1 forwarded).
A peer's part of a gather is asked over the peer protocol, never over HTTP.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from streamiq.serving.http.answers import SERVED_BY, Answers
from streamiq.serving.http.params import (
    Aggs,
    Cursor,
    Fresh,
    FromMs,
    GroupBy,
    Limit,
    Prefix,
    ToMs,
)
from streamiq.serving.query import model as q
from streamiq.serving.routes import AGGREGATE, KEY_WINDOWS, MULTI_GET, SCAN, WINDOWS

__all__ = ["MultiGet", "aggregate_body", "query_routes"]


class MultiGet(BaseModel):
    """Keys to look up (columns joined by ``|``)."""

    model_config = {"extra": "forbid"}
    keys: list[str] = Field(min_length=1, max_length=q.MAX_KEYS)


def query_routes(deps: Answers) -> APIRouter:
    r = APIRouter(tags=["queries"])
    _multi_get_route(r, deps)
    _scan_routes(r, deps)
    _key_windows_route(r, deps)
    _aggregate_route(r, deps)
    return r


def _multi_get_body(rows: q.MultiGetRows) -> dict[str, Any]:
    return {"results": [{"key": k.key, "partition": k.partition, "found": k.found,
                         "value": k.value} for k in rows.results],
            "missing_keys": rows.missing_keys}


def _multi_get_route(r: APIRouter, deps: Answers) -> None:
    """POST /v1/views/{view}/keys"""

    @r.post(MULTI_GET.path, summary="Multi-get: many keys, one call per owner")
    async def multi_get(request: Request, view: str, body: MultiGet, fresh: Fresh) -> Response:
        query = q.MultiGet(view, tuple(body.keys), fresh=fresh.typed())
        answer = await deps.queries.multi_get(query, deps.caller(request))
        return deps.gathered(answer, _multi_get_body)


def _scan_body(extra: dict[str, Any]) -> Any:
    def body(rows: q.ScanRows) -> dict[str, Any]:
        return {**extra, "rows": rows.rows, "count": len(rows.rows),
                "next_cursor": rows.next_cursor}
    return body


def _scan_routes(r: APIRouter, deps: Answers) -> None:
    """GET /v1/views/{view}/scan and /v1/views/{view}/windows"""
    @r.get(SCAN.path, summary="Range / prefix scan in key order, paged")
    async def scan(request: Request, view: str, fresh: Fresh,
                   start: Annotated[str | None, Query(alias="from",
                                                      description="First key (inclusive).")] = None,
                   to: Annotated[str | None, Query(description="End key (exclusive).")] = None,
                   prefix: Prefix = None, limit: Limit = 100, cursor: Cursor = None) -> Response:
        query = q.Scan(view, start, to, prefix, limit, cursor, fresh=fresh.typed())
        answer = await deps.queries.scan(query, deps.caller(request))
        return deps.gathered(answer, _scan_body(
            {"from": start, "to": to, "prefix": prefix, "limit": limit}))

    @r.get(WINDOWS.path, summary="Windows of all keys starting in [from, to)")
    async def windows_range(request: Request, view: str, fresh: Fresh, start: FromMs = 0,
                            end: ToMs = q.FAR, prefix: Prefix = None, limit: Limit = 100,
                            cursor: Cursor = None) -> Response:
        query = q.WindowScan(view, start, end, prefix, limit, cursor, fresh=fresh.typed())
        answer = await deps.queries.scan(query, deps.caller(request))
        return deps.gathered(answer, _scan_body(
            {"from": start, "to": end, "prefix": prefix, "limit": limit}))


def _key_windows_route(r: APIRouter, deps: Answers) -> None:
    """GET /v1/views/{view}/keys/{key}/windows"""

    @r.get(KEY_WINDOWS.path, summary="One key's windows in [from, to)")
    async def key_windows(request: Request, view: str, key: str, fresh: Fresh,
                          start: FromMs = 0, end: ToMs = q.FAR) -> Response:
        caller = deps.caller(request)
        query = q.KeyWindows(view, key, start, end, fresh=fresh.typed())

        def here(w: q.Windows) -> Response:
            return JSONResponse({"status": "OK", "view": query.view, "key": w.key,
                                 "partition": w.partition, "from": start, "to": end,
                                 "windows": w.windows, **w.stamp},
                                headers={SERVED_BY: w.stamp["served_by"]})

        return deps.one(request, await deps.queries.key_windows(query, caller), here)


def aggregate_body(rows: q.AggregateRows) -> dict[str, Any]:
    """An aggregate's result as JSON (the route's and its live changes')."""
    return {"group_by": rows.group_by, "aggregates": rows.aggregates,
            "groups": rows.groups, "rows": rows.rows}


def _aggregate_route(r: APIRouter, deps: Answers) -> None:
    """GET /v1/views/{view}/aggregate"""

    @r.get(AGGREGATE.path,
           summary="Group by columns with count/sum/min/max/avg, across all partitions")
    async def aggregate(request: Request, view: str, fresh: Fresh, group_by: GroupBy = None,
                        agg: Aggs = None, prefix: Prefix = None) -> Response:
        query = q.Aggregate(view, tuple(group_by or ()), tuple(agg or ()), prefix,
                            fresh=fresh.typed())
        answer = await deps.queries.aggregate(query, deps.caller(request))
        return deps.gathered(answer, aggregate_body)

