"""Which transport carries the peer protocol: the binary wire grown to every query type,
or gRPC (grpc.aio), measured side by side in one run (docs/design.md, "The peer
protocol").

Two server processes answer the same requests on the node's event loop (asyncio, as a
node runs): ``wire``, length-prefixed frames on a plain asyncio protocol (what
``serving/cluster/wire.py`` does), and ``grpc``, one generic unary method of grpc.aio
taking and returning raw bytes (no protobuf: the payload is the same orjson bytes
either way). The client is one asyncio process per variant:

* forwarded lookups: a ~120-byte typed request, a ~200-byte row document back, c=1
  (p50, p99 of ``--calls`` sequential calls) and c=16 (calls/s);
* scatter-gather: a reply with the partial of ``--keys`` keys (a multi-get's rows,
  ~75 bytes each, ~8 MB for 100k), p50 of ``--big`` calls.

Variants alternate in ``--rounds`` rounds; medians of the rounds are printed with the
ratio grpc / wire (above 1: gRPC is slower).

Usage: .venv/bin/python bench/bench_peer_transport.py [--calls 3000] [--keys 100000]
Needs grpcio (``uv pip install grpcio``; not a dependency of streamiq).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _common import free_port

_HEAD = struct.Struct("!II")  # body length, request id
ROW = orjson.dumps({"view": "balances", "key": "acct-000001", "partition": 1,
                    "value": {"account": "acct-000001", "balance": 1234, "count": 3,
                              "last_update": 1700000000000},
                    "served_by": "127.0.0.1:9002", "role": "active", "lag": 0})


def _request(keys: int) -> bytes:
    return orjson.dumps({"kind": "lookup", "view": "balances", "key": "acct-000001",
                         "partition": 1, "partitions": 3, "budget_ms": 10000,
                         "token": "-", "big": keys})


def _answer(req: bytes, cache: dict[int, bytes]) -> bytes:
    n = orjson.loads(req)["big"]
    if not n:
        return ROW
    if n not in cache:
        rows = {f"acct-{i:06d}": {"account": f"acct-{i:06d}", "balance": i, "count": 1,
                                  "last_update": 1700000000000 + i} for i in range(n)}
        cache[n] = orjson.dumps({"partial": {"found": rows, "keys": list(rows)},
                                 "not_active": []})
    return cache[n]


# -- servers --
class _WireServer(asyncio.Protocol):
    def __init__(self, cache: dict[int, bytes]) -> None:
        self.buf = b""  # requests are small
        self.cache = cache

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t: asyncio.Transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data
        out = []
        while len(buf) >= _HEAD.size:
            size, rid = _HEAD.unpack_from(buf)
            if len(buf) < _HEAD.size + size:
                break
            body = _answer(buf[_HEAD.size:_HEAD.size + size], self.cache)
            out.append(_HEAD.pack(len(body), rid) + body)
            buf = buf[_HEAD.size + size:]
        self.buf = buf
        if out:
            self.t.write(b"".join(out))


async def _serve(kind: str, port: int) -> None:
    cache: dict[int, bytes] = {}
    if kind == "wire":
        loop = asyncio.get_running_loop()
        await loop.create_server(lambda: _WireServer(cache), "127.0.0.1", port)
    else:
        import grpc

        async def call(req: bytes, _ctx: object) -> bytes:
            return _answer(req, cache)

        server = grpc.aio.server(options=[("grpc.max_send_message_length", 1 << 30),
                                          ("grpc.max_receive_message_length", 1 << 30)])
        handler = grpc.method_handlers_generic_handler("peer", {
            "Ask": grpc.unary_unary_rpc_method_handler(call)})
        server.add_generic_rpc_handlers((handler,))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
    print("ready", flush=True)
    await asyncio.Event().wait()


# -- clients --
class _WireClient(asyncio.Protocol):
    def __init__(self) -> None:
        self.buf = bytearray()  # a big reply comes in many reads: appended, not re-copied
        self.waiting: asyncio.Future[bytes] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t: asyncio.Transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if len(self.buf) >= _HEAD.size:
            size, _ = _HEAD.unpack_from(self.buf)
            if len(self.buf) >= _HEAD.size + size and self.waiting is not None:
                body = bytes(memoryview(self.buf)[_HEAD.size:_HEAD.size + size])
                self.buf = bytearray()
                self.waiting.set_result(body)

    async def call(self, req: bytes) -> bytes:
        self.waiting = asyncio.get_running_loop().create_future()
        self.t.write(_HEAD.pack(len(req), 1) + req)
        return await self.waiting


async def _clients(kind: str, port: int, n: int) -> list[object]:
    if kind == "wire":
        loop = asyncio.get_running_loop()
        out = []
        for _ in range(n):
            _, c = await loop.create_connection(_WireClient, "127.0.0.1", port)
            out.append(c.call)
        return out
    import grpc

    ch = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[
        ("grpc.max_receive_message_length", 1 << 30)])
    stub = ch.unary_unary("/peer/Ask")
    return [stub] * n


async def _measure(kind: str, port: int, calls: int, big: int, keys: int) -> dict[str, float]:
    one, *_ = await _clients(kind, port, 1)
    req = _request(0)
    for _ in range(200):  # warm
        await one(req)  # type: ignore[operator]
    lat = []
    for _ in range(calls):
        t = time.perf_counter()
        await one(req)  # type: ignore[operator]
        lat.append(time.perf_counter() - t)
    lat.sort()
    many = await _clients(kind, port, 16)
    done = 0
    stop = time.perf_counter() + 2.0

    async def worker(c: object) -> None:
        nonlocal done
        while time.perf_counter() < stop:
            await c(req)  # type: ignore[operator]
            done += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in many))
    rate = done / (time.perf_counter() - t0)
    bigreq = _request(keys)
    await one(bigreq)  # type: ignore[operator]  # the server builds its reply once
    bl = []
    for _ in range(big):
        t = time.perf_counter()
        body = await one(bigreq)  # type: ignore[operator]
        orjson.loads(body)  # the entry decodes the partial either way
        bl.append(time.perf_counter() - t)
    return {"p50_ms": lat[len(lat) // 2] * 1e3, "p99_ms": lat[int(len(lat) * 0.99)] * 1e3,
            "c16_per_s": rate, "big_p50_ms": statistics.median(bl) * 1e3}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--big", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--client", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        asyncio.run(_serve(a.serve[0], int(a.serve[1])))
        return
    if a.client:
        got = asyncio.run(_measure(a.client[0], int(a.client[1]), a.calls, a.big, a.keys))
        print(orjson.dumps(got).decode(), flush=True)
        return
    servers, ports = {}, {}
    for kind in ("wire", "grpc"):
        ports[kind] = free_port()
        servers[kind] = subprocess.Popen(
            [sys.executable, __file__, "--serve", kind, str(ports[kind])],
            stdout=subprocess.PIPE, text=True)
        assert servers[kind].stdout is not None and servers[kind].stdout.readline()
    results: dict[str, list[dict[str, float]]] = {"wire": [], "grpc": []}
    try:
        for r in range(a.rounds):
            for kind in (("wire", "grpc") if r % 2 == 0 else ("grpc", "wire")):
                out = subprocess.run(
                    [sys.executable, __file__, "--client", kind, str(ports[kind]),
                     "--calls", str(a.calls), "--keys", str(a.keys), "--big", str(a.big)],
                    capture_output=True, text=True, check=True).stdout
                results[kind].append(orjson.loads(out.strip().splitlines()[-1]))
                print(f"round {r + 1} {kind}: {results[kind][-1]}", flush=True)
    finally:
        for p in servers.values():
            p.terminate()
            p.wait()
    med = {k: {m: statistics.median(x[m] for x in v) for m in v[0]} for k, v in results.items()}
    print(f"\n{'':28}{'wire':>12}{'grpc.aio':>12}{'grpc/wire':>11}")
    for m, label in (("p50_ms", "lookup p50, c=1 (ms)"), ("p99_ms", "lookup p99, c=1 (ms)"),
                     ("c16_per_s", "lookups/s, c=16"),
                     ("big_p50_ms", f"gather reply, {a.keys} keys (ms)")):
        w, g = med["wire"][m], med["grpc"][m]
        print(f"{label:28}{w:12.3f}{g:12.3f}{g / w:10.2f}x")


if __name__ == "__main__":
    main()
