"""The composition root of a serving node: builds its parts and runs the process.

``run_node`` opens the node's state (``serving/node.py``); ``assemble`` builds its one
query layer (``serving/query/``: ``Queries`` over the node and its ``Coordinator``) and
the front ends over it: the HTTP app (``serving/http/app.py``, answering through
``Answers``), the lean path, the peer server and (``--sql-port``) the SQL server, each
given the query layer rather than building one. The HTTP server speaks HTTP, the lean
path and the peer protocol on one port (``serving/http/server.py``) until SIGINT/SIGTERM
or a fatal failure. Nothing imports this module but the command line and the tests'
node apps (``assemble``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from streamiq import tls
from streamiq.config import Settings
from streamiq.logs import configure_logging
from streamiq.metrics import Latency
from streamiq.serving.cluster.bootstrap import Bootstrap
from streamiq.serving.cluster.coordinator import Coordinator
from streamiq.serving.cluster.gate import Gate
from streamiq.serving.http.answers import Answers
from streamiq.serving.http.app import create_app
from streamiq.serving.http.fastpath import LeanLookups
from streamiq.serving.http.http_limits import HttpEdge
from streamiq.serving.http.metrics import LABELS, Timed
from streamiq.serving.http.server import HttpServer, run
from streamiq.serving.node import Node
from streamiq.serving.peer.server import PeerServer
from streamiq.serving.query.run import Queries

if TYPE_CHECKING:  # the SQL engines load only with --sql-port (_start_sql)
    from streamiq.serving.sql.server import PgServer

__all__ = ["FATAL_EXIT_GRACE_S", "assemble", "run_node"]

log = logging.getLogger("streamiq.node")


#: After a fatal failure, the clean shutdown gets this long before the process is ended.
FATAL_EXIT_GRACE_S = 20.0


def assemble(settings: Settings, node: Node) -> LeanLookups:
    """A node's one query layer and the front ends over it: the FastAPI app behind the
    lean key-lookup path, which carries the peer server (``asgi.deps.queries``: the
    query layer, for the SQL server).

    The lean path sits outside FastAPI's own middleware stack (error, telemetry and
    body-limit wrappers) so that the hottest query pays for none of it; everything it
    does not answer goes through the full app unchanged.
    """
    coordinator = Coordinator(node)
    if settings.metrics:  # recorded per query (serving/http/metrics.py)
        coordinator.traffic.latency = Latency(LABELS)
    queries = Queries(node, coordinator)
    deps = Answers(queries)
    app = create_app(settings, deps)
    latency = coordinator.traffic.latency
    return LeanLookups(app if latency is None else Timed(app, latency), deps,
                       PeerServer(queries, coordinator.gate))


def _force_exit() -> None:
    log.critical("shutdown after a fatal failure did not finish in %.0fs: exiting now",
                 FATAL_EXIT_GRACE_S)
    for h in logging.getLogger().handlers:
        h.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def run_node(settings: Settings) -> None:
    """Serve one node until SIGINT/SIGTERM (a graceful stop, status 0) or a fatal failure.

    The node is opened whole first (``Node.open``: topics, stores, materializer,
    membership, router), then served. On a fatal failure (a part of the node that cannot
    recover, see ``Node._fatal``) the server is asked to stop (``HttpServer.stop``, safe
    from any thread); it stops accepting, finishes in-flight requests and returns, the
    node is closed (clients closed, stores closed, so RocksDB is left clean), and the
    process exits with status 1 for its supervisor to restart it. That clean path is
    preferred over ``os._exit`` at the failure: RocksDB and the Kafka clients get
    closed, logs get flushed. ``os._exit(1)`` is only the backstop when that shutdown
    hangs (a thread stuck in a native call) for ``FATAL_EXIT_GRACE_S``: a failed node
    must never linger half-alive.
    """
    configure_logging(settings.log_level, settings.log_format)
    code = run(_serve(settings))
    if code == 1:
        log.critical("node %s exiting with status 1: a part could not recover",
                     settings.endpoint)
        logging.shutdown()
    if code:
        sys.exit(code)


async def _start_sql(settings: Settings, queries: Queries) -> PgServer | None:
    """The SQL port, when ``--sql-port`` asks for one. Its engines (DuckDB, pyarrow,
    sqlglot, pygwire) are imported only then: a third of a node's start (~0.5 s of CPU)."""
    if not settings.sql_port:
        return None
    from streamiq.serving.sql.listen import start_sql

    return await start_sql(settings, queries)


async def _open(settings: Settings) -> Node | None:
    """``Node.open``, or None when SIGINT/SIGTERM arrives first (the server's own
    handlers are installed only once it serves)."""
    loop = asyncio.get_running_loop()
    opening = asyncio.ensure_future(Node.open(settings, copier=_copier(settings)))
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, opening.cancel)
    try:
        return await opening
    except asyncio.CancelledError:
        log.warning("node %s: asked to stop while opening", settings.endpoint)
        return None
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def _copier(settings: Settings) -> Callable[[Node], Bootstrap] | None:
    """A partition never held is first copied from a peer (``--no-peer-copy``: never),
    asked with the cluster credential, else replayed by a process of its own
    (``--no-restore-processes``: never); with neither, the materializer replays it."""
    if not (settings.peer_copy or settings.restore_processes):
        return None
    mark, ssl = Gate(settings).mark, tls.client_context(settings)
    return lambda node: Bootstrap(node, mark, ssl, peers=settings.peer_copy,
                                  processes=settings.restore_processes)


def _bind(settings: Settings) -> socket.socket | None:
    """The node's HTTP socket, bound before the node opens: a taken port fails at once,
    naming the flag, and the node never joins the members without its port."""
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.host, settings.port))
    except OSError as e:
        sock.close()
        _cannot_listen(settings.host, settings.port, "--host/--port", e)
        return None
    return sock


def _cannot_listen(host: str, port: int, flags: str, e: OSError) -> None:
    print(f"streamiq node: cannot listen on {host}:{port} ({flags}): {e.strerror or e}",
          file=sys.stderr, flush=True)


async def _serve(settings: Settings) -> int:
    """Open the node, serve it until asked to stop, close it. The exit status: 0, 1 (a
    part could not recover) or 3 (the server did not start: its port, or the app's
    startup failed)."""
    sock = _bind(settings)
    if sock is None:
        return 3
    with sock:
        return await _serve_on(settings, sock)


async def _serve_on(settings: Settings, sock: socket.socket) -> int:
    node = await _open(settings)
    if node is None:
        return 0
    try:
        asgi = assemble(settings, node)
        server = HttpServer(asgi, edge=HttpEdge(settings.request_read_timeout_s), lean=asgi,
                            same_port=asgi.peer_server,
                            ssl_context=tls.server_context(settings), signals=True)

        def fatal() -> None:
            server.stop()
            watchdog = threading.Timer(FATAL_EXIT_GRACE_S, _force_exit)
            watchdog.daemon = True
            watchdog.start()

        node.on_fatal = fatal
        try:
            sql = await _start_sql(settings, asgi.deps.queries)  # this loop, before HTTP serves
        except OSError as e:
            _cannot_listen(settings.host, settings.sql_port, "--sql-port", e)
            return 3
        if sql is not None:
            node.closing.append(sql.close)
            node.collectors.append(sql.metrics)
            print(f"streamiq node {settings.endpoint} answers SQL (PostgreSQL wire) on "
                  f"{settings.host}:{settings.sql_port}", flush=True)
        print(f"streamiq node {settings.endpoint} listening on "
              f"{tls.scheme(settings)}://{settings.host}:{settings.port}", flush=True)
        # the app's lifespan shutdown closes the node (and the finally below, when the
        # lifespan never ran)
        code = await server.serve(sock)
        return 1 if node.failed is not None else code
    finally:
        await node.stop()  # when serve() ended before the lifespan's shutdown (a no-op after)
