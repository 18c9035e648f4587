"""The one HTTP error mapping (``_http.problem``) installed in the FastAPI apps of the
nodes and the ingest: every error a problem document, never a bare 500. And the one
check of query parameters' names (:func:`known_params`): a parameter a route does not
take is a 400 naming it, not ignored (``op=sum&field=balance`` on an aggregate, which
takes ``agg``, answered ``count(*)`` without a word)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from streamiq._http import ApiError, problem
from streamiq.errors import PROBLEM_JSON, BadRequest, NotFound, StreamiqError

__all__ = ["error_response", "install_error_handlers", "known_params"]

log = logging.getLogger("streamiq.http")

#: where a route keeps its query parameters' names once known (on the route itself: an
#: app's routes go with it, and FastAPI's routes are unhashable)
_TAKES = "_streamiq_query_names"


def error_response(exc: StreamiqError) -> Response:
    """``problem`` as a response of the FastAPI routes."""
    status, body, headers = problem(exc)
    return Response(body, status, media_type=PROBLEM_JSON, headers={
        k.decode(): v.decode() for k, v in headers if k not in (b"content-length",
                                                                 b"content-type")})


def known_params(request: Request) -> None:
    """A 400 naming each query parameter the matched route does not take (its own and
    its dependencies', by their names in the URL: ``from``, not ``from_ms``)."""
    if not request.scope.get("query_string"):
        return
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:  # not a FastAPI route: nothing declared to check against
        return
    takes = getattr(route, _TAKES, None)
    if takes is None:
        takes = _query_names(dependant)
        setattr(route, _TAKES, takes)
    unknown = sorted(set(request.query_params) - takes)
    if unknown:
        but = ", ".join(sorted(takes)) or "none"
        problems = [f"{name}: not a parameter of this route (it takes: {but})"
                    for name in unknown]
        raise BadRequest("; ".join(problems), problems=problems)


def _query_names(dependant: Any) -> frozenset[str]:
    """The names in the URL of the query parameters of ``dependant`` (a FastAPI
    ``Dependant``) and of its dependencies, at any depth."""
    names: set[str] = set()
    todo = [dependant]
    while todo:
        d = todo.pop()
        names.update(f.alias for f in d.query_params)
        todo.extend(d.dependencies)
    return frozenset(names)


def _describe(err: dict[str, Any]) -> str:
    loc = [str(x) for x in err.get("loc", ()) if x not in ("body", "query", "path")]
    where = ".".join(loc) or "request"
    return f"{where}: {err.get('msg', 'invalid')}"


def install_error_handlers(app: FastAPI) -> None:
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException as StarletteHTTPException

    @app.exception_handler(StreamiqError)
    async def _streamiq_error(_: Request, exc: StreamiqError) -> Response:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> Response:
        problems = [_describe(e) for e in exc.errors()]
        return error_response(BadRequest("; ".join(problems), problems=problems))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 404:
            return error_response(NotFound(str(exc.detail)))
        return error_response(ApiError(exc.status_code, "HTTP_ERROR", str(exc.detail)))

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> Response:
        log.exception("unexpected error")
        return error_response(StreamiqError(f"internal error: {type(exc).__name__}"))
