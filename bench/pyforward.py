"""The least a Python entry node can do for a forwarded lookup: parse the request with
httptools, hash the key to its partition, send one peer-protocol frame to the owner on
one pooled connection, and answer with the owner's reply (uvloop). No auth, limits,
placement, deadlines, hedges, metrics or pipelining: ``bench_hop_cost.py`` runs it
beside nginx and the real entry node to show what those cost at c=1.

``--spin-us N`` adds N microseconds of busy CPU per request before the frame is sent:
how much a microsecond of the entry's own work adds to a forwarded lookup's p50 here.

Usage: python bench/pyforward.py LISTEN_PORT OWNER_PORT [--spin-us N]
(prints "ready"; the owner is a node of a cluster without a secret, ``balances`` in 3
partitions).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable

import httptools
import uvloop

from streamiq.kafka.partitioner import partition_for
from streamiq.serving.cluster.wire import PREFACE, REPLY, request_body, request_frame

PARTITIONS = 3
_Then = Callable[[int, bytes], None]


class _Owner(asyncio.Protocol):
    """The one connection to the owner (a reply with id 0 answers a keep-alive)."""

    def __init__(self) -> None:
        self.then: _Then | None = None
        self.rid = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.transport.write(PREFACE + b"1\n")

    def data_received(self, data: bytes) -> None:
        _, rid, status = REPLY.unpack_from(data)
        if rid and self.then is not None:
            then, self.then = self.then, None
            then(status, data[REPLY.size:])

    def send(self, key: str, then: _Then) -> None:
        self.rid += 1
        self.then = then
        body = request_body("lookup", {"view": "balances", "key": key},
                            [partition_for(key.encode(), PARTITIONS)], PARTITIONS, None)
        self.transport.write(request_frame(self.rid, 10_000, body))


class _Client(asyncio.Protocol):
    def __init__(self, owner: _Owner, spin_s: float) -> None:
        self.owner = owner
        self.spin_s = spin_s
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_url(self, url: bytes) -> None:
        self.url = url

    def on_message_complete(self) -> None:
        if self.spin_s:
            end = time.perf_counter() + self.spin_s
            while time.perf_counter() < end:
                pass
        self.owner.send(self.url.rsplit(b"/", 1)[1].decode(), self.reply)

    def reply(self, status: int, body: bytes) -> None:
        self.transport.write(b"HTTP/1.1 %d OK\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\n\r\n%s" % (status, len(body), body))


async def main(a: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    _, owner = await loop.create_connection(_Owner, "127.0.0.1", a.owner_port)
    keep = request_frame(0, 10_000, request_body("lookup", {"view": "balances", "key": "k"},
                                                 [0], PARTITIONS, None))

    async def keep_alive() -> None:  # nodes close a peer connection idle for 5 s
        while True:
            await asyncio.sleep(1)
            owner.transport.write(keep)

    pinging = loop.create_task(keep_alive())
    server = await loop.create_server(lambda: _Client(owner, a.spin_us / 1e6), "127.0.0.1",
                                      a.port)
    print("ready", flush=True)
    try:
        await server.serve_forever()
    finally:
        pinging.cancel()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("port", type=int)
    ap.add_argument("owner_port", type=int)
    ap.add_argument("--spin-us", type=float, default=0.0)
    uvloop.run(main(ap.parse_args()))
