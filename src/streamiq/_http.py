"""The one mapping of streamiq's errors to HTTP, shared by the ingest service and the
nodes: RFC 9457 problem documents for every error, never a bare 500. ``problem`` is
the answer's parts, which the FastAPI apps (``_fastapi.py``), the lean paths and the
HTTP server's own refusals (``serving/http/http_limits.py``) all render."""

from __future__ import annotations

from typing import Any

from streamiq.errors import PROBLEM_JSON, StreamiqError

__all__ = ["ApiError", "problem"]


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
