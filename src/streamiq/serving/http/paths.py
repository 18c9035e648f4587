"""Request paths taken apart as the client wrote them: segment by segment, strictly UTF-8.

A key may be any string: the Python client percent-encodes it whole
(``quote(key, safe="")``), so ``/`` in a key travels as ``%2F`` and ``|`` as ``%7C``.
The HTTP server, like most, percent-decodes the whole path before routing, with two
losses: ``%2F`` becomes a separator (``/v1/views/v/keys/a%2Fb`` no longer names one key)
and bytes that are not UTF-8 (``%FF``, or ``%ED%A0%80``, a lone surrogate) become
U+FFFD, a different key that would then be looked up.

So paths with a ``%`` are taken apart from the raw path here: split on the separators
the client wrote, then each segment decoded strictly (``segments``). ``PathSegments``
answers ``400 BAD_REQUEST`` for a segment that is not UTF-8, and routes a path whose
segments hold a ``/`` on an escaped form (``%`` and ``/`` of each segment written
``%25`` and ``%2F``) that ``restore``, a dependency of the routes, turns back into the
segments' text before the route reads its path parameters. The lean path
(``serving/http/fastpath.py``) uses ``segments`` directly.

``segment`` is a path convertor matching an empty segment too, so that an empty key
(``/v1/views/v/keys/``) reaches its route and is refused by name instead of a 404.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import unquote, unquote_to_bytes

from fastapi import Request
from starlette.convertors import StringConvertor, register_url_convertor

from streamiq._fastapi import error_response
from streamiq.errors import BadRequest

__all__ = ["KEY", "PathSegments", "not_utf8", "restore", "segments"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]],
                    Callable[[Message], Awaitable[None]]], Awaitable[None]]

_ESCAPED = "streamiq.escaped"  # scope key: the routed path is the escaped form


class _Segment(StringConvertor):
    """``{key:segment}``: one path segment, possibly empty."""

    regex = "[^/]*"


register_url_convertor("segment", _Segment())
#: a key in a route's path: ``"/v1/views/{view}/keys/" + KEY``
KEY = "{key:segment}"


def segments(raw_path: bytes) -> list[str]:
    """The path's segments, each percent-decoded on its own (``%2F`` stays inside its
    segment). Raises ``UnicodeDecodeError`` when one is not UTF-8 once decoded."""
    return [unquote_to_bytes(s).decode() for s in raw_path.split(b"/")]


def not_utf8(raw_path: bytes) -> BadRequest:
    """The 400 of a path with a segment that is not UTF-8 (every path answers it)."""
    bad = next(s for s in raw_path.split(b"/") if not _decodes(s))
    return BadRequest(f"path segment {bad.decode('latin-1')!r} is not valid UTF-8 once "
                      "percent-decoded (a stray byte or a lone surrogate): keys and view "
                      "names are text, written as percent-encoded UTF-8",
                      segment=bad.decode("latin-1"))


def _decodes(segment: bytes) -> bool:
    try:
        unquote_to_bytes(segment).decode()
    except UnicodeDecodeError:
        return False
    return True


def _escape(segment: str) -> str:
    return segment.replace("%", "%25").replace("/", "%2F")


class PathSegments:
    """ASGI middleware of the node's FastAPI app (see the module's docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        raw = scope.get("raw_path") if scope["type"] == "http" else None
        if raw and b"%" in raw:
            try:
                parts = segments(raw)
            except UnicodeDecodeError:
                await error_response(not_utf8(raw))(scope, receive, send)
                return
            if any("/" in p for p in parts):
                scope[_ESCAPED] = True
                scope["path"] = "/".join(_escape(p) for p in parts)
        await self.app(scope, receive, send)


def restore(request: Request) -> None:
    """The path parameters as the client wrote them (a no-op unless ``PathSegments``
    routed an escaped path): run before the route reads them."""
    if request.scope.get(_ESCAPED):
        request.scope["path_params"] = {
            k: unquote(v) if isinstance(v, str) else v
            for k, v in request.scope.get("path_params", {}).items()}
