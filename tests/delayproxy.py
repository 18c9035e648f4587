"""A TCP proxy that delays every byte by a fixed time, each way: a slow network link in
front of one node, for machines where netem is not to be had (this one's kernel has no
``sch_netem``: ``tc qdisc add ... netem`` answers "Specified qdisc kind is unknown").

Run as ``python tests/delayproxy.py LISTEN_PORT UPSTREAM_PORT DELAY_S``; it prints
``ready`` once listening. Bytes keep their order; a connection's end is passed on after
the bytes before it. The test that starts it stops it by its PID.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                delay: float) -> None:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def send() -> None:
        while True:
            at, data = await queue.get()
            await asyncio.sleep(max(0.0, at - loop.time()))
            if not data:
                writer.close()
                return
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(send())
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            queue.put_nowait((loop.time() + delay, data))
    queue.put_nowait((loop.time() + delay, b""))
    with contextlib.suppress(ConnectionError):
        await sender


async def main(listen: int, upstream: int, delay: float) -> None:
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            ur, uw = await asyncio.open_connection("127.0.0.1", upstream)
        except OSError:
            w.close()
            return
        await asyncio.gather(_pump(r, uw, delay), _pump(ur, w, delay))

    server = await asyncio.start_server(handle, "127.0.0.1", listen)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])))
