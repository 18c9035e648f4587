"""HTTP plumbing shared by the ingest service and the nodes: RFC 9457 problem documents
for every error, never a bare 500."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from streamiq.errors import PROBLEM_JSON, BadRequest, NotFound, StreamiqError

__all__ = ["ApiError", "error_response", "install_error_handlers", "problem"]

log = logging.getLogger("streamiq.http")


class ApiError(StreamiqError):
    """A ``StreamiqError`` whose status and code are given per instance (for a one-off
    error that has no class in ``streamiq.errors``)."""

    def __init__(self, http_status: int, status: str, message: str, **extra: Any) -> None:
        super().__init__(message, **extra)
        self.http_status = http_status
        self.code = status


def problem(exc: StreamiqError) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
    """The one mapping of a streamiq error to an HTTP answer: its status, its problem
    document and the headers that go with it (the lean path writes these as they are)."""
    body = exc.render()
    headers = [(b"content-length", str(len(body)).encode()),
               (b"content-type", PROBLEM_JSON.encode())]
    if exc.http_status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    return exc.http_status, body, headers


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
