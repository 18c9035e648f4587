"""What a node asks its peers for a typed query: the ``Ask``, rendered from the query.

The path comes from the route table (``serving/routes.py``), its values percent-encoded
whole (a key may hold ``/``); the query parameters are the query's own and its
``Freshness``; a scatter-gather adds the ``partitions`` each peer answers
(``Peers.send``). Nothing is copied from an incoming request, so any front end's query
travels the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from streamiq.serving.cluster.peers import FORWARD_SLACK_S, Ask, Params
from streamiq.serving.query.model import (
    Aggregate,
    Caller,
    Freshness,
    KeyWindows,
    Lookup,
    MultiGet,
    Query,
    Scan,
    WindowScan,
)
from streamiq.serving.routes import AGGREGATE, KEY_WINDOWS, LOOKUP, MULTI_GET, SCAN, WINDOWS, Route

__all__ = ["ask", "budget", "path_of"]


def path_of(route: Route, **values: str) -> str:
    """``route``'s path with each parameter's value, percent-encoded whole."""
    return "/".join(quote(values[s[1:-1].split(":")[0]], safe="") if s.startswith("{") else s
                    for s in route.path.split("/"))


def budget(fresh: Freshness, default_wait_ms: int) -> float:
    """Seconds a forwarded query may take: its own position wait plus slack."""
    if fresh.position is None:
        return FORWARD_SLACK_S
    wait_ms = default_wait_ms if fresh.wait_ms is None else fresh.wait_ms
    return wait_ms / 1000 + FORWARD_SLACK_S


def _params(*pairs: tuple[str, object]) -> Params:
    """The pairs whose value is given, as text."""
    return [(k, str(v)) for k, v in pairs if v is not None]


def _own(q: Query) -> tuple[str, Route, Params]:
    """The query's path, its route and its own parameters."""
    if isinstance(q, Lookup):
        return path_of(LOOKUP, view=q.view, key=q.key), LOOKUP, []
    if isinstance(q, KeyWindows):
        return (path_of(KEY_WINDOWS, view=q.view, key=q.key), KEY_WINDOWS,
                _params(("from", q.start), ("to", q.end)))
    if isinstance(q, MultiGet):
        return path_of(MULTI_GET, view=q.view), MULTI_GET, []
    if isinstance(q, Scan | WindowScan):
        route = SCAN if isinstance(q, Scan) else WINDOWS
        return path_of(route, view=q.view), route, _params(
            ("from", q.start), ("to", q.to if isinstance(q, Scan) else q.end),
            ("prefix", q.prefix), ("limit", q.limit), ("cursor", q.cursor))
    if isinstance(q, Aggregate):
        return path_of(AGGREGATE, view=q.view), AGGREGATE, [
            *(("group_by", g) for g in q.group_by), *(("agg", a) for a in q.aggs),
            *_params(("prefix", q.prefix))]
    raise TypeError(f"not a query: {q!r}")


def ask(q: Query, caller: Caller, default_wait_ms: int,
        body: Callable[[list[int]], Any] | None = None) -> Ask:
    """What peers are asked for ``q`` on behalf of ``caller`` (``body``: the JSON body
    for the partitions a peer answers)."""
    path, route, own = _own(q)
    f = q.fresh
    fresh = _params(("max_lag", f.max_lag), ("position", f.position), ("wait_ms", f.wait_ms))
    return Ask(route.method, path, [*own, *fresh], body, caller.authorization,
               budget(f, default_wait_ms))
