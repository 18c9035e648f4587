"""A real node HTTP server (``serving/http/server.py``) in the test's event loop, and raw
HTTP/1.1 exchanges with it (requests written byte for byte, as a misbehaving client
would)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from procs import free_port

from streamiq.serving.http.fastpath import LeanLookups
from streamiq.serving.http.http_limits import HttpEdge
from streamiq.serving.http.leanserve import LeanPosts
from streamiq.serving.http.protocol import HttpProtocol
from streamiq.serving.http.server import HttpServer

__all__ = ["closed_by_server", "exchange", "read_response", "serving"]


@asynccontextmanager
async def serving(app: Any, edge: HttpEdge | None = None, lifespan: bool = False,
                  protocol: type[HttpProtocol] = HttpProtocol,
                  grace_s: float = 5.0, writes: LeanPosts | None = None
                  ) -> AsyncIterator[int]:
    """``app`` behind the HTTP server as run_node runs it (the lean path when ``app`` is a
    node's ``LeanLookups``; ``writes``: the ingest's lean writes, as run_ingest gives
    them), on a free port, until exit."""
    import socket

    port = free_port()
    sock = socket.create_server(("127.0.0.1", port))
    node = isinstance(app, LeanLookups)
    srv = HttpServer(app, edge=edge, lean=app if node else None,
                     same_port=app.peer_server if node else None, writes=writes,
                     lifespan=lifespan, protocol=protocol, grace_s=grace_s)
    task = asyncio.create_task(srv.serve(sock))
    try:
        while not srv.started:
            assert not task.done(), "server did not start"
            await asyncio.sleep(0.01)
        yield port
    finally:
        srv.stop()
        await task


async def read_response(r: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = (await r.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    status = int(head[0].split()[1])
    headers = {k.lower(): v for k, _, v in (h.partition(": ") for h in head[1:] if h)}
    body = await r.readexactly(int(headers["content-length"]))
    return status, headers, body


async def closed_by_server(r: asyncio.StreamReader, within: float = 15) -> bool:
    """Whether the server ends the connection (its FIN, or its reset once a lingering
    close ends) within ``within`` seconds, reading and dropping what it still sends."""
    try:
        return await asyncio.wait_for(r.read(), within) == b""
    except ConnectionError:
        return True
    except TimeoutError:
        return False


async def exchange(port: int, request: bytes,
                   within: float = 30) -> tuple[int, dict[str, str], bytes, bool]:
    """Send, read one answer (within ``within`` seconds); whether the server then
    closed the connection."""
    r, w = await asyncio.open_connection("127.0.0.1", port)

    async def send() -> None:
        try:
            w.write(request)
            await w.drain()
        except ConnectionError:
            pass  # it may close while a large request is still being written

    sending = asyncio.create_task(send())
    try:
        status, headers, body = await asyncio.wait_for(read_response(r), within)
        closed = await closed_by_server(r)
    finally:
        sending.cancel()
        w.close()
    return status, headers, body, closed
