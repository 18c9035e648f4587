"""Which HTTP server a node could run without overriding uvicorn's private methods,
measured side by side in one run (issue 39; docs/design.md, "The HTTP server").

Every variant answers ``GET /v1/views/balances/keys/{key}`` from an in-process dict
with the same JSON body, through its fastest hook, in a process of its own:

* ``streamiq ASGI``: the node's own server (``serving/http/server.py``) and a bare ASGI
  callable (a task and two ASGI messages per request: what FastAPI's routes get);
* ``uvicorn private hook``: uvicorn's httptools protocol with ``_start_asgi_task``
  overridden to answer inside the parser callback (what the node did before its own
  server, pinning uvicorn <0.55); when uvicorn is installed (not a dependency);
* ``uvicorn ASGI``: stock uvicorn and a bare ASGI callable (public hooks only: a task
  and two ASGI messages per request); when uvicorn is installed;
* ``granian RSGI``: granian (Rust) and its RSGI interface, one worker (when installed:
  ``uv pip install granian``; not a dependency of streamiq);
* ``httptools protocol``: a bare asyncio protocol on httptools answering inside the
  parser callback (the floor of a server of our own).

Load: ``wrk`` at c=16 (lookups/s) and c=1 (p50), variants alternating in ``--rounds``
rounds, medians printed with each variant's ratio to the private hook.

Usage: .venv/bin/python bench/bench_http_server.py [--seconds 3] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _common import free_port
from bench_queries import wrk

N = 20_000
KEYS = [f"acct-{i:06d}" for i in range(N)]


def body(key: str) -> bytes:
    return orjson.dumps({"view": "balances", "key": key, "partition": 0,
                         "value": {"account": key, "balance": 5, "count": 1,
                                   "last_update": 1}, "served_by": "127.0.0.1:1",
                         "role": "active", "lag": 0})


DATA = {f"/v1/views/balances/keys/{k}".encode(): body(k) for k in KEYS}
NOT_FOUND = b'{"code":"NOT_FOUND"}'


def _response(status: bytes, payload: bytes) -> bytes:
    return (b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\ncontent-length: "
            + str(len(payload)).encode() + b"\r\nx-streamiq-hops: 0\r\n\r\n" + payload)


async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    payload = DATA.get(scope["raw_path"])
    await send({"type": "http.response.start", "status": 200 if payload else 404,
                "headers": [(b"content-type", b"application/json"),
                            (b"x-streamiq-hops", b"0")]})
    await send({"type": "http.response.body", "body": payload or NOT_FOUND})


def serve_uvicorn(port: int, private: bool) -> None:
    import uvicorn
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class Inline(HttpToolsProtocol):
        def _start_asgi_task(self, cycle: Any, app: Any) -> None:  # the private hook
            payload = DATA.get(cycle.scope["raw_path"])
            self.transport.write(_response(b"200 OK", payload) if payload
                                 else _response(b"404 Not Found", NOT_FOUND))
            cycle.response_started = cycle.response_complete = True
            cycle.message_event.set()
            cycle.on_response()

    uvicorn.run(asgi, host="127.0.0.1", port=port, log_level="warning", access_log=False,
                lifespan="off", http=Inline if private else "httptools")


def serve_granian(port: int) -> None:
    from granian import Granian
    from granian.constants import Interfaces

    Granian("bench_http_server:rsgi", address="127.0.0.1", port=port, workers=1,
            interface=Interfaces.RSGI, log_enabled=False).serve()


async def rsgi(scope: Any, proto: Any) -> None:
    payload = DATA.get(scope.path.encode())
    proto.response_bytes(200 if payload else 404, [("content-type", "application/json"),
                                                   ("x-streamiq-hops", "0")],
                         payload or NOT_FOUND)


def serve_streamiq(port: int) -> None:
    import socket

    from streamiq.serving.http.server import HttpServer, run

    sock = socket.create_server(("127.0.0.1", port))
    run(HttpServer(asgi, lifespan=False, signals=True).serve(sock))


def serve_httptools(port: int) -> None:
    import httptools

    class Proto(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.t: asyncio.Transport = transport  # type: ignore[assignment]
            self.parser = httptools.HttpRequestParser(self)
            self.url = b""

        def data_received(self, data: bytes) -> None:
            self.parser.feed_data(data)

        def on_url(self, url: bytes) -> None:
            self.url += url

        def on_message_complete(self) -> None:
            payload = DATA.get(self.url)
            self.url = b""
            self.t.write(_response(b"200 OK", payload) if payload
                         else _response(b"404 Not Found", NOT_FOUND))

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Proto, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def _wait(port: int, path: str) -> None:
    import time

    import httpx

    for _ in range(600):
        try:
            if httpx.get(f"http://127.0.0.1:{port}{path}", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"server on {port} not ready")


VARIANTS = ["streamiq ASGI", "uvicorn private hook", "uvicorn ASGI", "granian RSGI",
            "httptools protocol"]
OPTIONAL = {"granian RSGI": "granian", "uvicorn private hook": "uvicorn", "uvicorn ASGI": "uvicorn"}


def serve(name: str, port: int) -> None:
    if name == "streamiq ASGI":
        serve_streamiq(port)
    elif name == "granian RSGI":
        serve_granian(port)
    elif name == "httptools protocol":
        serve_httptools(port)
    else:
        serve_uvicorn(port, private=name == "uvicorn private hook")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        serve(a.serve[0], int(a.serve[1]))
        return
    names = [v for v in VARIANTS if v not in OPTIONAL or importlib.util.find_spec(OPTIONAL[v])]
    procs, ports = {}, {}
    root = Path(tempfile.mkdtemp(prefix="bench-http-"))
    paths = [f"/v1/views/balances/keys/{k}" for k in KEYS]
    try:
        for name in names:
            ports[name] = free_port()
            procs[name] = subprocess.Popen([sys.executable, __file__, "--serve", name,
                                            str(ports[name])], cwd=Path(__file__).parent)
            _wait(ports[name], paths[0])
        runs: dict[tuple[str, str], list[float]] = {}
        for r in range(a.rounds):
            for name in (names if r % 2 == 0 else names[::-1]):
                url = f"http://127.0.0.1:{ports[name]}"
                loaded = wrk(url, paths, root, 16, a.seconds, pids=[procs[name].pid])
                unloaded = wrk(url, paths, root, 1, 1.0)
                runs.setdefault((name, "rps"), []).append(loaded["rps"])
                runs.setdefault((name, "cpu"), []).append(loaded["cpu_us"])
                runs.setdefault((name, "p50"), []).append(unloaded["p50"])
    finally:
        for p in procs.values():
            p.terminate()
            p.wait(20)
    med = {k: statistics.median(v) for k, v in runs.items()}
    base = names[0]
    print(f"\n{'':24}{'lookups/s c=16':>16}{'CPU us/req':>12}{'p50 c=1 ms':>12}"
          f"{'rps vs first':>13}{'p50 vs first':>13}")
    for name in names:
        print(f"{name:24}{med[(name, 'rps')]:16.0f}{med[(name, 'cpu')]:12.1f}"
              f"{med[(name, 'p50')]:12.3f}{med[(name, 'rps')] / med[(base, 'rps')]:12.2f}x"
              f"{med[(name, 'p50')] / med[(base, 'p50')]:12.2f}x")


if __name__ == "__main__":
    main()
