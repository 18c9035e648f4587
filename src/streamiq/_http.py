"""HTTP plumbing shared by the ingest service and the nodes: JSON errors, never a 500."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

__all__ = ["ApiError", "error_response", "install_error_handlers"]

log = logging.getLogger("streamiq.http")


class ApiError(Exception):
    """An error with an HTTP status and a machine-readable ``status`` code."""

    def __init__(self, http_status: int, status: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.status = status
        self.message = message
        self.extra = extra


def error_response(http_status: int, status: str, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"status": status, "error": message, **extra}, status_code=http_status)


def _describe(err: dict[str, Any]) -> str:
    loc = [str(x) for x in err.get("loc", ()) if x not in ("body", "query", "path")]
    where = ".".join(loc) or "request"
    return f"{where}: {err.get('msg', 'invalid')}"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.http_status, exc.status, exc.message, **exc.extra)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [_describe(e) for e in exc.errors()]
        return error_response(400, "BAD_REQUEST", "; ".join(problems), problems=problems)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = "NOT_FOUND" if exc.status_code == 404 else "HTTP_ERROR"
        return error_response(exc.status_code, code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return error_response(500, "INTERNAL", f"internal error: {type(exc).__name__}")
