"""The one HTTP error mapping (``_http.problem``) installed in the FastAPI apps of the
nodes and the ingest: every error a problem document, never a bare 500."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from streamiq._http import ApiError, problem
from streamiq.errors import PROBLEM_JSON, BadRequest, NotFound, StreamiqError

__all__ = ["error_response", "install_error_handlers"]

log = logging.getLogger("streamiq.http")


def error_response(exc: StreamiqError) -> Response:
    """``problem`` as a response of the FastAPI routes."""
    status, body, headers = problem(exc)
    return Response(body, status, media_type=PROBLEM_JSON, headers={
        k.decode(): v.decode() for k, v in headers if k not in (b"content-length",
                                                                 b"content-type")})


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
