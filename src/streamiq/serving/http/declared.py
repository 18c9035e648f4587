"""HTTP routes made from a query type: a route declared with ``fields=True``
(``serving/routes.py``) takes its query type's fields as query parameters, runs the
query through the query layer and renders its result as it is.

The query type (``KINDS[route.query]``, a ``Query`` subclass) is the whole contract:
``GET /v1/views/balances/top?column=balance&k=3`` is the top-k query of ``balances``
with those fields. Each field's type is its parameter's (``str``, ``int``, ``float``, ``bool``,
optional, tuples as repeated parameters), its default the parameter's, its
``metadata["doc"]`` the parameter's description at /docs; a field named in the path is
a path parameter. FastAPI reads the values as their types (``k=x`` is a 400 naming
``k``); the query's runner checks what types cannot say (``k`` within its bounds). The
answer is the scatter-gather's envelope (status, partitions, missing partitions, who
served it) around the result's fields (``dataclasses.asdict``).

A new query type thus needs no code here: its module, its route's declaration, and
(for SQL) its planner rule.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from streamiq.serving.http.answers import Answers
from streamiq.serving.http.params import Fresh
from streamiq.serving.query import model
from streamiq.serving.routes import ROUTES, Route

__all__ = ["declared_routes"]

_OWN = ("view", "fresh")  # every query's fields that are not its parameters


def declared_routes(deps: Answers) -> APIRouter:
    """A route for each route of the table declared ``fields=True`` (its query type
    registered by then: ``query/kinds.py`` imports the built-in ones)."""
    r = APIRouter(tags=["queries"])
    for route in ROUTES:
        if route.fields:
            _declare(r, deps, route, model.KINDS[route.query or ""])
    return r


def _body(result: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        return dataclasses.asdict(result)
    return dict(result)


def _declare(r: APIRouter, deps: Answers, route: Route, cls: type[model.Query]) -> None:
    hints = typing.get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.init and f.name not in _OWN]
    tuples = {f.name for f in fields if typing.get_origin(_plain(hints[f.name])) is tuple}

    async def endpoint(request: Request, view: str, fresh: Any, **given: Any) -> Response:
        args = {k: tuple(v) if k in tuples else v for k, v in given.items()
                if not (k in tuples and v is None)}  # a repeated one not given: its default
        query = cls(view, fresh=fresh.typed(), **args)
        return deps.gathered(await deps.queries.run(query, deps.caller(request)), _body)

    kw = inspect.Parameter.KEYWORD_ONLY
    params = [inspect.Parameter("request", kw, annotation=Request),
              inspect.Parameter("view", kw, annotation=str),
              inspect.Parameter("fresh", kw, annotation=Fresh)]
    params += [_parameter(f, hints[f.name], f.name in route.params, f.name in tuples)
               for f in fields]
    endpoint.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    endpoint.__name__ = route.query or "query"
    doc = (cls.__doc__ or "").strip()
    r.add_api_route(route.path, endpoint, methods=[route.method],
                    summary=doc.splitlines()[0] if doc else None, description=doc)


_UNION = type(int | None)  # what ``X | None`` is at run time


def _plain(hint: Any) -> Any:
    """``hint`` without ``None`` (``tuple[str, ...] | None`` -> ``tuple[str, ...]``)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if typing.get_origin(hint) in (typing.Union, _UNION) and len(args) == 1 \
        else hint


def _parameter(f: dataclasses.Field[Any], hint: Any, in_path: bool, repeated: bool
               ) -> inspect.Parameter:
    """The endpoint's parameter for field ``f``: a path parameter if the path names it,
    else a query parameter (a tuple: repeated, read as a list)."""
    default: Any = (f.default if f.default is not dataclasses.MISSING
                    else f.default_factory() if f.default_factory is not dataclasses.MISSING
                    else inspect.Parameter.empty)
    annotation: Any = hint
    if repeated:
        annotation = list[typing.get_args(_plain(hint))[0]] | None  # type: ignore[misc]
        default = None if default is inspect.Parameter.empty else list(default) or None
    if not in_path:
        annotation = Annotated[annotation, Query(description=f.metadata.get("doc"))]
    return inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                             default=default)

