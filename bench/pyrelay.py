"""The least a Python hop can do: relay bytes, unparsed, between each client connection
and a connection of its own to an upstream (uvloop, asyncio protocols, no HTTP parsing,
no routing). ``bench_hop_cost.py`` runs it beside nginx: a forwarded lookup's entry node
does this and more (parse, decide, frame the peer request), so its p50 cannot be under
this relay's.

Usage: python bench/pyrelay.py LISTEN_PORT UPSTREAM_PORT (prints "ready")
"""

from __future__ import annotations

import asyncio
import sys

import uvloop


class _Upstream(asyncio.Protocol):
    def __init__(self, client: asyncio.Transport) -> None:
        self.client = client

    def data_received(self, data: bytes) -> None:
        if not self.client.is_closing():  # the client may have left meanwhile
            self.client.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.close()


class _Client(asyncio.Protocol):
    def __init__(self, upstream_port: int) -> None:
        self.port = upstream_port
        self.up: asyncio.Transport | None = None
        self.held: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        up, _ = await loop.create_connection(lambda: _Upstream(self.transport),  # type: ignore[arg-type]
                                             "127.0.0.1", self.port)
        self.up = up
        for data in self.held:
            up.write(data)
        self.held.clear()

    def data_received(self, data: bytes) -> None:
        if self.up is None:
            self.held.append(data)
        elif not self.up.is_closing():
            self.up.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.up is not None:
            self.up.close()


async def main(listen: int, upstream: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Client(upstream), "127.0.0.1", listen)
    print("ready", flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1]), int(sys.argv[2])))
