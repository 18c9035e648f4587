"""The node's route table: every HTTP route, declared once, as data.

Each ``Route`` names its method, its path pattern (as FastAPI declares it) and its
metrics label (``query``: the query type its latency is recorded under; None for what
is not a query: health, metrics, metadata, the dashboard). Everything that needs to
know a route takes it from here:

* the FastAPI routes are declared with ``Route.path`` (``serving/http/app.py``,
  ``serving/http/queries.py``);
* the lean path (``serving/http/fastpath.py``) finds a key lookup with ``lookup_target``;
* the latency metric labels a request with ``query_of`` (``serving/http/metrics.py``);
* the authentication gate finds the view a path reads with ``view_of``
  (``serving/cluster/coordinator.py``).

The seed's ``/account/{id}`` shortcut is an alias, declared once below (``ACCOUNT``):
a key lookup of the ``balances`` view whose key is the ``account`` path parameter.
A new query type is one ``Route`` here (or ``declare``'d by its own module) with
``fields=True``: its HTTP route is made from the query type's fields
(``serving/http/declared.py``). ``test_routes`` fails for a route of the app that is
not in this table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from streamiq.views.base import ID_PATTERN

__all__ = ["ACCOUNT", "AGGREGATE", "AGGREGATE_CHANGES", "CHANGES", "FANOUT", "KEY_WINDOWS",
           "LOOKUP", "MULTI_GET", "ROUTES", "SCAN", "TOP_K", "UNTIMED", "WINDOWS", "Route",
           "declare", "lookup_target", "query_of", "undeclared", "view_of"]


@dataclass(frozen=True)
class Route:
    """One route: ``method`` ``path`` (FastAPI's pattern, ``{name}`` or ``{name:conv}``
    per parameter), its metrics label ``query`` (None: not a query, untimed), whether
    it is a scatter-gather (``fanout``), and for an alias the ``view`` it reads and the
    ``pattern`` its key must match."""

    method: str
    path: str
    query: str | None = None
    fanout: bool = False
    view: str | None = None  # an alias: this view, whatever the path says
    key: str = "key"  # the path parameter holding the key (a key lookup)
    pattern: str | None = None  # an alias's key form (checked by the route and lean path)
    #: the route is made from its query type (``KINDS[query]``): its fields are the
    #: route's parameters, its result the answer (``serving/http/declared.py``)
    fields: bool = False
    # derived: the segment count, the literal segments (index, text), the parameters'
    # indexes, and the alias's key form compiled
    size: int = field(init=False, repr=False, compare=False)
    literals: tuple[tuple[int, str], ...] = field(init=False, repr=False, compare=False)
    params: dict[str, int] = field(init=False, repr=False, compare=False)
    key_form: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        parts = self.path.split("/")
        set_ = object.__setattr__
        set_(self, "size", len(parts))
        set_(self, "literals", tuple((i, p) for i, p in enumerate(parts)
                                     if not p.startswith("{")))
        set_(self, "params", {p[1:-1].split(":")[0]: i for i, p in enumerate(parts)
                              if p.startswith("{")})
        set_(self, "key_form", re.compile(self.pattern) if self.pattern else None)

    def match(self, parts: list[str]) -> bool:
        """The path's segments (``path.split("/")``) are this route's."""
        if len(parts) != self.size:
            return False
        for i, text in self.literals:  # noqa: SIM110 - the lean path: no generator
            if parts[i] != text:
                return False
        return True


_KEY = "{key:segment}"  # a key may be empty: its route refuses it by name (paths.py)
LOOKUP = Route("GET", "/v1/views/{view}/keys/" + _KEY, "lookup")
#: the seed's shortcut: GET /account/{id} is a key lookup of "balances" (seed 000)
ACCOUNT = Route("GET", "/account/{account:segment}", "lookup", view="balances",
                key="account", pattern=ID_PATTERN)
MULTI_GET = Route("POST", "/v1/views/{view}/keys", "multiget", fanout=True)
SCAN = Route("GET", "/v1/views/{view}/scan", "scan", fanout=True)
WINDOWS = Route("GET", "/v1/views/{view}/windows", "window_scan", fanout=True)
KEY_WINDOWS = Route("GET", "/v1/views/{view}/keys/" + _KEY + "/windows", "windows")
AGGREGATE = Route("GET", "/v1/views/{view}/aggregate", "aggregate", fanout=True)
TOP_K = Route("GET", "/v1/views/{view}/top", "topk", fanout=True, fields=True)
#: the queries: timed, labelled by ``query`` (the query's ``kind``); ``declare`` adds one
ROUTES = [LOOKUP, ACCOUNT, MULTI_GET, SCAN, WINDOWS, KEY_WINDOWS, AGGREGATE, TOP_K]
#: a view's live changes (Server-Sent Events): a stream, not a query (untimed)
CHANGES = Route("GET", "/v1/views/{view}/changes")
#: an aggregate's result each time it changes (Server-Sent Events)
AGGREGATE_CHANGES = Route("GET", "/v1/views/{view}/aggregate/changes")
#: routes that are not queries (not timed), declared so that none is left out by mistake
UNTIMED = (CHANGES, AGGREGATE_CHANGES, *(Route(m, p) for m, p in (
    ("GET", "/health"), ("GET", "/metrics"), ("GET", "/v1/views"),
    ("GET", "/v1/metadata/{view}/" + _KEY), ("GET", "/v1/cluster"),
    ("GET", "/v1/dashboard"), ("GET", "/v1/pipeline"), ("GET", "/v1/events"), ("GET", "/"))))
#: the labels of scatter-gather queries (served "fanout")
FANOUT = {r.query for r in ROUTES if r.fanout}
_LOOKUPS = {r.size: r for r in ROUTES if r.query == "lookup"}
_BY_PATH = {r.path: r for r in ROUTES}


def declare(route: Route) -> Route:
    """Add a query's route to the table (a query type in a module of its own declares
    its route as it is defined; an app made after that serves it). ValueError: the
    table has a route of that method and path, or the route is no query."""
    if route.query is None:
        raise ValueError(f"{route.path}: a declared route is a query's (query=its kind)")
    if any((r.method, r.path) == (route.method, route.path) for r in (*ROUTES, *UNTIMED)):
        raise ValueError(f"{route.method} {route.path} is declared already")
    ROUTES.append(route)
    _BY_PATH[route.path] = route
    if route.fanout:
        FANOUT.add(route.query)
    if route.query == "lookup":
        _LOOKUPS[route.size] = route
    return route


def lookup_target(parts: list[str]) -> tuple[str, str] | None:
    """(view name, key) of a key lookup path given as its decoded segments, else None
    (an alias's key that does not match its pattern too: its route refuses it)."""
    route = _LOOKUPS.get(len(parts))
    if route is None or not route.match(parts):
        return None
    key = parts[route.params[route.key]]
    if route.view is None:
        return parts[route.params["view"]], key
    form = route.key_form
    return None if form is not None and not form.fullmatch(key) else (route.view, key)


def query_of(method: str, path: str) -> str | None:
    """The metrics label of a request (None: not a query, or no route)."""
    parts = path.split("/")
    for r in ROUTES:
        if r.method == method and r.match(parts):
            return r.query
    return None


def view_of(route_path: str | None, path_params: dict[str, str]) -> str | None:
    """The view a request reads, given its route's path: an alias's view, else the
    ``view`` path parameter (None: no view, e.g. /v1/cluster)."""
    route = _BY_PATH.get(route_path) if route_path is not None else None
    if route is not None and route.view is not None:
        return route.view
    return path_params.get("view")


def undeclared(routes: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Of an app's (method, path) routes, those neither a query of ``ROUTES`` nor declared
    ``UNTIMED``: a route that would go untimed without anyone deciding it should."""
    known = {(r.method, r.path) for r in (*ROUTES, *UNTIMED)}
    return [r for r in routes if r not in known]
