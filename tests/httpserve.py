"""A real uvicorn server in the test's event loop, and raw HTTP/1.1 exchanges with it
(requests written byte for byte, as a misbehaving client would)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import uvicorn
from procs import free_port

__all__ = ["closed_by_server", "exchange", "read_response", "serving"]


@asynccontextmanager
async def serving(app: Any, http: Any,
                  lifespan: Literal["auto", "on", "off"] = "off") -> AsyncIterator[int]:
    """``app`` behind uvicorn with the protocol ``http``, on a free port, until exit."""
    port = free_port()
    # proxy_headers=False as in run_node: the lean path needs LeanLookups as the app
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan=lifespan,
                                        proxy_headers=False, http=http, log_level="warning"))
    task = asyncio.create_task(srv.serve())
    try:
        while not srv.started:
            assert not task.done(), "server did not start"
            await asyncio.sleep(0.01)
        yield port
    finally:
        srv.should_exit = True
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
